#if Postgres
public import CofferCore
public import Foundation
public import Logging
import PostgresNIO

/// A suite of keys and values in a PostgreSQL table, shared by every instance of an
/// application that points at the same database: the fleet's `KeyValueFileStrategy`.
///
/// Values are the same bytes the local strategies store. One row per key (docs/FORMAT.md,
/// "PostgreSQL tables"), each with the suite-wide version of its last write. A write is one
/// statement — one transaction — that also raises the suite's version and sends a
/// notification, so every instance observing the suite (`@Stored` properties, computed values,
/// observers) follows it; an instance that was disconnected catches up by version when it
/// reconnects, so no change is missed. `saveBatch` is one transaction. ``compareAndSwap(_:expected:new:)``
/// and ``update(_:_:)`` hold the suite's version row locked from the read to the write, so a
/// counter incremented from many machines is exact.
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
public final class PostgresKeyValueStrategy: AsyncBatchPersistenceStrategy, AsyncCompareAndSwapPersistenceStrategy,
    ChangeObservingPersistenceStrategy
{
    /// The suite: the rows of this store are those with this suite name.
    public let suite: String
    /// The server and database.
    public var configuration: PostgresConfiguration { link.configuration }

    let link: PostgresLink
    let channel: String
    private let tracker = ChangeTracker<StoreChange>()

    /// A store for `suite` on the server `configuration` names. Nothing is contacted until the
    /// first call; the tables are created then when missing. Stores with equal settings share
    /// one connection pool in the process (``PostgresConfiguration/maximumConnections``).
    ///
    /// - Parameter logger: Where postgres-nio logs this store's queries and connections (the
    ///   default logs nothing below critical). Bound values are never logged by Coffer.
    public init(configuration: PostgresConfiguration = .environment(), suite: String = "standard", logger: Logger? = nil) {
        self.suite = suite
        self.link = PostgresLink(configuration: configuration, logger: logger)
        self.channel = Schema.channel("coffer_kv_", Array(suite.utf8))
    }

    // MARK: - AsyncPersistenceStrategy (the synchronous forms run these on Coffer's threads)

    public func load(_ key: String) async throws -> Data? {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run(
                "SELECT value FROM coffer_kv WHERE suite = $1 AND key = $2", binds, on: connection)
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
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run(
                "SELECT key FROM coffer_kv WHERE suite = $1 AND value IS NOT NULL", binds, on: connection)
            return try rows.map { try Self.key(from: $0.cells[0].decode(Data.self)) }
        }
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
        let planned = order.map { ($0, latest[$0]!) }
        let (suite, channel, link) = (suite, channel, link)
        let version = try await link.transaction { connection -> (Int64, commit: Bool) in
            let version = try await Self.bumpVersion(suite, on: connection, link: link)
            for (key, value) in planned {
                try await Self.upsert(suite, key: key, value: value, version: version, on: connection, link: link)
            }
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return (version, true)
        }
        tracker.markOwn(version)
    }

    // MARK: - Atomic read-modify-write

    /// Stores `new` (`nil` removes) only if `key` holds exactly `expected` (`nil`: absent), as of
    /// the newest commit of any instance: the suite's version row stays locked from the read
    /// to the write.
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
    /// Returning `nil` removes the key. `transform` runs inside the transaction, while the
    /// suite's version row is locked: keep it short.
    public func update<T: Codable & Sendable>(_ key: String, _ transform: @escaping @Sendable (T?) throws -> T?) async throws {
        let encoding = valueEncoding
        try await readModifyWrite(key) { current in
            let value = try current.map { try ValueCodec.decode(T.self, from: $0, as: encoding) }
            return .store(try PostgresLink.callersCode { try transform(value) }.map { try ValueCodec.encode($0, as: encoding) })
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

    private enum Decision: Sendable {
        case keep
        case store(Data?)
    }

    private func readModifyWrite(_ key: String, _ decide: @escaping @Sendable (Data?) throws -> Decision) async throws {
        let keyBytes = Data(key.utf8)
        let (suite, channel, link) = (suite, channel, link)
        let written = try await link.transaction { connection -> (Int64?, commit: Bool) in
            let version = try await Self.bumpVersion(suite, on: connection, link: link)
            var binds = PostgresBindings()
            binds.append(suite)
            try binds.append(keyBytes)
            let rows = try await link.run(
                "SELECT value FROM coffer_kv WHERE suite = $1 AND key = $2", binds, on: connection)
            let current = try rows.first.flatMap { try $0.cells[0].decode(Data?.self) }
            guard case .store(let next) = try decide(current) else { return (nil, false) }
            try await Self.upsert(suite, key: keyBytes, value: next, version: version, on: connection, link: link)
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return (version, true)
        }
        if let written { tracker.markOwn(written) }
    }

    // MARK: - Changes from elsewhere

    /// Tells `handler` which keys other instances (other processes, other machines, `coffer`)
    /// change: a LISTEN on the suite's channel, on a connection of its own, while at least one
    /// observation is alive. After a dropped connection it reconnects and reports what changed
    /// meanwhile. Never fails for an unreachable server, and never waits for it: it keeps trying
    /// in the background.
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        tracker.observe(handler, link: link, channel: channel) { [weak self] in
            try await self?.catchUp()
        }
    }

    /// Reads which keys changed since the last report and tells the observers.
    private func catchUp() async throws {
        let (suite, link) = (suite, link)
        try await tracker.catchUp(
            version: { try await self.currentVersion() }, everything: StoreChange(keys: nil)
        ) { since in
            var binds = PostgresBindings()
            binds.append(suite)
            binds.append(since)
            return try await link.withConnection(idempotent: true) { [binds] connection in
                let rows = try await link.run(
                    "SELECT key, version FROM coffer_kv WHERE suite = $1 AND version > $2", binds, on: connection)
                return try rows.map { row -> (row: String, version: Int64) in
                    let cells = row.cells
                    return (try Self.key(from: cells[0].decode(Data.self)), try cells[1].decode(Int64.self))
                }
            }
        } report: { keys in
            StoreChange(keys: Set(keys))
        }
    }

    // MARK: - Internals

    private func write(_ key: String, _ data: Data?) async throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        try binds.append(data)
        binds.append(channel)
        let link = link
        let version = try await link.withConnection(idempotent: false) { [binds] connection in
            let rows = try await link.run(Self.writeStatement, binds, on: connection)
            return try rows.first?.cells[0].decode(Int64.self)
        }
        if let version { tracker.markOwn(version) }
    }

    /// One statement, so one round trip and one transaction: raise the suite's version (locking
    /// its row until commit, which orders the suite's commits by version), write the row, notify.
    static let writeStatement = """
        WITH v AS (INSERT INTO coffer_suites AS s (suite, version) VALUES ($1, 1) \
        ON CONFLICT (suite) DO UPDATE SET version = s.version + 1 RETURNING s.version), \
        w AS (INSERT INTO coffer_kv AS t (suite, key, value, version) SELECT $1, $2, $3, v.version FROM v \
        ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, version = excluded.version RETURNING t.version) \
        SELECT w.version FROM w, pg_notify($4, w.version::text)
        """

    private static func bumpVersion(_ suite: String, on connection: PostgresConnection, link: PostgresLink)
        async throws -> Int64
    {
        var binds = PostgresBindings()
        binds.append(suite)
        let rows = try await link.run(
            "INSERT INTO coffer_suites AS s (suite, version) VALUES ($1, 1) "
                + "ON CONFLICT (suite) DO UPDATE SET version = s.version + 1 RETURNING s.version", binds,
            on: connection)
        return try rows[0].cells[0].decode(Int64.self)
    }

    private static func upsert(
        _ suite: String, key: Data, value: Data?, version: Int64, on connection: PostgresConnection, link: PostgresLink
    ) async throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(key)
        try binds.append(value)
        binds.append(version)
        try await link.run(
            "INSERT INTO coffer_kv AS t (suite, key, value, version) VALUES ($1, $2, $3, $4) "
                + "ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, version = excluded.version", binds,
            on: connection)
    }

    private func currentVersion() async throws -> Int64 {
        var binds = PostgresBindings()
        binds.append(suite)
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run("SELECT version FROM coffer_suites WHERE suite = $1", binds, on: connection)
            return try rows.first?.cells[0].decode(Int64.self) ?? 0
        }
    }

    private static func key(from bytes: Data) throws -> String {
        guard let key = String(validating: bytes, as: UTF8.self) else {
            throw CofferError(.corrupted, "a key in the coffer_kv table is not valid UTF-8")
        }
        return key
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
            description: "postgres(suite: \(suite), key: \(key))", identity: .inContext(["postgres", suite, key])
        ) { context in
            var configuration = context.setting(PostgresConfiguration.self) ?? .environment()
            if configuration.timeout == nil { configuration.timeout = context.lockTimeout.inSeconds }
            let store = try context.sharedStore(id: "postgres:\(configuration.identity):\(suite)") {
                PostgresKeyValueStrategy(configuration: configuration, suite: suite)
            }
            return (store, key)
        }
    }

    /// A key in an explicit PostgreSQL store.
    public static func postgres(_ store: PostgresKeyValueStrategy, key: String) -> Backing {
        Backing(description: "postgres(suite: \(store.suite), key: \(key))", identity: .instance(store, key: key)) {
            _ in (store, key)
        }
    }
}
#endif
