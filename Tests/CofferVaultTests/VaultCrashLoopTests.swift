import CofferCore
import CofferCrypto
import CofferTesting
import CofferVault
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// kill -9 while a child process commits to a vault (immediate mode, raw key: no Argon2id),
/// then reopen: see CrashLoopTests (CofferStorageTests) for the key-value twin.
@Suite("Crash loop: vault", .serialized)
struct VaultCrashLoopTests {
    static let keyHex = String(repeating: "5a", count: 32)

    /// The helper executable, built beside the test binary.
    static func helperPath() -> String { productPath("CofferTestHelper") }

    @Test func killNineWhileCommittingLosesNothing() throws {
        let dir = try Scratch("vault-crash")
        let url = dir.file("crash.coffer")
        let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
        _ = try Vault.create(at: url, unlock: .key(key))
        var generator = SystemRandomNumberGenerator()
        var last = -1
        var acknowledged = 0
        var inFlightNew = 0
        var inFlightOld = 0
        var killedBeforeReady = 0
        var temporaryFilesLeft = 0
        var slowestReopen = 0.0
        for iteration in 0..<stressIterations {
            let child = try runAndKill(
                ["crash-vault", url.path, Self.keyHex], delay: Double.random(in: 0...0.050, using: &generator),
                fromSpawn: iteration % 5 == 4)
            #expect(child.killed, "iteration \(iteration): the child exited by itself: \(child.errorOutput)")
            if !child.wasReady { killedBeforeReady += 1 }
            acknowledged += child.acked.count
            #expect(child.acked == Array((last + 1)..<(last + 1 + child.acked.count)), "iteration \(iteration)")
            let newestAcked = child.acked.last ?? last
            if try FileManager.default.contentsOfDirectory(atPath: dir.path).contains(where: { $0.hasSuffix(".tmp") }) {
                temporaryFilesLeft += 1
            }
            let start = Date()
            let vault = try Vault.open(at: url, unlock: .key(key), lockTimeout: .seconds(0.05))
            slowestReopen = max(slowestReopen, Date().timeIntervalSince(start))
            let found = try vault.string(service: "crash", account: "last").flatMap { Int($0) } ?? -1
            #expect(found == newestAcked || found == newestAcked + 1, "iteration \(iteration): last \(found), acked \(newestAcked)")
            if found == newestAcked + 1 { inFlightNew += 1 } else if child.wasReady { inFlightOld += 1 }
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
            #expect(!(try FileManager.default.contentsOfDirectory(atPath: dir.path)).contains { $0.hasSuffix(".tmp") })
            vault.lock()
            last = found
        }
        print(
            "RELIABILITY kill -9 loop, vault: iterations \(stressIterations), acknowledged commits \(acknowledged), "
                + "in-flight commit found new \(inFlightNew) / old \(inFlightOld), killed before opening "
                + "\(killedBeforeReady), kills that left a temporary file \(temporaryFilesLeft) (all removed by the "
                + "next open), slowest reopen \(Int(slowestReopen * 1000)) ms, lost 0")
    }
}
