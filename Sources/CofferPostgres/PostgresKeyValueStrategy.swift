#if Postgres
public import CofferCore
public import Foundation
public import Logging
import PostgresNIO

/// A suite of keys and values in a PostgreSQL table, shared by every instance of an
/// application that points at the same database: the fleet's `KeyValueFileStrategy`.
///
/// Values are the same bytes the local strategies store. One row per key (docs/FORMAT.md,
/// "PostgreSQL tables"), each stamped with the id of the transaction that last wrote it. A write
/// is one statement (one transaction) and, once committed, a notification on the suite's channel,
/// so every instance observing the suite (`@Stored` properties, computed values, observers)
/// follows it; an instance that was disconnected catches up by transaction id when it reconnects,
/// so no change is missed (see `SuiteTracker`). Writes of different keys lock nothing in common.
/// `saveBatch` is one transaction. ``compareAndSwap(_:expected:new:)`` and ``update(_:_:)`` hold
/// the key's row locked from the read to the write, so a counter incremented from many machines
/// is exact.
///
/// Every call is `async` (``AsyncPersistenceStrategy``); the synchronous forms run it on Coffer's
/// own threads for callers that are not async. Each ends within the deadlines of its
/// ``PostgresConfiguration`` (``CofferError/Code/busy`` for a lock held elsewhere past
/// ``PostgresConfiguration/timeout``, ``CofferError/Code/io`` for a server that is unavailable or
/// stops answering), never later.
///
/// When `save` returns, the server has committed the write: with the server's default
/// `synchronous_commit = on`, it survives a crash or restart of the server (see README, "Many
/// machines"). A write whose connection drops before the answer throws
/// ``CofferError/Code/io`` saying it may or may not have been committed.
///
/// ```swift
/// let settings = try PostgresConfiguration(url: "postgres://app@db.internal/app")
/// let flags = PostgresKeyValueStrategy(configuration: settings, suite: "feature-flags")
/// try await flags.set(true, for: "new-checkout")
/// ```
public final class PostgresKeyValueStrategy: AsyncPersistenceStrategy, BatchPersistenceStrategy,
    CompareAndSwapPersistenceStrategy, ChangeObservingPersistenceStrategy, KeyLockingPersistenceStrategy
{
    /// The suite: the rows of this store are those with this suite name.
    public let suite: String
    /// The server and database.
    public var configuration: PostgresConfiguration { link.configuration }

    let link: PostgresLink
    let channel: String
    private let tracker: SuiteTracker
    private let notifier: CommitNotifier
    /// This store's statements, with its schema's table names: built once, not per call.
    private let sql: Statements

    private struct Statements: Sendable {
        let load, keys, placeholder, lockRow, write, catchUp: String

        init(_ tables: Tables) {
            load = "SELECT value FROM \(tables.kv) WHERE suite = $1 AND key = $2"
            keys = "SELECT key FROM \(tables.kv) WHERE suite = $1 AND value IS NOT NULL"
            placeholder =
                "INSERT INTO \(tables.kv) (suite, key, value, version, writer) "
                + "VALUES ($1, $2, NULL, 0, pg_current_xact_id()) ON CONFLICT (suite, key) DO NOTHING"
            lockRow = "SELECT value FROM \(tables.kv) WHERE suite = $1 AND key = $2 FOR UPDATE"
            // A key's row written (`value` NULL: a tombstone), stamped with the writing
            // transaction, whose id it returns. On its own, one statement is one transaction.
            write = """
                INSERT INTO \(tables.kv) AS t (suite, key, value, version, writer) VALUES ($1, $2, $3, 0, pg_current_xact_id()) \
                ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, writer = excluded.writer \
                RETURNING t.writer::text
                """
            catchUp = SuiteTracker.catchUpStatement(tables)
        }
    }

    /// A store for `suite` on the server `configuration` names. Nothing is contacted until the
    /// first call; the tables are created then when missing. Stores with equal settings share
    /// one connection pool in the process (``PostgresConfiguration/maximumConnections``).
    ///
    /// - Parameter logger: Where postgres-nio logs this store's queries and connections (the
    ///   default logs nothing below critical). Bound values are never logged by Coffer.
    public init(configuration: PostgresConfiguration = .environment(), suite: String = "standard", logger: Logger? = nil) {
        self.suite = suite
        let link = PostgresLink(configuration: configuration, logger: logger, name: ("suite", suite))
        let channel = Schema.channel("coffer_kv_", Array(suite.utf8))
        self.link = link
        self.channel = channel
        self.tracker = SuiteTracker(suite: suite, logger: link.logger)
        self.notifier = CommitNotifier(link: link, channel: channel)
        self.sql = Statements(link.tables)
    }

    // MARK: - AsyncPersistenceStrategy (the synchronous forms run these on Coffer's threads)

    public func load(_ key: String) async throws -> Data? {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        let link = link
        return try await link.withConnection(idempotent: true) { [binds, sql] connection in
            let rows = try await link.run(
                sql.load, binds, on: connection)
            guard let row = rows.first else { return nil }
            return try row.cells[0].decode(Data?.self)
        }
    }

    public func save(_ data: Data, for key: String) async throws {
        try await write(key, data)
    }

    public func remove(_ key: String) async throws {
        try await write(key, nil)
    }

    public func keys() async throws -> [String] {
        var binds = PostgresBindings()
        binds.append(suite)
        let (suite, link) = (suite, link)
        let (keys, skipped) = try await link.withConnection(idempotent: true) { [binds, sql] connection in
            let rows = try await link.run(
                sql.keys, binds, on: connection)
            var skipped = 0
            let keys = try rows.compactMap { row -> String? in
                let key = String(validating: try row.cells[0].decode(Data.self), as: UTF8.self)
                if key == nil { skipped += 1 }
                return key
            }
            return (keys, skipped)
        }
        // A row no Coffer writes (a key that is not UTF-8) is left out and said (with the
        // connection back in the pool), never an error that hides every other key.
        if skipped > 0 { link.logger.warning("\(skipped) row(s) of suite \(suite) have a key that is not UTF-8: skipped") }
        return keys
    }

    /// Applies every change in one transaction: all of them are committed, or none is. A key
    /// named twice takes its last change.
    public func saveBatch(_ changes: [(key: String, data: Data?)]) async throws {
        var latest: [Data: Data?] = [:]
        var order: [Data] = []
        for (key, data) in changes {
            let bytes = Data(key.utf8)
            if latest.updateValue(data, forKey: bytes) == nil { order.append(bytes) }
        }
        guard !order.isEmpty else { return }
        if order.count == 1 {
            return try await write(changes[0].key, latest[order[0]]!)
        }
        // In key order: two batches over the same keys lock their rows in the same order, so they
        // wait for each other instead of deadlocking.
        let planned = order.sorted { $0.lexicographicallyPrecedes($1) }.map { ($0, latest[$0]!) }
        let (suite, link) = (suite, link)
        let writer = try await link.transaction { [sql] connection -> (UInt64, commit: Bool) in
            var writer: UInt64 = 0
            for (key, value) in planned {
                writer = try await Self.upsert(suite, key: key, value: value, sql: sql.write, on: connection, link: link)
            }
            return (writer, true)
        }
        tracker.markOwn(order, writer: writer)
        notifier.committed()
    }

    // MARK: - Atomic read-modify-write

    /// Stores `new` (`nil` removes) only if `key` holds exactly `expected` (`nil`: absent), as of
    /// the newest commit of any instance: the key's row stays locked from the read to the write.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool {
        let swapped = Guarded(false)
        try await readModifyWrite(key) { current in
            guard current == expected else { return .keep }
            swapped.withLock { $0 = true }
            return expected == new ? .keep : .store(new)
        }
        return swapped.withLock { $0 }
    }

    /// Reads, transforms and writes one value atomically with respect to every instance.
    ///
    /// ```swift
    /// try await store.update("launches") { (count: Int?) in (count ?? 0) + 1 }
    /// ```
    /// Returning `nil` removes the key. `transform` runs inside the transaction, while the key's
    /// row is locked: keep it short.
    public func update<T: Codable & Sendable>(_ key: String, _ transform: @escaping @Sendable (T?) throws -> T?) async throws {
        let encoding = valueEncoding
        try await readModifyWrite(key) { current in
            try await PostgresLink.callersCodeOffJobs {
                let value = try current.map { try ValueCodec.decode(T.self, from: $0, as: encoding) }
                return .store(
                    try PostgresLink.callersCode { try transform(value) }.map { try ValueCodec.encode($0, as: encoding) })
            }
        }
    }

    /// ``update(_:_:)-(String,_)`` for a caller that is not async: blocks until it ends (within
    /// the deadlines of ``PostgresConfiguration``).
    public func update<T: Codable & Sendable>(_ key: String, _ transform: (T?) throws -> T?) throws {
        try withoutActuallyEscaping(transform) { transform in
            let body = WhileBlocked(transform)
            defer { body.revoke() }
            try Offload.wait { try await self.update(key) { (value: T?) in try body.call { try $0(value) } } }
        }
    }

    /// Locks `key`'s row in a transaction of its own and returns once it is read; the
    /// transaction writes what the caller then decides (``KeyLock``). After a lost swap,
    /// `$x.update { … }` runs its transform between the two, in its caller's context, instead
    /// of retrying the swap.
    package func lock(_ key: String) async throws -> any KeyLock {
        try await HeldRow.hold(secret: false, until: .now + .seconds(link.timeout)) { offer in
            try await self.readModifyWrite(key) { current in
                switch try await offer(current) {
                case .release, .expired: .keep
                case .store(let new): current == new ? .keep : .store(new)
                }
            }
        }
    }

    private enum Decision: Sendable {
        case keep
        case store(Data?)
    }

    private func readModifyWrite(_ key: String, _ decide: @escaping @Sendable (Data?) async throws -> Decision)
        async throws
    {
        let keyBytes = Data(key.utf8)
        let (suite, link) = (suite, link)
        let written = try await link.transaction { [sql] connection -> (UInt64?, commit: Bool) in
            var binds = PostgresBindings()
            binds.append(suite)
            try binds.append(keyBytes)
            // The key's row is locked from here to the commit. An absent key gets a placeholder
            // row first (rolled back with the transaction when nothing is stored), so two
            // instances creating the same key wait for each other as well; the read is a
            // statement of its own, whose snapshot sees the row another instance just committed.
            try await link.run(sql.placeholder, binds, on: connection)
            let rows = try await link.run(
                sql.lockRow, binds, on: connection)
            let current = try rows.first.flatMap { try $0.cells[0].decode(Data?.self) }
            guard case .store(let next) = try await decide(current) else {
                return (nil, false)
            }
            return (try await Self.upsert(suite, key: keyBytes, value: next, sql: sql.write, on: connection, link: link), true)
        }
        if let written {
            tracker.markOwn([keyBytes], writer: written)
            notifier.committed()
        }
    }

    // MARK: - Changes from elsewhere

    /// Tells `handler` which keys other instances (other processes, other machines, `coffer`)
    /// change: a LISTEN on the suite's channel, on a connection of its own, while at least one
    /// observation is alive. After a dropped connection it reconnects and reports what changed
    /// meanwhile. Never fails for an unreachable server, and never waits for it: it keeps trying
    /// in the background.
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        tracker.observe(handler, link: link, channel: channel, ownToken: notifier.token) { [weak self] in
            try await self?.catchUp()
        }
    }

    /// How many catch-ups of this instance's current observation asked the server for rows, and
    /// how many rows they read in all: what following the suite has cost (0 when unobserved).
    package var catchUpReads: (catchUps: Int, rows: Int) { tracker.reads }

    /// The catch-up statement (`$1` suite, `$2` the previous snapshot's `xmax`, `$3` whether to
    /// read rows, `$4` its running transactions): for a test that checks the server's plan.
    package var catchUpStatement: String { sql.catchUp }

    /// Reads which keys changed since the last report and tells the observers.
    private func catchUp() async throws {
        guard tracker.isObserved else { return }
        let (horizon, newest) = tracker.start()
        var binds = PostgresBindings()
        binds.append(suite)
        binds.append(String(horizon?.xmax ?? 0))
        binds.append(horizon != nil)
        binds.append((horizon?.running ?? []).map { String($0) })
        let link = link
        let reading = try await link.withConnection(idempotent: true) { [binds, sql] connection in
            try SuiteTracker.reading(try await link.run(sql.catchUp, binds, on: connection))
        }
        tracker.apply(reading, newestBefore: newest)
    }

    // MARK: - Internals

    private func write(_ key: String, _ data: Data?) async throws {
        let keyBytes = Data(key.utf8)
        let (suite, link) = (suite, link)
        let writer = try await link.withConnection(idempotent: false) { [sql] connection in
            try await Self.upsert(suite, key: keyBytes, value: data, sql: sql.write, on: connection, link: link)
        }
        tracker.markOwn([keyBytes], writer: writer)
        notifier.committed()
    }

    /// Runs `sql` (``Statements/write``) and returns the writing transaction's id.
    private static func upsert(
        _ suite: String, key: Data, value: Data?, sql: String, on connection: PostgresConnection, link: PostgresLink
    ) async throws -> UInt64 {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(key)
        try binds.append(value)
        let rows = try await link.run(sql, binds, on: connection)
        guard let writer = try rows.first?.cells[0].decode(String.self) else {
            throw CofferError(.io, "the PostgreSQL server did not return the written row")
        }
        return try SuiteTracker.xid(writer)
    }
}

extension Backing {
    /// A key in the default suite on the PostgreSQL server of the current ``CofferContext``:
    /// the ``PostgresConfiguration`` attached to it, else the `PG*` environment variables.
    ///
    /// ```swift
    /// @Stored(backed: .postgres(key: "maintenance")) var maintenance = false
    /// ```
    public static func postgres(key: String) -> Backing {
        postgres(suite: "standard", key: key)
    }

    /// A key in a named suite on the current context's PostgreSQL server.
    public static func postgres(suite: String, key: String) -> Backing {
        Backing(
            description: "postgres(suite: \(suite), key: \(key))", store: .inContext(["postgres", suite]), key: key
        ) { context in
            var configuration = context.setting(PostgresConfiguration.self) ?? .environment()
            if configuration.timeout == nil { configuration.timeout = context.lockTimeout.inSeconds }
            let store = try context.sharedStore(id: .inContext(["postgres", configuration.identity, suite])) {
                PostgresKeyValueStrategy(configuration: configuration, suite: suite)
            }
            return (store, key)
        }
    }

    /// A key in an explicit PostgreSQL store.
    public static func postgres(_ store: PostgresKeyValueStrategy, key: String) -> Backing {
        Backing(description: "postgres(suite: \(store.suite), key: \(key))", store: store.id, key: key) {
            _ in (store, key)
        }
    }
}
#endif
