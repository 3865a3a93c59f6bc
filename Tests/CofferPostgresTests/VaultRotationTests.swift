#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferState
import CofferTesting
import CofferVault
import Foundation
import Testing

/// Key slots and rotation of a PostgreSQL vault while the fleet runs (SECURITY.md, "Rotation and revocation").
@Suite("PostgreSQL vault: key slots and rotation")
struct VaultRotationTests {
    @Test("Rotation while instances run: the kept ones follow (properties too), the revoked one gets .wrongKey and keeps its values")
    func rotationInProcess() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vrotate")
        let admin = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        // More rows than one INSERT of the rotation carries (500). Written 100 per transaction:
        // each item of an `apply` is a read and a write, and one transaction of 1,200 took
        // longer than the 11 s answer deadline under CI's load.
        for start in stride(from: 0, to: 1_200, by: 100) {
            try await admin.apply(
                (start..<(start + 100)).map { .set(service: "bulk", account: "b\($0)", secret: Array("\($0)".utf8), label: nil, comment: nil) })
        }
        for i in 0..<25 { try await admin.set("secret \(i)", service: "svc", account: "a\(i)", label: "L\(i)") }
        try await admin.remove(service: "svc", account: "a24")
        let kept = try X25519Identity.generate()
        let revoked = try X25519Identity.generate()
        #expect(try await admin.addRecipient(kept.recipient))
        #expect(try await admin.addRecipient(kept.recipient) == false)
        #expect(try await admin.addRecipient(revoked.recipient))
        let slots = try await admin.keySlots()
        #expect(slots.map(\.kind) == ["key", "recipient", "recipient"])
        #expect(slots[2].recipient == revoked.recipient.description)

        let keptMachine = try await PostgresVault.open(name: name, unlock: .identities([kept]), configuration: configuration)
        let revokedMachine = try await PostgresVault.open(name: name, unlock: .identities([revoked]), configuration: configuration)
        let keptMode = Stored(wrappedValue: "", backed: .vault(keptMachine, service: "fleet", account: "mode"))
        let revokedMode = Stored(wrappedValue: "", backed: .vault(revokedMachine, service: "fleet", account: "mode"))
        try await admin.set("before", service: "fleet", account: "mode")
        #expect(await FollowingTests.until { keptMode.wrappedValue == "before" && revokedMode.wrappedValue == "before" })

        let rotation = try await admin.rotate(removingRecipients: [revoked.recipient])
        #expect(rotation.keptSlots == 2 && rotation.removedSlots == 1 && rotation.items == 1_225)
        #expect(rotation.removed.map(\.recipient) == [revoked.recipient.description])
        try await admin.set("after", service: "fleet", account: "mode")

        // The kept machine's property follows through the rotation; its calls work.
        #expect(await FollowingTests.until { keptMode.wrappedValue == "after" }, "\(String(describing: keptMode.loadError))")
        #expect(try await keptMachine.string(service: "svc", account: "a3") == "secret 3")
        try await keptMachine.set("from the kept machine", service: "svc", account: "k")
        #expect(try await admin.string(service: "svc", account: "k") == "from the kept machine")
        // The revoked one: .wrongKey, its property keeps the value it had.
        let error = await #expect(throws: CofferError.self) { _ = try await revokedMachine.string(service: "svc", account: "a3") }
        #expect(error?.code == .wrongKey)
        #expect("\(error.map { String(describing: $0) } ?? "")".contains("revoked"))
        await #expect(throws: CofferError.self) { try await revokedMachine.set("x", service: "svc", account: "z") }
        #expect(await FollowingTests.until { revokedMode.loadError?.code == .wrongKey }, "\(String(describing: revokedMode.loadError))")
        #expect(revokedMode.wrappedValue == "before")
        await #expect(throws: CofferError.self) {
            _ = try await PostgresVault.open(name: name, unlock: .identities([revoked]), configuration: configuration)
        }
        // Every row authenticates under the new keys; the removed item stays removed.
        let report = try await admin.verify()
        #expect(report.damaged.isEmpty)
        #expect(report.intact == 1_226)
        #expect(try await keptMachine.string(service: "bulk", account: "b1199") == "1199")
        #expect(try await admin.items(service: "svc").count == 25)
        #expect(try await admin.string(service: "svc", account: "a24") == nil)
        let fresh = try await PostgresVault.open(name: name, unlock: .identities([kept]), configuration: configuration)
        #expect(try await fresh.string(service: "fleet", account: "mode") == "after")
    }

    @Test("The old header put back by SQL after a rotation: instances refuse it as altered, never follow back to the old keys")
    func oldHeaderPutBack() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("vheader")
        let admin = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let identity = try X25519Identity.generate()
        try await admin.addRecipient(identity.recipient)
        let machine = try await PostgresVault.open(name: name, unlock: .identities([identity]), configuration: configuration)
        try await admin.set("v1", service: "svc", account: "a")
        let id = try VaultSecurityTests.vaultID(name, cluster)
        let oldHeader = try cluster.sql("SELECT encode(header, 'hex') FROM coffer_vaults WHERE name = '\(name)'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try await admin.rotate()
        try await admin.set("v2", service: "svc", account: "a")
        #expect(try await machine.string(service: "svc", account: "a") == "v2")
        // What a revoked machine that kept the old header (and the old keys) could write back.
        try cluster.sql("UPDATE coffer_vaults SET header = '\\x\(oldHeader)' WHERE vault_id = '\\x\(id)'")
        let refused = await #expect(throws: CofferError.self) { _ = try await machine.string(service: "svc", account: "a") }
        #expect(refused?.code == .corrupted, "\(String(describing: refused))")
        await #expect(throws: CofferError.self) { try await machine.set("x", service: "svc", account: "b") }
    }

    @Test("A fleet of 300 machines: 300 labelled recipient slots, each opens; a rotation removes one and keeps every label")
    func threeHundredSlots() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vfleet")
        let admin = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await admin.set("v", service: "svc", account: "a")
        let machines = try (0..<300).map { _ in try X25519Identity.generate() }
        for (index, machine) in machines.enumerated() {
            #expect(try await admin.addRecipient(machine.recipient, label: "web-\(index)"))
        }
        let slots = try await admin.keySlots()
        #expect(slots.count == 301)
        #expect(slots[300].label == "web-299" && slots[300].recipient == machines[299].recipient.description)
        for index in [0, 150, 299] {
            let opened = try await PostgresVault.open(name: name, unlock: .identities([machines[index]]), configuration: configuration)
            #expect(try await opened.string(service: "svc", account: "a") == "v")
        }
        let rotation = try await admin.rotate(removingRecipients: [machines[150].recipient])
        #expect(rotation.keptSlots == 300 && rotation.removed.map(\.label) == ["web-150"])
        let after = try await admin.keySlots()
        #expect(after.compactMap(\.label) == (0..<300).filter { $0 != 150 }.map { "web-\($0)" })
        await #expect(throws: CofferError.self) {
            _ = try await PostgresVault.open(name: name, unlock: .identities([machines[150]]), configuration: configuration)
        }
        let kept = try await PostgresVault.open(name: name, unlock: .identities([machines[299]]), configuration: configuration)
        #expect(try await kept.string(service: "svc", account: "a") == "v")
    }

    @Test("Slot changes racing each other and a rotation, from three instances: none is lost, and every added identity opens the vault")
    func racingSlotChanges() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vrace")
        let admin = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await admin.set("v", service: "svc", account: "a")
        let others = try await [
            PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration),
            PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration),
        ]
        let machines = try (0..<20).map { _ in try X25519Identity.generate() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, vault) in others.enumerated() {
                group.addTask {
                    for machine in machines[(index * 10)..<(index * 10 + 10)] {
                        try await vault.addRecipient(machine.recipient, label: "m")
                    }
                }
            }
            group.addTask {
                for _ in 0..<3 { try await admin.rotate() }
            }
            try await group.waitForAll()
        }
        #expect(try await admin.keySlots().count == 21)
        for machine in machines {
            let opened = try await PostgresVault.open(name: name, unlock: .identities([machine]), configuration: configuration)
            #expect(try await opened.string(service: "svc", account: "a") == "v")
        }
    }

    @Test("Slot changes on a PostgreSQL vault: passphrase added and removed, a slot without its secret refused for rotation")
    func slotChanges() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vslots")
        let vault = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await vault.set("v", service: "svc", account: "a")
        try await vault.addKeySlot(.passphrase("pw"), kdf: .interactive)
        let byPassphrase = try await PostgresVault.open(name: name, unlock: .passphrase("pw"), configuration: configuration)
        #expect(try await byPassphrase.string(service: "svc", account: "a") == "v")
        // The passphrase user cannot re-wrap the raw-key slot without the key: refused, nothing changed.
        let refused = await #expect(throws: CofferError.self) { try await byPassphrase.rotate() }
        #expect(refused?.code == .invalidArgument)
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("key slot 0 (key)"))
        #expect(try await vault.string(service: "svc", account: "a") == "v")
        // With it, kept.
        #expect(try await byPassphrase.rotate(keeping: [.key(testKey)]).keptSlots == 2)
        #expect(try await vault.string(service: "svc", account: "a") == "v")
        // Removing the passphrase slot (no rotation): the passphrase opens nothing more.
        try await vault.removeKeySlot(at: 1)
        await #expect(throws: CofferError.self) {
            _ = try await PostgresVault.open(name: name, unlock: .passphrase("pw"), configuration: configuration)
        }
        await #expect(throws: CofferError.self) { try await vault.removeKeySlot(at: 0) }
        #expect(try await vault.keySlots().map(\.kind) == ["key"])
    }

    @Test("Three processes follow a PostgreSQL vault through a rotation to the last value; the one whose slot was removed reports .wrongKey")
    func threeProcesses() throws {
        let url = try PostgresTestCluster.shared.url
        let configuration = try sharedConfiguration()
        let name = uniqueName("vrotate3")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-rotate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: dir) }
        let admin = try PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let identities = try (0..<3).map { _ in try X25519Identity.generate() }
        var files: [String] = []
        for (index, identity) in identities.enumerated() {
            try admin.addRecipient(identity.recipient)
            let file = dir.appendingPathComponent("identity\(index)")
            try Data(try identity.fileContents().withUnsafeBytes { Array($0) }).write(to: file)
            files.append(file.path)
        }
        try admin.set("v0", service: "fleet", account: "mode")
        let children = try files.map {
            try HelperChild(["pg-follow", url, "vault", name, "mode", "120"], environment: ["COFFER_FLEET_IDENTITY_FILE": $0])
        }
        for child in children {
            #expect(child.readLine() == "ready")
            #expect(child.readLine() == "value v0")
        }
        try admin.rotate(removingRecipients: [identities[2].recipient])
        for i in 1...3 { try admin.set("v\(i)", service: "fleet", account: "mode") }
        for child in children.prefix(2) {
            while let line = child.readLine(), line != "value v3" {}  // v1 and v2 may be skipped
            child.say("status")
            #expect(child.readLine() == "status v3 none")
        }
        // The revoked process: still v0 in memory, and .wrongKey ("wrong passphrase or key").
        let revoked = children[2]
        var status: String?
        for _ in 0..<200 {
            revoked.say("status")
            status = revoked.readLine()
            if status == "status v0 wrong passphrase or key" { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(status == "status v0 wrong passphrase or key")
        for child in children { #expect(child.wait() == 0) }
    }
}
#endif
