// The kill -9 harness the crash-loop tests of the key-value file and the vault share: run
// CofferTestHelper, kill it at a random moment, read what it acknowledged, reopen the store, and
// count what RELIABILITY.md reports. Package-only.
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

/// The value the crash children (CofferTestHelper Crash.swift) write for commit `i`: a length
/// that varies from a few bytes to several 4 KiB pages, so commits end at every offset within a
/// sector and span sectors.
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
    let helper = try HelperChild(arguments, environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .capture)
    if !fromSpawn {
        while let line = helper.readLine(), !line.hasPrefix("ready") {}
    }
    usleep(UInt32(delay * 1_000_000))
    kill(helper.process.processIdentifier, SIGKILL)
    helper.wait()
    var child = KilledChild()
    child.killed = helper.process.terminationReason == .uncaughtSignal && helper.process.terminationStatus == SIGKILL
    child.errorOutput = helper.standardError
    for line in helper.lines {
        let parts = line.split(separator: " ")
        if parts.first == "ready" { child.wasReady = true }
        if parts.count == 2, parts[0] == "ack", let i = Int(parts[1]) { child.acked.append(i) }
    }
    return child
}

/// Counts for RELIABILITY.md, printed by each kill -9 loop.
package struct CrashLoopFigures: CustomStringConvertible {
    package var iterations = 0
    package var acknowledged = 0
    package var inFlightNew = 0
    package var inFlightOld = 0
    package var killedBeforeReady = 0
    package var temporaryFilesLeft = 0
    package var slowestReopen = 0.0

    package var description: String {
        "iterations \(iterations), acknowledged commits \(acknowledged), in-flight commit found new \(inFlightNew) / "
            + "old \(inFlightOld), killed before opening \(killedBeforeReady), kills that left a temporary file "
            + "\(temporaryFilesLeft) (all removed by the next open), slowest reopen \(Int(slowestReopen * 1000)) ms, "
            + "lost 0"
    }
}

/// One kill and reopen of a kill -9 loop, for the test's own checks.
package struct CrashLoopStep {
    package var iteration: Int
    package var child: KilledChild
    /// The newest commit the reopened store holds (-1: none).
    package var found: Int
    /// The rules every loop holds each step to, as failure messages for the ones it broke: the
    /// child died of the kill; its acks run on, one by one, from the newest commit the store
    /// held when it started; the reopened store holds the newest acknowledged commit or the one
    /// in flight after it; the reopen removed every temporary file.
    package var failures: [String]
}

/// The kill -9 loop of the key-value file and the vault: ``stressIterations`` times, runs
/// CofferTestHelper with `arguments` (a child that commits forever, printing `ready` once open
/// and `ack <i>` after each commit), kills it at a random moment (0–50 ms after `ready`, or
/// after the spawn every fifth time), reopens the store with `reopen` (timed), reads the newest
/// commit it holds with `newest`, and hands the store and the step to `check`.
/// - Parameter directory: the store's directory, looked at for temporary files.
/// - Returns: the loop's figures.
package func runCrashLoop<Store>(
    _ arguments: [String], directory: String, reopen: () throws -> Store, newest: (Store) throws -> Int,
    check: (Store, CrashLoopStep) throws -> Void
) throws -> CrashLoopFigures {
    func holdsTemporaryFile() throws -> Bool {
        try FileManager.default.contentsOfDirectory(atPath: directory).contains { $0.hasSuffix(".tmp") }
    }
    var figures = CrashLoopFigures()
    var generator = SystemRandomNumberGenerator()
    var last = -1  // the newest commit known to be in the store
    for iteration in 0..<stressIterations {
        let child = try runAndKill(
            arguments, delay: Double.random(in: 0...0.050, using: &generator), fromSpawn: iteration % 5 == 4)
        var failures: [String] = []
        if !child.killed { failures.append("iteration \(iteration): the child exited by itself: \(child.errorOutput)") }
        if !child.wasReady { figures.killedBeforeReady += 1 }
        figures.acknowledged += child.acked.count
        // Acks are consecutive from the state the child found.
        if child.acked != Array((last + 1)..<(last + 1 + child.acked.count)) {
            failures.append("iteration \(iteration): acks \(child.acked) do not follow commit \(last)")
        }
        let newestAcked = child.acked.last ?? last
        if try holdsTemporaryFile() { figures.temporaryFilesLeft += 1 }
        let start = Date()
        let store = try reopen()
        figures.slowestReopen = max(figures.slowestReopen, Date().timeIntervalSince(start))
        let found = try newest(store)
        if found != newestAcked && found != newestAcked + 1 {
            failures.append("iteration \(iteration): last \(found), acked \(newestAcked)")
        }
        if found == newestAcked + 1 { figures.inFlightNew += 1 } else if child.wasReady { figures.inFlightOld += 1 }
        if try holdsTemporaryFile() { failures.append("iteration \(iteration): the reopen left a temporary file") }
        try check(store, CrashLoopStep(iteration: iteration, child: child, found: found, failures: failures))
        last = found
        figures.iterations += 1
    }
    return figures
}
