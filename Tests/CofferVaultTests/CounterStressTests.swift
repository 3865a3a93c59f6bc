import CofferCore
import CofferCrypto
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Testing

/// Two processes each increment one counter N times (1,000 in make stress, 100 in make test):
/// a key-value value with `update`, a vault item with `Vault.update`, and a vault item under an
/// application lock with a third process reading it all along: nothing lost, every read whole.
@Suite("Counters across processes", .serialized)
struct CounterStressTests {
    static let times = stressIterations >= 1000 ? 1000 : 100

    @Test func keyValueCounter() throws {
        let dir = try Scratch("kv-counter")
        let start = Date()
        let writers = try (0..<2).map { _ in
            try HelperChild(["kv-increment", dir.path, "counter", "n", "\(Self.times)"])
        }
        for writer in writers { #expect(writer.wait() == 0) }
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "counter")
        #expect(try store.get(Int.self, for: "n") == 2 * Self.times)
        print("RELIABILITY counter, key-value update(): 2 processes × \(Self.times) = \(try store.get(Int.self, for: "n") ?? -1) (expected \(2 * Self.times)) in \(Int(Date().timeIntervalSince(start))) s")
    }

    /// `vault-update` children: `Vault.update` alone, no application lock. The key is the one
    /// the child opens with (32 bytes of 0x5a); the counter is a little-endian UInt64. Both
    /// children open the vault and say `ready` before either is told to go, so their loops
    /// overlap even at 100 increments (a read outside the lock then loses updates every run).
    @Test func vaultCounterWithUpdate() throws {
        let dir = try Scratch("vault-update-counter")
        let url = dir.url("counter.coffer")
        let key = [UInt8](repeating: 0x5a, count: 32)
        _ = try Vault.create(at: url, unlock: .key(try SecureBytes(copying: key)))
        let start = Date()
        let writers = try (0..<2).map { _ in try HelperChild(["vault-update", url.path, "\(Self.times)"]) }
        // "ready", or the end of the output when the child failed to open the vault.
        let ready = writers.map { $0.readLine() == "ready" }
        guard ready.allSatisfy({ $0 }) else {
            // Writing to a child that died would raise SIGPIPE here.
            for writer in writers where writer.process.isRunning { writer.process.terminate() }
            for writer in writers { writer.wait() }
            Issue.record("a vault-update child did not open the vault: \(ready)")
            return
        }
        for writer in writers { writer.say("go") }
        for writer in writers { #expect(writer.wait() == 0) }
        let vault = try Vault.open(at: url, unlock: .key(try SecureBytes(copying: key)))
        let bytes = try #require(try vault.data(service: "counter", account: "update"))
        #expect(bytes.count == 8)
        let final =
            bytes.count == 8 ? UInt64(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }) : 0
        #expect(final == UInt64(2 * Self.times))
        print("RELIABILITY counter, vault Vault.update(): 2 processes × \(Self.times) = \(final) (expected \(2 * Self.times)) in \(Int(Date().timeIntervalSince(start))) s")
    }

    @Test func vaultCounterWithAConcurrentReader() throws {
        let dir = try Scratch("vault-counter")
        let url = dir.url("counter.coffer")
        let keyHex = String(repeating: "5a", count: 32)
        _ = try Vault.create(at: url, unlock: .key(try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))))
        let start = Date()
        let reader = try HelperChild(["vault-read-loop", url.path, keyHex, "\(2 * Self.times)"])
        let writers = try (0..<2).map { _ in try HelperChild(["vault-increment", url.path, keyHex, "\(Self.times)"]) }
        for writer in writers { #expect(writer.wait() == 0) }
        #expect(reader.wait() == 0, "the reader saw a torn or older value")
        let readLine = reader.output
        let vault = try Vault.open(at: url, unlock: .key(try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))))
        let final = try vault.string(service: "counter", account: "n")
        #expect(final == "\(2 * Self.times)")
        print("RELIABILITY counter, vault (application lock around read+set): 2 processes × \(Self.times) = \(final ?? "nil"); concurrent reader: \(readLine.trimmingCharacters(in: .whitespacesAndNewlines)), every value whole and never older; \(Int(Date().timeIntervalSince(start))) s")
    }
}
