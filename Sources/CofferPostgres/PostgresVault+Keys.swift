#if Postgres
import CofferCore
public import CofferCrypto
public import CofferVault
import Foundation
import PostgresNIO

/// Key slots and rotation of a vault kept in PostgreSQL (SECURITY.md, "Rotation and revocation").
///
/// The header (its key slots) is the `header` column of the vault's row in `coffer_vaults`.
/// A slot change rewrites it with the same keys. A rotation rewrites it with a new master key
/// and, in the same transaction, re-seals every item under the new keys: the database holds
/// the old vault or the new one, never a mix. Every read and write checks the header's epoch
/// in the statement it already runs (a rotation gives a new one): an instance that finds a new
/// epoch follows it with what opened its slot — one AEAD, or one X25519, and no KDF — and goes
/// on; one whose slot was removed gets `.wrongKey` from then on, and what it had in memory
/// stays there.
extension PostgresVault {
    /// The header's epoch, in SQL: bytes 32..<48 of the header copy (docs/FORMAT.md §2).
    static var epochSQL: String {
        "substring(header from \(RowSealing.epochRange.lowerBound + 1) for \(RowSealing.epochRange.count))"
    }

    /// Thrown inside a call that found a header epoch other than its keys': the call is made
    /// again after ``follow()``.
    /// Rows per INSERT of a rotation (2 binds each, well under PostgreSQL's 65,535).
    static let rowsPerInsert = 500

    struct StaleKeys: Error {
        /// ``StaleKeys``, thrown inside a call on a connection: handed back as it is (not as an
        /// unexpected reply), after the transaction is rolled back.
        static var insideCall: any Error { PostgresLink.BodyError(error: StaleKeys()) }
    }

    /// Throws ``StaleKeys`` (inside a call) when `epoch`, read from the database, is not the
    /// epoch of `sealing`'s header.
    func checkEpoch(_ epoch: Data?, sealing: RowSealing) throws {
        guard let epoch, [UInt8](epoch) != sealing.epoch else { return }  // no row: the vault is gone (said elsewhere)
        throw StaleKeys.insideCall
    }

    /// Runs `body`, following a rotation it runs into and running it again (a few times at
    /// most: each rotation it meets is followed once).
    func withCurrentKeys<T>(_ body: () async throws -> T) async throws -> T {
        var attempts = 0
        while true {
            do {
                return try await body()
            } catch is StaleKeys {
                attempts += 1
                guard attempts < 4 else {
                    throw CofferError(.busy, "the vault's keys were rotated again and again during this call: try it again", path: name)
                }
                try await follow()
            }
        }
    }

    /// Reads the header and takes its keys (a rotation), or its slots (a slot change).
    /// - Throws: `.wrongKey` when no slot of it opens with what opened this instance's slot.
    func follow() async throws {
        let current = try sealing
        let header = try await readHeader()
        guard let next = try current.following(header: header) else {
            throw CofferError(
                .wrongKey,
                "vault \(name): its master key was rotated, and no key slot that this instance's key opens remains "
                    + "(it was removed): this instance was revoked",
                path: name)
        }
        let changed = next.epoch != current.epoch
        replaceKeys(next, replacing: current)
        if changed {
            // Row keys are the old keys' hashes: what was read under them says nothing now.
            forgetReads()
            link.logger.notice("vault \(name): its master key was rotated by another instance; this instance follows")
        }
    }

    /// The header copy as the database holds it now.
    func readHeader() async throws -> [UInt8] {
        try await link.withConnection(idempotent: true) { connection in try await self.readHeader(on: connection) }
    }

    // MARK: - Key slots

    /// The key slots, as the database holds them now.
    public func keySlots() async throws -> [KeySlotInfo] {
        try await follow()
        return try sealing.keySlots
    }

    /// ``keySlots()`` for a caller that is not async.
    public func keySlots() throws -> [KeySlotInfo] {
        try Offload.wait { try await self.keySlots() }
    }

    /// Adds a key slot that the identity of `recipient` opens (see `Vault.addRecipient`). Every
    /// instance sees it at once; nothing is re-sealed.
    /// - Returns: whether a slot was added (false: the recipient had one already).
    /// - Parameter label: what ``keySlots()`` shows for the slot (the machine's name, say); see
    ///   `Vault.addRecipient(_:label:)`.
    @discardableResult
    public func addRecipient(_ recipient: X25519Recipient, label: String? = nil) async throws -> Bool {
        try await changeSlots(.addRecipient(recipient, label: label)) > 0
    }

    /// Adds a key slot, so `source` opens the vault too (Argon2id runs on Coffer's own threads).
    public func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters = .moderate, label: String? = nil) async throws {
        try await changeSlots(.add(source, kdf: kdf, label: label))
    }

    /// Removes key slot `index` (as ``keySlots()`` lists them). The last slot is never removed.
    /// Removing a slot stops its secret from opening the vault from now on; it does not take
    /// back the master key from an instance that opened it before: ``rotate(removing:removingRecipients:keeping:)`` does.
    public func removeKeySlot(at index: Int) async throws {
        try await changeSlots(.remove(index))
    }

    /// Removes every key slot of `recipient`; returns how many.
    @discardableResult
    public func removeRecipient(_ recipient: X25519Recipient) async throws -> Int {
        try await changeSlots(.removeRecipient(recipient))
    }

    /// ``addRecipient(_:label:)`` for a caller that is not async.
    @discardableResult
    public func addRecipient(_ recipient: X25519Recipient, label: String? = nil) throws -> Bool {
        try Offload.wait { try await self.addRecipient(recipient, label: label) }
    }

    /// ``addKeySlot(_:kdf:label:)`` for a caller that is not async.
    public func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters = .moderate, label: String? = nil) throws {
        try Offload.wait { try await self.addKeySlot(source, kdf: kdf, label: label) }
    }

    /// ``removeKeySlot(at:)`` for a caller that is not async.
    public func removeKeySlot(at index: Int) throws {
        try Offload.wait { try await self.removeKeySlot(at: index) }
    }

    /// ``removeRecipient(_:)`` for a caller that is not async.
    @discardableResult
    public func removeRecipient(_ recipient: X25519Recipient) throws -> Int {
        try Offload.wait { try await self.removeRecipient(recipient) }
    }

    /// One slot change, made on the header as the database holds it under its row lock.
    @discardableResult
    private func changeSlots(_ change: RowSealing.SlotChange) async throws -> Int {
        // A new slot is made before the row is locked, on Coffer's threads (a passphrase runs
        // Argon2id): it wraps the keys this instance holds, which a rotation meanwhile would
        // change (then the transaction sees a new epoch, and the slot is made again).
        try await withCurrentKeys {
            let sealing = try self.sealing
            let prepared = try await Offload.run { try sealing.prepare(change) }
            let link = link
            let vaultID = vaultID
            let result = try await link.transaction { connection -> ((RowSealing, Int)?, commit: Bool) in
                var binds = PostgresBindings()
                try binds.append(Data(vaultID))
                let rows = try await link.run(
                    "SELECT header FROM \(link.tables.vaults) WHERE vault_id = $1 FOR UPDATE", binds, on: connection)
                guard let stored = try rows.first?.cells[0].decode(Data.self) else {
                    throw CofferError(.notFound, "the vault was removed from the database", path: self.name)
                }
                guard let current = try sealing.following(header: [UInt8](stored)), current.epoch == sealing.epoch else {
                    throw StaleKeys.insideCall
                }
                let (next, header, changed) = try current.changingSlots(prepared)
                guard changed > 0 else { return (nil, false) }
                var update = PostgresBindings()
                try update.append(Data(header))
                try update.append(Data(vaultID))
                try await link.run(
                    "UPDATE \(link.tables.vaults) SET header = $1 WHERE vault_id = $2", update, on: connection)
                return ((next, changed), true)
            }
            guard let (next, changed) = result else { return 0 }
            self.replaceKeys(next, replacing: sealing)
            return changed
        }
    }

    // MARK: - Rotation

    /// Rotates the vault's master key while the fleet runs: a new key, every item re-sealed
    /// under it, every key slot that stays re-wrapped, the slots named removed — in one
    /// transaction. Every instance that still has a slot follows by itself at its next call or
    /// change notification, and its properties keep following; one whose slot was removed gets
    /// `.wrongKey`, and keeps what it had in memory. Takes what `Vault.rotate` takes, and
    /// refuses (before anything changes) what it refuses: a passphrase, key-file or raw-key slot
    /// other than this instance's is kept only when its secret is in `keeping`.
    ///
    /// Every row is read, opened and sealed again in this process, with the vault's row locked
    /// (writers wait; readers do not): about 30 µs per item.
    @discardableResult
    public func rotate(
        removing slots: Set<Int> = [], removingRecipients recipients: [X25519Recipient] = [],
        keeping secrets: [VaultUnlock] = [], kdfLimit: Argon2idParameters = Vault.defaultKDFLimit
    ) async throws -> VaultRotation {
        // The header as it is now, so the secrets to keep are matched against its slots.
        try await follow()
        return try await withCurrentKeys {
            let sealing = try self.sealing
            let keeping = try await Offload.run { try sealing.slotKeys(for: secrets, kdfLimit: kdfLimit) }
            let (link, vaultID, channel) = (link, vaultID, channel)
            let (next, rotation, version, writer, rowKeys) = try await link.transaction {
                connection -> ((RowSealing, VaultRotation, Int64, UInt64, [[UInt8]]), commit: Bool) in
                let (version, writer) = try await self.bumpVersion(sealing: sealing, on: connection)
                let stored = try await self.readHeader(on: connection)
                guard let current = try sealing.following(header: stored), current.epoch == sealing.epoch else {
                    throw StaleKeys.insideCall
                }
                let (next, header, planned) = try current.rotated(
                    removing: slots, removingRecipients: recipients, keeping: keeping)
                var binds = PostgresBindings()
                try binds.append(Data(vaultID))
                let rows = try await link.run(
                    "DELETE FROM \(link.tables.vaultRows) WHERE vault_id = $1 RETURNING row_key, record, version",
                    binds, on: connection)
                var rowKeys: [[UInt8]] = []
                var sealedRows: [(rowKey: [UInt8], record: [UInt8])] = []
                for row in rows {
                    let rowKey = [UInt8](try row.cells[0].decode(Data.self))
                    let record = [UInt8](try row.cells[1].decode(Data.self))
                    let rowVersion = try row.cells[2].decode(Int64.self)
                    // Removals need no record now: every instance rereads after a rotation.
                    let body: VaultRecordBody
                    do {
                        body = try current.open(record, rowKey: rowKey, version: rowVersion)
                    } catch let error as CofferError where error.code == .corrupted {
                        throw CofferError(
                            .corrupted,
                            "not rotating: a row of the vault fails authentication, and a rotation never drops a row it "
                                + "cannot read (`coffer --store … verify` names it, `verify --repair` removes it); "
                                + "nothing was changed",
                            path: self.name)
                    }
                    guard case .put(let item, var secret) = body else { continue }
                    defer { SecureMemory.zero(&secret) }
                    let newKey = try next.rowKey(service: item.service, account: item.account)
                    let sealed = try secret.withUnsafeBytes { bytes in
                        try next.sealPut(
                            service: item.service, account: item.account, label: item.label, comment: item.comment,
                            created: item.created, modified: item.modified, secret: bytes, rowKey: newKey,
                            version: version)
                    }
                    sealedRows.append((newKey, sealed))
                    rowKeys.append(newKey)
                }
                // Several hundred rows per statement: one round trip each, not one per item.
                for start in stride(from: 0, to: sealedRows.count, by: Self.rowsPerInsert) {
                    let chunk = sealedRows[start..<min(start + Self.rowsPerInsert, sealedRows.count)]
                    var insert = PostgresBindings()
                    try insert.append(Data(vaultID))
                    insert.append(version)
                    var values: [String] = []
                    for (offset, row) in chunk.enumerated() {
                        try insert.append(Data(row.rowKey))
                        try insert.append(Data(row.record))
                        values.append("($1, $\(3 + 2 * offset), $\(4 + 2 * offset), $2)")
                    }
                    try await link.run(
                        "INSERT INTO \(link.tables.vaultRows) (vault_id, row_key, record, version) VALUES "
                            + values.joined(separator: ", "),
                        insert, on: connection)
                }
                var update = PostgresBindings()
                try update.append(Data(header))
                try update.append(Data(vaultID))
                try await link.run("UPDATE \(link.tables.vaults) SET header = $1 WHERE vault_id = $2", update, on: connection)
                try await ChangeFeed.notify(channel, of: version, on: connection, link: link)
                var rotation = planned
                rotation.items = rowKeys.count
                return ((next, rotation, version, writer, rowKeys), true)
            }
            self.replaceKeys(next, replacing: sealing)
            self.forgetReads()
            self.wrote(rowKeys, version, writer: writer)
            return rotation
        }
    }

    /// ``rotate(removing:removingRecipients:keeping:kdfLimit:)`` for a caller that is not async.
    @discardableResult
    public func rotate(
        removing slots: Set<Int> = [], removingRecipients recipients: [X25519Recipient] = [],
        keeping secrets: [VaultUnlock] = [], kdfLimit: Argon2idParameters = Vault.defaultKDFLimit
    ) throws -> VaultRotation {
        try Offload.wait {
            try await self.rotate(removing: slots, removingRecipients: recipients, keeping: secrets, kdfLimit: kdfLimit)
        }
    }

    /// The header copy, on `connection` (inside a transaction: as that transaction sees it).
    private func readHeader(on connection: PostgresConnection) async throws -> [UInt8] {
        var binds = PostgresBindings()
        try binds.append(Data(vaultID))
        let rows = try await link.run("SELECT header FROM \(link.tables.vaults) WHERE vault_id = $1", binds, on: connection)
        guard let found = try rows.first?.cells[0].decode(Data.self) else {
            throw CofferError(.notFound, "the vault was removed from the database", path: name)
        }
        return [UInt8](found)
    }
}
#endif
