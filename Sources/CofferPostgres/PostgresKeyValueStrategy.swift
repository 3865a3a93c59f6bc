#if Postgres
public import CofferCore
public import Foundation
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
/// When `save` returns, the server has committed the write: with the server's default
/// `synchronous_commit = on`, it survives a crash or restart of the server (see README, "Many
/// machines"). A write whose connection drops before the answer throws
/// ``CofferError/Code/io`` saying it may or may not have been committed.
///
/// ```swift
/// let settings = try PostgresConfiguration(url: "postgres://app@db.internal/app")
/// let flags = PostgresKeyValueStrategy(configuration: settings, suite: "feature-flags")
/// try flags.set(true, for: "new-checkout")
/// ```
public final class PostgresKeyValueStrategy: BatchPersistenceStrategy, CompareAndSwapPersistenceStrategy,
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
    /// first call; the tables are created then when missing.
    public init(configuration: PostgresConfiguration = .environment(), suite: String = "standard") {
        self.suite = suite
        self.link = PostgresLink(configuration: configuration)
        self.channel = Schema.channel("coffer_kv_", Array(suite.utf8))
    }

    // MARK: - PersistenceStrategy

    public func load(_ key: String) throws -> Data? {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        let rows = try link.withConnection(idempotent: true) { connection in
            try PostgresLink.run("SELECT value FROM coffer_kv WHERE suite = $1 AND key = $2", binds, on: connection)
        }
        guard let row = rows.first else { return nil }
        return try row.cells[0].decode(Data?.self)
    }

    public func save(_ data: Data, for key: String) throws {
        try write(key, data)
    }

    public func remove(_ key: String) throws {
        try write(key, nil)
    }

    public func keys() throws -> [String] {
        var binds = PostgresBindings()
        binds.append(suite)
        let rows = try link.withConnection(idempotent: true) { connection in
            try PostgresLink.run(
                "SELECT key FROM coffer_kv WHERE suite = $1 AND value IS NOT NULL", binds, on: connection)
        }
        return try rows.map { try Self.key(from: $0.cells[0].decode(Data.self)) }
    }

    /// Applies every change in one transaction: all of them are committed, or none is. A key
    /// named twice takes its last change.
    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        var latest: [Data: Data?] = [:]
        var order: [Data] = []
        for (key, data) in changes {
            let bytes = Data(key.utf8)
            if latest.updateValue(data, forKey: bytes) == nil { order.append(bytes) }
        }
        guard !order.isEmpty else { return }
        if order.count == 1 {
            return try write(changes[0].key, latest[order[0]]!)
        }
        let version = try link.transaction { connection -> (Int64, commit: Bool) in
            let version = try bumpVersion(on: connection)
            for key in order {
                try upsert(key: key, value: latest[key]!, version: version, on: connection)
            }
            try ChangeFeed.notify(channel, of: version, on: connection)
            return (version, true)
        }
        tracker.markOwn(version)
    }

    // MARK: - Atomic read-modify-write

    /// Stores `new` (`nil` removes) only if `key` holds exactly `expected` (`nil`: absent), as of
    /// the newest commit of any instance: the suite's version row stays locked from the read
    /// to the write.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool {
        var swapped = false
        try readModifyWrite(key) { current in
            guard current == expected else { return .keep }
            swapped = true
            return expected == new ? .keep : .store(new)
        }
        return swapped
    }

    /// Reads, transforms and writes one value atomically with respect to every instance.
    ///
    /// ```swift
    /// try store.update("launches") { (count: Int?) in (count ?? 0) + 1 }
    /// ```
    /// Returning `nil` removes the key.
    public func update<T: Codable>(_ key: String, _ transform: (T?) throws -> T?) throws {
        try readModifyWrite(key) { current in
            let value = try current.map { try ValueCodec.decode(T.self, from: $0, as: valueEncoding) }
            return .store(try transform(value).map { try ValueCodec.encode($0, as: valueEncoding) })
        }
    }

    private enum Decision {
        case keep
        case store(Data?)
    }

    private func readModifyWrite(_ key: String, _ decide: (Data?) throws -> Decision) throws {
        let keyBytes = Data(key.utf8)
        let written = try link.transaction { connection -> (Int64?, commit: Bool) in
            let version = try bumpVersion(on: connection)
            var binds = PostgresBindings()
            binds.append(suite)
            try binds.append(keyBytes)
            let rows = try PostgresLink.run(
                "SELECT value FROM coffer_kv WHERE suite = $1 AND key = $2", binds, on: connection)
            let current = try rows.first.flatMap { try $0.cells[0].decode(Data?.self) }
            guard case .store(let next) = try decide(current) else { return (nil, false) }
            try upsert(key: keyBytes, value: next, version: version, on: connection)
            try ChangeFeed.notify(channel, of: version, on: connection)
            return (version, true)
        }
        if let written { tracker.markOwn(written) }
    }

    // MARK: - Changes from elsewhere

    /// Tells `handler` which keys other instances (other processes, other machines, `coffer`)
    /// change: a LISTEN on the suite's channel, on a connection and a thread of its own, while at
    /// least one observation is alive. After a dropped connection it reconnects and reports
    /// what changed meanwhile. Never fails for an unreachable server: it keeps trying.
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        tracker.observe(handler, link: link, channel: channel, version: currentVersion(on:)) { [weak self] connection in
            try self?.catchUp(on: connection)
        }
    }

    /// Reads which keys changed since the last report and tells the observers.
    private func catchUp(on connection: PostgresConnection) throws {
        try tracker.catchUp(on: connection, version: currentVersion(on:), everything: StoreChange(keys: nil)) { since in
            var binds = PostgresBindings()
            binds.append(suite)
            binds.append(since)
            let rows = try PostgresLink.run(
                "SELECT key, version FROM coffer_kv WHERE suite = $1 AND version > $2", binds, on: connection)
            return try rows.map { row -> (row: String, version: Int64) in
                let cells = row.cells
                return (try Self.key(from: cells[0].decode(Data.self)), try cells[1].decode(Int64.self))
            }
        } report: { keys in
            StoreChange(keys: Set(keys))
        }
    }

    // MARK: - Internals

    private func write(_ key: String, _ data: Data?) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        try binds.append(data)
        binds.append(channel)
        let rows = try link.withConnection(idempotent: false) { connection in
            try PostgresLink.run(Self.writeStatement, binds, on: connection)
        }
        if let version = try rows.first?.cells[0].decode(Int64.self) { tracker.markOwn(version) }
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

    private func bumpVersion(on connection: PostgresConnection) throws -> Int64 {
        var binds = PostgresBindings()
        binds.append(suite)
        let rows = try PostgresLink.run(
            "INSERT INTO coffer_suites AS s (suite, version) VALUES ($1, 1) "
                + "ON CONFLICT (suite) DO UPDATE SET version = s.version + 1 RETURNING s.version", binds,
            on: connection)
        return try rows[0].cells[0].decode(Int64.self)
    }

    private func upsert(key: Data, value: Data?, version: Int64, on connection: PostgresConnection) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(key)
        try binds.append(value)
        binds.append(version)
        try PostgresLink.run(
            "INSERT INTO coffer_kv AS t (suite, key, value, version) VALUES ($1, $2, $3, $4) "
                + "ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, version = excluded.version", binds,
            on: connection)
    }

    private func currentVersion(on connection: PostgresConnection) throws -> Int64 {
        var binds = PostgresBindings()
        binds.append(suite)
        let rows = try PostgresLink.run("SELECT version FROM coffer_suites WHERE suite = $1", binds, on: connection)
        return try rows.first?.cells[0].decode(Int64.self) ?? 0
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
            let configuration = context.setting(PostgresConfiguration.self) ?? .environment()
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
