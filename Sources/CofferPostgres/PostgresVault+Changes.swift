#if Postgres
// Changes from elsewhere: the LISTEN feed on the vault's channel, and the catch-up read after it.
public import CofferCore
import CofferCrypto
public import CofferVault
import Foundation
import PostgresNIO

extension PostgresVault {
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
    func catchUp() async throws {
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
}

#endif
