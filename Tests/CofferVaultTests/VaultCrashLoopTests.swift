import CofferCore
import CofferCrypto
import CofferTesting
import CofferVault
import Foundation
import Testing

/// kill -9 while a child process commits to a vault (immediate mode, raw key: no Argon2id),
/// then reopen: see CrashLoopTests (CofferStorageTests) for the key-value twin.
@Suite("Crash loop: vault", .serialized)
struct VaultCrashLoopTests {
    static let keyHex = String(repeating: "5a", count: 32)

    @Test func killNineWhileCommittingLosesNothing() throws {
        try crashLoop(rotating: false)
    }

    /// The same loop, rotating the master key after every second commit: the vault opens with
    /// the raw key and with the identity of its recipient slot after every kill, to the last
    /// acknowledged commit or the one in flight — the old vault or the new, never a mix.
    @Test func killNineWhileRotatingLosesNothing() throws {
        try crashLoop(rotating: true)
    }

    func crashLoop(rotating: Bool) throws {
        let dir = try Scratch(rotating ? "vault-crash-rotate" : "vault-crash")
        let url = dir.url("crash.coffer")
        let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
        let identity = try X25519Identity(secretKey: try SecureBytes(copying: [UInt8](repeating: 0x17, count: 32)))
        let created = try Vault.create(at: url, unlock: .key(key))
        if rotating { try created.addRecipient(identity.recipient) }
        created.lock()
        let command = rotating ? "crash-vault-rotate" : "crash-vault"
        let figures = try runCrashLoop([command, url.path, Self.keyHex], directory: dir.path) {
            try Vault.open(at: url, unlock: .key(key), lockTimeout: .seconds(0.05))
        } newest: { vault in
            try vault.string(service: "crash", account: "last").flatMap { Int($0) } ?? -1
        } check: { vault, step in
            for failure in step.failures { Issue.record("\(failure)") }
            let (found, iteration) = (step.found, step.iteration)
            var expected: Set<String> = []
            for slot in 0..<64 {
                let newest = found - ((found - slot) % 64 + 64) % 64
                let secret = try vault.data(service: "crash", account: "k\(slot)")
                if newest >= 0 {
                    expected.insert("k\(slot)")
                    #expect(secret.map(Array.init) == crashValue(newest), "iteration \(iteration): k\(slot)")
                    #expect(try vault.item(service: "crash", account: "k\(slot)")?.label == "k\(newest)")
                } else {
                    #expect(secret == nil, "iteration \(iteration): k\(slot) before its first commit")
                }
            }
            if found >= 0 {
                expected.formUnion(["x", "last"])
                #expect(try vault.data(service: "crash", account: "x").map(Array.init) == crashValue(found))
            }
            #expect(Set(try vault.items().map(\.account)) == expected, "iteration \(iteration)")
            if rotating {
                let byIdentity = try Vault.open(at: url, unlock: .identities([identity]), lockTimeout: .seconds(0.05))
                #expect(try byIdentity.string(service: "crash", account: "last") == vault.string(service: "crash", account: "last"))
                byIdentity.lock()
            }
            vault.lock()
        }
        print("RELIABILITY kill -9 loop, vault\(rotating ? " rotating its key" : ""): \(figures)")
    }
}
