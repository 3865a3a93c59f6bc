import CofferCore
import CofferStorage
import CofferTesting
import Foundation
import Testing

/// kill -9 at a random moment (0–50 ms) while a child commits in immediate mode, then reopen.
@Suite("Crash loop: key-value file", .serialized)
struct KVCrashLoopTests {
    @Test func killNineWhileCommittingLosesNothing() throws {
        let dir = try Scratch("kv-crash")
        // The parent creates the suite; each child continues from the newest commit in it.
        _ = try KeyValueFileStrategy(directory: dir.url, suite: "crash", durability: .immediate)
        let figures = try runCrashLoop(["crash-kv", dir.path, "crash"], directory: dir.path) {
            // The lock is free at once: a 50 ms timeout is enough.
            try KeyValueFileStrategy(
                directory: dir.url, suite: "crash", durability: .immediate, lockTimeout: .seconds(0.05))
        } newest: { store in
            try store.get(Int.self, for: "last") ?? -1
        } check: { store, step in
            for failure in step.failures { Issue.record("\(failure)") }
            try Self.verify(store, last: step.found, iteration: step.iteration)
        }
        print("RELIABILITY kill -9 loop, key-value file: \(figures)")
    }

    /// The same on a suite the child opens exclusively in coalesced mode: its appends are
    /// stores into a mapping of the file (on ext4 and tmpfs), which a kill can cut at any byte,
    /// not whole `pwrite`s. What the child acknowledged is in the kernel, so it survives the kill.
    @Test func killNineWhileAppendingThroughAMappingLosesNothing() throws {
        // On tmpfs, where appends are always mapped (the system's temporary directory could be
        // on a file system where they are written, and the test would not test the mapping).
        let dir = try TemporaryDirectory(prefix: "coffer-kv-crash-mapped", in: "/dev/shm")
        _ = try KeyValueFileStrategy(directory: dir.url, suite: "crash", durability: .coalesced)
        let figures = try runCrashLoop(["crash-kv-mapped", dir.path, "crash"], directory: dir.path) {
            try KeyValueFileStrategy(directory: dir.url, suite: "crash", durability: .coalesced, lockTimeout: .seconds(5))
        } newest: { store in
            try store.get(Int.self, for: "last") ?? -1
        } check: { store, step in
            for failure in step.failures { Issue.record("\(failure)") }
            // `single` = i lands alone just before commit i: i or i + 1 when commit i is the last.
            let single = try store.get(Int.self, for: "single")
            if step.found >= 0 {
                #expect(single == step.found || single == step.found + 1, "iteration \(step.iteration): single \(String(describing: single))")
            }
            try Self.verify(store, last: step.found, iteration: step.iteration, extraKeys: single == nil ? [] : ["single"])
        }
        print("RELIABILITY kill -9 loop, key-value file appended through a mapping: \(figures)")
    }

    /// Every commit up to `last` is present and exact (each of the 64 slots holds the newest
    /// commit that wrote it), and nothing after it; `extraKeys` may exist besides.
    static func verify(_ store: KeyValueFileStrategy, last: Int, iteration: Int, extraKeys: Set<String> = []) throws {
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
        #expect(Set(try store.keys()) == expectedKeys.union(extraKeys), "iteration \(iteration)")
    }
}
