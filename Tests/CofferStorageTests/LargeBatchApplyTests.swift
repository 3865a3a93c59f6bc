import CofferCore
import CofferJournal
import CofferRuntime
@testable import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

/// A key-value suite applies a large batch of records (an open, or a catch-up with another
/// writer's many records) into its index (`SuiteIndex`): names and values left where they lie
/// in the batch's bytes, overwritten and removed along the way, the table grown and its
/// removals closing their gaps. The outcome must be the model's: the same values, the same live
/// bytes, the same keys told to observers, and a record that is no key-value record refused at
/// its offset.
@Suite("Key-value suite: large batches applied to the index")
struct LargeBatchApplyTests {
    /// Several thousand records, with overwrites and removes among them.
    static let count = 6_161

    /// The changes, in order, and what they leave: key `k<i % 1000>` set to `i`, every 7th a
    /// remove instead, a few names outside ASCII.
    static func changes() -> (changes: [(key: String, data: Data?)], model: [String: Data]) {
        var changes: [(key: String, data: Data?)] = []
        var model: [String: Data] = [:]
        for i in 0..<count {
            let key = i % 97 == 0 ? "clé-\(i % 1000)" : "k\(i % 1000)"
            let data: Data? = i % 7 == 0 ? nil : withUnsafeBytes(of: UInt64(i)) { Data($0) } + Data(count: i % 23)
            changes.append((key, data))
            model[key] = data
        }
        return (changes, model)
    }

    static func contents(_ store: KeyValueFileStrategy) throws -> [String: Data] {
        var contents: [String: Data] = [:]
        for key in try store.keys() { contents[key] = try store.load(key) }
        return contents
    }

    @Test("An open of thousands of records, overwritten and removed, indexes exactly the model")
    func openMatchesTheModel() throws {
        let scratch = try Scratch()
        let (changes, model) = Self.changes()
        let liveBytes: Int
        do {
            let writer = try KeyValueFileStrategy(directory: scratch.url, suite: "big")
            // One record per change, so the open applies all of them in one batch.
            for start in stride(from: 0, to: changes.count, by: 500) {
                try writer.saveBatch(Array(changes[start..<min(changes.count, start + 500)]))
            }
            #expect(try Self.contents(writer) == model)
            liveBytes = writer.statistics.liveBytes
        }
        let reopened = try KeyValueFileStrategy(directory: scratch.url, suite: "big")
        #expect(try Self.contents(reopened) == model)
        #expect(reopened.statistics.keys == model.count)
        #expect(reopened.statistics.liveBytes == liveBytes, "live bytes differ from the writer's count")
        // A rewrite keeps exactly the live values.
        try reopened.compact()
        #expect(try Self.contents(try KeyValueFileStrategy(directory: scratch.url, suite: "big")) == model)
    }

    @Test("A catch-up with another writer's many records applies them and tells observers every key")
    func catchUpMatchesTheModel() throws {
        let scratch = try Scratch()
        let reader = try KeyValueFileStrategy(directory: scratch.url, suite: "big")
        let told = Locked<Set<String>?>([])
        let observation = try reader.observeChanges { change in
            told.withLock { seen in
                if let keys = change.keys { seen?.formUnion(keys) } else { seen = nil }
            }
        }
        defer { observation.cancel() }
        let writer = try KeyValueFileStrategy(directory: scratch.url, suite: "big")
        let (changes, model) = Self.changes()
        try writer.saveBatch(changes)
        // The reader catches up with one batch of every record on its next read.
        #expect(try Self.contents(reader) == model)
        #expect(reader.statistics.liveBytes == writer.statistics.liveBytes)
        // The watcher thread tells what the catch-up collected (or anything, if it read first).
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if told.withLock({ $0 == nil || $0 == Set(changes.map(\.key)) }) { break }
            try writer.save(Data([1]), for: "nudge")
            Thread.sleep(forTimeInterval: 0.05)
        }
        let seen = told.withLock { $0 }
        #expect(seen == nil || seen!.isSuperset(of: Set(changes.map(\.key))), "observers were not told every key")
    }

    @Test(
        "A record with valid checksums but no key-value layout, deep in a large batch, is refused at its offset",
        arguments: [0, 1, 127, 2_500, count - 1])
    func anInvalidRecordIsRefusedAtItsOffset(position: Int) throws {
        let scratch = try Scratch()
        let path = scratch.path("bad.cofferkv")
        let (changes, _) = Self.changes()
        var payloads = try changes.map { try KeyValueFileStrategy.encode(key: $0.key, value: $0.data) }
        payloads[position] = Data([3, 1, 0x41])  // op 3: neither set nor remove
        let offsets: [Int64]
        do {
            let (journal, _) = try Journal.open(
                path: path, options: JournalOptions(application: 1, durability: .coalesced), fileSystem: LiveFileSystem(),
                create: .createNew)
            offsets = try journal.withWriteLock { _ in try journal.append(payloads) }
            try journal.close()
        }
        let error = #expect(throws: CofferError.self) {
            _ = try KeyValueFileStrategy(directory: scratch.url, suite: "bad")
        }
        #expect(error?.code == .corrupted)
        #expect(error?.offset == offsets[position], "refused at \(String(describing: error?.offset))")
        #expect(error?.message.contains("invalid layout") == true)
    }
}
