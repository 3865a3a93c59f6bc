// The timing harness of `coffer bench` and `coffer-bench`: calibrated runs, median/min/max,
// and a sink the optimiser cannot see through.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One benchmark's result: nanoseconds per operation over `runs` timed runs.
package struct BenchResult: Sendable {
    package var name: String
    /// Median over the runs.
    package var nsPerOp: Double
    package var minNs: Double
    package var maxNs: Double
    package var runs: Int
    /// The 99th percentile, for the latency benchmarks (whose runs are samples).
    package var p99Ns: Double? = nil
    /// A peer (a baseline Coffer is compared with), not Coffer itself.
    package var isPeer: Bool { name.hasPrefix("peer.") }
    package var opsPerSec: Double { nsPerOp > 0 ? 1e9 / nsPerOp : 0 }

    package init(name: String, nsPerOp: Double, minNs: Double, maxNs: Double, runs: Int, p99Ns: Double? = nil) {
        self.name = name
        self.nsPerOp = nsPerOp
        self.minNs = minNs
        self.maxNs = maxNs
        self.runs = runs
        self.p99Ns = p99Ns
    }
}

extension BenchResult {
    /// A latency benchmark's result from its samples, sorted: median, extremes and 99th percentile.
    package init(name: String, latencies: [Double]) {
        self.init(
            name: name, nsPerOp: latencies[latencies.count / 2], minNs: latencies[0], maxNs: latencies[latencies.count - 1],
            runs: latencies.count, p99Ns: latencies[min(latencies.count - 1, latencies.count * 99 / 100)])
    }
}

/// One benchmark to run: untimed `prepare` before each run, then `body(n)` timed for `n` ops.
package struct BenchSpec {
    package var name: String
    package var maxIterations: Int = 50_000_000
    package var prepare: () throws -> Void = {}
    package var body: (Int) throws -> UInt64

    package init(
        name: String, maxIterations: Int = 50_000_000, prepare: @escaping () throws -> Void = {},
        body: @escaping (Int) throws -> UInt64
    ) {
        self.name = name
        self.maxIterations = maxIterations
        self.prepare = prepare
        self.body = body
    }
}

/// Monotonic nanoseconds.
@inline(__always)
package func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// `read` done `n` times, the results summed (wrapping) into the checksum a ``BenchSpec`` body
/// returns. Inlined, with a closure that does not escape: the read is inlined into the loop as
/// if it were written there, with no call through a closure per operation (that would add its
/// own nanoseconds to the fastest reads).
@inline(__always)
package func sumOfReads(_ n: Int, _ read: () throws -> Int) rethrows -> UInt64 {
    var sum: UInt64 = 0
    for _ in 0..<n { sum &+= UInt64(truncatingIfNeeded: try read()) }
    return sum
}

/// Consumes a value so the loop that produced it cannot be deleted: the optimiser cannot look
/// into an unoptimised, non-inlined function, so the argument must be computed.
@inline(never) @_optimize(none)
package func blackHole(_ value: UInt64) {
    if value == 0x5EED_C0FF_EE00_0001 { print("", terminator: "") }
}

/// Runs `body(iterations)` (which returns a checksum of its results) enough times to fill each
/// run's time budget, then `runs` timed runs; reports the median ns/op with min and max.
///
/// - Parameters:
///   - budget: target duration of one timed run, in nanoseconds.
///   - maxIterations: a cap per run (for operations that grow a file or hold memory).
///   - prepare: untimed work before each run (a fresh store, …).
package struct BenchRunner {
    package var quick: Bool
    package var runs: Int { quick ? 5 : 7 }
    package var budget: UInt64 { quick ? 20_000_000 : 100_000_000 }

    /// `COFFER_BENCH_ITERATIONS`: every calibrated benchmark runs exactly this many operations
    /// per run (its warm-up too), for counting what an operation costs rather than timing it:
    /// `perf stat -e instructions:u` at two counts, the difference over 8 × their difference
    /// (the warm-up and 7 runs), is the same on a busy machine as on an idle one.
    package var fixedIterations: Int? =
        getenv("COFFER_BENCH_ITERATIONS").flatMap { Int(String(cString: $0)) }.flatMap { $0 > 0 ? $0 : nil }

    package init(quick: Bool) { self.quick = quick }

    /// Measures several benchmarks with their runs interleaved (run 1 of each, then run 2 of
    /// each, …), so that a change in the machine's load or the disk's queue during the group
    /// touches all of them alike and their ratios hold.
    package func measureGroup(_ specs: [BenchSpec]) throws -> [BenchResult] {
        var counts: [Int] = []
        for spec in specs {
            counts.append(try calibrate(spec))
        }
        var samples = [[Double]](repeating: [], count: specs.count)
        for _ in 0..<runs {
            for (i, spec) in specs.enumerated() {
                try spec.prepare()
                let start = monotonicNanoseconds()
                blackHole(try spec.body(counts[i]))
                samples[i].append(Double(monotonicNanoseconds() - start) / Double(counts[i]))
            }
        }
        return zip(specs, samples).map { spec, runs in
            let sorted = runs.sorted()
            return BenchResult(
                name: spec.name, nsPerOp: sorted[sorted.count / 2], minNs: sorted[0], maxNs: sorted[sorted.count - 1],
                runs: sorted.count)
        }
    }

    /// Warms up and returns the ops per run that fill the budget.
    private func calibrate(_ spec: BenchSpec) throws -> Int {
        let maxIterations = spec.maxIterations
        let prepare = spec.prepare
        let body = spec.body
        // Calibrate (and warm up): grow the iteration count until one round takes a fifth of
        // the budget; a slow first operation (a file growing, a cache filling) only makes the
        // next round larger.
        try prepare()
        if let fixed = fixedIterations.map({ min($0, maxIterations) }) {
            blackHole(try body(fixed))
            return fixed
        }
        var iterations = 1
        var elapsed: UInt64 = 0
        while true {
            let start = monotonicNanoseconds()
            blackHole(try body(iterations))
            elapsed = monotonicNanoseconds() - start
            if elapsed >= budget / 5 || iterations >= maxIterations { break }
            let factor = elapsed == 0 ? 100 : min(100, max(2, Int(budget / 4 / max(elapsed, 1))))
            iterations = min(maxIterations, iterations * factor)
        }
        let perOp = Double(elapsed) / Double(iterations)
        return max(1, min(maxIterations, Int(Double(budget) / max(perOp, 1))))
    }

    /// For operations that take long on their own (an Argon2id unlock, opening a 10k store):
    /// one operation per run, no calibration, one untimed warm-up.
    package func measureSingle(_ name: String, prepare: () throws -> Void = {}, _ body: () throws -> UInt64) throws -> BenchResult {
        if !quick {
            try prepare()
            blackHole(try body())
        }
        var samples: [Double] = []
        for _ in 0..<runs {
            try prepare()
            let start = monotonicNanoseconds()
            blackHole(try body())
            samples.append(Double(monotonicNanoseconds() - start))
        }
        samples.sort()
        return BenchResult(
            name: name, nsPerOp: samples[samples.count / 2], minNs: samples[0], maxNs: samples[samples.count - 1],
            runs: samples.count)
    }
}
