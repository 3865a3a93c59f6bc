// `coffer-bench`: a suite of 1,000,000 keys (the `keys.*.1M` rows; `--quick` uses 10,000 and
// keeps the names). The suite is a `KeyValueFileStrategy` of 8-byte `Int` values, keys
// `k-0`…, written in commits of 10,000 before anything is timed.
//
// What one operation is, per name:
//   keys.open.1M            opening the suite in a new instance (the file read, every record
//                           indexed) and reading one key (one op per run)
//   keys.compact.1M         `compact()` of the suite: every live record rewritten to a new file,
//                           synced and renamed into place (one op per run)
//   keys.change.latency.1M  another process's write (`set`, coalesced) of one key of the suite
//                           → the Observation `onChange` of this process's `StoredMap<Int?>` entry
//                           of that key, the only entry alive (median over samples, as
//                           `keyvalue.change.latency`; p99 beside it)
//   keys.change.cpu.1M      the CPU time this process spends per change followed in that run
//                           (the watch, the catch-up, the entry's reload, the pipe to the writer):
//                           what a reread of the other keys would make grow with the suite
//
// Memory (not a row: rows are nanoseconds): a second process opens the suite, then holds a live
// entry of every key, and says its resident memory after each step; `coffer-bench` writes the
// bytes per key to standard error (`keys.memory.1M: …`). See `keysMemoryProbe`.

import Coffer
import CofferBenchHarness
import Foundation
import Observation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension BenchSuite {
    static let largeKeyNames = ["keys.open.1M", "keys.compact.1M", "keys.change.latency.1M", "keys.change.cpu.1M"]
    /// The suite the large rows share (and the writer and memory processes open).
    static let largeSuite = "keys-1M"
    /// The key the change rows follow: one of the suite's keys.
    static let largeWatchedKey = "k-0"

    /// The number of keys in the large suite.
    var largeCount: Int { runner.quick ? 10_000 : 1_000_000 }

    func keysLarge(_ selected: [String]) throws -> [BenchResult] {
        if selected.isEmpty { return [] }
        var results: [BenchResult] = []
        let count = largeCount
        do {
            let store = try Self.makeLargeSuite(in: directory, count: count)
            let probe = "k-\(count / 2)"
            if selected.contains("keys.open.1M") {
                results.append(
                    try runner.measureSingle("keys.open.1M") {
                        let opened = try KeyValueFileStrategy(directory: directory, suite: Self.largeSuite)
                        guard let value = try opened.load(probe) else {
                            throw BenchError("bench: the large suite lost a key")
                        }
                        return UInt64(value.count)
                    })
            }
            if selected.contains("keys.compact.1M") {
                results.append(
                    try runner.measureSingle("keys.compact.1M") {
                        try store.compact()
                        return UInt64(store.statistics.keys)
                    })
            }
            try store.flush()
        }
        try reportLargeMemory(count: count)
        if selected.contains("keys.change.latency.1M") || selected.contains("keys.change.cpu.1M") {
            results += try largeChangeLatency().filter { selected.contains($0.name) }
        }
        return results
    }

    /// A suite of `count` keys `k-0`… (Int values `0`…), written in commits of 10,000 and synced.
    static func makeLargeSuite(in directory: URL, count: Int) throws -> KeyValueFileStrategy {
        let store = try KeyValueFileStrategy(directory: directory, suite: largeSuite, durability: .coalesced)
        for start in stride(from: 0, to: count, by: 10_000) {
            try store.saveBatch(
                try (start..<min(count, start + 10_000)).map { i in
                    ("k-\(i)", try ValueCodec.encode(i, as: store.valueEncoding))
                })
        }
        try store.flush()
        return store
    }

    /// `keys.change.latency.1M` and `keys.change.cpu.1M`: this process follows one key of the
    /// large suite through a `StoredMap` entry; the writer process (`change-writer keys`)
    /// writes that key, one change at a time.
    private func largeChangeLatency() throws -> [BenchResult] {
        let samples = runner.quick ? 40 : 300
        let store = try KeyValueFileStrategy(directory: directory, suite: Self.largeSuite, durability: .coalesced)
        let map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
        let entry = map.entry(Self.largeWatchedKey)
        _ = try entry.load()
        let writer = try BenchChild(["change-writer", "keys", directory.path])
        defer { writer.finish() }
        guard writer.readLine() == "ready" else { throw BenchError("bench: the writer process failed") }
        let cpuBefore = Self.cpuNanoseconds()
        let latencies = try Self.changeLatencies(from: writer, samples: samples) { UInt64(entry.wrappedValue ?? 0) }
        let cpuPerChange = Double(Self.cpuNanoseconds() - cpuBefore) / Double(samples)
        withExtendedLifetime(entry) {}
        return [
            BenchResult(name: "keys.change.latency.1M", latencies: latencies),
            // One figure over the whole run (CPU time is counted in ticks, too coarse per change).
            BenchResult(
                name: "keys.change.cpu.1M", nsPerOp: max(cpuPerChange, 1), minNs: max(cpuPerChange, 1),
                maxNs: max(cpuPerChange, 1), runs: samples),
        ]
    }

    /// Runs the memory probe (`change-writer keys-memory`) on the large suite and writes
    /// what a stored key and a live entry cost to standard error.
    private func reportLargeMemory(count: Int) throws {
        let probe = try BenchChild(["change-writer", "keys-memory", directory.path, String(count)])
        defer { probe.finish() }
        guard let line = probe.readLine() else { throw BenchError("bench: the memory probe failed") }
        let fields = line.split(separator: " ").compactMap { Double($0) }
        guard fields.count == 3 else { throw BenchError("bench: the memory probe failed") }
        let (opened, held, idle) = (fields[0], fields[1], fields[2])
        func bytes(_ total: Double) -> String { String(format: "%.0f B", total / Double(count)) }
        writeError(
            "keys.memory.1M (\(count) keys): the open suite \(bytes(opened)) per stored key; a live, followed, "
                + "idle entry \(bytes(held)) more per key; \(String(format: "%.0f", idle)) ns CPU per second "
                + "while they idle\n")
    }
}

/// The memory probe, a second process of `coffer-bench` (`change-writer keys-memory DIR
/// COUNT`): opens the large suite, then makes a `StoredMap<Int?>` entry of each of its `COUNT`
/// keys, reads it (so it is loaded and followed) and holds it. Prints one line: the resident
/// memory the open suite added, the memory the live entries added (their array of references
/// included), both in bytes, and the CPU time used per second while they idle (ns).
///
/// A process of its own, so the figures start from a clean heap (the bench process has freed
/// much memory by then, which its allocator reuses).
///
/// When the directory holds no suite, the probe makes one of `COUNT` keys first, and lets it go
/// before measuring (to profile the probe on its own: `heaptrack coffer-bench change-writer
/// keys-memory DIR 10000`).
func keysMemoryProbe(directory: URL, count: Int) throws {
    if !FileManager.default.fileExists(atPath: directory.appendingPathComponent(BenchSuite.largeSuite + ".cofferkv").path) {
        _ = try BenchSuite.makeLargeSuite(in: directory, count: count)
    }
    let baseline = residentBytes()
    let store = try KeyValueFileStrategy(directory: directory, suite: BenchSuite.largeSuite, durability: .coalesced)
    let opened = residentBytes()
    guard store.statistics.keys >= count else { throw BenchError("bench: the large suite is not there") }
    let map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
    var entries: [Stored<Int?>] = []
    entries.reserveCapacity(count)
    var sum = 0
    for i in 0..<count {
        let entry = map.entry("k-\(i)")
        sum &+= entry.wrappedValue ?? 0
        entries.append(entry)
    }
    let held = residentBytes()
    // Two idle seconds (a fifth of one for the small suite of `--quick`).
    let seconds = count >= 1_000_000 ? 2.0 : 0.2
    let cpu = BenchSuite.cpuNanoseconds()
    usleep(UInt32(seconds * 1e6))
    let idle = Double(BenchSuite.cpuNanoseconds() - cpu) / seconds
    blackHole(UInt64(truncatingIfNeeded: sum))
    writeOut("\(opened - baseline) \(held - opened) \(idle)\n")
    withExtendedLifetime(entries) {}
}

/// This process's resident memory in bytes (`/proc/self/statm`), after giving freed heap back.
func residentBytes() -> Int {
    #if canImport(Glibc)
    // glibc's `malloc_trim` (not in Swift's Glibc module): the freed pages of the open's
    // transient buffers would otherwise count as the suite's.
    if let trim = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
        _ = unsafeBitCast(trim, to: (@convention(c) (Int) -> Int32).self)(0)
    }
    #endif
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}
