#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// The settings of the process's throwaway cluster (started on first use, stopped at exit).
/// Fails with the reason — PostgreSQL not installed, initdb or pg_ctl failing — never skips.
func sharedConfiguration() throws -> PostgresConfiguration {
    try PostgresConfiguration(url: PostgresTestCluster.shared.url)
}

/// A suite or vault name no other test uses.
func uniqueName(_ prefix: String = "t") -> String { "\(prefix)-\(UUID().uuidString.prefix(8))" }

/// The raw key every test vault unlocks with (no Argon2id: tests stay fast).
let testKey = try! SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))

/// Polls `condition` every 10 ms until it holds or `timeout` seconds pass.
func eventually(timeout: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date() + timeout
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return try condition()
}

/// A value behind an `NSLock`.
final class Protected<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// A `CofferTestHelper` child with pipes to its standard input and output.
final class HelperChild {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("CofferTestHelper").path),
            directory.path != "/"
        {
            directory.deleteLastPathComponent()
        }
        process.executableURL = directory.appendingPathComponent("CofferTestHelper")
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    func readLine() -> String? {
        var line = Data()
        while let byte = try? output.fileHandleForReading.read(upToCount: 1), let first = byte.first {
            if first == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
            line.append(first)
        }
        return line.isEmpty ? nil : String(decoding: line, as: UTF8.self)
    }

    func say(_ line: String) {
        try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    func wait() -> Int32 {
        process.waitUntilExit()
        return process.terminationStatus
    }
}
#endif
