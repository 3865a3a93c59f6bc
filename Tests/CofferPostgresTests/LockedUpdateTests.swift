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
// One case at a time: each keeps a key under contention on purpose, and the process's other
// suites share its two cores and their deadlines.
@Suite("PostgreSQL: a contended update waits its turn on the key's lock", .serialized)
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
        /// Rounds committed (counted after each commit).
        let rounds = Protected(0)
        /// Locks taken (counted as soon as each is granted).
        let acquired = Protected(0)
        private let stopped = Protected(false)
        private let done = DispatchSemaphore(value: 0)
        let failure = Protected<String?>(nil)

        init(_ strategy: any KeyLockingPersistenceStrategy, key: String, hold: Duration = .milliseconds(30)) {
            let (rounds, acquired, stopped, done, failure) = (rounds, acquired, stopped, done, failure)
            Thread.detachNewThread {
                defer { done.signal() }
                do {
                    while !stopped.withLock({ $0 }) {
                        let lock = try Offload.wait { try await strategy.lock(key) }
                        acquired.withLock { $0 += 1 }
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

        /// Waits until `count` rounds are done (at most 20 s), without holding a thread.
        func waitForRounds(_ count: Int) async -> Bool {
            for _ in 0..<2_000 {
                if rounds.withLock({ $0 }) >= count { return true }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return false
        }

        /// Ends the rounds and waits for the last one (on Coffer's threads).
        func stop() async {
            stopped.withLock { $0 = true }
            let done = done
            _ = try? await Offload.run { done.wait() }
        }

        /// Inside a transform: blocks until the next round has committed (at most 10 s), so
        /// that a swap of what was read before loses.
        func blockUntilNextRound() {
            let start = rounds.withLock { $0 }
            for _ in 0..<2_000 where rounds.withLock({ $0 }) == start { Thread.sleep(forTimeInterval: 0.005) }
        }

        /// Inside a transform: whether the competitor takes no lock for 200 ms (several rounds'
        /// time): the caller holds the key locked. (Counted at the grant, not at the commit,
        /// which a busy machine may count late.)
        func standsStill() -> Bool {
            let start = acquired.withLock { $0 }
            Thread.sleep(forTimeInterval: 0.2)
            return acquired.withLock { $0 } == start
        }
    }

    /// A counter at 0 on one instance, and a competitor on another already two rounds in.
    static func contended(_ kind: Kind) async throws
        -> (competing: any KeyLockingPersistenceStrategy, counter: Stored<Int>, competitor: Competitor)
    {
        let instances = try strategies(kind)
        let counter = Stored(wrappedValue: 0, backed: backing(instances[1], key: "counter"))
        try await counter.save(0)
        let competitor = Competitor(instances[0], key: "counter")
        #expect(await competitor.waitForRounds(2))
        return (instances[0], counter, competitor)
    }

    @Test(
        "Against a writer that keeps the key locked and changing, an update ends in its turn: a lost swap, then one run with the key locked",
        arguments: Kind.allCases, Caller.allCases)
    func endsInItsTurn(_ kind: Kind, _ caller: Caller) async throws {
        let (competing, counter, competitor) = try await Self.contended(kind)
        let calls = Protected(0)
        let heldLocked = Protected(false)
        // The first run waits for a round to commit, so its swap loses; a retried swap would
        // lose again and again (each reread meets the next round), until the context's 10 s
        // budget ended it in `.busy`. The second run must hold the key: no round commits.
        let body: @Sendable (inout Int) -> Void = { value in
            let call = calls.withLock { count -> Int in
                count += 1
                return count
            }
            if call == 1 { competitor.blockUntilNextRound() }
            if call == 2 { heldLocked.withLock { $0 = competitor.standsStill() } }
            value += 1
        }
        let result: Int
        switch caller {
        case .sync: result = try await Offload.run { try Self.blockingUpdate(counter, body) }
        case .async: result = try await counter.update(body)
        }
        let roundsAfter = competitor.rounds.withLock { $0 }
        await competitor.stop()
        #expect(competitor.failure.withLock { $0 } == nil)
        #expect(calls.withLock { $0 } == 2)
        #expect(heldLocked.withLock { $0 }, "the second run did not hold the key locked")
        #expect(result % 100 == 1, "the update's result \(result) is not one more than a value the competitor committed")
        // Neither write was lost: every round added 100 to what it read, the update 1.
        let stored = try #require(try await competing.load("counter").map { try ValueCodec.decode(Int.self, from: $0, as: competing.valueEncoding) })
        #expect(stored % 100 == 1)
        #expect(stored / 100 >= roundsAfter)
    }

    @Test(
        "A transform that throws with the key locked writes nothing and releases the key at once",
        arguments: Kind.allCases, Caller.allCases)
    func throwingTransformReleases(_ kind: Kind, _ caller: Caller) async throws {
        let (competing, counter, competitor) = try await Self.contended(kind)
        let calls = Protected(0)
        let heldLocked = Protected(false)
        // The first run loses its swap (it waits for a round); the second, with the key
        // locked, throws.
        let body: @Sendable (inout Int) throws -> Void = { value in
            let call = calls.withLock { count -> Int in
                count += 1
                return count
            }
            value = 1_000_001
            if call == 1 { competitor.blockUntilNextRound() }
            if call >= 2 {
                heldLocked.withLock { $0 = competitor.standsStill() }
                throw Oops()
            }
        }
        switch caller {
        case .sync: await #expect(throws: Oops.self) { try await Offload.run { try Self.blockingUpdate(counter, body) } }
        case .async: await #expect(throws: Oops.self) { try await counter.update(body) }
        }
        // Released at once, not held until the store's deadline (10 s): the rounds go on.
        let before = competitor.rounds.withLock { $0 }
        let started = ContinuousClock.now
        #expect(await competitor.waitForRounds(before + 3))
        #expect(ContinuousClock.now - started < .seconds(5), "the key stayed locked after the transform threw")
        await competitor.stop()
        #expect(competitor.failure.withLock { $0 } == nil)
        #expect(calls.withLock { $0 } == 2)
        #expect(heldLocked.withLock { $0 }, "the second run did not hold the key locked")
        let stored = try #require(try await competing.load("counter").map { try ValueCodec.decode(Int.self, from: $0, as: competing.valueEncoding) })
        #expect(stored % 100 == 0, "the throwing transform's value was written")
    }

    @Test("A lock whose caller does not decide within the store's timeout rolls back: .busy, nothing written, the key free", arguments: Kind.allCases)
    func undecidedLockExpires(_ kind: Kind) async throws {
        var configuration = try sharedConfiguration()
        configuration.timeout = 3
        let name = uniqueName("expiry-\(kind.rawValue)")
        let strategy: any KeyLockingPersistenceStrategy
        switch kind {
        case .keyValue: strategy = PostgresKeyValueStrategy(configuration: configuration, suite: name)
        case .vault:
            strategy = try await PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
                .strategy(service: "fleet")
        }
        try await strategy.save(try ValueCodec.encode(5, as: strategy.valueEncoding), for: "counter")
        let lock = try await strategy.lock("counter")
        try await Task.sleep(for: .seconds(4.5))  // past the timeout, and the connection's own deadline (timeout + 1 s)
        do {
            try await lock.store(try ValueCodec.encode(6, as: strategy.valueEncoding))
            Issue.record("a decision past the deadline was stored")
        } catch let error as CofferError {
            #expect(error.code == .busy)
            #expect(error.message.contains("nothing was written"))
        }
        // Rolled back by its own deadline (`.busy` above, not `.io` for a connection closed at
        // the answer deadline): the key is free, its value the one before.
        let again = try await strategy.lock("counter")
        #expect(try again.current.map { try ValueCodec.decode(Int.self, from: $0, as: strategy.valueEncoding) } == 5)
        await again.release()
    }

    @Test("Three instances × 100 updates each, sync and async at once, give exactly 300", arguments: Kind.allCases)
    func contendedCounter(_ kind: Kind) async throws {
        let counters = try Self.strategies(kind, count: 3).map { Stored(wrappedValue: 0, backed: Self.backing($0, key: "hits")) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, counter) in counters.enumerated() {
                group.addTask {
                    if index == 1 {
                        for _ in 0..<100 { try await counter.update { $0 += 1 } }
                    } else {
                        // On Coffer's threads, never holding a cooperative thread for the loop.
                        try await Offload.run { for _ in 0..<100 { try Self.blockingUpdate(counter) { $0 += 1 } } }
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = try await counters[0].load()
        #expect(total == 300)
    }
}
#endif
