#if Postgres
// The item calls of a vault kept in PostgreSQL (async): reads, writes in one transaction each,
// add and update under the vault's version row lock.
import CofferCore
public import CofferCrypto
public import CofferVault
public import Foundation
import PostgresNIO

extension PostgresVault {
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

    func itemsOnce(service: String?) async throws -> [VaultItem] {
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

    func addOnce(_ changes: [VaultChange]) async throws -> [VaultItemID] {
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
            try await self.updateOnce(service: service, account: account) { current in
                try await PostgresLink.callersCodeOffJobs { try PostgresLink.callersCode { try transform.call { try $0(current) } } }
            }
        }
    }

    /// One attempt of an update: `transform` is given the secret with the vault's version row
    /// locked, and what it returns is written (`nil` removes; the same secret writes nothing).
    func updateOnce(service: String, account: String, _ transform: @escaping @Sendable (Data?) async throws -> Data?)
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
            let next = try await transform(old)
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
    func commit(_ changes: [VaultChange], inspect: @escaping @Sendable (VaultChange, VaultItem?) -> Void)
        async throws
    {
        guard !changes.isEmpty else { return }
        try await withCurrentKeys { try await self.commitOnce(changes, inspect: inspect) }
    }

    /// Each change with the key of its row, its names checked; of several changes of one row,
    /// the last one only (the one written last wins, as without a batch).
    func planned(_ changes: [VaultChange], sealing: RowSealing) throws -> [(change: VaultChange, rowKey: [UInt8])] {
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

    func commitOnce(_ changes: [VaultChange], inspect: @escaping @Sendable (VaultChange, VaultItem?) -> Void)
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
}

#endif
