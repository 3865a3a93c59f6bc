import CofferCore
import CofferCrypto
import CofferJournal
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// Rotating a vault's master key (SECURITY.md, "Rotation and revocation"): revocation of removed slots,
/// the other instances following by themselves, refusals before anything changes.
@Suite("Vault: rotating the master key")
struct RotationTests {
    @Test("A revoked identity opens nothing written after the rotation, even with the old master key; the kept ones follow by themselves")
    func revokedIdentity() throws {
        let dir = try Scratch("rotate-revoke")
        let url = dir.url("v")
        let admin = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        for i in 0..<30 { try admin.set("secret \(i)", service: "svc", account: "a\(i)", label: "L\(i)") }
        let kept = try X25519Identity.generate()
        let revoked = try X25519Identity.generate()
        try admin.addRecipient(kept.recipient)
        try admin.addRecipient(revoked.recipient)
        // Three other instances, as three machines would have them open: two keep their slot.
        let keptMachine = try Vault.open(at: url, unlock: .identities([kept]))
        let passphraseUser = try Vault.open(at: url, unlock: .passphrase("pw"))
        let revokedMachine = try Vault.open(at: url, unlock: .identities([revoked]))
        #expect(try revokedMachine.string(service: "svc", account: "a1") == "secret 1")
        // What a revoked machine could have kept: the old master key.
        let oldKeys = try revokedMachine.store.state.withLock { try #require($0).keys }

        let rotation = try admin.rotate(removingRecipients: [revoked.recipient])
        #expect(
            rotation
                == VaultRotation(
                    keptSlots: 2, removedSlots: 1, items: 30,
                    removed: [KeySlotInfo(kind: "recipient", recipient: revoked.recipient.description)]))
        try admin.set("written after", service: "svc", account: "new")

        // The revoked identity opens nothing: not the file, not the instance it had open.
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .identities([revoked])) }
        let refused = expectError(.wrongKey) { _ = try revokedMachine.string(service: "svc", account: "new") }
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("revoked"))
        // Nor the old master key: no record of the rotated file opens under it, even given the
        // right chain value.
        let entries = try admin.store.state.withLock { try #require($0).entries }
        #expect(entries.count == 31)
        for entry in entries.values {
            #expect(throws: CofferError.self) {
                _ = try RecordCipher.open(entry.payload, keys: oldKeys, vaultID: admin.store.state.withLock { $0!.header.vaultID }, chain: entry.chain)
            }
        }
        // The kept identity and the passphrase follow, with no prompt and no KDF, and write.
        #expect(try keptMachine.string(service: "svc", account: "new") == "written after")
        #expect(try passphraseUser.string(service: "svc", account: "a29") == "secret 29")
        try passphraseUser.set("from the passphrase", service: "svc", account: "p")
        try keptMachine.compact()
        #expect(try admin.string(service: "svc", account: "p") == "from the passphrase")
        let fresh = try Vault.open(at: url, unlock: .identities([kept]))
        #expect(try Snapshot(of: fresh) == Snapshot(of: admin))
        #expect(try admin.info().keySlots.map(\.recipient) == [nil, kept.recipient.description])
    }

    @Test("The independent reader opens a rotated vault with the kept identity, not with the removed passphrase")
    func readerOpensRotated() throws {
        let dir = try Scratch("rotate-reader")
        let url = dir.url("v")
        let identity = try X25519Identity.generate()
        let identityURL = dir.url("identity")
        try Data(try identity.fileContents().withUnsafeBytes { Array($0) }).write(to: identityURL)
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("7331", service: "svc", account: "a", label: "La")
        try vault.addRecipient(identity.recipient)
        try vault.rotate(removing: [0])
        let (status, text) = try runVaultReader([url.path, "--identity", identityURL.path, "--show-secrets"])
        #expect(status == 0)
        #expect(text == "svc\ta\tLa\t37333331\n")  // the secret in hex
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
    }

    @Test("A slot whose secret is not at hand is refused before anything changes, and kept when its secret is given")
    func slotWithoutSecret() throws {
        let dir = try Scratch("rotate-refuse")
        let url = dir.url("v")
        let keyFile = dir.url("key")
        try Data((0..<64).map { UInt8($0) }).write(to: keyFile)
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("s", service: "svc", account: "a")
        try vault.addKeySlot(.keyFile(keyFile))
        let before = try Data(contentsOf: url)
        let refused = expectError(.invalidArgument) { try vault.rotate() }
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("key slot 1 (keyFile)"))
        expectError(.invalidArgument) { try vault.rotate(removing: [0, 1]) }
        expectError(.invalidArgument) { try vault.rotate(removing: [5]) }
        expectError(.wrongKey) { try vault.rotate(keeping: [.passphrase("not it")]) }
        #expect(try Data(contentsOf: url) == before)
        // Given its key file, the slot is kept: both open the rotated vault.
        #expect(try vault.rotate(keeping: [.keyFile(keyFile)]).keptSlots == 2)
        #expect(try Data(contentsOf: url) != before)
        #expect(try Vault.open(at: url, unlock: .keyFile(keyFile)).string(service: "svc", account: "a") == "s")
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).string(service: "svc", account: "a") == "s")
        // Or removed.
        #expect(try vault.rotate(removing: [1]) == VaultRotation(keptSlots: 1, removedSlots: 1, items: 1, removed: [KeySlotInfo(kind: "keyFile")]))
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .keyFile(keyFile)) }
    }

    @Test("Rotating away the slot that unlocked this instance: it goes on with the new key; its secret opens nothing more")
    func removingOwnSlot() throws {
        let dir = try Scratch("rotate-own")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("old"), kdf: fastKDF)
        try vault.set("v", service: "svc", account: "a")
        try vault.addKeySlot(.passphrase("new"), kdf: fastKDF)
        try vault.rotate(removing: [0], keeping: [.passphrase("new")])
        try vault.set("w", service: "svc", account: "b")
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase("old")) }
        let reopened = try Vault.open(at: url, unlock: .passphrase("new"))
        #expect(try Snapshot(of: reopened) == Snapshot(of: vault))
        // Locked, this instance needs a slot like everyone else.
        vault.lock()
        expectError(.wrongKey) { try vault.unlock(.passphrase("old")) }
        try vault.unlock(.passphrase("new"))
        #expect(try vault.string(service: "svc", account: "b") == "w")
    }

    @Test("An old copy of the file put back after a rotation is refused by the instances that followed it, never followed back to the old keys")
    func oldCopyPutBack() throws {
        let dir = try Scratch("rotate-rollback")
        let url = dir.url("v")
        let admin = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        let identity = try X25519Identity.generate()
        try admin.addRecipient(identity.recipient)
        try admin.set("old", service: "svc", account: "a")
        let machine = try Vault.open(at: url, unlock: .identities([identity]))
        let oldCopy = try Data(contentsOf: url)
        try admin.rotate()
        try admin.set("new", service: "svc", account: "a")
        #expect(try machine.string(service: "svc", account: "a") == "new")  // followed
        // The pre-rotation file (whose keys a revoked party may hold) put back in its place, and
        // written through Coffer with those keys (a compaction), so every process notices it.
        try oldCopy.write(to: dir.url("planted"))
        #expect(rename(dir.url("planted").path, url.path) == 0)
        try Vault.open(at: url, unlock: .passphrase("pw")).compact()
        let refused = expectError(.corrupted) { _ = try machine.string(service: "svc", account: "a") }
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("older header"))
    }

    @Test("A passphrase changed after opening is this instance's slot: a rotation keeps it, and another instance's rotation is followed")
    func passphraseChangedThenRotated() throws {
        let dir = try Scratch("rotate-passwd")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("old"), kdf: fastKDF)
        try vault.set("v", service: "svc", account: "a")
        let other = try Vault.open(at: url, unlock: .passphrase("old"))
        try vault.changePassphrase(to: "new")
        #expect(try vault.rotate().keptSlots == 1)
        #expect(try Vault.open(at: url, unlock: .passphrase("new")).string(service: "svc", account: "a") == "v")
        // `other` unlocked with the old passphrase, whose slot is gone: revoked.
        expectError(.wrongKey) { _ = try other.string(service: "svc", account: "a") }
        let third = try Vault.open(at: url, unlock: .passphrase("new"))
        try third.changePassphrase(to: "newer")
        try vault.rotate(keeping: [.passphrase("newer")])
        #expect(try third.string(service: "svc", account: "a") == "v")
        #expect(try third.rotate().keptSlots == 1)
        // `vault` was unlocked with "new", which `third` changed to "newer": its slot is gone.
        expectError(.wrongKey) { _ = try vault.string(service: "svc", account: "a") }
    }

    @Test("Slot changes from two instances racing a rotation from a third: none is lost, every added identity opens")
    func racingSlotChanges() async throws {
        let dir = try Scratch("rotate-race")
        let url = dir.url("v")
        let admin = try await Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try await admin.set("v", service: "svc", account: "a")
        let others = try (0..<2).map { _ in try Vault.open(at: url, unlock: .passphrase("pw")) }
        let machines = try (0..<8).map { _ in try X25519Identity.generate() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, vault) in others.enumerated() {
                group.addTask {
                    for machine in machines[(index * 4)..<(index * 4 + 4)] { try vault.addRecipient(machine.recipient, label: "m") }
                }
            }
            group.addTask { for _ in 0..<3 { try admin.rotate() } }
            try await group.waitForAll()
        }
        #expect(try admin.info().keySlots.count == 9)
        for machine in machines {
            #expect(try await Vault.open(at: url, unlock: .identities([machine])).string(service: "svc", account: "a") == "v")
        }
    }

    @Test("Two rotations in a row, each by another instance: every instance with a slot keeps up")
    func rotationsByTurns() throws {
        let dir = try Scratch("rotate-turns")
        let url = dir.url("v")
        let a = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        let identity = try X25519Identity.generate()
        try a.addRecipient(identity.recipient)
        let b = try Vault.open(at: url, unlock: .identities([identity]))
        for round in 0..<6 {
            let (rotator, other) = round % 2 == 0 ? (a, b) : (b, a)
            try rotator.set("\(round)", service: "svc", account: "round")
            // a holds the passphrase slot's key (it unlocked with it); b must be given it.
            try rotator.rotate(keeping: round % 2 == 0 ? [] : [.passphrase("pw")])
            #expect(try other.string(service: "svc", account: "round") == "\(round)")
        }
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).string(service: "svc", account: "round") == "5")
    }
}
