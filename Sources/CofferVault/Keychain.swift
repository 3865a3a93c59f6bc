// The one keychain abstraction: items named by service and account, locking, durability and
// outside changes, adopted by the file vault (``Vault``) and CofferPostgres's `PostgresVault`.
// The CLI's commands, `ServiceStrategy` and `CofferService` work on it, never on a concrete vault.
public import CofferCore
public import CofferCrypto
public import Foundation

/// A keychain: secrets named by a service and an account, each with a label, a comment and
/// dates, kept encrypted.
///
/// ``Vault`` (a file) and CofferPostgres's `PostgresVault` (rows in PostgreSQL, shared by a
/// fleet) are keychains. Code written against this protocol works on either:
///
/// ```swift
/// func rotateDeployToken(in keychain: some Keychain, to token: SecureBytes) throws {
///     try keychain.set(token, service: "api.example.com", account: "deploy")
///     print("stored in \(keychain.location)")
/// }
///
/// try rotateDeployToken(in: try Vault.open(at: url, unlock: unlock), to: token)
/// try rotateDeployToken(in: try PostgresVault.open(name: "production", unlock: unlock), to: token)
/// ```
///
/// Every call here is synchronous. A `PostgresVault` also has `async` forms of the item calls;
/// its synchronous ones run them on Coffer's own threads and block the calling thread until the
/// server answers (within its deadlines). From async code, call the `async` forms: a blocked
/// cooperative thread is one the rest of the process cannot use meanwhile.
///
/// The rules of both vaults hold:
/// 1. A keychain is thread-safe: open one per vault and process, and share it.
/// 2. A write is durable when it returns (the file vault's `.coalesced` durability defers the
///    fsync; ``flush()`` forces it).
/// 3. Several processes or instances may share one vault; each sees the others' writes on its
///    next call, and ``update(service:account:_:)`` is atomic across all of them.
/// 4. After ``lock()`` the keys are gone from memory and calls throw
///    ``CofferError/Code/locked``.
///
/// Secrets: read them as ``SecureBytes`` (``secret(service:account:)``) where they matter; a
/// `Data` or `String` copy is the caller's to wipe, and a `String` cannot be wiped at all.
/// Errors never hold a secret.
public protocol Keychain: AnyObject, Sendable {
    /// Where the items are, for messages and logs: the file vault's path, or the PostgreSQL
    /// vault's name with its server and database. Never a password or key. Names are as given:
    /// escape control characters before printing it to a terminal.
    var location: String { get }

    // MARK: Reading

    /// The secret of an item as bytes, or `nil` when there is no such item.
    /// - Throws: ``CofferError`` — ``CofferError/Code/locked``, ``CofferError/Code/corrupted``, …
    func data(service: String, account: String) throws -> Data?

    /// The secret of an item as UTF-8 text, or `nil` when there is no such item.
    /// - Throws: ``CofferError/Code/decoding`` when the secret is not UTF-8; as ``data(service:account:)``.
    func string(service: String, account: String) throws -> String?

    /// The secret of an item in guarded memory (wiped when released), or `nil` when there is no
    /// such item. The form for secrets that matter.
    /// - Throws: as ``data(service:account:)``.
    func secret(service: String, account: String) throws -> SecureBytes?

    /// An item's attributes (never its secret), or `nil` when there is no such item.
    func item(service: String, account: String) throws -> VaultItem?

    /// The attributes of every item (of `service`, when given), sorted by service then account.
    func items(service: String?) throws -> [VaultItem]

    // MARK: Writing

    /// Stores `secret` under `service` and `account`, replacing any earlier one.
    ///
    /// - Parameters:
    ///   - service: Non-empty, at most ``Vault/maximumNameLength`` bytes of UTF-8.
    ///   - account: Non-empty, at most ``Vault/maximumNameLength`` bytes of UTF-8.
    ///   - label: A readable name; `nil` keeps the current one (empty for a new item).
    ///   - comment: A note (not secret); `nil` keeps the current one.
    /// - Throws: ``CofferError`` — ``CofferError/Code/invalidArgument`` (an empty or too long
    ///   name; nothing is written), ``CofferError/Code/locked``, ``CofferError/Code/io``, …
    func set(_ secret: Data, service: String, account: String, label: String?, comment: String?) throws

    /// Stores a UTF-8 text secret. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    func set(_ secret: String, service: String, account: String, label: String?, comment: String?) throws

    /// Stores a secret held in guarded memory. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) throws

    /// Removes an item. Returns whether it existed.
    @discardableResult
    func remove(service: String, account: String) throws -> Bool

    /// Applies several changes as one commit: all of them survive, or none (the file vault: one
    /// append and one fsync; the PostgreSQL vault: one transaction).
    func apply(_ changes: [VaultChange]) throws

    /// Adds new items as one commit, as ``apply(_:)`` does, unless one of them exists already.
    ///
    /// Whether one exists is decided while the vault's write lock is held, and the commit is
    /// made under that same hold (the file vault: `<file>.lock`, after catching up with the
    /// other writers; the PostgreSQL vault: the transaction that locks the vault's version row),
    /// so an item another writer stored meanwhile is never replaced: of two processes adding
    /// the same item at once, exactly one adds it. Checking with ``item(service:account:)`` and
    /// then calling ``set(_:service:account:label:comment:)-(Data,_,_,_,_)`` is not atomic.
    ///
    /// - Parameter changes: `.set` changes only.
    /// - Returns: The items of `changes` that exist already, in the order of `changes` (then
    ///   nothing is written); empty when every item was added.
    /// - Throws: ``CofferError/Code/invalidArgument`` for a `.remove` (nothing is written); as
    ///   ``apply(_:)``.
    func add(_ changes: [VaultChange]) throws -> [VaultItemID]

    /// Reads, transforms and writes one item's secret atomically with respect to every writer
    /// of the vault, in any process: `transform` gets the current secret (`nil`: no such item)
    /// and returns the new one (`nil` removes the item; the current bytes write nothing).
    ///
    /// ```swift
    /// try keychain.update(service: "app", account: "launches") { old in
    ///     Data(String((old.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0) + 1).utf8)
    /// }
    /// ```
    ///
    /// `transform` runs while the vault's write lock is held: keep it short, and do not call
    /// the keychain from it. Copies of the secret it keeps are the caller's to wipe.
    /// - Throws: what `transform` throws (nothing is written then); ``CofferError``.
    func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws

    // MARK: Locking and durability

    /// Whether ``lock()`` was called (no key is in memory).
    var isLocked: Bool { get }

    /// Drops the keys from memory (they are wiped); later calls throw
    /// ``CofferError/Code/locked``. A file vault makes pending writes durable first and can be
    /// unlocked again (``Vault/unlock(_:kdfLimit:)``); a PostgreSQL vault is opened again.
    func lock()

    /// Makes every write made so far durable now: nothing to do for a write that was durable
    /// when it returned (the file vault's default, every PostgreSQL write).
    /// - Throws: ``CofferError/Code/io`` when the disk refuses.
    func flush() throws

    // MARK: Changes from elsewhere

    /// Starts telling `handler` which items other processes or instances change: their
    /// identities, or `nil` when any may have (the file was compacted elsewhere, the vault was
    /// unlocked again, the server was restored). The handler runs on a Coffer thread; changes
    /// this instance makes itself are not reported. The watch (inotify for a file, LISTEN for
    /// PostgreSQL) runs while an observation is alive.
    func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation
}

extension Keychain {
    /// Stores `secret`, keeping the item's label and comment (empty for a new item).
    public func set(_ secret: Data, service: String, account: String) throws {
        try set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a UTF-8 text secret, keeping the item's label and comment.
    public func set(_ secret: String, service: String, account: String) throws {
        try set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a secret held in guarded memory, keeping the item's label and comment.
    public func set(_ secret: SecureBytes, service: String, account: String) throws {
        try set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// The attributes of every item, sorted by service then account.
    public func items() throws -> [VaultItem] { try items(service: nil) }
}

extension Vault: Keychain {
    /// The vault file's path.
    public var location: String { url.path }
}

/// A store over the items of a keychain (the vault strategies): a graceful shutdown
/// (`CofferService`) locks that keychain when given the store.
extension Keychain {
    /// Applies strategy writes (`nil` data removes) as one commit. The secrets are copied into
    /// the arrays ``VaultChange`` holds only for the commit, and zeroed once it is done.
    package func applyWiping(_ changes: [(service: String, account: String, data: Data?)]) throws {
        var secrets = changes.map { $0.data.map { [UInt8]($0) } }
        // Runs after `commit`'s changes are released, so each array is zeroed in place.
        defer { for index in secrets.indices { SecureMemory.zero(&secrets[index]) } }
        try commit(changes, secrets)
    }

    private func commit(_ changes: [(service: String, account: String, data: Data?)], _ secrets: [[UInt8]?]) throws {
        try apply(
            zip(changes, secrets).map { change, secret in
                guard let secret else { return .remove(service: change.service, account: change.account) }
                return .set(service: change.service, account: change.account, secret: secret, label: nil, comment: nil)
            })
    }
}

package protocol KeychainItemsStrategy: Sendable {
    /// The keychain holding the items.
    var keychain: any Keychain { get }
}

/// A keychain that lends the key of the slot it was unlocked with (``VaultSessionKey``), so
/// `coffer unlock` can keep it for a login session: the file vault and the PostgreSQL vault.
package protocol SessionKeyLending: Keychain {
    /// The key-encryption key of the slot this keychain was unlocked with; `nil` when locked or
    /// unlocked with an identity.
    var sessionKey: VaultSessionKey? { get }
}

extension Vault: SessionKeyLending {}
