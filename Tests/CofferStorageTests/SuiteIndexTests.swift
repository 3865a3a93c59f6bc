import CofferTesting
import Foundation
import Testing

@testable import CofferStorage

/// The key-value suite's index (`SuiteIndex`), against a dictionary as the model: sets,
/// overwrites and removes in random order (removals move the slots after them back, so every
/// lookup after one checks that move), growth, names of every length and spelling.
@Suite("Key-value suite: its index against a model")
struct SuiteIndexTests {
    /// Names of 0 to 40 bytes, some outside ASCII, two spellings of "café" (distinct names).
    static func name(_ i: Int) -> String {
        switch i % 6 {
        case 0: return "k\(i)"
        case 1: return String(repeating: "n", count: i % 41)
        case 2: return "clé-\(i)-ünïcödé"
        case 3: return i % 12 == 3 ? "caf\u{E9}" : "cafe\u{301}"
        case 4: return "a-rather-long-name-of-more-than-sixteen-bytes-\(i)"
        default: return "\(i)"
        }
    }

    /// The model is keyed by UTF-8 bytes: `String`'s `==` would make the two spellings of
    /// "café" one key, and the index keeps them apart (exact names).
    typealias Model = [[UInt8]: Data]

    static func check(_ index: SuiteIndex, _ model: Model, _ names: [String]) {
        #expect(index.count == model.count)
        for name in names {
            #expect(index.value(for: name) == model[Array(name.utf8)], "value of \(name.debugDescription)")
            #expect(index.valueCount(for: name) == model[Array(name.utf8)]?.count)
        }
        #expect(Set(index.keys.map { Array($0.utf8) }) == Set(model.keys))
        #expect(index.keys.count == model.count, "a name listed twice")
        var listed: Model = [:]
        index.forEach { name, value in listed[Array(name)] = Data(value) }
        #expect(listed == model)
    }

    @Test("Random sets, overwrites and removes leave what the model has", arguments: [1, 2, 3, 4])
    func randomOperations(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var index = SuiteIndex()
        var model: Model = [:]
        let names = (0..<600).map(Self.name)
        for step in 0..<20_000 {
            let name = names[Int.random(in: 0..<names.count, using: &random)]
            if Int.random(in: 0..<3, using: &random) == 0 {
                let old = index.remove(name)
                #expect(old == model.removeValue(forKey: Array(name.utf8))?.count)
            } else {
                let value = Data((0..<Int.random(in: 0..<24, using: &random)).map { _ in UInt8(step & 0xFF) })
                let old = index.set(name, value)
                #expect(old == model.updateValue(value, forKey: Array(name.utf8))?.count)
            }
            if step % 2_000 == 0 { Self.check(index, model, names) }
        }
        Self.check(index, model, names)
        index.removeAll()
        Self.check(index, [:], names)
        // Usable again after being emptied.
        index.set("again", Data([1]))
        Self.check(index, [Array("again".utf8): Data([1])], names + ["again"])
    }

    @Test("A table that only grows, and one emptied name by name, stay exact")
    func growAndDrain() {
        var index = SuiteIndex()
        var model: Model = [:]
        let names = (0..<5_000).map { "item-\($0)" }
        for (i, name) in names.enumerated() {
            let value = withUnsafeBytes(of: UInt64(i)) { Data($0) }
            index.set(name, value)
            model[Array(name.utf8)] = value
        }
        Self.check(index, model, names)
        for name in names.shuffled() {
            #expect(index.remove(name) == 8)
            model[Array(name.utf8)] = nil
            #expect(index.value(for: name) == nil)
        }
        Self.check(index, [:], names)
        #expect(index.remove("item-1") == nil)
    }

    @Test("Names in a shared segment: a batch's records stay readable while any is live, and are freed after")
    func sharedSegment() {
        var index = SuiteIndex()
        // Two records' name and value bytes side by side, as an open's batch holds them.
        let bytes = Data("alpha".utf8) + Data([1, 2, 3]) + Data("beta".utf8) + Data([4])
        let segment = bytes.withUnsafeBytes { index.addSegment(copying: $0) }
        index.set(segment: segment, offset: 0, nameCount: 5, valueCount: 3)
        index.set(segment: segment, offset: 8, nameCount: 4, valueCount: 1)
        index.releaseIfUnused(segment)  // in use: kept
        #expect(index.value(for: "alpha") == Data([1, 2, 3]))
        #expect(index.value(for: "beta") == Data([4]))
        // Both replaced by writes of their own: the batch's segment is freed (ASan would see a
        // use after free if a slot still pointed into it), the new values read back.
        index.set("alpha", Data([9]))
        index.remove("beta")
        #expect(index.value(for: "alpha") == Data([9]))
        #expect(index.value(for: "beta") == nil)
        #expect(index.count == 1)
    }

    @Test("Superseded records of a batch do not keep memory past twice what is live")
    func segmentsAreCompacted() {
        var index = SuiteIndex()
        // One batch of 20,000 records (as an open reads them): name "k<i>" and a 32-byte value.
        var bytes = Data()
        var places: [(offset: Int, nameCount: Int)] = []
        for i in 0..<20_000 {
            let name = Data("k\(i)".utf8)
            places.append((bytes.count, name.count))
            bytes += name + Data(repeating: UInt8(i & 0xFF), count: 32)
        }
        let segment = bytes.withUnsafeBytes { index.addSegment(copying: $0) }
        for place in places { index.set(segment: segment, offset: place.offset, nameCount: place.nameCount, valueCount: 32) }
        index.releaseIfUnused(segment)
        index.compactSegmentsIfWorthIt()
        #expect(index.retainedBytes == bytes.count, "a batch that is all live is kept as it is")
        // All but 100 removed: the batch would keep ~800 KB for 100 values.
        for i in 100..<20_000 {
            index.remove("k\(i)")
            index.compactSegmentsIfWorthIt()
        }
        #expect(index.retainedBytes < 2 * 100 * (36 + SuiteIndex.recordOverhead) + 256 * 1024)
        for i in 0..<100 { #expect(index.value(for: "k\(i)") == Data(repeating: UInt8(i & 0xFF), count: 32)) }
        #expect(index.value(for: "k100") == nil)
        #expect(index.count == 100)
        // And it goes on working: overwrite, remove, add.
        index.set("k0", Data([1]))
        index.remove("k1")
        index.set("new", Data([2]))
        #expect(index.value(for: "k0") == Data([1]) && index.value(for: "k1") == nil && index.value(for: "new") == Data([2]))
        #expect(index.value(for: "k99") == Data(repeating: 99, count: 32))
    }

    @Test("A value of the same size written over one written here is stored in place; a batch's never is")
    func sameSizeOverwrite() {
        var index = SuiteIndex()
        index.set("counter", Data(repeating: 0, count: 8))
        let retained = index.retainedBytes
        for i in 1...1_000 {
            let value = withUnsafeBytes(of: UInt64(i).littleEndian) { Data($0) }
            #expect(index.set("counter", value) == 8)
            #expect(index.value(for: "counter") == value)
        }
        #expect(index.retainedBytes == retained, "same-size overwrites allocate nothing")
        // Another size: a segment of its own again, the old one freed.
        #expect(index.set("counter", Data([7])) == 8)
        #expect(index.value(for: "counter") == Data([7]))
        #expect(index.retainedBytes == "counter".utf8.count + 1)
        // A record in a segment it shares with another (a batch's, or a compaction's) is never
        // written in place, even at offset 0 with the same size: the write goes to a segment
        // of its own, and the other record is unchanged. (An open's batch keeps whole records,
        // so its names never start at 0; the shared segment is what this guards against.)
        let bytes = Data("one".utf8) + Data([1, 1]) + Data("two".utf8) + Data([2, 2])
        let segment = bytes.withUnsafeBytes { index.addSegment(copying: $0) }
        index.set(segment: segment, offset: 0, nameCount: 3, valueCount: 2)
        index.set(segment: segment, offset: 5, nameCount: 3, valueCount: 2)
        #expect(index.set("one", Data([9, 9])) == 2)
        #expect(index.value(for: "one") == Data([9, 9]))
        #expect(index.value(for: "two") == Data([2, 2]))
        #expect(index.count == 3)
    }
}
