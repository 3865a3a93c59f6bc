#if Postgres
public import CofferCore
public import CofferCrypto
public import CofferVault
public import Foundation
public import Logging
import PostgresNIO

/// A vault kept in PostgreSQL, shared by a fleet: the keychain-style API of `Vault`, with the
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
    let sealing: RowSealing
    let channel: String
    private let tracker = ChangeTracker<Set<VaultItemID>?>()
    /// The newest version this instance has seen of each row: an older one later is a rollback,
    /// a row gone is a deletion behind Coffer's back.
    private let newestVersions = Locked<[[UInt8]: Int64]>([:])
    /// One strategy per service (see ``strategy(service:)``).
    let strategies = Locked<[String: WeakStrategy]>([:])

    private init(name: String, link: PostgresLink, sealing: RowSealing) {
        self.name = name
        self.link = link
        self.sealing = sealing
        self.channel = Schema.channel("coffer_vault_", sealing.vaultID)
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
        let (sealing, header) = try await Offload.run { try RowSealing.create(unlock: unlock, kdf: kdf) }
        let link = PostgresLink(configuration: configuration, logger: logger, name: ("vault", name))
        var binds = PostgresBindings()
        binds.append(name)
        try binds.append(Data(sealing.vaultID))
        try binds.append(Data(header))
        let created = try await link.withConnection(idempotent: false) { [binds] connection in
            try await !link.run(
                "INSERT INTO \(link.tables.vaults) (name, vault_id, header, version) VALUES ($1, $2, $3, 0) "
                    + "ON CONFLICT (name) DO NOTHING RETURNING version", binds, on: connection
            ).isEmpty
        }
        guard created else {
            throw CofferError(.alreadyExists, "the database already has a vault named \(name)")
        }
        return PostgresVault(name: name, link: link, sealing: sealing)
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
        let found = try await link.withConnection(idempotent: true) { [binds] connection -> (Data, Data)? in
            let rows = try await link.run(
                "SELECT vault_id, header FROM \(link.tables.vaults) WHERE name = $1", binds, on: connection)
            guard let row = rows.first else { return nil }
            let cells = row.cells
            return (try cells[0].decode(Data.self), try cells[1].decode(Data.self))
        }
        guard let (vaultID, header) = found else {
            throw CofferError(.notFound, "the database has no vault named \(name)")
        }
        let sealing = try await Offload.run {
            try RowSealing.unlock(header: Array(header), unlock: unlock, kdfLimit: kdfLimit, name: name)
        }
        guard Array(vaultID) == sealing.vaultID else {
            throw CofferError(.corrupted, "the vault's id does not match its header", path: name)
        }
        return PostgresVault(name: name, link: link, sealing: sealing)
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

    /// The secret's bytes, or `nil` when there is no such item.
    /// - Throws: ``CofferError/Code/corrupted`` for a row that fails authentication (or was rolled
    ///   back or deleted behind Coffer's back, as far as this instance can tell); `.io`; `.busy`.
    public func data(service: String, account: String) async throws -> Data? {
        guard case .put(_, var secret) = try await body(service: service, account: account) else { return nil }
        defer { secret.withUnsafeMutableBytes { zero($0) } }
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

    /// The item's attributes (no secret), or `nil`.
    public func item(service: String, account: String) async throws -> VaultItem? {
        guard case .put(let item, var secret) = try await body(service: service, account: account) else { return nil }
        secret.withUnsafeMutableBytes { zero($0) }
        return item
    }

    /// Every item (of `service`, when given), sorted by service then account. Opens every row.
    public func items(service: String? = nil) async throws -> [VaultItem] {
        var binds = PostgresBindings()
        try binds.append(Data(sealing.vaultID))
        // What was known before the query: a commit seen then must be visible to it.
        let known = newestVersions.withLock { $0 }
        let link = link
        let rows = try await link.withConnection(idempotent: true) { [binds] connection in
            try await link.run(
                "SELECT row_key, record, version FROM \(link.tables.vaultRows) WHERE vault_id = $1", binds, on: connection
            ).map(Self.decodeRow)
        }
        var items: [VaultItem] = []
        for (rowKey, record, version) in rows {
            try checkNotRolledBack(version, known: known[rowKey])
            guard case .put(let item, var secret) = try sealing.open(record, rowKey: rowKey, version: version) else {
                continue
            }
            secret.withUnsafeMutableBytes { zero($0) }
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

    /// Reads, transforms and writes one secret atomically with respect to every instance: the
    /// vault's version row stays locked from the read to the write. Returning `nil` removes it.
    /// `transform` runs inside the transaction: keep it short.
    public func update(service: String, account: String, _ transform: @escaping @Sendable (Data?) throws -> Data?)
        async throws
    {
        try checkNames(service: service, account: account)
        let rowKey = try sealing.rowKey(service: service, account: account)
        let (link, channel) = (link, channel)
        let version = try await link.transaction { connection -> (Int64?, commit: Bool) in
            let version = try await self.bumpVersion(on: connection)
            let current = try await self.currentBody(rowKey, on: connection)
            var old: Data?
            var existing: VaultItem?
            if case .put(let item, var secret)? = current {
                old = Data(secret)
                existing = item
                secret.withUnsafeMutableBytes { zero($0) }
            }
            let next = try PostgresLink.callersCode { try transform(old) }
            if next == old { return (nil, false) }
            let record: [UInt8]
            if let next {
                record = try self.seal(
                    service: service, account: account, secret: next, label: nil, comment: nil, existing: existing,
                    rowKey: rowKey, version: version)
            } else if existing != nil {
                record = try self.sealing.sealDelete(service: service, account: account, rowKey: rowKey, version: version)
            } else {
                return (nil, false)
            }
            try await self.upsert(rowKey, record, version, on: connection)
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return (version, true)
        }
        if let version { wrote([rowKey], version) }
    }

    /// Makes `body` of `change` for each change, in one transaction with the vault's version row
    /// locked; `inspect` sees each change with the item it replaces.
    private func commit(_ changes: [VaultChange], inspect: @escaping @Sendable (VaultChange, VaultItem?) -> Void)
        async throws
    {
        guard !changes.isEmpty else { return }
        var planned: [(change: VaultChange, rowKey: [UInt8])] = []
        for change in changes {
            let (service, account) = change.names
            try checkNames(service: service, account: account)
            let rowKey = try sealing.rowKey(service: service, account: account)
            planned.removeAll { $0.rowKey == rowKey }
            planned.append((change, rowKey))
        }
        let steps = planned
        let (link, channel) = (link, channel)
        let (version, written) = try await link.transaction { connection -> ((Int64, [[UInt8]]), commit: Bool) in
            let version = try await self.bumpVersion(on: connection)
            var written: [[UInt8]] = []
            for (change, rowKey) in steps {
                var existing: VaultItem?
                var damaged = false
                do {
                    if case .put(let item, var secret)? = try await self.currentBody(rowKey, on: connection) {
                        existing = item
                        secret.withUnsafeMutableBytes { zero($0) }
                    }
                } catch let error as CofferError where error.code == .corrupted {
                    // A row that fails authentication is replaced (or removed) whole: writing
                    // the item again is how an operator repairs it. Reads keep reporting it.
                    damaged = true
                }
                inspect(change, existing)
                let record: [UInt8]
                switch change {
                case .set(let service, let account, let secret, let label, let comment):
                    record = try self.seal(
                        service: service, account: account, secret: Data(secret), label: label, comment: comment,
                        existing: existing, rowKey: rowKey, version: version)
                case .remove(let service, let account):
                    guard existing != nil || damaged else { continue }
                    record = try self.sealing.sealDelete(
                        service: service, account: account, rowKey: rowKey, version: version)
                }
                try await self.upsert(rowKey, record, version, on: connection)
                written.append(rowKey)
            }
            guard !written.isEmpty else { return ((version, []), false) }
            try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
            return ((version, written), true)
        }
        if !written.isEmpty { wrote(written, version) }
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

    /// The secret as text, blocking until it arrives.
    public func string(service: String, account: String) throws -> String? {
        try Offload.wait { try await self.string(service: service, account: account) }
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

    /// ``update(service:account:_:)-(_,_,_)``, blocking until it ends.
    public func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {
        try withoutActuallyEscaping(transform) { transform in
            let body = WhileBlocked(transform)
            defer { body.revoke() }
            try Offload.wait {
                try await self.update(service: service, account: account) { (current: Data?) in try body.call { try $0(current) } }
            }
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
    private func catchUp() async throws {
        let (link, sealing) = (link, sealing)
        try await tracker.catchUp(version: { try await self.currentVersion() }, everything: nil) { since in
            var binds = PostgresBindings()
            try binds.append(Data(sealing.vaultID))
            binds.append(since)
            let rows = try await link.withConnection(idempotent: true) { [binds] connection in
                try await link.run(
                    "SELECT row_key, record, version FROM \(link.tables.vaultRows) WHERE vault_id = $1 AND version > $2",
                    binds, on: connection
                ).map(Self.decodeRow)
            }
            return rows.map { (rowKey, record, version) -> (row: VaultItemID?, version: Int64) in
                switch try? sealing.open(record, rowKey: rowKey, version: version) {
                case .put(let item, var secret)?:
                    secret.withUnsafeMutableBytes { zero($0) }
                    return (VaultItemID(service: item.service, account: item.account), version)
                case .delete(let service, let account)?: return (VaultItemID(service: service, account: account), version)
                case nil: return (nil, version)  // fails to authenticate: everyone rereads, and reports it
                }
            }
        } report: { items in
            items.contains(nil) ? nil : Set(items.compactMap { $0 })
        }
    }

    // MARK: - Internals

    private func body(service: String, account: String) async throws -> VaultRecordBody? {
        try checkNames(service: service, account: account)
        let rowKey = try sealing.rowKey(service: service, account: account)
        guard
            let body = try await link.withConnection(idempotent: true, { connection in
                try await self.currentBody(rowKey, on: connection)
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

    /// The row's body inside a write transaction (the vault's version row is locked).
    private func currentBody(_ rowKey: [UInt8], on connection: PostgresConnection) async throws -> VaultRecordBody? {
        var binds = PostgresBindings()
        try binds.append(Data(sealing.vaultID))
        try binds.append(Data(rowKey))
        let known = newestVersions.withLock { $0[rowKey] }
        let rows = try await link.run(
            "SELECT row_key, record, version FROM \(link.tables.vaultRows) WHERE vault_id = $1 AND row_key = $2", binds,
            on: connection)
        guard let row = rows.first else {
            if known != nil {
                throw CofferError(
                    .corrupted, "a vault row this instance has read was deleted from the database behind Coffer's back",
                    path: name)
            }
            return nil
        }
        let (_, record, version) = try Self.decodeRow(row)
        try checkNotRolledBack(version, known: known)
        let body = try sealing.open(record, rowKey: rowKey, version: version)
        newestVersions.withLock { $0[rowKey] = max($0[rowKey] ?? 0, version) }
        return body
    }

    /// `known`: the newest version of the row this instance knew of before it asked.
    private func checkNotRolledBack(_ version: Int64, known: Int64?) throws {
        if let newest = known, version < newest {
            throw CofferError(
                .corrupted,
                "a vault row was rolled back to an older version (\(version), after \(newest) was read)", path: name)
        }
    }

    private func seal(
        service: String, account: String, secret: Data, label: String?, comment: String?, existing: VaultItem?,
        rowKey: [UInt8], version: Int64
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

    private func wrote(_ rowKeys: [[UInt8]], _ version: Int64) {
        newestVersions.withLock { newest in
            for rowKey in rowKeys { newest[rowKey] = max(newest[rowKey] ?? 0, version) }
        }
        tracker.markOwn(version)
    }

    private func bumpVersion(on connection: PostgresConnection) async throws -> Int64 {
        var binds = PostgresBindings()
        try binds.append(Data(sealing.vaultID))
        let rows = try await link.run(
            "UPDATE \(link.tables.vaults) SET version = version + 1 WHERE vault_id = $1 RETURNING version", binds,
            on: connection)
        guard let row = rows.first else {
            throw CofferError(.notFound, "the vault was removed from the database", path: name)
        }
        return try row.cells[0].decode(Int64.self)
    }

    private func upsert(_ rowKey: [UInt8], _ record: [UInt8], _ version: Int64, on connection: PostgresConnection)
        async throws
    {
        var binds = PostgresBindings()
        try binds.append(Data(sealing.vaultID))
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
        try binds.append(Data(sealing.vaultID))
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run("SELECT version FROM \(link.tables.vaults) WHERE vault_id = $1", binds, on: connection)
            return try rows.first?.cells[0].decode(Int64.self) ?? 0
        }
    }

    private static func decodeRow(_ row: PostgresRow) throws -> (rowKey: [UInt8], record: [UInt8], version: Int64) {
        let cells = row.cells
        return (
            [UInt8](try cells[0].decode(Data.self)), [UInt8](try cells[1].decode(Data.self)),
            try cells[2].decode(Int64.self)
        )
    }
}

extension VaultChange {
    var names: (service: String, account: String) {
        switch self {
        case .set(let service, let account, _, _, _): (service, account)
        case .remove(let service, let account): (service, account)
        }
    }
}

/// Wipes bytes that held a secret.
func zero(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress else { return }
    memset(base, 0, buffer.count)
}
#endif
