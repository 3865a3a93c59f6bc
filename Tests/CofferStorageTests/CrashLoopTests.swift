import CofferCore
import CofferStorage
import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Counts for RELIABILITY.md, printed by each loop.
struct CrashLoopFigures: CustomStringConvertible {
    var iterations = 0
    var acknowledged = 0
    var inFlightNew = 0
    var inFlightOld = 0
    var killedBeforeReady = 0
    var temporaryFilesLeft = 0
    var slowestReopen = 0.0

    var description: String {
        "iterations \(iterations), acknowledged commits \(acknowledged), in-flight commit found new \(inFlightNew) / "
            + "old \(inFlightOld), killed before opening \(killedBeforeReady), kills that left a temporary file "
            + "\(temporaryFilesLeft) (all removed by the next open), slowest reopen \(Int(slowestReopen * 1000)) ms, "
            + "lost 0"
    }
}

/// kill -9 at a random moment (0–50 ms) while a child commits in immediate mode, then reopen.
@Suite("Crash loop: key-value file", .serialized)
struct KVCrashLoopTests {
    @Test func killNineWhileCommittingLosesNothing() throws {
        let dir = try Scratch("kv-crash")
        // The parent creates the suite; each child continues from `last`.
        _ = try KeyValueFileStrategy(directory: dir.url, suite: "crash", durability: .immediate)
        var figures = CrashLoopFigures()
        var generator = SystemRandomNumberGenerator()
        var last = -1  // the newest commit known to be in the file
        for iteration in 0..<stressIterations {
            let fromSpawn = iteration % 5 == 4
            let child = try runAndKill(
                ["crash-kv", dir.path, "crash"], delay: Double.random(in: 0...0.050, using: &generator),
                fromSpawn: fromSpawn)
            #expect(child.killed, "iteration \(iteration): the child exited by itself: \(child.errorOutput)")
            if !child.wasReady { figures.killedBeforeReady += 1 }
            figures.acknowledged += child.acked.count
            // Acks are consecutive from the state the child found.
            #expect(child.acked == Array((last + 1)..<(last + 1 + child.acked.count)), "iteration \(iteration)")
            let newestAcked = child.acked.last ?? last
            let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
            if names.contains(where: { $0.hasSuffix(".tmp") }) { figures.temporaryFilesLeft += 1 }
            // The lock is free at once: a 50 ms timeout is enough.
            let start = Date()
            let store = try KeyValueFileStrategy(
                directory: dir.url, suite: "crash", durability: .immediate, lockTimeout: .seconds(0.05))
            figures.slowestReopen = max(figures.slowestReopen, Date().timeIntervalSince(start))
            let found = try store.get(Int.self, for: "last") ?? -1
            #expect(found == newestAcked || found == newestAcked + 1, "iteration \(iteration): last \(found), acked \(newestAcked)")
            if found == newestAcked + 1 { figures.inFlightNew += 1 } else if child.wasReady { figures.inFlightOld += 1 }
            try Self.verify(store, last: found, iteration: iteration)
            #expect(!(try FileManager.default.contentsOfDirectory(atPath: dir.path)).contains { $0.hasSuffix(".tmp") })
            last = found
            figures.iterations += 1
        }
        print("RELIABILITY kill -9 loop, key-value file: \(figures)")
    }

    /// Every commit up to `last` is present and exact (each of the 64 slots holds the newest
    /// commit that wrote it), and nothing after it.
    static func verify(_ store: KeyValueFileStrategy, last: Int, iteration: Int) throws {
        var expectedKeys: Set<String> = []
        for slot in 0..<64 {
            let newest = last - ((last - slot) % 64 + 64) % 64
            let value = try store.load("k\(slot)")
            if newest >= 0 && newest <= last {
                expectedKeys.insert("k\(slot)")
                #expect(value.map(Array.init) == crashValue(newest), "iteration \(iteration): k\(slot) is not commit \(newest)")
            } else {
                #expect(value == nil, "iteration \(iteration): k\(slot) exists before its first commit")
            }
        }
        if last >= 0 {
            expectedKeys.formUnion(["x", "last"])
            #expect(try store.load("x").map(Array.init) == crashValue(last), "iteration \(iteration): x is not commit \(last)")
        }
        #expect(Set(try store.keys()) == expectedKeys, "iteration \(iteration)")
    }
}
