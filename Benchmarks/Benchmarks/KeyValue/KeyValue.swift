// The key-value file strategy: writes (coalesced, durable, and coalesced on a suite opened
// exclusively), reads and opens, at 10, 1,000 and 100,000 keys. A write appends one record, so its cost must not grow with the suite.

import Benchmark
import BenchSupport
import Coffer
import Foundation

let benchmarks: @Sendable () -> Void = {
    configureSuite()
    let scratch = ScratchDirectory("bench-kv")

    for count in scalingSizes {
        let size = sizeLabel(count)
        for (mode, durability, exclusive) in [
            ("coalesced", Durability.coalesced, false), ("durable", .immediate, false), ("exclusive", .coalesced, true),
        ] {
            var store: KeyValueFileStrategy?
            var next: UInt64 = 0
            Benchmark(
                "keyvalue.write.\(mode).\(size)",
                configuration: configuration(scaling: durability == .immediate ? .one : .kilo, fsyncBound: durability == .immediate)
            ) { benchmark in
                guard let store else { fatalError("set up before the run") }
                for _ in benchmark.scaledIterations {
                    next &+= 1
                    // Overwrites one key: the suite keeps `count` live keys.
                    try store.save(eightBytes(next), for: "item-0")
                }
            } setup: {
                do {
                    store = try makeKeyValueSuite(
                        in: scratch.url, suite: "write-\(mode)-\(count)", count: count, durability: durability,
                        exclusive: exclusive)
                } catch { fixtureFailed("key-value suite of \(count)", error) }
            } teardown: {
                try? store?.flush()
                store = nil
            }
        }

        Benchmark("keyvalue.open.\(size)", configuration: configuration(maxIterations: 200)) { benchmark in
            for _ in benchmark.scaledIterations {
                let store = try KeyValueFileStrategy(directory: scratch.url, suite: "open-\(count)")
                blackHole(try store.load("item-\(count / 2)"))
            }
        } setup: {
            do { _ = try makeKeyValueSuite(in: scratch.url, suite: "open-\(count)", count: count, durability: .coalesced) }
            catch { fixtureFailed("key-value suite of \(count)", error) }
        }
    }

    var reader: KeyValueFileStrategy?
    let keys = (0..<1000).map { "item-\($0)" }
    Benchmark("keyvalue.read.1k", configuration: configuration(scaling: .kilo)) { benchmark in
        guard let reader else { fatalError("set up before the run") }
        for i in benchmark.scaledIterations {
            blackHole(try reader.load(keys[i % 1000]))
        }
    } setup: {
        do { reader = try makeKeyValueSuite(in: scratch.url, suite: "read", count: 1000, durability: .coalesced) }
        catch { fixtureFailed("key-value suite", error) }
    } teardown: {
        reader = nil
    }
}
