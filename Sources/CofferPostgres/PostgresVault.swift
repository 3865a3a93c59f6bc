#if Postgres
// The PostgreSQL vault: its type and state, and its lifecycle (create, open, lock, accept a
// rollback). The item calls are in PostgresVault+Items.swift, their synchronous forms in
// PostgresVault+Keychain.swift, the SQL under them in PostgresVault+Rows.swift; following other
// instances in PostgresVault+Changes.swift; verify and repair in PostgresVault+Verify.swift; key
// slots and rotation in PostgresVault+Keys.swift.
import CofferCore
public import CofferCrypto
public import CofferVault
import Foundation
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
    let keys: Locked<RowSealing?>
    /// The vault's random id (its rows' key in the database).
    let vaultID: [UInt8]
    let channel: String
    let tracker = ChangeTracker<Set<VaultItemID>?>()
    /// The newest version this instance has seen of each row: an older one later is a rollback,
    /// a row gone is a deletion behind Coffer's back.
    let newestVersions = Locked<[[UInt8]: Int64]>([:])
    /// The server's next transaction id as this instance last saw it (its snapshots, its own
    /// writes): a server whose next id is below it went back — restored from a backup, or failed
    /// over to a replica that had not received every commit — which no SQL can do.
    let serverHorizon: Locked<UInt64>
    /// The kinds of warning this instance has logged (each is said once).
    let warned = Locked<Set<String>>([])
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

}

#endif
