#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import CofferVault
import Foundation
import Testing

/// `$x.update { … }` on PostgreSQL: after a lost swap, the next attempt holds the key locked
/// while its transform runs, so an update against writers that keep the key changing ends in
/// its turn, where retried swaps could lose every time until the deadline.
@Suite("PostgreSQL: a contended update waits its turn on the key's lock")
struct LockedUpdateTests {
    enum Kind: String, CaseIterable, Sendable { case keyValue, vault }
    enum Caller: String, CaseIterable, Sendable { case sync, async }

    struct Oops: Error {}

    /// `count` strategies (as many instances, each with its own connections) on one new suite
    /// or vault.
    static func strategies(_ kind: Kind, count: Int = 2) throws -> [any KeyLockingPersistenceStrategy] {
        let configuration = try sharedConfiguration()
        let name = uniqueName("locked-\(kind.rawValue)")
        switch kind {
        case .keyValue:
            return (0..<count).map { _ in PostgresKeyValueStrategy(configuration: configuration, suite: name) }
        case .vault:
            _ = try PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
            return try (0..<count).map { _ in
                try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
                    .strategy(service: "fleet")
            }
        }
    }

    static func backing(_ strategy: any KeyLockingPersistenceStrategy, key: String) -> Backing {
        switch strategy {
        case let store as PostgresKeyValueStrategy: .postgres(store, key: key)
        case let service as PostgresVaultStrategy: .vault(service.vault, service: service.service, account: key)
        default: fatalError("no backing for \(type(of: strategy))")
        }
    }

    /// The synchronous `update`, which async code would not pick by itself.
    @discardableResult
    static func blockingUpdate(_ counter: Stored<Int>, _ body: (inout Int) throws -> Void) throws -> Int {
        try counter.update(body)
    }

    /// Another instance that keeps the key locked and changing, round after round (each round
    /// holds the lock `hold` long, then adds 100), on a thread of its own until stopped.
    final class Competitor: Sendable {
        let rounds = Protected(0)
        private let stopped = Protected(false)
        private let done = DispatchSemaphore(value: 0)
        let failure = Protected<String?>(nil)

        init(_ strategy: any KeyLockingPersistenceStrategy, key: String, hold: Duration = .milliseconds(30)) {
            let (rounds, stopped, done, failure) = (rounds, stopped, done, failure)
            Thread.detachNewThread {
                defer { done.signal() }
                do {
                    while !stopped.withLock({ $0 }) {
                        let lock = try Offload.wait { try await strategy.lock(key) }
                        let value = try lock.current.map { try ValueCodec.decode(Int.self, from: $0, as: strategy.valueEncoding) } ?? 0
                        Thread.sleep(forTimeInterval: hold.inSeconds)
                        let next = try ValueCodec.encode(value + 100, as: strategy.valueEncoding)
                        try Offload.wait { try await lock.store(next) }
                        rounds.withLock { $0 += 1 }
                    }
                } catch {
                    failure.withLock { $0 = "\(error)" }
                }
            }
        }

        /// Waits until `count` rounds are done (at most 20 s).
        func waitForRounds(_ count: Int) -> Bool { eventually(timeout: 20) { rounds.withLock { $0 } >= count } }

        func stop() {
            stopped.withLock { $0 = true }
            done.wait()
        }
    }

    @Test(
        "Against a writer that keeps the key locked and changing, an update ends in its turn, its transform run at most twice",
        arguments: Kind.allCases, Caller.allCases)
    func endsInItsTurn(_ kind: Kind, _ caller: Caller) async throws {
        let instances = try Self.strategies(kind)
        let (competing, updater) = (instances[0], instances[1])
        let counter = Stored(wrappedValue: 0, backed: Self.backing(updater, key: "counter"))
        try await counter.save(0)
        let competitor = Competitor(competing, key: "counter")
        #expect(competitor.waitForRounds(2))
        let calls = Protected(0)
        let body: @Sendable (inout Int) -> Void = { value in
            calls.withLock { $0 += 1 }
            value += 1
        }
        // A retried swap loses every time here: each reread meets the next round's lock, and
        // the round commits a new value before the swap gets the row. The context's 10 s budget
        // would end it in `.busy`.
        let result: Int
        switch caller {
        case .sync: result = try await Offload.run { try Self.blockingUpdate(counter, body) }
        case .async: result = try await counter.update(body)
        }
        let roundsAfter = competitor.rounds.withLock { $0 }
        competitor.stop()
        #expect(competitor.failure.withLock { $0 } == nil)
        #expect(result % 100 == 1, "the update's result \(result) is not one more than a value the competitor committed")
        #expect((1...2).contains(calls.withLock { $0 }))
        // Neither write was lost: every round added 100 to what it read, the update 1.
        let stored = try #require(try await competing.load("counter").map { try ValueCodec.decode(Int.self, from: $0, as: competing.valueEncoding) })
        #expect(stored % 100 == 1)
        #expect(stored / 100 >= roundsAfter)
    }

    @Test(
        "A transform that throws with the key locked writes nothing and releases the key at once",
        arguments: Kind.allCases, Caller.allCases)
    func throwingTransformReleases(_ kind: Kind, _ caller: Caller) async throws {
        let instances = try Self.strategies(kind)
        let (competing, updater) = (instances[0], instances[1])
        let counter = Stored(wrappedValue: 0, backed: Self.backing(updater, key: "counter"))
        try await counter.save(0)
        let competitor = Competitor(competing, key: "counter")
        #expect(competitor.waitForRounds(2))
        let calls = Protected(0)
        // The first run loses its swap to the competitor; the second, with the key locked, throws.
        let body: @Sendable (inout Int) throws -> Void = { value in
            let call = calls.withLock { count -> Int in
                count += 1
                return count
            }
            value = 1_000_001
            if call >= 2 { throw Oops() }
        }
        switch caller {
        case .sync: await #expect(throws: Oops.self) { try await Offload.run { try Self.blockingUpdate(counter, body) } }
        case .async: await #expect(throws: Oops.self) { try await counter.update(body) }
        }
        // Released at once, not held until the store's deadline (10 s): the competitor's rounds
        // go on.
        let before = competitor.rounds.withLock { $0 }
        #expect(competitor.waitForRounds(before + 3))
        competitor.stop()
        #expect(competitor.failure.withLock { $0 } == nil)
        #expect(calls.withLock { $0 } == 2)
        let stored = try #require(try await competing.load("counter").map { try ValueCodec.decode(Int.self, from: $0, as: competing.valueEncoding) })
        #expect(stored % 100 == 0, "the throwing transform's value was written")
    }

    @Test("Three instances × 200 updates each, sync and async at once, give exactly 600", arguments: Kind.allCases)
    func contendedCounter(_ kind: Kind) async throws {
        let counters = try Self.strategies(kind, count: 3).map { Stored(wrappedValue: 0, backed: Self.backing($0, key: "hits")) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, counter) in counters.enumerated() {
                group.addTask {
                    if index == 1 {
                        for _ in 0..<200 { try await counter.update { $0 += 1 } }
                    } else {
                        // On Coffer's threads, never holding a cooperative thread for the loop.
                        try await Offload.run { for _ in 0..<200 { try Self.blockingUpdate(counter) { $0 += 1 } } }
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = try await counters[0].load()
        #expect(total == 600)
    }
}
#endif
