// The key-value file and the vault on the one journal-store engine (CofferJournal's JournalStore):
// the same outside-change reports and the same compaction rule, through each store's own API.
import CofferCore
import CofferCrypto
import CofferJournal
@testable import CofferStorage
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

@Suite("One journal-store engine under the key-value file and the vault")
struct JournalStoreParityTests {
    /// What observers were told, in order (the watcher thread tells).
    final class Told: Sendable {
        private let changes = Locked<[Set<String>?]>([])
        func append(_ change: Set<String>?) { changes.withLock { $0.append(change) } }
        var all: [Set<String>?] { changes.withLock { $0 } }

        /// The keys told so far, or `nil` once "anything" was told.
        func union(first count: Int? = nil) -> Set<String>? {
            var keys: Set<String> = []
            for change in all.prefix(count ?? Int.max) {
                guard let change else { return nil }
                keys.formUnion(change)
            }
            return keys
        }
    }

    /// One store as the scenarios drive it: two instances on one file, keys as strings.
    struct Pair {
        var observeMine: (Told) throws -> StoreObservation
        var writeMine: (String) throws -> Void
        var writeOther: (String) throws -> Void
        var removeOther: (String) throws -> Void
        var compactOther: () throws -> Void
        var readMine: (String) throws -> Bool
    }

    static func keyValuePair(in scratch: Scratch) throws -> Pair {
        let mine = try KeyValueFileStrategy(directory: scratch.url, suite: "shared")
        let other = try KeyValueFileStrategy(directory: scratch.url, suite: "shared")
        return Pair(
            observeMine: { told in try mine.observeChanges { told.append($0.keys) } },
            writeMine: { try mine.save(Data([1]), for: $0) },
            writeOther: { try other.save(Data([2]), for: $0) },
            removeOther: { try other.remove($0) },
            compactOther: { try other.compact() },
            readMine: { try mine.load($0) != nil })
    }

    static func vaultPair(in scratch: Scratch) throws -> Pair {
        let key = try SecureBytes.random(count: 32)
        let url = scratch.url("shared.coffervault")
        let mine = try Vault.create(at: url, unlock: .key(key))
        let other = try Vault.open(at: url, unlock: .key(key))
        return Pair(
            observeMine: { told in mine.observeChanges { told.append($0.map { Set($0.map(\.account)) }) } },
            writeMine: { try mine.set("1", service: "s", account: $0) },
            writeOther: { try other.set("2", service: "s", account: $0) },
            removeOther: { _ = try other.remove(service: "s", account: $0) },
            compactOther: { try other.compact() },
            readMine: { try mine.data(service: "s", account: $0) != nil })
    }

    /// Waits (at most 30 s: generous for a loaded machine) until `condition` holds.
    static func waitUntil(_ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test("Both stores tell another writer's keys, never their own writes, and anything after a compaction elsewhere", arguments: ["keyValue", "vault"])
    func outsideChanges(store: String) async throws {
        let scratch = try Scratch("parity")
        let pair = store == "vault" ? try Self.vaultPair(in: scratch) : try Self.keyValuePair(in: scratch)
        let told = Told()
        let observation = try pair.observeMine(told)
        defer { observation.cancel() }

        try pair.writeMine("own")
        try pair.writeOther("a")
        try pair.writeOther("b")
        try pair.removeOther("a")
        #expect(await Self.waitUntil { told.union() == ["a", "b"] })
        #expect(try pair.readMine("b"))
        #expect(try !pair.readMine("a"))

        let before = told.all.count
        try pair.compactOther()
        #expect(await Self.waitUntil { told.all.dropFirst(before).contains { $0 == nil } })
        #expect(try pair.readMine("b"))
        #expect(told.union(first: before)?.contains("own") == false)
    }

    /// Writes one key over and over beside a kept one, checking the engine's rule at every write
    /// from the index's own facts; returns how many writes compacted.
    static func checkCompactionRule(
        write: () throws -> Void, facts: () throws -> (used: Int, live: Int, replaced: Int, worth: Bool)
    ) throws -> Int {
        var compactions = 0
        // Enough writes of about 1 KB for three compactions at the rule's minimum.
        for _ in 0..<(3 * JournalCompaction.minimumGarbage / 1000 + 100) {
            let before = try facts()
            // Each write's record is as large as the one it replaces: the live bytes stay.
            let garbage = before.used + before.replaced - before.live
            let expected = garbage > JournalCompaction.minimumGarbage && garbage > before.live
            try write()
            let after = try facts()
            #expect(!after.worth)
            #expect(after.live == before.live)
            #expect((after.used == after.live) == expected)
            if expected { compactions += 1 }
        }
        return compactions
    }

    @Test("Both stores compact by the engine's one rule")
    func compactionRule() throws {
        let scratch = try Scratch("parity-rule")
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "rule")
        try suite.save(Data(repeating: 7, count: 3000), for: "kept")
        try suite.save(Data(repeating: 9, count: 1000), for: "k")
        let keyValue = try Self.checkCompactionRule(write: { try suite.save(Data(repeating: 9, count: 1000), for: "k") }) {
            try suite.store.withIndex { s in
                (Int(s.journal.dataEnd - s.journal.dataStart), s.liveBytes, s.recordSize(of: ExactKey("k"))!,
                 s.compactionIsWorthIt)
            }
        }

        let vault = try Vault.create(at: scratch.url("rule.coffervault"), unlock: .key(try SecureBytes.random(count: 32)))
        try vault.set(Data(repeating: 7, count: 3000), service: "s", account: "kept")
        try vault.set(Data(repeating: 9, count: 1000), service: "s", account: "k")
        let sealed = try Self.checkCompactionRule(write: { try vault.set(Data(repeating: 9, count: 1000), service: "s", account: "k") }) {
            try vault.store.withIndex { s in
                (Int(s.journal.dataEnd - s.journal.dataStart), s.liveBytes,
                 s.entries[ItemKey(service: "s", account: "k")]!.payload.count + Journal.frameHeaderSize,
                 s.compactionIsWorthIt)
            }
        }
        #expect(keyValue >= 3)
        #expect(sealed >= 3)
    }
}
