#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import Foundation
import Testing

/// `StoredMap` on a PostgreSQL suite: two instances of the store (two machines, as far as the
/// map can tell) see each other's writes through their maps, and the async forms wait for the
/// server without blocking a thread.
@Suite("StoredMap on PostgreSQL")
struct StoredMapPostgresTests {
    /// Polls `condition` every 10 ms, without holding a thread, until it holds or `timeout`
    /// seconds pass (a hang guard: the machine is shared and may be slow).
    static func until(_ timeout: Double = 60, _ condition: () throws -> Bool) async rethrows -> Bool {
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return try condition()
    }

    @Test("Two instances on one suite: writes through one map reach the other's entries and changes")
    func twoInstancesFollowEachOther() async throws {
        let configuration = try sharedConfiguration()
        let suite = uniqueName("map")
        let one = StoredMap<Int>(
            store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: 0)
        let two = StoredMap<Int>(
            store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: 0)

        // A held entry of the second instance follows the first's writes.
        let followed = two.entry("tenant-a")
        #expect(try await followed.load() == 0)
        let seen = Protected<Set<String>>([])
        // Subscribed here, before the writes: inside the task it could subscribe after them.
        let changes = two.changes
        let recorder = Task {
            for await change in changes {
                if case .keys(let keys) = change { seen.withLock { $0.formUnion(keys) } }
                if case .unknown = change { seen.withLock { _ = $0.insert("*") } }
            }
        }
        defer { recorder.cancel() }

        try await one.save(7, for: "tenant-a")
        try await one.save(1, for: "tenant-b")  // a key the second instance does not hold
        let followedState = { "value \(followed.wrappedValue), loading \(followed.isLoading), \(String(describing: followed.loadError))" }
        #expect(await Self.until { followed.wrappedValue == 7 }, "\(followedState())")
        #expect(await Self.until { seen.withLock { Set(["tenant-a", "tenant-b"]).isSubset(of: $0) || $0.contains("*") } })
        #expect(try await two.load("tenant-b") == 1)

        // And the other way round, with a setter (its write follows in the background).
        let back = one.entry("tenant-c")
        #expect(try await back.load() == 0)
        two["tenant-c"] = 3
        try await two.entry("tenant-c").flush()
        #expect(await Self.until { back.wrappedValue == 3 })
    }

    @Test("Async load, save, update, remove and keys wait for the server; update loses nothing")
    func asyncForms() async throws {
        let configuration = try sharedConfiguration()
        let suite = uniqueName("map")
        // What this test checks is that no update is lost, not how long contention may last: an
        // update's budget (the context's lock timeout, 10 s by default) also counts its wait for
        // the other updates of the key in this process, and on a machine whose both cores are
        // busy 20 updates of one cell racing 20 of another instance took longer (seen in CI).
        let scratch = try TemporaryDirectory("map-updates")
        let patient = CofferContext(directory: URL(fileURLWithPath: scratch.path), lockTimeout: .seconds(300))
        let (one, two) = CofferContext.$current.withValue(patient) {
            (
                StoredMap<Int>(
                    store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: 0),
                StoredMap<Int>(
                    store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: 0,
                    keepsRecent: 0)
            )
        }

        try await one.save(5, for: "a")
        #expect(try await two.load("a") == 5)
        #expect(try await Set(two.keys()) == ["a"])

        // Eight tasks on two instances count one key at once: compare-and-swap on the server.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                let map = task.isMultiple(of: 2) ? one : two
                group.addTask { for _ in 0..<5 { try await map.update("hits") { $0 += 1 } } }
            }
            try await group.waitForAll()
        }
        #expect(try await one.load("hits") == 40)
        #expect(try await Set(one.keys()) == ["a", "hits"])

        try await two.remove("a")
        #expect(try await one.load("a") == 0)
        #expect(try await one.keys() == ["hits"])
        // The synchronous forms work too, from a thread that may block (they wait on Coffer's threads).
        let (loaded, keys) = try await Task.detached {
            try one.save(9, for: "sync")
            let loaded = try two.load("sync")
            try two.remove("sync")
            return (loaded, try one.keys())
        }.value
        #expect(loaded == 9)
        #expect(keys == ["hits"])
    }

    @Test("A setter's write on its way is not lost to a new entry of the key, even with no entry kept")
    func writeOnItsWayIsKept() async throws {
        let configuration = try sharedConfiguration()
        let suite = uniqueName("map")
        let map = StoredMap<Int>(
            store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: 0,
            keepsRecent: 0)
        for value in 1...20 {
            map["k"] = value  // returns before the server has it; the entry is let go at once
            // A new entry of the key shares the writer's cell (still registered), so its load
            // waits for the write and reads it, instead of the value from before it.
            #expect(try await map.load("k") == value)
        }
        #expect(await Self.until { CellRegistry.users(of: map.store.backing(key: "k"), type: Int.self) == 0 })
    }

    @Test("The first synchronous read of a remote key shows the default and loads in the background")
    func firstReadLoadsInTheBackground() async throws {
        let configuration = try sharedConfiguration()
        let suite = uniqueName("map")
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        try await writer.set("pro", for: "acme")
        let plans = StoredMap<String>(store: .strategy(PostgresKeyValueStrategy(configuration: configuration, suite: suite)), default: "free")
        let first = plans["acme"]
        #expect(first == "free" || first == "pro")  // never blocks; the default until loaded
        // The map keeps the entry, so the background load lands and a later read shows it.
        #expect(await Self.until { plans["acme"] == "pro" })
        #expect(try await plans.load("acme") == "pro")
    }
}
#endif
