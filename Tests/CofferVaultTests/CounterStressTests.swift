import CofferCore
import CofferCrypto
import CofferStorage
import CofferVault
import Foundation
import Testing

/// Two processes each increment one counter N times (1,000 in make stress, 100 in make test),
/// with a third process reading the vault counter all along: nothing lost, every read whole.
@Suite("Counters across processes", .serialized)
struct CounterStressTests {
    static let times = (ProcessInfo.processInfo.environment["COFFER_STRESS_ITERATIONS"].flatMap { Int($0) } ?? 30) >= 1000 ? 1000 : 100

    static func start(_ arguments: [String], output: Pipe? = nil) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: VaultCrashLoopTests.helperPath())
        process.arguments = arguments
        if let output { process.standardOutput = output }
        try process.run()
        return process
    }

    @Test func keyValueCounter() throws {
        let dir = try Scratch("kv-counter")
        let start = Date()
        let writers = try (0..<2).map { _ in try Self.start(["kv-increment", dir.path, "counter", "n", "\(Self.times)"]) }
        for process in writers {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "counter")
        #expect(try store.get(Int.self, for: "n") == 2 * Self.times)
        print("RELIABILITY counter, key-value update(): 2 processes × \(Self.times) = \(try store.get(Int.self, for: "n") ?? -1) (expected \(2 * Self.times)) in \(Int(Date().timeIntervalSince(start))) s")
    }

    @Test func vaultCounterWithAConcurrentReader() throws {
        let dir = try Scratch("vault-counter")
        let url = dir.file("counter.coffer")
        let keyHex = String(repeating: "5a", count: 32)
        _ = try Vault.create(at: url, unlock: .key(try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))))
        let start = Date()
        let readerOutput = Pipe()
        let reader = try Self.start(["vault-read-loop", url.path, keyHex, "\(2 * Self.times)"], output: readerOutput)
        let writers = try (0..<2).map { _ in try Self.start(["vault-increment", url.path, keyHex, "\(Self.times)"]) }
        for process in writers {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }
        let readLine = String(decoding: readerOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        reader.waitUntilExit()
        #expect(reader.terminationStatus == 0, "the reader saw a torn or older value")
        let vault = try Vault.open(at: url, unlock: .key(try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))))
        let final = try vault.string(service: "counter", account: "n")
        #expect(final == "\(2 * Self.times)")
        print("RELIABILITY counter, vault (application lock around read+set: no Vault.update): 2 processes × \(Self.times) = \(final ?? "nil"); concurrent reader: \(readLine.trimmingCharacters(in: .whitespacesAndNewlines)), every value whole and never older; \(Int(Date().timeIntervalSince(start))) s")
    }
}
