// The timing harness of `coffer bench` (issue 6): calibrated runs, median/min/max, and a sink
// the optimiser cannot see through.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One benchmark's result: nanoseconds per operation over `runs` timed runs.
struct BenchResult: Sendable {
    var name: String
    /// Median over the runs.
    var nsPerOp: Double
    var minNs: Double
    var maxNs: Double
    var runs: Int
    /// A peer (a baseline Coffer is compared with), not Coffer itself.
    var isPeer: Bool { name.hasPrefix("peer.") }
    var opsPerSec: Double { nsPerOp > 0 ? 1e9 / nsPerOp : 0 }
}

/// Monotonic nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// Consumes a value so the loop that produced it cannot be deleted: the optimiser cannot look
/// into an unoptimised, non-inlined function, so the argument must be computed.
@inline(never) @_optimize(none)
func blackHole(_ value: UInt64) {
    if value == 0x5EED_C0FF_EE00_0001 { writeError("") }
}

/// Runs `body(iterations)` (which returns a checksum of its results) enough times to fill each
/// run's time budget, then `runs` timed runs; reports the median ns/op with min and max.
///
/// - Parameters:
///   - budget: target duration of one timed run, in nanoseconds.
///   - maxIterations: a cap per run (for operations that grow a file or hold memory).
///   - prepare: untimed work before each run (a fresh store, …).
struct BenchRunner {
    var quick: Bool
    var runs: Int { quick ? 5 : 7 }
    var budget: UInt64 { quick ? 20_000_000 : 100_000_000 }

    func measure(
        _ name: String, maxIterations: Int = 50_000_000, prepare: () throws -> Void = {},
        _ body: (Int) throws -> UInt64
    ) throws -> BenchResult {
        // Calibrate: grow the iteration count until one run takes a tenth of the budget.
        try prepare()
        var iterations = 1
        var elapsed: UInt64 = 0
        while true {
            let start = monotonicNanoseconds()
            blackHole(try body(iterations))
            elapsed = monotonicNanoseconds() - start
            if elapsed >= budget / 10 || iterations >= maxIterations { break }
            iterations = min(maxIterations, iterations * (elapsed == 0 ? 100 : max(2, Int(budget / 10 / max(elapsed, 1)))))
        }
        let perOp = Double(elapsed) / Double(iterations)
        let count = max(1, min(maxIterations, Int(Double(budget) / max(perOp, 1))))
        var samples: [Double] = []
        samples.reserveCapacity(runs)
        for _ in 0..<runs {
            try prepare()
            let start = monotonicNanoseconds()
            blackHole(try body(count))
            let time = monotonicNanoseconds() - start
            samples.append(Double(time) / Double(count))
        }
        samples.sort()
        return BenchResult(
            name: name, nsPerOp: samples[samples.count / 2], minNs: samples[0], maxNs: samples[samples.count - 1],
            runs: samples.count)
    }

    /// For operations that take long on their own (an Argon2id unlock, opening a 10k store):
    /// one operation per run, no calibration, one untimed warm-up.
    func measureSingle(_ name: String, prepare: () throws -> Void = {}, _ body: () throws -> UInt64) throws -> BenchResult {
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
