#if Postgres
// Verify and repair: every row authenticated, and the damaged ones removed exactly as reported.
import CofferCore
import CofferCrypto
import CofferVault
public import Foundation
import PostgresNIO

extension PostgresVault {
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

    func verifyOnce() async throws -> Verification {
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
}

#endif
