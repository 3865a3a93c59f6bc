// The journal-store engine (JournalStore, JournalIndex): outside changes, the compaction rule,
// closing and reopening — the same for a store of its own here and for the key-value file.
import CofferCore
import CofferJournal
import CofferRuntime
@testable import CofferStorage
import CofferTesting
import Foundation
import Testing

/// The smallest store on the engine: a record is an op (1 = set, 2 = remove), the key's UTF-8,
/// a zero byte, and the value.
struct NotesIndex: JournalIndex {
    var journal: Journal
    var values: [String: (value: [UInt8], size: Int)] = [:]
    var liveBytes = 0
    var outside = OutsideChanges<String>()
    /// How many times the engine had the file rewritten.
    var rewrites = 0

    static let application: UInt16 = 0x7E57

    /// Opens (creating it) the notes file at `path` on the engine.
    static func open(_ path: String) throws -> JournalStore<NotesIndex> {
        let (journal, records) = try Journal.open(
            path: path, options: JournalOptions(application: application, durability: .coalesced),
            fileSystem: LiveFileSystem(), create: .openOrCreate)
        var index = NotesIndex(journal: journal)
        try index.apply(records: records)
        return JournalStore(
            index, path: path, fileSystem: LiveFileSystem(),
            closedError: CofferError(.closed, "the notes are closed", path: path))
    }

    static func record(_ key: String, _ value: [UInt8]?) -> Data {
        Data([value == nil ? 2 : 1] + Array(key.utf8) + [0] + (value ?? []))
    }

    mutating func forgetAll() {
        values = [:]
        liveBytes = 0
    }

    mutating func apply(records: JournalRecords) throws {
        for record in records {
            let bytes = [UInt8](record.payload)
            guard let zero = bytes.firstIndex(of: 0), let key = String(validating: bytes[1..<zero], as: UTF8.self) else {
                throw CofferError(.corrupted, "not a note", path: journal.path, offset: record.offset)
            }
            outside.note(key)
            index(key, bytes[0] == 1 ? Array(bytes[(zero + 1)...]) : nil, size: bytes.count + Journal.frameHeaderSize)
        }
    }

    mutating func rewriteLive() throws {
        rewrites += 1
        try journal.rewrite(payloads: values.map { Self.record($0.key, $0.value.value) })
    }

    static func change(_ keys: Set<String>?) -> Set<String>? { keys }

    mutating func index(_ key: String, _ value: [UInt8]?, size: Int) {
        if let old = values.removeValue(forKey: key) { liveBytes -= old.size }
        if let value {
            values[key] = (value, size)
            liveBytes += size
        }
    }
}

extension JournalStore where Index == NotesIndex {
    /// Sets (or, with `nil`, removes) one note: one commit.
    func set(_ key: String, _ value: [UInt8]?) throws {
        try write { index in
            let payload = NotesIndex.record(key, value)
            try index.journal.append([payload])
            index.index(key, value, size: payload.count + Journal.frameHeaderSize)
        }
    }

    func value(_ key: String) throws -> [UInt8]? {
        try read { $0.values[key]?.value }
    }
}

/// What observers were told, in order (thread-safe: the watcher thread tells).
final class Told<Change: Sendable>: Sendable {
    private let changes = Locked<[Change]>([])
    func append(_ change: Change) { changes.withLock { $0.append(change) } }
    var all: [Change] { changes.withLock { $0 } }
}

/// Waits (at most `seconds`, generous for a loaded machine) until `condition` holds.
func waitUntil(within seconds: Double = 30, _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try condition()
}

/// The keys told so far, or `nil` once "anything" was told.
func union(_ told: [Set<String>?]) -> Set<String>? {
    var keys: Set<String> = []
    for change in told {
        guard let change else { return nil }
        keys.formUnion(change)
    }
    return keys
}

@Suite("Journal-store engine")
struct JournalStoreTests {
    @Test("Another writer's records are told as the keys they touch; own writes are not told; a compaction elsewhere is told as anything")
    func outsideChanges() async throws {
        let scratch = try Scratch()
        let path = scratch.url.appendingPathComponent("notes").path
        let mine = try NotesIndex.open(path)
        let other = try NotesIndex.open(path)  // another process, as far as the engine can tell
        let told = Told<Set<String>?>()
        let observation = mine.observeChanges { told.append($0) }
        defer { observation.cancel() }

        try mine.set("own", [1])
        try other.set("a", [2])
        try other.set("b", [3])
        try other.set("a", nil)
        #expect(await waitUntil { union(told.all) == ["a", "b"] })
        #expect(try mine.value("b") == [3])
        #expect(try mine.value("a") == nil)

        let before = told.all.count
        try other.compact()
        #expect(await waitUntil { told.all.dropFirst(before).contains { $0 == nil } })
        #expect(try mine.value("b") == [3])
        #expect(try mine.value("own") == [1])
        #expect(union(Array(told.all.prefix(before)))?.contains("own") == false)
    }

    @Test("The compaction rule: a write compacts exactly when more than 256 KiB and more than the live records are superseded")
    func compactionRule() throws {
        let scratch = try Scratch()
        let store = try NotesIndex.open(scratch.url.appendingPathComponent("notes").path)
        try store.set("kept", Array(repeating: 7, count: 3000))
        let value = Array(repeating: UInt8(9), count: 1000)
        var compactions = 0
        // Enough 1 KB writes for three compactions at the rule's minimum.
        for _ in 0..<(3 * JournalCompaction.minimumGarbage / 1000 + 100) {
            let (used, live, rewrites) = try store.withIndex {
                (Int($0.journal.dataEnd - $0.journal.dataStart), $0.liveBytes, $0.rewrites)
            }
            let record = NotesIndex.record("k", value).count + Journal.frameHeaderSize
            let replaced = try store.withIndex { $0.values["k"]?.size ?? 0 }
            // After this write's append: the file holds `record` more, the live records `record - replaced` more.
            let garbage = used + record - (live + record - replaced)
            let expected = garbage > JournalCompaction.minimumGarbage && garbage > live + record - replaced
            try store.set("k", value)
            let (after, rewritesAfter, worth) = try store.withIndex {
                (Int($0.journal.dataEnd - $0.journal.dataStart), $0.rewrites, $0.compactionIsWorthIt)
            }
            #expect((rewritesAfter == rewrites + 1) == expected)
            #expect(!worth)
            if expected {
                compactions += 1
                #expect(after == live + record - replaced)
            }
        }
        #expect(compactions >= 3)
    }

    @Test("The key-value file compacts by the same rule, from the same engine")
    func keyValueFollowsTheRule() throws {
        let scratch = try Scratch()
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "rule")
        try suite.save(Data(repeating: 7, count: 3000), for: "kept")
        var compactions = 0
        // Enough 1 KB writes for three compactions at the rule's minimum.
        for _ in 0..<(3 * JournalCompaction.minimumGarbage / 1000 + 100) {
            let (used, live, recordOfK) = try suite.store.withIndex {
                (Int($0.journal.dataEnd - $0.journal.dataStart), $0.liveBytes, $0.recordSize(of: ExactKey("k")) ?? 0)
            }
            let record = try KeyValueFileStrategy.encode(key: "k", value: Data(count: 1000)).count + Journal.frameHeaderSize
            let garbage = used + record - (live + record - recordOfK)
            let expected = garbage > JournalCompaction.minimumGarbage && garbage > live + record - recordOfK
            try suite.save(Data(repeating: 9, count: 1000), for: "k")
            let (after, worth) = try suite.store.withIndex {
                (Int($0.journal.dataEnd - $0.journal.dataStart), $0.compactionIsWorthIt)
            }
            #expect(!worth)
            #expect((after < used) == expected)
            if expected { compactions += 1 }
        }
        #expect(compactions >= 3)
    }

    @Test("The key-value file tells outside changes through the engine: keys, then anything after a compaction elsewhere")
    func keyValueOutsideChanges() async throws {
        let scratch = try Scratch()
        let mine = try KeyValueFileStrategy(directory: scratch.url, suite: "shared")
        let other = try KeyValueFileStrategy(directory: scratch.url, suite: "shared")
        let told = Told<Set<String>?>()
        let observation = try mine.observeChanges { told.append($0.keys) }
        defer { observation.cancel() }

        try mine.save(Data([1]), for: "own")
        try other.save(Data([2]), for: "a")
        try other.save(Data([3]), for: "b")
        try other.remove("a")
        #expect(await waitUntil { union(told.all) == ["a", "b"] })

        let before = told.all.count
        try other.compact()
        #expect(await waitUntil { told.all.dropFirst(before).contains { $0 == nil } })
        #expect(try mine.load("b") == Data([3]))
        #expect(union(Array(told.all.prefix(before)))?.contains("own") == false)
    }

    @Test("A closed store throws its owner's error; observers are told anything, and again when it reopens")
    func closedAndReopened() async throws {
        let scratch = try Scratch()
        let path = scratch.url.appendingPathComponent("notes").path
        let store = try NotesIndex.open(path)
        try store.set("a", [1])
        let told = Told<Set<String>?>()
        let observation = store.observeChanges { told.append($0) }
        defer { observation.cancel() }

        let index = try #require(store.close())
        #expect(store.isClosed)
        expectError(.closed) { _ = try store.value("a") }
        expectError(.closed) { try store.set("b", [2]) }
        let other = try NotesIndex.open(path)
        try other.set("b", [2])
        #expect(await waitUntil { told.all.contains { $0 == nil } })

        // Reopened with the index it had (a vault unlocked again): caught up on the next read,
        // and observers are told that anything may have changed.
        let before = told.all.count
        store.open(index)
        #expect(!store.isClosed)
        #expect(await waitUntil { told.all.dropFirst(before).contains { $0 == nil } })
        #expect(try store.value("b") == [2])
    }
}
