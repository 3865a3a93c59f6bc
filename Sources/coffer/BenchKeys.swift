// `coffer bench`: keys chosen at run time, at any number (the `keys.*` rows).
//
// What one operation is, per name (every entry is `StoredMap<Int?>.entry(_:)` of a map over one
// key-value suite, `.coalesced`, that keeps no entries itself (`keepsRecent: 0`): the table
// holds them; each live entry is written, so it follows changes made elsewhere):
//   keys.create.1k      a new key's entry created and written, with 1,000 entries alive
//   keys.create.100k    the same with 100,000 entries alive: the two are equal when creating
//                       an entry costs nothing that grows with the live entries
//   keys.read.100k      a read of a live entry among 100,000 (the `stored.read` of a large table)
//   keys.transient      an entry for a stored key made, read and dropped (a handler that makes
//                       its property per request), with no other entry of that key alive
//   keys.release.100k   releasing 100,000 live entries, all at once (one op per run)

import Coffer
import Foundation

extension BenchSuite {
    static let keyNames = ["keys.create.1k", "keys.create.100k", "keys.read.100k", "keys.transient", "keys.release.100k"]

    func keysScaling(_ selected: [String]) throws -> [BenchResult] {
        let store = try KeyValueFileStrategy(directory: directory, suite: "keys", durability: .coalesced)
        defer { try? store.flush() }
        let map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
        /// `count` live entries on keys `prefix-0`…, each written and read.
        func liveEntries(_ prefix: String, _ count: Int) -> [Stored<Int?>] {
            (0..<count).map { i in
                let entry = map.entry("\(prefix)-\(i)")
                entry.wrappedValue = i
                return entry
            }
        }
        // `--quick` (a smoke run, as the test of the command makes) builds tables of 10,000: the
        // names stay, the figures are not the published ones.
        let large = runner.quick ? 10_000 : 100_000
        var results: [BenchResult] = []
        // Creating: each run adds at most 1,000 entries to the table, dropped before the next run
        // (untimed), so the table the figure is taken at stays at its nominal size.
        func creating(_ name: String, alive: Int) -> BenchSpec {
            let table = liveEntries(name, alive)
            var made: [Stored<Int?>] = []
            made.reserveCapacity(1000)
            var next = 0
            return BenchSpec(name: name, maxIterations: 1000, prepare: { made.removeAll(keepingCapacity: true) }) { n in
                for _ in 0..<n {
                    next += 1
                    let entry = map.entry("\(name)-new-\(next)")
                    entry.wrappedValue = next
                    made.append(entry)
                }
                return UInt64(made.count + table.count)
            }
        }
        var specs: [BenchSpec] = []
        if selected.contains("keys.create.1k") { specs.append(creating("keys.create.1k", alive: 1000)) }
        if selected.contains("keys.create.100k") { specs.append(creating("keys.create.100k", alive: large)) }
        if selected.contains("keys.read.100k") {
            let table = liveEntries("read", large)
            var index = 0
            specs.append(
                BenchSpec(name: "keys.read.100k") { n in
                    sumOfReads(n) {
                        index = index == table.count - 1 ? 0 : index + 1
                        return table[index].wrappedValue ?? 0
                    }
                })
        }
        if selected.contains("keys.transient") {
            for i in 0..<1000 { try store.set(i, for: "transient-\(i)") }
            var index = 0
            specs.append(
                BenchSpec(name: "keys.transient", maxIterations: 1_000_000) { n in
                    try sumOfReads(n) {
                        index = index == 999 ? 0 : index + 1
                        guard let value = map["transient-\(index)"] else {
                            throw CLIError(.failure, "bench: a transient entry read no value")
                        }
                        return value
                    }
                })
        }
        results += try runner.measureGroup(specs)
        if selected.contains("keys.release.100k") {
            var table: [Stored<Int?>] = []
            results.append(
                try runner.measureSingle("keys.release.100k", prepare: { table = liveEntries("release", large) }) {
                    let count = table.count
                    table = []
                    return UInt64(count)
                })
        }
        return results
    }
}
