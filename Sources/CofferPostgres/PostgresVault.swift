#if Postgres
public import CofferCore
public import CofferCrypto
public import CofferVault
public import Foundation
public import Logging
import PostgresNIO

/// A vault kept in PostgreSQL, shared by a fleet: a ``Keychain``, as the file `Vault` is, with the
/// database holding only sealed records.
///
/// Everything the file vault encrypts — secret, service, account, label, comment, dates — is
/// sealed in this process with the vault's keys, by the file vault's own code (XChaCha20-Poly1305
/// records, Argon2id/key-file/raw-key key slots; see `RowSealing`), so a dump, a replica or a
/// database administrator sees ciphertext, sizes and versions only. Rows are found by a keyed
/// BLAKE2b hash of service and account, never the names. Each record's associated data binds it
/// to its vault, its row and its version: a row altered, copied onto another item or from another
/// vault, or given another version fails with ``CofferError/Code/corrupted`` (SECURITY.md, "The
/// fleet store").
///
/// ```swift
/// let vault = try await PostgresVault.openOrCreate(name: "production", unlock: .keyFile(keyURL), configuration: settings)
/// try await vault.set("s3cr3t", service: "api.example.com", account: "deploy")
/// let token = try await vault.string(service: "api.example.com", account: "deploy")
/// ```
public final class PostgresVault: Sendable {
    /// The vault's name in the `coffer_vaults` table (stored in plain text, like a file name).
    public let name: String
    /// The server and database.
    public var configuration: PostgresConfiguration { link.configuration }

    let link: PostgresLink
    /// The vault's keys until ``lock()``.
    private let keys: Locked<RowSealing?>
    /// The vault's random id (its rows' key in the database).
    let vaultID: [UInt8]
    let channel: String
    private let tracker = ChangeTracker<Set<VaultItemID>?>()
    /// The newest version this instance has seen of each row: an older one later is a rollback,
    /// a row gone is a deletion behind Coffer's back.
    private let newestVersions = Locked<[[UInt8]: Int64]>([:])
    /// The server's next transaction id as this instance last saw it (its snapshots, its own
    /// writes): a server whose next id is below it went back — restored from a backup, or failed
    /// over to a replica that had not received every commit — which no SQL can do.
    private let serverHorizon: Locked<UInt64>
    /// The kinds of warning this instance has logged (each is said once).
    private let warned = Locked<Set<String>>([])
    /// One strategy per service (see ``strategy(service:)``).
    let strategies = Locked<[String: WeakStrategy]>([:])

    private init(name: String, link: PostgresLink, sealing: RowSealing, serverNext: UInt64) {
        self.name = name
        self.link = link
        self.keys = Locked(sealing)
        self.vaultID = sealing.vaultID
        self.serverHorizon = Locked(serverNext)
        self.channel = Schema.channel("coffer_vault_", sealing.vaultID)
    }

    /// The vault's keys; `.locked` after ``lock()``.
    var sealing: RowSealing {
        get throws {
            guard let sealing = keys.withLock({ $0 }) else {
                throw CofferError(.locked, "the vault was locked: open it again", path: name)
            }
            return sealing
        }
    }

    /// Drops this instance's keys: every later call throws ``CofferError/Code/locked``. The keys
    /// are wiped when the last call still using them ends. Other instances are not affected.
    public func lock() {
        let sealing = keys.withLock { $0.take() }
        withExtendedLifetime(sealing) {}  // released (and wiped) outside the lock
    }

    /// Whether ``lock()`` was called.
    public var isLocked: Bool { keys.withLock { $0 == nil } }

    /// Takes the keys of a rotation or a slot change, in place of `current` (the keys the change
    /// was made from): when another call replaced those meanwhile, or after ``lock()``, nothing
    /// changes (a later call finds the epoch it needs and follows again), so keys never go back.
    func replaceKeys(_ next: RowSealing, replacing current: RowSealing) {
        let old = keys.withLock { keys -> RowSealing? in
            guard let held = keys, held === current else { return nil }
            defer { keys = next }
            return held
        }
        withExtendedLifetime(old) {}  // released (and wiped) outside the lock
    }

    /// Forgets the row versions read: after a rotation, rows have new keys and versions.
    func forgetReads() {
        newestVersions.withLock { $0 = [:] }
    }

    /// Accepts rows older than this instance has read (after an operator's logical restore, or
    /// a rollback they confirm was theirs): reads stop failing with ``CofferError/Code/rolledBack``
    /// and observers reread everything. A restore from a backup or a failover is accepted without
    /// this (the server's own transaction counter shows it).
    public func acceptRollback() {
        newestVersions.withLock { $0 = [:] }
        tracker.restart()
    }

    /// Creates the vault `name`: a new master key in one key slot for `unlock`. The KDF runs on
    /// Coffer's own threads, never the cooperative pool.
    /// - Throws: ``CofferError/Code/alreadyExists`` when the database has a vault of that name;
    ///   ``CofferError/Code/io`` when the server is unavailable.
    public static func create(
        name: String, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate,
        configuration: PostgresConfiguration = .environment(), logger: Logger? = nil
    ) async throws -> PostgresVault {
        if let refusal = PostgresLink.refusal(of: name, as: "vault") { throw refusal }  // before the KDF
        let (sealing, header) = try await Offload.run { try RowSealing.create(unlock: unlock, kdf: kdf, name: name) }
        let link = PostgresLink(configuration: configuration, logger: logger, name: ("vault", name))
        var binds = PostgresBindings()
        binds.append(name)
        try binds.append(Data(sealing.vaultID))
        try binds.append(Data(header))
        let created = try await link.withConnection(idempotent: false) { [binds] connection -> UInt64? in
            let rows = try await link.run(
                "INSERT INTO \(link.tables.vaults) (name, vault_id, header, version) VALUES ($1, $2, $3, 0) "
                    + "ON CONFLICT (name) DO NOTHING RETURNING pg_current_xact_id()::text", binds, on: connection)
            return try rows.first.map { try Self.transactionID($0.cells[0]) }
        }
        guard let created else {
            throw CofferError(.alreadyExists, "the database already has a vault named \(name)")
        }
        return PostgresVault(name: name, link: link, sealing: sealing, serverNext: created + 1)
    }

    /// ``create(name:unlock:kdf:configuration:logger:)`` for a caller that is not async.
    public static func create(
        name: String, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate,
        configuration: PostgresConfiguration = .environment(), logger: Logger? = nil
    ) throws -> PostgresVault {
        try Offload.wait {
            try await create(name: name, unlock: unlock, kdf: kdf, configuration: configuration, logger: logger)
        }
    }

    /// Opens and unlocks the vault `name`. The KDF (Argon2id, for a passphrase) runs on Coffer's
    /// own threads, never the cooperative pool: a server opens its vault at start-up with
    /// `try await` and fails fast there.
    /// - Throws: ``CofferError`` — `.notFound`, `.wrongKey`, `.limitExceeded`, `.corrupted`
    ///   (its header was altered), `.io` (the server is unavailable).
    public static func open(
        name: String, unlock: VaultUnlock, kdfLimit: Argon2idParameters = Vault.defaultKDFLimit,
        configuration: PostgresConfiguration = .environment(), logger: Logger? = nil
    ) async throws -> PostgresVault {
        let link = PostgresLink(configuration: configuration, logger: logger, name: ("vault", name))
        var binds = PostgresBindings()
        binds.append(name)
        let found = try await link.withConnection(idempotent: true) { [binds] connection -> (Data, Data, UInt64)? in
            let rows = try await link.run(
                "SELECT vault_id, header, pg_snapshot_xmax(pg_current_snapshot())::text FROM \(link.tables.vaults) "
                    + "WHERE name = $1", binds, on: connection)
            guard let row = rows.first else { return nil }
            let cells = row.cells
            return (try cells[0].decode(Data.self), try cells[1].decode(Data.self), try Self.transactionID(cells[2]))
        }
        guard let (vaultID, header, serverNext) = found else {
            throw CofferError(.notFound, "the database has no vault named \(name)")
        }
        let sealing = try await Offload.run {
            try RowSealing.unlock(header: Array(header), unlock: unlock, kdfLimit: kdfLimit, name: name)
        }
        guard Array(vaultID) == sealing.vaultID else {
            throw CofferError(.corrupted, "the vault's id does not match its header", path: name)
        }
        return PostgresVault(name: name, link: link, sealing: sealing, serverNext: serverNext)
    }

    /// ``open(name:unlock:kdfLimit:configuration:logger:)`` for a caller that is not async.
    public static func open(
        name: String, unlock: VaultUnlock, kdfLimit: Argon2idParameters = Vault.defaultKDFLimit,
        configuration: PostgresConfiguration = .environment(), logger: Logger? = nil
    ) throws -> PostgresVault {
        try Offload.wait {
            try await open(name: name, unlock: unlock, kdfLimit: kdfLimit, configuration: configuration, logger: logger)
        }
    }

    /// Opens the vault `name`, creating it first when the database has none of that name.
    public static func openOrCreate(
        name: String, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate,
        kdfLimit: Argon2idParameters = Vault.defaultKDFLimit, configuration: PostgresConfiguration = .environment(),
        logger: Logger? = nil
    ) async throws -> PostgresVault {
        let limit = RowSealing.kdfLimit(kdfLimit, raisedTo: kdf)
        do {
            return try await open(name: name, unlock: unlock, kdfLimit: limit, configuration: configuration, logger: logger)
        } catch let error as CofferError where error.code == .notFound {
            do {
                return try await create(name: name, unlock: unlock, kdf: kdf, configuration: configuration, logger: logger)
            } catch let error as CofferError where error.code == .alreadyExists {
                // Another instance created it meanwhile.
                return try await open(
                    name: name, unlock: unlock, kdfLimit: limit, configuration: configuration, logger: logger)
            }
        }
    }

    /// ``openOrCreate(name:unlock:kdf:kdfLimit:configuration:logger:)`` for a caller that is not async.
    public static func openOrCreate(
        name: String, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate,
        kdfLimit: Argon2idParameters = Vault.defaultKDFLimit, configuration: PostgresConfiguration = .environment(),
        logger: Logger? = nil
    ) throws -> PostgresVault {
        try Offload.wait {
            try await openOrCreate(
                name: name, unlock: unlock, kdf: kdf, kdfLimit: kdfLimit, configuration: configuration, logger: logger)
        }
    }

    // MARK: - Items (async)

    /// Stores `secret` for `service` and `account`, replacing any item there. A `nil` label or
    /// comment keeps the item's current one (empty for a new item).
    public func set(_ secret: Data, service: String, account: String, label: String? = nil, comment: String? = nil)
        async throws
    {
        try await apply([.set(service: service, account: account, secret: [UInt8](secret), label: label, comment: comment)])
    }

    /// Stores a text secret (its UTF-8).
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        async throws
    {
        try await set(Data(secret.utf8), service: service, account: account, label: label, comment: comment)
    }

    /// Stores a secret held in guarded memory. The one plain copy made for sealing is wiped when
    /// the write ends.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) async throws {
        var bytes = secret.withUnsafeBytes { [UInt8]($0) }
        // Runs after `apply`'s change is released, so the array is wiped in place.
        defer { SecureMemory.zero(&bytes) }
        try await apply([.set(service: service, account: account, secret: bytes, label: label, comment: comment)])
    }

    /// The secret's bytes, or `nil` when there is no such item.
    /// - Throws: ``CofferError/Code/corrupted`` for a row that fails authentication (or was rolled
    ///   back or deleted behind Coffer's back, as far as this instance can tell); `.io`; `.busy`.
    public func data(service: String, account: String) async throws -> Data? {
        guard case .put(_, var secret) = try await body(service: service, account: account) else { return nil }
        defer { SecureMemory.zero(&secret) }
        return Data(secret)
    }

    /// The secret as text.
    /// - Throws: ``CofferError/Code/decoding`` when it is not UTF-8.
    public func string(service: String, account: String) async throws -> String? {
        guard let data = try await data(service: service, account: account) else { return nil }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw CofferError(.decoding, "the secret is not UTF-8 text")
        }
        return text
    }

    /// The secret in guarded memory (wiped when released), or `nil` when there is no such item:
    /// the form for secrets that matter (no `Data` copy is made).
    public func secret(service: String, account: String) async throws -> SecureBytes? {
        guard case .put(_, var secret) = try await body(service: service, account: account) else { return nil }
        defer { SecureMemory.zero(&secret) }
        do {
            return try SecureBytes(copying: secret)
        } catch let error as CryptoError {
            throw CofferError(.crypto, "cannot hold the secret in guarded memory: \(error.message)")
        }
    }

    /// The item's attributes (no secret), or `nil`.
    public func item(service: String, account: String) async throws -> VaultItem? {
        guard case .put(let item, var secret) = try await body(service: service, account: account) else { return nil }
        SecureMemory.zero(&secret)
        return item
    }

    /// Every item (of `service`, when given), sorted by service then account. Opens every row.
    public func items(service: String? = nil) async throws -> [VaultItem] {
        try await withCurrentKeys { try await self.itemsOnce(service: service) }
    }

    private func itemsOnce(service: String?) async throws -> [VaultItem] {
        let sealing = try sealing
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        // What was known before the query: a commit seen then must be visible to it. (The
        // horizon first: see `readRows`.)
        let horizon = serverHorizon.withLock { $0 }
        let known = newestVersions.withLock { $0 }
        let link = link
        let (serverNext, rows) = try await link.withConnection(idempotent: true) { [binds] connection in
            try await self.readRows("", binds, sealing: sealing, on: connection)
        }
        // A row older than this instance has read: the server restored (accepted), or rolled
        // back by SQL (refused).
        if !acceptIfRestored(serverNext, before: horizon),
            let older = rows.first(where: { row in known[row.rowKey].map { row.version < $0 } ?? false })
        {
            throw rolledBack(older.version, known: known[older.rowKey]!)
        }
        var items: [VaultItem] = []
        for (rowKey, record, version) in rows {
            guard case .put(let item, var secret) = try sealing.open(record, rowKey: rowKey, version: version) else {
                continue
            }
            SecureMemory.zero(&secret)
            if service == nil || item.service == service { items.append(item) }
        }
        return items.sorted { ($0.service, $0.account) < ($1.service, $1.account) }
    }

    /// Removes the item; returns whether there was one.
    @discardableResult
    public func remove(service: String, account: String) async throws -> Bool {
        let existed = Guarded(false)
        try await commit([.remove(service: service, account: account)]) { _, current in
            existed.withLock { $0 = current != nil }
        }
        return existed.withLock { $0 }
    }

    /// Applies every change in one transaction: all of them are committed, or none is.
    public func apply(_ changes: [VaultChange]) async throws {
        try await commit(changes) { _, _ in }
    }

    /// Adds new items in one transaction unless one of them exists already: whether one does is
    /// read inside the transaction that locks the vault's version row (every writer takes that
    /// lock first), and the rows are written in it, so an item another instance stored meanwhile
    /// is never replaced. When one exists the transaction is rolled back: nothing is written.
    ///
    /// - Parameter changes: `.set` changes only.
    /// - Returns: The items of `changes` that exist already, in the order of `changes`; empty
    ///   when every item was added.
    /// - Throws: ``CofferError/Code/invalidArgument`` for a `.remove` (nothing is written);
    ///   ``CofferError/Code/corrupted`` for an existing row that fails authentication (it is
    ///   not replaced); as `apply(_:)`.
    public func add(_ changes: [VaultChange]) async throws -> [VaultItemID] {
        guard !changes.isEmpty else { return [] }
        return try await withCurrentKeys { try await self.addOnce(changes) }
    }

    private func addOnce(_ changes: [VaultChange]) async throws -> [VaultItemID] {
        let sealing = try sealing
        for change in changes {
            guard case .set = change else {
                throw CofferError(.invalidArgument, "add(_:) adds items: a removal is not one", path: name)
            }
        }
        let steps = try planned(changes, sealing: sealing)
        let (link, channel) = (link, channel)
        let (present, version, writer) = try await link.transaction {
            connection -> (([VaultItemID], Int64, UInt64), commit: Bool) in
            let (bumped, writer) = try await self.bumpVersion(sealing: sealing, on: connection)
            var present: [VaultItemID] = []
            for (change, rowKey) in steps {
                if case .put(_, var secret)? = try await self.currentBody(rowKey, sealing: sealing, on: connection) {
                    SecureMemory.zero(&secret)
                    let (service, account) = change.names
                    present.append(VaultItemID(service: service, account: account))
                }
            }
            guard present.isEmpty else { return ((present, bumped, writer), false) }
            // As every write: above any version this instance has read of these rows (a
            // removed item's row), so the rows written read back.
            let version = try await self.superseding(bumped, rowKeys: steps.map(\.rowKey), on: connection)
            for (change, rowKey) in steps {
                guard case .set(let service, let account, let secret, let label, let comment) = change else { continue }
                let record = try self.seal(
                    service: service, account: account, secret: Data(secret), label: label, comment: comment,
                    existing: nil, rowKey: rowKey, version: version, sealing: sealing)
                try await self.upsert(rowKey, record, version, on: connection)
            }
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return (([], version, writer), true)
        }
        if present.isEmpty { wrote(steps.map(\.rowKey), version, writer: writer) }
        return present
    }

    /// `add(_:)`, blocking until it ends.
    public func add(_ changes: [VaultChange]) throws -> [VaultItemID] {
        try Offload.wait { try await self.add(changes) }
    }

    /// Reads, transforms and writes one secret atomically with respect to every instance: the
    /// vault's version row stays locked from the read to the write. Returning `nil` removes it.
    /// `transform` runs inside the transaction, on one of Coffer's threads (hence `@Sendable`):
    /// keep it short. It is not kept after the call.
    public func update(service: String, account: String, _ transform: @Sendable (Data?) throws -> Data?) async throws {
        try await withoutActuallyEscaping(transform) { transform in
            let lent = WhileBlocked<(Data?) throws -> Data?>(transform)
            defer { lent.revoke() }
            try await update(service: service, account: account, lent: lent)
        }
    }

    /// The update behind both forms, with the caller's `transform` lent for the call: taken back
    /// when the caller's form returns, so it never outlives it.
    func update(service: String, account: String, lent transform: WhileBlocked<(Data?) throws -> Data?>) async throws {
        try await withCurrentKeys {
            try await self.updateOnce(service: service, account: account) { current in try transform.call { try $0(current) } }
        }
    }

    private func updateOnce(service: String, account: String, _ transform: @escaping @Sendable (Data?) throws -> Data?)
        async throws
    {
        try checkNames(service: service, account: account)
        let sealing = try sealing
        let rowKey = try sealing.rowKey(service: service, account: account)
        let (link, channel) = (link, channel)
        let version = try await link.transaction { connection -> ((Int64, UInt64)?, commit: Bool) in
            let (bumped, writer) = try await self.bumpVersion(sealing: sealing, on: connection)
            let current = try await self.currentBody(rowKey, sealing: sealing, on: connection)
            let version = try await self.superseding(bumped, rowKeys: [rowKey], on: connection)
            var old: Data?
            // Zeroed once the transaction is done, as the file vault zeroes its copy for the caller.
            defer { SecureMemory.zero(&old) }
            var existing: VaultItem?
            if case .put(let item, var secret)? = current {
                old = Data(secret)
                existing = item
                SecureMemory.zero(&secret)
            }
            let next = try await PostgresLink.callersCodeOffJobs { [old] in
                try PostgresLink.callersCode { try transform(old) }
            }
            if next == old { return (nil, false) }
            let record: [UInt8]
            if let next {
                record = try self.seal(
                    service: service, account: account, secret: next, label: nil, comment: nil, existing: existing,
                    rowKey: rowKey, version: version, sealing: sealing)
            } else if existing != nil {
                record = try sealing.sealDelete(service: service, account: account, rowKey: rowKey, version: version)
            } else {
                return (nil, false)
            }
            try await self.upsert(rowKey, record, version, on: connection)
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return ((version, writer), true)
        }
        if let (version, writer) = version { wrote([rowKey], version, writer: writer) }
    }

    /// Makes `body` of `change` for each change, in one transaction with the vault's version row
    /// locked; `inspect` sees each change with the item it replaces.
    private func commit(_ changes: [VaultChange], inspect: @escaping @Sendable (VaultChange, VaultItem?) -> Void)
        async throws
    {
        guard !changes.isEmpty else { return }
        try await withCurrentKeys { try await self.commitOnce(changes, inspect: inspect) }
    }

    /// Each change with the key of its row, its names checked; of several changes of one row,
    /// the last one only (the one written last wins, as without a batch).
    private func planned(_ changes: [VaultChange], sealing: RowSealing) throws -> [(change: VaultChange, rowKey: [UInt8])] {
        var planned: [(change: VaultChange, rowKey: [UInt8])] = []
        for change in changes {
            let (service, account) = change.names
            try checkNames(service: service, account: account)
            let rowKey = try sealing.rowKey(service: service, account: account)
            planned.removeAll { $0.rowKey == rowKey }
            planned.append((change, rowKey))
        }
        return planned
    }

    private func commitOnce(_ changes: [VaultChange], inspect: @escaping @Sendable (VaultChange, VaultItem?) -> Void)
        async throws
    {
        let sealing = try sealing
        let steps = try planned(changes, sealing: sealing)
        let (link, channel) = (link, channel)
        let (version, writer, written) = try await link.transaction { connection -> ((Int64, UInt64, [[UInt8]]), commit: Bool) in
            let (bumped, writer) = try await self.bumpVersion(sealing: sealing, on: connection)
            var current: [(existing: VaultItem?, damaged: Bool)] = []
            for (_, rowKey) in steps {
                var existing: VaultItem?
                var damaged = false
                do {
                    if case .put(let item, var secret)? = try await self.currentBody(rowKey, sealing: sealing, on: connection) {
                        existing = item
                        SecureMemory.zero(&secret)
                    }
                } catch let error as CofferError where error.code == .corrupted {
                    // A row that fails authentication is replaced (or removed) whole: writing
                    // the item again is how an operator repairs it. Reads keep reporting it.
                    // (A row older than this instance has read is not: `.rolledBack` is thrown,
                    // and nothing is written, until `acceptRollback()`. Written over, its new
                    // version could still be below the one read, and this instance would refuse
                    // to read back the write it had acknowledged.)
                    damaged = true
                }
                current.append((existing, damaged))
            }
            let version = try await self.superseding(bumped, rowKeys: steps.map(\.rowKey), on: connection)
            var written: [[UInt8]] = []
            for ((change, rowKey), (existing, damaged)) in zip(steps, current) {
                inspect(change, existing)
                let record: [UInt8]
                switch change {
                case .set(let service, let account, let secret, let label, let comment):
                    record = try self.seal(
                        service: service, account: account, secret: Data(secret), label: label, comment: comment,
                        existing: existing, rowKey: rowKey, version: version, sealing: sealing)
                case .remove(let service, let account):
                    guard existing != nil || damaged else { continue }
                    record = try sealing.sealDelete(
                        service: service, account: account, rowKey: rowKey, version: version)
                }
                try await self.upsert(rowKey, record, version, on: connection)
                written.append(rowKey)
            }
            guard !written.isEmpty else { return ((version, writer, []), false) }
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return ((version, writer, written), true)
        }
        if !written.isEmpty { wrote(written, version, writer: writer) }
    }

    // MARK: - Items, for callers that are not async

    /// ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``, blocking until it ends.
    public func set(_ secret: Data, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        try Offload.wait { try await self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// Stores a text secret (its UTF-8), blocking until it ends.
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        try set(Data(secret.utf8), service: service, account: account, label: label, comment: comment)
    }

    /// The secret's bytes, or `nil`, blocking until they arrive.
    public func data(service: String, account: String) throws -> Data? {
        try Offload.wait { try await self.data(service: service, account: account) }
    }

    /// Stores a secret held in guarded memory, blocking until it is committed.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) throws {
        try Offload.wait { try await self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// The secret as text, blocking until it arrives.
    public func string(service: String, account: String) throws -> String? {
        try Offload.wait { try await self.string(service: service, account: account) }
    }

    /// The secret in guarded memory, or `nil`, blocking until it arrives.
    public func secret(service: String, account: String) throws -> SecureBytes? {
        try Offload.wait { try await self.secret(service: service, account: account) }
    }

    /// The item's attributes (no secret), or `nil`, blocking until they arrive.
    public func item(service: String, account: String) throws -> VaultItem? {
        try Offload.wait { try await self.item(service: service, account: account) }
    }

    /// Every item (of `service`, when given), blocking until they arrive.
    public func items(service: String? = nil) throws -> [VaultItem] {
        try Offload.wait { try await self.items(service: service) }
    }

    /// Removes the item, blocking until it is removed; returns whether there was one.
    @discardableResult
    public func remove(service: String, account: String) throws -> Bool {
        try Offload.wait { try await self.remove(service: service, account: account) }
    }

    /// Applies every change in one transaction, blocking until it is committed.
    public func apply(_ changes: [VaultChange]) throws {
        try Offload.wait { try await self.apply(changes) }
    }

    /// ``update(service:account:_:)``, blocking until it ends. `transform` runs on one of
    /// Coffer's threads while the caller waits, and is taken back before this returns.
    public func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {
        try withoutActuallyEscaping(transform) { transform in
            let lent = WhileBlocked(transform)
            defer { lent.revoke() }
            try Offload.wait { try await self.update(service: service, account: account, lent: lent) }
        }
    }

    // MARK: - Changes from elsewhere

    /// Calls `handler` with the items other instances change (`nil`: any may have), from a
    /// LISTEN on the vault's channel; after a dropped connection, with what changed meanwhile.
    public func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation {
        tracker.observe(handler, link: link, channel: channel) { [weak self] in
            try await self?.catchUp()
        }
    }

    /// Reads which items changed since the last report and tells the observers; a changed row
    /// that fails to authenticate makes everyone reread (and report it).
    ///
    /// One statement reads the vault's counter, the server's next transaction id and the rows
    /// above the last version reported, so under one snapshot: a row above the counter was not
    /// written by Coffer (every write raises the counter in its transaction) and is skipped and
    /// said, never allowed to move the starting point; a server whose next transaction id went
    /// back was restored, and everyone rereads.
    private func catchUp() async throws {
        // Locked: nothing can be read, and every call says so; the feed has nothing to report
        // (throwing here would make it reconnect every second for as long as it is observed).
        guard let sealing = keys.withLock({ $0 }) else { return }
        let (link, vaultID) = (link, vaultID)
        try await tracker.catchUp(version: { try await self.currentVersion() }, everything: nil) { since in
            var binds = PostgresBindings()
            try binds.append(Data(vaultID))
            binds.append(since)
            let horizon = self.serverHorizon.withLock { $0 }
            let (counter, serverNext, epoch, rows) = try await link.withConnection(idempotent: true) { [binds] connection in
                let rows = try await link.run(
                    "SELECT v.version, pg_snapshot_xmax(pg_current_snapshot())::text, r.row_key, r.record, r.version, "
                        + "\(Self.epochSQL.replacingOccurrences(of: "header", with: "v.header")) "
                        + "FROM \(link.tables.vaults) AS v LEFT JOIN \(link.tables.vaultRows) AS r "
                        + "ON r.vault_id = v.vault_id AND r.version > $2 WHERE v.vault_id = $1",
                    binds, on: connection)
                // No row: the vault was removed (its calls say so); nothing changed to report.
                guard let first = rows.first else {
                    return (since, UInt64?.none, Data?.none, [(rowKey: [UInt8], record: [UInt8], version: Int64)]())
                }
                let counter = try first.cells[0].decode(Int64.self)
                let serverNext: UInt64? = try Self.transactionID(first.cells[1])
                return (counter, serverNext, try first.cells[5].decode(Data?.self), try rows.compactMap { try Self.vaultRow($0, from: 2) })
            }
            // Rotated (by another instance): follow it, and everyone rereads — or, revoked,
            // rereads and is told `.wrongKey`, keeping what it had.
            if let epoch, [UInt8](epoch) != sealing.epoch {
                _ = try? await self.follow()
                return (counter, [], true)
            }
            let restored = serverNext.map { self.acceptIfRestored($0, before: horizon) } ?? false
            let beyond = rows.filter { $0.version > counter }.count
            if beyond > 0 {
                self.warnOnce(
                    "beyond",
                    "vault \(self.name): \(beyond) row(s) carry a version beyond the vault's counter (\(counter)): "
                        + "not written by Coffer, skipped; `coffer --store … verify` names them and "
                        + "`verify --repair` removes them")
            }
            let changed = rows.filter { $0.version <= counter }.map { (rowKey, record, version) -> (row: VaultItemID?, version: Int64) in
                switch try? sealing.open(record, rowKey: rowKey, version: version) {
                case .put(let item, var secret)?:
                    SecureMemory.zero(&secret)
                    return (VaultItemID(service: item.service, account: item.account), version)
                case .delete(let service, let account)?: return (VaultItemID(service: service, account: account), version)
                case nil: return (nil, version)  // fails to authenticate: everyone rereads, and reports it
                }
            }
            return (counter, changed, restored)
        } report: { items in
            items.contains(nil) ? nil : Set(items.compactMap { $0 })
        }
    }

    // MARK: - Verify and repair

    /// A row of the vault that Coffer cannot use, as ``verify()`` found it.
    public struct DamagedRow: Sendable, Hashable, CustomStringConvertible {
        /// The row's key in the database (a keyed hash of service and account: no name).
        public let rowKey: Data
        /// The row's version.
        public let version: Int64
        /// SHA-256 of the row's record: ``removeDamagedRows(_:)`` removes exactly this row.
        public let recordDigest: Data
        /// Why it cannot be used.
        public let reason: String

        public var description: String {
            "row \(rowKey.prefix(8).map { String(format: "%02x", $0) }.joined())… version \(version): \(reason)"
        }
    }

    /// What ``verify()`` found.
    public struct Verification: Sendable {
        /// Rows that authenticate (items and removal records).
        public let intact: Int
        /// Of those, rows written before vault names were bound into records (they are bound the
        /// next time their item is written).
        public let unbound: Int
        /// Of those, rows whose version is beyond the vault's counter: the counter was put back
        /// (by SQL, or a restore of that table alone). They are authentic and never removed;
        /// followers skip them until the counter passes them again.
        public let aheadOfCounter: Int
        /// Rows that cannot be used: each fails authentication, or names another item.
        public let damaged: [DamagedRow]
    }

    /// Authenticates every row of the vault and names those that fail: altered, copied from
    /// another row or vault, sealed under another vault name, naming another item than their row
    /// key, or carrying a version beyond the vault's counter (inserted by hand). Reads only.
    public func verify() async throws -> Verification {
        try await withCurrentKeys { try await self.verifyOnce() }
    }

    private func verifyOnce() async throws -> Verification {
        let sealing = try sealing
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        let link = link
        let (counter, rows) = try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run(
                "SELECT v.version, r.row_key, r.record, r.version, sha256(r.record), "
                    + "\(Self.epochSQL.replacingOccurrences(of: "header", with: "v.header")) FROM \(link.tables.vaults) AS v "
                    + "LEFT JOIN \(link.tables.vaultRows) AS r ON r.vault_id = v.vault_id WHERE v.vault_id = $1",
                binds, on: connection)
            guard let first = rows.first else {
                throw CofferError(.notFound, "the vault was removed from the database", path: self.name)
            }
            // Rows sealed under keys this instance no longer has are never called damaged.
            try self.checkEpoch(try first.cells[5].decode(Data?.self), sealing: sealing)
            let counter = try first.cells[0].decode(Int64.self)
            let found = try rows.compactMap { row -> (rowKey: [UInt8], record: [UInt8], version: Int64, digest: Data)? in
                guard let (rowKey, record, version) = try Self.vaultRow(row, from: 1) else { return nil }
                return (rowKey, record, version, try row.cells[4].decode(Data.self))
            }
            return (counter, found)
        }
        var intact = 0
        var unbound = 0
        var ahead = 0
        var damaged: [DamagedRow] = []
        for (rowKey, record, version, digest) in rows {
            func damage(_ reason: String) {
                damaged.append(DamagedRow(rowKey: Data(rowKey), version: version, recordDigest: digest, reason: reason))
            }
            guard let (body, named) = try? sealing.openReporting(record, rowKey: rowKey, version: version) else {
                damage(
                    version > counter
                        ? "fails authentication, and its version is beyond the vault's counter (\(counter)): not written by Coffer"
                        : "fails authentication: altered, copied from another row or vault, or sealed under another vault name")
                continue
            }
            let names: (String, String)
            switch body {
            case .put(let item, var secret):
                SecureMemory.zero(&secret)
                names = (item.service, item.account)
            case .delete(let service, let account): names = (service, account)
            }
            guard try sealing.rowKey(service: names.0, account: names.1) == rowKey else {
                damage("names another item than its row key")
                continue
            }
            intact += 1
            if !named { unbound += 1 }
            // Sealed by Coffer at a version the counter has not reached: the counter went back.
            if version > counter { ahead += 1 }
        }
        damaged.sort { $0.version != $1.version ? $0.version < $1.version : $0.rowKey.lexicographicallyPrecedes($1.rowKey) }
        return Verification(intact: intact, unbound: unbound, aheadOfCounter: ahead, damaged: damaged)
    }

    /// Removes rows ``verify()`` reported, each only while it is exactly as reported (same key,
    /// version and record), in one transaction. Returns how many were removed. Rows that
    /// authenticate are never passed here by Coffer; an item whose row is removed is gone.
    @discardableResult
    public func removeDamagedRows(_ rows: [DamagedRow]) async throws -> Int {
        guard !rows.isEmpty else { return 0 }
        let (link, vaultID) = (link, vaultID)
        return try await link.transaction { connection -> (Int, commit: Bool) in
            var removed = 0
            for row in rows {
                var binds = PostgresBindings()
                try binds.append(Data(vaultID))
                try binds.append(row.rowKey)
                binds.append(row.version)
                try binds.append(row.recordDigest)
                removed += try await link.run(
                    "DELETE FROM \(link.tables.vaultRows) WHERE vault_id = $1 AND row_key = $2 AND version = $3 "
                        + "AND sha256(record) = $4 RETURNING 1", binds, on: connection
                ).count
            }
            return (removed, true)
        }
    }

    /// ``verify()`` for a caller that is not async.
    public func verify() throws -> Verification {
        try Offload.wait { try await self.verify() }
    }

    /// ``removeDamagedRows(_:)`` for a caller that is not async.
    @discardableResult
    public func removeDamagedRows(_ rows: [DamagedRow]) throws -> Int {
        try Offload.wait { try await self.removeDamagedRows(rows) }
    }

    // MARK: - Internals

    private func body(service: String, account: String) async throws -> VaultRecordBody? {
        try checkNames(service: service, account: account)
        return try await withCurrentKeys { try await self.bodyOnce(service: service, account: account) }
    }

    private func bodyOnce(service: String, account: String) async throws -> VaultRecordBody? {
        let sealing = try sealing
        let rowKey = try sealing.rowKey(service: service, account: account)
        guard
            let body = try await link.withConnection(idempotent: true, { connection in
                try await self.currentBody(rowKey, sealing: sealing, on: connection)
            })
        else { return nil }
        switch body {
        case .put(let item, _):
            guard item.service == service, item.account == account else {
                throw CofferError(.corrupted, "a vault row names another item than its row key", path: name)
            }
        case .delete: break
        }
        return body
    }

    /// The row's body (inside a write transaction, the vault's version row is locked).
    private func currentBody(_ rowKey: [UInt8], sealing: RowSealing, on connection: PostgresConnection) async throws
        -> VaultRecordBody?
    {
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        try binds.append(Data(rowKey))
        let horizon = serverHorizon.withLock { $0 }
        let known = newestVersions.withLock { $0[rowKey] }
        let (serverNext, rows) = try await readRows(" AND r.row_key = $2", binds, sealing: sealing, on: connection)
        let restored = acceptIfRestored(serverNext, before: horizon)
        guard let (_, record, version) = rows.first else {
            if known != nil, !restored {
                throw CofferError(
                    .corrupted, "a vault row this instance has read was deleted from the database behind Coffer's back",
                    path: name)
            }
            return nil
        }
        if let known, version < known, !restored { throw rolledBack(version, known: known) }
        let body = try sealing.open(record, rowKey: rowKey, version: version)
        newestVersions.withLock { $0[rowKey] = max($0[rowKey] ?? 0, version) }
        return body
    }

    /// The vault's rows (`$1` is the vault id; `condition` narrows them) and, from the same
    /// snapshot, the server's next transaction id: every read also moves the server horizon, so
    /// an instance that only reads still tells a restore from a rollback.
    ///
    /// Callers read the horizon *before* the newest versions they know: a restore found
    /// meanwhile forgets those versions before it lowers the horizon, so a caller either sees
    /// the old horizon (and the restore) or the versions already forgotten.
    ///
    /// The same statement reads the header's epoch: rows sealed under other keys than
    /// `sealing`'s (the vault was rotated) are never opened with them (``StaleKeys``).
    private func readRows(
        _ condition: String, _ binds: PostgresBindings, sealing: RowSealing, on connection: PostgresConnection
    ) async throws -> (serverNext: UInt64, rows: [(rowKey: [UInt8], record: [UInt8], version: Int64)]) {
        let rows = try await link.run(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text, r.row_key, r.record, r.version, "
                + "(SELECT \(Self.epochSQL) FROM \(link.tables.vaults) WHERE vault_id = $1) FROM (SELECT 1) AS one "
                + "LEFT JOIN \(link.tables.vaultRows) AS r ON r.vault_id = $1\(condition)", binds, on: connection)
        guard let first = rows.first else { throw CofferError(.io, "the server sent no row for a read") }
        try checkEpoch(try first.cells[4].decode(Data?.self), sealing: sealing)
        let serverNext = try Self.transactionID(first.cells[0])
        return (serverNext, try rows.compactMap { try Self.vaultRow($0, from: 1) })
    }

    /// The vault row in columns `first`, `first + 1` and `first + 2` (key, record, version) of a
    /// LEFT JOIN's result, or `nil` where the join found none.
    private static func vaultRow(_ row: PostgresRow, from first: Int) throws
        -> (rowKey: [UInt8], record: [UInt8], version: Int64)?
    {
        let cells = row.cells
        guard let rowKey = try cells[first].decode(Data?.self) else { return nil }
        return ([UInt8](rowKey), [UInt8](try cells[first + 1].decode(Data.self)), try cells[first + 2].decode(Int64.self))
    }

    /// A row at `version`, older than the `known` one this instance read, while the server did
    /// not go back: ``CofferError/Code/rolledBack``.
    private func rolledBack(_ version: Int64, known: Int64) -> CofferError {
        CofferError(
            .rolledBack,
            "a vault row is older (version \(version)) than one this instance has read (\(known)), and the server's "
                + "transaction counter did not go back with it: someone with write access to the tables put an older row "
                + "back, or an operator restored rows logically. If it was an operator's, accept it with "
                + "PostgresVault.acceptRollback() or restart the instance; otherwise treat it as tampering",
            path: name)
    }

    /// Notes the server's next transaction id, read by a statement that started when the horizon
    /// was `before`. Every id seen by then was assigned before the statement's snapshot, so a
    /// next id below it means the server went back (restored, failed over): forgets what this
    /// instance read, makes observers reread, warns. (The horizon as it is now may be higher, from
    /// a write that raced the statement: comparing with it would be a false alarm.)
    private func acceptIfRestored(_ serverNext: UInt64, before: UInt64) -> Bool {
        guard serverNext < before else {
            serverHorizon.withLock { $0 = max($0, serverNext) }
            return false
        }
        // Forgotten before the horizon is lowered (see `readRows`).
        newestVersions.withLock { $0 = [:] }
        tracker.restart()
        let first = serverHorizon.withLock { horizon -> Bool in
            guard horizon > serverNext else { return false }  // lowered already: said once
            horizon = serverNext
            return true
        }
        guard first else { return true }
        link.logger.warning(
            "vault \(name): the database was restored from a backup or failed over (the server's transaction counter went back); this instance now serves the restored rows, and writes made after the backup are gone from the database"
        )
        return true
    }

    private func warnOnce(_ kind: String, _ message: String) {
        guard warned.withLock({ $0.insert(kind).inserted }) else { return }
        link.logger.warning("\(message)")
    }

    /// A transaction id sent as text (`xid8::text`).
    private static func transactionID(_ cell: PostgresCell) throws -> UInt64 {
        guard let id = UInt64(try cell.decode(String.self)) else {
            throw CofferError(.io, "the server sent a transaction id that is not a number")
        }
        return id
    }

    private func seal(
        service: String, account: String, secret: Data, label: String?, comment: String?, existing: VaultItem?,
        rowKey: [UInt8], version: Int64, sealing: RowSealing
    ) throws -> [UInt8] {
        let now = Date()
        return try secret.withUnsafeBytes { secret in
            try sealing.sealPut(
                service: service, account: account, label: label ?? existing?.label ?? "",
                comment: comment ?? existing?.comment ?? "", created: existing?.created ?? now, modified: now,
                secret: secret, rowKey: rowKey, version: version)
        }
    }

    private func checkNames(service: String, account: String) throws {
        guard !service.isEmpty, !account.isEmpty else {
            throw CofferError(.invalidArgument, "service and account must not be empty")
        }
    }

    /// Notes a committed write: its rows' version, and its transaction id in the server horizon.
    /// Only after the commit: until then the server's snapshots may end below the id (PostgreSQL
    /// 14 and later end them after the newest *completed* transaction), and a check made inside
    /// the writing transaction would take that for a restore.
    func wrote(_ rowKeys: [[UInt8]], _ version: Int64, writer: UInt64) {
        serverHorizon.withLock { $0 = max($0, writer + 1) }
        newestVersions.withLock { newest in
            for rowKey in rowKeys { newest[rowKey] = max(newest[rowKey] ?? 0, version) }
        }
        tracker.markOwn(version)
    }

    /// Raises the vault's counter (locking its row to the commit) and returns the new version and
    /// the writing transaction's id.
    /// With the row locked, the header's epoch is checked: a write sealed under keys the vault
    /// no longer has (it was rotated) is never made (``StaleKeys``).
    func bumpVersion(sealing: RowSealing, on connection: PostgresConnection) async throws
        -> (version: Int64, writer: UInt64)
    {
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        let rows = try await link.run(
            "UPDATE \(link.tables.vaults) SET version = version + 1 WHERE vault_id = $1 "
                + "RETURNING version, pg_current_xact_id()::text, \(Self.epochSQL)", binds,
            on: connection)
        guard let row = rows.first else {
            throw CofferError(.notFound, "the vault was removed from the database", path: name)
        }
        try checkEpoch(try row.cells[2].decode(Data?.self), sealing: sealing)
        return (try row.cells[0].decode(Int64.self), try Self.transactionID(row.cells[1]))
    }

    /// The version a write of `rowKeys` takes: `version` (from ``bumpVersion(sealing:on:)``), or,
    /// when the vault's counter is behind a version this instance has read of one of those rows
    /// (authentic: read and opened, in this transaction or before; the counter was put back by
    /// SQL), one above it, the counter raised with it. So the write supersedes the row and reads
    /// back, here and in every instance that read it. Rows older than this instance has read
    /// never get here: ``currentBody(_:sealing:on:)`` refuses them (`.rolledBack`).
    private func superseding(_ version: Int64, rowKeys: [[UInt8]], on connection: PostgresConnection) async throws
        -> Int64
    {
        let floor = newestVersions.withLock { known in rowKeys.compactMap { known[$0] }.max() } ?? 0
        guard floor >= version else { return version }
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        binds.append(floor + 1)
        try await link.run("UPDATE \(link.tables.vaults) SET version = $2 WHERE vault_id = $1", binds, on: connection)
        return floor + 1
    }

    /// Writes a row at `version` (inside the write's transaction).
    /// - Throws: ``CofferError/Code/rolledBack`` when `version` is not above the version this
    ///   instance has read of the row: the vault's counter was put back (by SQL; a restore is
    ///   noticed before, and forgets what was read). Written, the row would be refused by this
    ///   instance's next read, after the write was acknowledged; so nothing is written until
    ///   ``acceptRollback()``.
    private func upsert(_ rowKey: [UInt8], _ record: [UInt8], _ version: Int64, on connection: PostgresConnection)
        async throws
    {
        if let known = newestVersions.withLock({ $0[rowKey] }), version <= known {
            throw CofferError(
                .rolledBack,
                "the vault's version counter is behind a row this instance has read (a write would get version "
                    + "\(version), not above \(known)), and the server's transaction counter did not go back with it: "
                    + "someone with write access to the tables put the counter back, or an operator restored rows "
                    + "logically. Nothing was written. If it was an operator's, accept it with "
                    + "PostgresVault.acceptRollback() or restart the instance; otherwise treat it as tampering",
                path: name)
        }
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        try binds.append(Data(rowKey))
        try binds.append(Data(record))
        binds.append(version)
        try await link.run(
            "INSERT INTO \(link.tables.vaultRows) (vault_id, row_key, record, version) VALUES ($1, $2, $3, $4) "
                + "ON CONFLICT (vault_id, row_key) DO UPDATE SET record = excluded.record, version = excluded.version",
            binds, on: connection)
    }

    private func currentVersion() async throws -> Int64 {
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run("SELECT version FROM \(link.tables.vaults) WHERE vault_id = $1", binds, on: connection)
            return try rows.first?.cells[0].decode(Int64.self) ?? 0
        }
    }

}

extension PostgresVault: Keychain {
    /// The vault's name with its server and database (never a password): `vault NAME on
    /// postgres://user@host:port/database (tls: …)`.
    public var location: String { "vault \(name) on \(configuration)" }

    /// Nothing to do: every write is committed in the database when it returns.
    public func flush() throws {}

    /// Nothing to do: every write is committed in the database when it returns.
    public func flush() async throws {}
}

extension VaultChange {
    var names: (service: String, account: String) {
        switch self {
        case .set(let service, let account, _, _, _): (service, account)
        case .remove(let service, let account): (service, account)
        }
    }
}

#endif
