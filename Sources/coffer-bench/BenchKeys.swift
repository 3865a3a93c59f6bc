// `coffer-bench`: keys chosen at run time, at any number (the `keys.*` rows).
//
// What one operation is, per name (every entry is `StoredMap<Int?>.entry(_:)` of a map over one
// key-value suite, `.coalesced`, that keeps no entries itself (`keepsRecent: 0`): the table
// holds them; each live entry is written, so it follows changes made elsewhere):
//   keys.create.1k      a new key's entry created and written, with 1,000 entries alive
//   keys.create.100k    the same with 100,000 entries alive: the two are equal when creating
//                       an entry costs nothing that grows with the live entries
//   keys.read.100k      a read of a live entry among 100,000 (the `stored.read` of a large table)
//   peer.observable.read.100k  the same loop over 100,000 objects of Swift's own `@Observable`
//                       class with an `Int?` property: the floor of a read from a large table
//                       of objects, paid in cache misses (`peer.observable.read` reads one)
//   keys.transient      an entry for a stored key made, read and dropped (a handler that makes
//                       its property per request), with no other entry of that key alive
//   keys.release.100k   releasing 100,000 live entries, all at once (one op per run)
//   keys.*.1M           a suite of 1,000,000 keys: opened, compacted, one key followed (see
//                       BenchKeysLarge.swift)
//
// The curves (`COFFER_BENCH_KEYS_CURVE=1`): keys.create.N, keys.read.N and keys.release.N at
// N = 1k, 10k, 100k and 1M live entries (1k and 10k with `--quick`), in place of the three rows
// above that they include; each size is measured on its own (its create and read share one
// table of N live entries), so the tables of the other sizes are not alive meanwhile.

import Coffer
import CofferBenchHarness
import Foundation
import Observation

extension BenchSuite {
    static let keyNames =
        (curveSizes.map { sizes in
            ["create", "read", "release"].flatMap { op in sizes.map { "keys.\(op).\($0.label)" } }
        } ?? ["keys.create.1k", "keys.create.100k", "keys.read.100k"]) + ["peer.observable.read.100k"]
        + ["keys.transient"] + (curveSizes == nil ? ["keys.release.100k"] : []) + largeKeyNames

    /// The sizes of the curves when `COFFER_BENCH_KEYS_CURVE` is set (to anything but `0` or
    /// empty), else `nil`. `--quick` runs only the first two.
    static let curveSizes: [(label: String, count: Int)]? = {
        guard let value = ProcessInfo.processInfo.environment["COFFER_BENCH_KEYS_CURVE"], !value.isEmpty, value != "0"
        else { return nil }
        return [("1k", 1000), ("10k", 10_000), ("100k", 100_000), ("1M", 1_000_000)]
    }()

    func keysScaling(_ selected: [String]) throws -> [BenchResult] {
        let large = try keysLarge(selected.filter { Self.largeKeyNames.contains($0) })
        if Self.curveSizes != nil {
            return try keysCurves(selected)
                + keysFixed(selected.filter { $0 == "keys.transient" || $0 == "peer.observable.read.100k" }) + large
        }
        return try keysFixed(selected) + large
    }

    /// The default rows: create with 1k and 100k alive, read among 100k, transient, release 100k.
    private func keysFixed(_ selected: [String]) throws -> [BenchResult] {
        if selected.isEmpty { return [] }
        let store = try KeyValueFileStrategy(directory: directory, suite: "keys", durability: .coalesced)
        defer { try? store.flush() }
        let map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
        func liveEntries(_ prefix: String, _ count: Int) -> [Stored<Int?>] { Self.liveEntries(map, prefix, count) }
        // `--quick` (a smoke run, as the test of the command makes) builds tables of 10,000: the
        // names stay, the figures are not the published ones.
        let large = runner.quick ? 10_000 : 100_000
        var results: [BenchResult] = []
        func creating(_ name: String, alive: Int) -> BenchSpec {
            creatingBeside(liveEntries(name, alive), name: name, map: map)
        }
        var specs: [BenchSpec] = []
        if selected.contains("keys.create.1k") { specs.append(creating("keys.create.1k", alive: 1000)) }
        if selected.contains("keys.create.100k") { specs.append(creating("keys.create.100k", alive: large)) }
        if selected.contains("keys.read.100k") { specs.append(reading(liveEntries("read", large), name: "keys.read.100k")) }
        if selected.contains("peer.observable.read.100k") {
            let table = (0..<large).map { i in
                let box = ObservableOptionalBox()
                box.value = i
                return box
            }
            var index = 0
            specs.append(
                BenchSpec(name: "peer.observable.read.100k") { n in
                    sumOfReads(n) {
                        index = index == table.count - 1 ? 0 : index + 1
                        return table[index].value ?? 0
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
                            throw BenchError("bench: a transient entry read no value")
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

    /// The curves: create, read and release at each of ``curveSizes`` live entries, one size
    /// after the other.
    private func keysCurves(_ selected: [String]) throws -> [BenchResult] {
        guard let allSizes = Self.curveSizes else { return [] }
        let store = try KeyValueFileStrategy(directory: directory, suite: "keys-curves", durability: .coalesced)
        defer { try? store.flush() }
        let map = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
        var results: [BenchResult] = []
        for (label, count) in allSizes.prefix(runner.quick ? 2 : allSizes.count) {
            let (create, read, release) = ("keys.create.\(label)", "keys.read.\(label)", "keys.release.\(label)")
            if selected.contains(create) || selected.contains(read) {
                let table = Self.liveEntries(map, "table-\(label)", count)
                var specs: [BenchSpec] = []
                if selected.contains(create) { specs.append(creatingBeside(table, name: create, map: map)) }
                if selected.contains(read) { specs.append(reading(table, name: read)) }
                results += try runner.measureGroup(specs)
            }
            if selected.contains(release) {
                var table: [Stored<Int?>] = []
                results.append(
                    try runner.measureSingle(release, prepare: { table = Self.liveEntries(map, "release-\(label)", count) }) {
                        let released = table.count
                        table = []
                        return UInt64(released)
                    })
            }
        }
        return results
    }

    /// `count` live entries of `map` on keys `prefix-0`…, each written and read.
    static func liveEntries(_ map: StoredMap<Int?>, _ prefix: String, _ count: Int) -> [Stored<Int?>] {
        (0..<count).map { i in
            let entry = map.entry("\(prefix)-\(i)")
            entry.wrappedValue = i
            return entry
        }
    }

    /// Creating a new key's entry (written) with `table` alive: each run adds at most 1,000
    /// entries, dropped before the next run (untimed), so the number of live entries the figure
    /// is taken at stays at its nominal size.
    func creatingBeside(_ table: [Stored<Int?>], name: String, map: StoredMap<Int?>) -> BenchSpec {
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

    /// A read of a live entry of `table`, each in turn.
    func reading(_ table: [Stored<Int?>], name: String) -> BenchSpec {
        var index = 0
        return BenchSpec(name: name) { n in
            sumOfReads(n) {
                index = index == table.count - 1 ? 0 : index + 1
                return table[index].wrappedValue ?? 0
            }
        }
    }
}

/// Swift's own observable model with an optional value, as `keys.read.100k` reads an `Int?`.
@Observable
final class ObservableOptionalBox {
    var value: Int?
}
