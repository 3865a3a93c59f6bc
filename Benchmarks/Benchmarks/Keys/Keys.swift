// Keys chosen at run time (`StoredMap`): what a key costs must not grow with the number of keys
// alive. The same operations as `coffer-bench`'s `keys.*` rows (Sources/coffer-bench/BenchKeys.swift):
// every entry is `StoredMap<Int?>.entry(_:)` of a map over one key-value suite, `.coalesced`,
// that keeps no entries itself (`keepsRecent: 0`); a live entry is written, so it is loaded and
// follows changes made elsewhere.
//
//   keys.create.1k, keys.create.100k   a new key's entry made and written, with 1,000 or 100,000
//                                      entries alive (the entries one sample made are dropped
//                                      before the next, outside the measurement)
//   keys.read.100k                     a read of a live entry among 100,000
//   keys.transient                     an entry for a stored key made, read and dropped, with no
//                                      other entry of that key alive

import Benchmark
import BenchSupport
import Coffer
import Foundation

/// `count` live entries of `map` on keys `prefix-0`…, each written (so loaded and followed).
func liveEntries(_ map: StoredMap<Int?>, _ prefix: String, _ count: Int) -> [Stored<Int?>] {
    (0..<count).map { i in
        let entry = map.entry("\(prefix)-\(i)")
        entry.wrappedValue = i
        return entry
    }
}

/// The suite and the map every benchmark here uses, and the scratch directory that holds the
/// suite, kept as long as the benchmarks that capture it (a `ScratchDirectory` removes its
/// directory when released).
final class KeysFixture: Sendable {
    let scratch = ScratchDirectory("bench-keys")
    let store: KeyValueFileStrategy
    let map: StoredMap<Int?>

    init() {
        do {
            store = try KeyValueFileStrategy(directory: scratch.url, suite: "keys", durability: .coalesced)
        } catch { fixtureFailed("key-value suite", error) }
        map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
    }
}

let benchmarks: @Sendable () -> Void = {
    configureSuite()
    let fixture = KeysFixture()
    
    for alive in [1_000, 100_000] {
        let size = sizeLabel(alive)
        var table: [Stored<Int?>] = []
        var made: [Stored<Int?>] = []
        var next = 0
        Benchmark("keys.create.\(size)", configuration: configuration(scaling: .kilo)) { benchmark in
            // Not measured: the last sample's entries are dropped; the table is alive.
            made.removeAll(keepingCapacity: true)
            precondition(table.count == alive)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                next += 1
                let entry = fixture.map.entry("create-\(size)-new-\(next)")
                entry.wrappedValue = next
                made.append(entry)
            }
            benchmark.stopMeasurement()
        } setup: {
            table = liveEntries(fixture.map, "create-\(size)", alive)
            made.reserveCapacity(1000)
        } teardown: {
            made = []
            table = []
        }
    }

    var readTable: [Stored<Int?>] = []
    var readIndex = 0
    Benchmark("keys.read.100k", configuration: configuration(scaling: .kilo)) { benchmark in
        // Each entry in turn, across samples: a sample reads 1,000 of them, not the same 1,000.
        let count = readTable.count
        for _ in benchmark.scaledIterations {
            readIndex = readIndex == count - 1 ? 0 : readIndex + 1
            blackHole(readTable[readIndex].wrappedValue)
        }
    } setup: {
        readTable = liveEntries(fixture.map, "read", 100_000)
    } teardown: {
        readTable = []
    }

    let transientKeys = (0..<1000).map { "transient-\($0)" }
    Benchmark("keys.transient", configuration: configuration(scaling: .kilo)) { benchmark in
        for i in benchmark.scaledIterations {
            blackHole(fixture.map[transientKeys[i % 1000]])
        }
    } setup: {
        do {
            for (i, key) in transientKeys.enumerated() { try fixture.store.set(i, for: key) }
        } catch { fixtureFailed("transient keys", error) }
    }
}
