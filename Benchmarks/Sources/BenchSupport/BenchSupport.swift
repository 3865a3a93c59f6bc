// Shared by every suite: the default configuration (metrics and regression tolerances), a private
// temporary directory, and store fixtures.

public import Benchmark
public import Coffer
public import CofferCrypto
public import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The three store sizes of the scaling benchmarks: the cost of a write must not grow with them.
public let scalingSizes = [10, 1_000, 100_000]

/// "10", "1k", "100k".
public func sizeLabel(_ count: Int) -> String {
    count >= 1000 ? "\(count / 1000)k" : "\(count)"
}

// Benchmark names have no spaces: benchmark 1.38.1 writes threshold files with spaces replaced
// by underscores but reads them back by the raw name, so a name with a space never finds its
// threshold and `thresholds check` fails.

/// Metrics every benchmark records: time, throughput, allocations and peak memory.
public var coreMetrics: [BenchmarkMetric] { [.wallClock, .cpuTotal, .throughput, .mallocCountTotal, .peakMemoryResident] }

/// Tolerances for `swift package benchmark thresholds check`, which compares each metric's p90
/// with Thresholds/. These shared 2-core machines are noisy: wall-clock time fails the check only
/// past 2 × its threshold, and not at all for operations bound by the disk's flush (`fsyncBound`),
/// whose latency here moves between 0.1 and 8 ms with other sessions' I/O — those are gated on
/// their allocations only. CPU time (10 ms ticks) and throughput (the inverse of time) are recorded
/// but not gated. Malloc counts are nearly deterministic (background threads — a coalesced
/// store's flush timer — add a few) and held to 25 %; peak resident memory to 2 ×. Each check is
/// relative only: an absolute tolerance is compared in the metric's scaled units and misfires.
public func regressionTolerances(fsyncBound: Bool = false) -> [BenchmarkMetric: BenchmarkThresholds] {
    let ungated = BenchmarkThresholds(
        relative: BenchmarkThresholds.Relative.none, absolute: BenchmarkThresholds.Absolute.none)
    return [
        .wallClock: fsyncBound ? ungated : BenchmarkThresholds(relative: [.p90: 100.0]),
        .cpuTotal: ungated,
        .throughput: ungated,
        .mallocCountTotal: BenchmarkThresholds(relative: [.p90: 25.0]),
        .peakMemoryResident: BenchmarkThresholds(relative: [.p90: 100.0]),
    ]
}

/// Sets the suite-wide configuration, `configuration()` with its defaults; call first in `benchmarks`.
public func configureSuite() {
    Benchmark.defaultConfiguration = configuration()
}

/// A benchmark's configuration: ``coreMetrics`` and ``regressionTolerances(fsyncBound:)`` always,
/// and what a benchmark may change. An operation fast enough to be repeated `scaling` times per
/// sample says so; a slow one (sealing 1 MiB, a KDF) reports in larger `timeUnits`, with fewer
/// warm-up runs or iterations, or more time.
public func configuration(
    scaling: BenchmarkScalingFactor = .one, timeUnits: BenchmarkTimeUnits = .nanoseconds, warmupIterations: Int = 3,
    maxDuration: Duration = .seconds(1), maxIterations: Int = 2_000, fsyncBound: Bool = false
) -> Benchmark.Configuration {
    .init(
        metrics: coreMetrics, timeUnits: timeUnits, warmupIterations: warmupIterations, scalingFactor: scaling,
        maxDuration: maxDuration, maxIterations: maxIterations,
        thresholds: regressionTolerances(fsyncBound: fsyncBound))
}

/// Directories to delete when the process exits.
private let scratchPaths = Mutex<[String]>([])

/// A private (0700) temporary directory, deleted with everything in it when the process exits
/// (or at ``remove()``).
public final class ScratchDirectory: Sendable {
    public let url: URL

    public init(_ label: String) {
        var template = Array((NSTemporaryDirectory() + "/coffer-\(label)-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard let made else { fatalError("cannot create a temporary directory: \(String(cString: strerror(errno)))") }
        url = URL(fileURLWithPath: String(cString: made))
        let first = scratchPaths.withLock { paths in
            paths.append(url.path)
            return paths.count == 1
        }
        if first {
            atexit {
                for path in scratchPaths.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
            }
        }
    }

    public func file(_ name: String) -> URL { url.appendingPathComponent(name) }

    public func remove() { try? FileManager.default.removeItem(at: url) }

    deinit { remove() }
}

/// 8 bytes of `value`, the key-value benchmarks' value.
@inline(__always)
public func eightBytes(_ value: UInt64) -> Data { withUnsafeBytes(of: value) { Data($0) } }

/// A key-value suite holding `count` keys `item-0…` of 8 bytes, written in commits of 1,000.
public func makeKeyValueSuite(in directory: URL, suite: String, count: Int, durability: Durability, exclusive: Bool = false)
    throws -> KeyValueFileStrategy
{
    let store = try KeyValueFileStrategy(directory: directory, suite: suite, durability: durability, exclusive: exclusive)
    for start in stride(from: 0, to: count, by: 1000) {
        try store.saveBatch((start..<min(count, start + 1000)).map { ("item-\($0)", eightBytes(UInt64($0))) })
    }
    try store.flush()
    return store
}

/// A vault (raw key, no KDF) holding `count` items of 32 bytes, written in commits of 1,000.
public func makeVault(at url: URL, key: SecureBytes, count: Int, durability: Durability) throws -> Vault {
    let vault = try Vault.create(at: url, unlock: .key(key), durability: durability)
    let secret = [UInt8](repeating: 0x5A, count: 32)
    for start in stride(from: 0, to: count, by: 1000) {
        try vault.apply(
            (start..<min(count, start + 1000)).map {
                .set(service: "bench", account: "item-\($0)", secret: secret, label: nil, comment: nil)
            })
    }
    try vault.flush()
    return vault
}

/// Fails the benchmark run: a fixture could not be built.
public func fixtureFailed(_ what: String, _ error: any Error) -> Never {
    fatalError("benchmark fixture: \(what): \(error)")
}
