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
        let dir = try Scratch("vault-crash")
        let url = dir.url("crash.coffer")
        let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
        _ = try Vault.create(at: url, unlock: .key(key))
        let figures = try runCrashLoop(["crash-vault", url.path, Self.keyHex], directory: dir.path) {
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
            vault.lock()
        }
        print("RELIABILITY kill -9 loop, vault: \(figures)")
    }
}
