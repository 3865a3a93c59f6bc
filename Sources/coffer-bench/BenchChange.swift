// `coffer-bench`: how long a write made by another process takes to reach an observer here,
// and what watching costs while nothing changes.
//
//   keyvalue.change.latency   another process's `KeyValueFileStrategy.set` (coalesced) → the
//                             Observation `onChange` of a loaded `@Stored` on that key, here
//   vault.change.latency      the same through `Vault.set` and a `.vault(…)` property
//   watch.idle.1000keys       CPU time this process spends per second while 1,000 loaded
//                             properties on 10 suites are watched and nothing changes
//
// Latency is measured from just before the other process starts its write (it writes its
// monotonic clock as the value) to the callback, so it includes the write itself. The median
// is the reported figure; min, max and the 99th percentile are over the samples.

import ArgumentParser
import Coffer
import CofferBenchHarness
import CofferCrypto
import Foundation
import Observation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The writing side of the change benchmarks, run by `coffer-bench` as a second process. Not
/// shown in `--help`: its only caller is the benchmark.
struct BenchChangeWriterCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "change-writer", abstract: "The second process of `coffer-bench` (internal).",
        shouldDisplay: false)

    @Argument var kind: String
    @Argument var directory: String
    /// `keys-memory`: the number of keys of the large suite.
    @Argument var count: Int?

    func run() throws {
        let url = URL(fileURLWithPath: directory)
        let write: () throws -> Void
        switch kind {
        case "keys":
            // One key of the large suite of the `keys.*.1M` rows (BenchKeysLarge.swift).
            let store = try KeyValueFileStrategy(directory: url, suite: BenchSuite.largeSuite)
            write = { try store.set(Int(monotonicNanoseconds()), for: BenchSuite.largeWatchedKey) }
        case "keys-memory":
            // Not a writer: the memory probe of the large suite, which says its figures and ends.
            try keysMemoryProbe(directory: url, count: count ?? 0)
            return
        case "keyvalue":
            let store = try KeyValueFileStrategy(directory: url, suite: "change")
            write = { try store.set(Int(monotonicNanoseconds()), for: "t") }
        case "vault":
            let vault = try Vault.open(
                at: url.appendingPathComponent("change.coffervault"),
                unlock: .keyFile(url.appendingPathComponent("change.key")), durability: .coalesced)
            write = { try vault.set(String(monotonicNanoseconds()), service: "bench", account: "t") }
        default:
            throw ValidationError("change-writer: unknown kind")
        }
        writeOut("ready\n")
        while let line = readLine(), line == "w" {
            try write()
            writeOut("ok\n")
        }
    }
}

final class LatencyModel {
    @Stored(backed: .keyValue(suite: "change", key: "t")) var keyValue = 0
    @Stored(backed: .vault(service: "bench", account: "t")) var vault = 0
}

extension BenchSuite {
    func changeLatency(_ selected: [String]) throws -> [BenchResult] {
        var results: [BenchResult] = []
        let samples = runner.quick ? 40 : 300
        let keyFile = directory.appendingPathComponent("change.key")
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: keyFile)
        chmod(keyFile.path, 0o600)
        _ = try Vault.create(at: directory.appendingPathComponent("change.coffervault"), unlock: .keyFile(keyFile))
        let context = CofferContext(directory: directory)
            .with(VaultConfiguration(url: directory.appendingPathComponent("change.coffervault"), unlock: .keyFile(keyFile)))
        let model = CofferContext.$current.withValue(context) { LatencyModel() }
        for (name, kind) in [("keyvalue.change.latency", "keyvalue"), ("vault.change.latency", "vault")]
        where selected.contains(name) {
            let property = kind == "vault" ? model.$vault : model.$keyValue
            _ = try property.load()
            let writer = try BenchChild(["change-writer", kind, directory.path])
            defer { writer.finish() }
            guard writer.readLine() == "ready" else { throw BenchError("bench: the writer process failed") }
            let latencies = try Self.changeLatencies(from: writer, samples: samples) { UInt64(property.wrappedValue) }
            results.append(BenchResult(name: name, latencies: latencies))
        }
        if selected.contains("watch.idle.1000keys") { results.append(try idleCost()) }
        return results
    }

    /// `samples` changes, one at a time: the writer process writes its monotonic clock as the
    /// value, and `read` (an observed property's value) is read once Observation says it changed.
    /// Returns the latencies, sorted; a change not seen within 2 s counts as 2 s (never dropped).
    static func changeLatencies(from writer: BenchChild, samples: Int, read: () -> UInt64) throws -> [Double] {
        var latencies: [Double] = []
        for _ in 0..<samples {
            let seen = Locked<UInt64>(0)
            let signal = DispatchSemaphore(value: 0)
            _ = withObservationTracking { read() } onChange: {
                seen.withLock { $0 = monotonicNanoseconds() }
                signal.signal()
            }
            writer.say("w")
            guard writer.readLine() == "ok" else { throw BenchError("bench: the writer process failed") }
            if signal.wait(timeout: .now() + 2) == .timedOut {
                latencies.append(2e9)
                continue
            }
            latencies.append(Double(seen.withLock { $0 } &- read()))
            usleep(1000)  // one change at a time, not a burst
        }
        return latencies.sorted()
    }

    /// 1,000 loaded properties on 10 suites, watched; the CPU this process uses per second of
    /// wall time while nothing changes (median of the runs).
    private func idleCost() throws -> BenchResult {
        let context = CofferContext(directory: directory.appendingPathComponent("idle"))
        let properties = CofferContext.$current.withValue(context) {
            (0..<1000).map { Stored(wrappedValue: 0, backed: .keyValue(suite: "idle\($0 % 10)", key: "k\($0)")) }
        }
        for property in properties { _ = try property.load() }
        let seconds = runner.quick ? 1.0 : 10.0
        var samples: [Double] = []
        for _ in 0..<runner.runs {
            let before = Self.cpuNanoseconds()
            usleep(UInt32(seconds * 1e6 / Double(runner.runs)))
            samples.append(Double(Self.cpuNanoseconds() - before) / (seconds / Double(runner.runs)))
        }
        withExtendedLifetime(properties) {}
        samples.sort()
        return BenchResult(
            name: "watch.idle.1000keys", nsPerOp: max(samples[samples.count / 2], 1), minNs: max(samples[0], 1),
            maxNs: max(samples.last!, 1), runs: samples.count)
    }

    /// User and system CPU time of this process so far.
    static func cpuNanoseconds() -> UInt64 {
        var usage = rusage()
        #if os(Linux)
        getrusage(RUSAGE_SELF.rawValue, &usage)
        #else
        getrusage(RUSAGE_SELF, &usage)
        #endif
        func ns(_ time: timeval) -> UInt64 { UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_usec) * 1000 }
        return ns(usage.ru_utime) + ns(usage.ru_stime)
    }
}

/// This `coffer-bench` as a child process, talked to by lines.
final class BenchChild {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    func readLine() -> String? {
        var line = Data()
        while let byte = try? output.fileHandleForReading.read(upToCount: 1), let first = byte.first {
            if first == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
            line.append(first)
        }
        return nil
    }

    func say(_ line: String) {
        try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    func finish() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
