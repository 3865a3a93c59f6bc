import CofferCore
import CofferCrypto
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
    static let iterations = ProcessInfo.processInfo.environment["COFFER_STRESS_ITERATIONS"].flatMap { Int($0) } ?? 30
    static let keyHex = String(repeating: "5a", count: 32)

    static func crashValue(_ i: Int) -> [UInt8] {
        let length = 1 + (i &* 2654435761) % 9000
        return (0..<length).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ i ^ ($0 >> 8)) }
    }

    /// The helper executable, built beside the test binary.
    static func helperPath() -> String {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("CofferTestHelper").path),
            directory.path != "/"
        {
            directory.deleteLastPathComponent()
        }
        return directory.appendingPathComponent("CofferTestHelper").path
    }

    /// Runs the helper, kills it `delay` s after `ready` (or after start), returns its acks.
    static func runAndKill(_ arguments: [String], delay: Double, fromSpawn: Bool) throws
        -> (acked: [Int], wasReady: Bool, killed: Bool, errors: String)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: helperPath())
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        var seen = Data()
        if !fromSpawn {
            while !String(decoding: seen, as: UTF8.self).contains("ready") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                seen += chunk
            }
        }
        usleep(UInt32(delay * 1_000_000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        seen += output.fileHandleForReading.readDataToEndOfFile()
        var acked: [Int] = []
        var wasReady = false
        for line in String(decoding: seen, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.first == "ready" { wasReady = true }
            if parts.count == 2, parts[0] == "ack", let i = Int(parts[1]) { acked.append(i) }
        }
        let killed = process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL
        return (acked, wasReady, killed, String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }

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
        for iteration in 0..<Self.iterations {
            let child = try Self.runAndKill(
                ["crash-vault", url.path, Self.keyHex], delay: Double.random(in: 0...0.050, using: &generator),
                fromSpawn: iteration % 5 == 4)
            #expect(child.killed, "iteration \(iteration): the child exited by itself: \(child.errors)")
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
                    #expect(secret.map(Array.init) == Self.crashValue(newest), "iteration \(iteration): k\(slot)")
                    #expect(try vault.item(service: "crash", account: "k\(slot)")?.label == "k\(newest)")
                } else {
                    #expect(secret == nil, "iteration \(iteration): k\(slot) before its first commit")
                }
            }
            if found >= 0 {
                expected.formUnion(["x", "last"])
                #expect(try vault.data(service: "crash", account: "x").map(Array.init) == Self.crashValue(found))
            }
            #expect(Set(try vault.items().map(\.account)) == expected, "iteration \(iteration)")
            #expect(!(try FileManager.default.contentsOfDirectory(atPath: dir.path)).contains { $0.hasSuffix(".tmp") })
            vault.lock()
            last = found
        }
        print(
            "RELIABILITY kill -9 loop, vault: iterations \(Self.iterations), acknowledged commits \(acknowledged), "
                + "in-flight commit found new \(inFlightNew) / old \(inFlightOld), killed before opening "
                + "\(killedBeforeReady), kills that left a temporary file \(temporaryFilesLeft) (all removed by the "
                + "next open), slowest reopen \(Int(slowestReopen * 1000)) ms, lost 0")
    }
}
