// The kill -9 harness the crash-loop tests of the key-value file and the vault share: run
// CofferTestHelper, kill it at a random moment, read what it acknowledged. Package-only.
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How many iterations the reliability loops run: `COFFER_STRESS_ITERATIONS` (make stress sets
/// 1000), 30 by default so `make test` stays quick.
package let stressIterations = ProcessInfo.processInfo.environment["COFFER_STRESS_ITERATIONS"].flatMap { Int($0) } ?? 30

/// The value the crash children (CofferTestHelper Crash.swift) write for commit `i`.
package func crashValue(_ i: Int) -> [UInt8] {
    let length = 1 + (i &* 2654435761) % 9000
    return (0..<length).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ i ^ ($0 >> 8)) }
}

/// What one killed child said before it died.
package struct KilledChild {
    /// The `i` of every `ack <i>` line, in order.
    package var acked: [Int] = []
    /// Whether it printed `ready` (had opened the store) before the kill.
    package var wasReady = false
    /// Whether it died of SIGKILL (rather than exiting with an error).
    package var killed = false
    package var errorOutput = ""
}

/// Starts the helper with `arguments`, kills it with SIGKILL `delay` seconds after it printed
/// `ready` (or after it started, with `fromSpawn`), and returns what it acknowledged.
package func runAndKill(_ arguments: [String], delay: Double, fromSpawn: Bool) throws -> KilledChild {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: productPath("CofferTestHelper"))
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
    var child = KilledChild()
    child.killed = process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL
    child.errorOutput = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    for line in String(decoding: seen, as: UTF8.self).split(separator: "\n") {
        let parts = line.split(separator: " ")
        if parts.first == "ready" { child.wasReady = true }
        if parts.count == 2, parts[0] == "ack", let i = Int(parts[1]) { child.acked.append(i) }
    }
    return child
}

/// The path of an executable product built beside the test binary.
package func productPath(_ name: String) -> String {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    // On Linux the test binary is `<build>/debug/CofferPackageTests.xctest`; on macOS it is a
    // bundle whose executable sits three levels deeper.
    while !FileManager.default.fileExists(atPath: directory.appendingPathComponent(name).path),
        directory.path != "/"
    {
        directory.deleteLastPathComponent()
    }
    return directory.appendingPathComponent(name).path
}
