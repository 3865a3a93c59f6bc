#if Postgres
// The SQL under the item calls: reading rows (with the server horizon and the rotation epoch),
// refusing rolled-back rows, and writing them at the vault's next version.
import CofferCore
import CofferCrypto
import CofferVault
import Foundation
import PostgresNIO

extension PostgresVault {
    // MARK: - Internals

    func body(service: String, account: String) async throws -> VaultRecordBody? {
        try checkNames(service: service, account: account)
        return try await withCurrentKeys { try await self.bodyOnce(service: service, account: account) }
    }

    func bodyOnce(service: String, account: String) async throws -> VaultRecordBody? {
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
    func currentBody(_ rowKey: [UInt8], sealing: RowSealing, on connection: PostgresConnection) async throws
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
    func readRows(
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
    static func vaultRow(_ row: PostgresRow, from first: Int) throws
        -> (rowKey: [UInt8], record: [UInt8], version: Int64)?
    {
        let cells = row.cells
        guard let rowKey = try cells[first].decode(Data?.self) else { return nil }
        return ([UInt8](rowKey), [UInt8](try cells[first + 1].decode(Data.self)), try cells[first + 2].decode(Int64.self))
    }

    /// A row at `version`, older than the `known` one this instance read, while the server did
    /// not go back: ``CofferError/Code/rolledBack``.
    func rolledBack(_ version: Int64, known: Int64) -> CofferError {
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
    func acceptIfRestored(_ serverNext: UInt64, before: UInt64) -> Bool {
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

    func warnOnce(_ kind: String, _ message: String) {
        guard warned.withLock({ $0.insert(kind).inserted }) else { return }
        link.logger.warning("\(message)")
    }

    /// A transaction id sent as text (`xid8::text`).
    static func transactionID(_ cell: PostgresCell) throws -> UInt64 {
        guard let id = UInt64(try cell.decode(String.self)) else {
            throw CofferError(.io, "the server sent a transaction id that is not a number")
        }
        return id
    }

    func seal(
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

    func checkNames(service: String, account: String) throws {
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
    func superseding(_ version: Int64, rowKeys: [[UInt8]], on connection: PostgresConnection) async throws
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
    func upsert(_ rowKey: [UInt8], _ record: [UInt8], _ version: Int64, on connection: PostgresConnection)
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

    func currentVersion() async throws -> Int64 {
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        let link = link
        return try await link.withConnection(idempotent: true) { [binds] connection in
            let rows = try await link.run("SELECT version FROM \(link.tables.vaults) WHERE vault_id = $1", binds, on: connection)
            return try rows.first?.cells[0].decode(Int64.self) ?? 0
        }
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

#endif
