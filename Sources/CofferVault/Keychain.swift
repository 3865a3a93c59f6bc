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
/// func rotateDeployToken(in keychain: some Keychain, to token: SecureBytes) async throws {
///     try await keychain.set(token, service: "api.example.com", account: "deploy")
///     print("stored in \(keychain.location)")
/// }
///
/// try await rotateDeployToken(in: try Vault.open(at: url, unlock: unlock), to: token)
/// try await rotateDeployToken(in: try await PostgresVault.open(name: "production", unlock: unlock), to: token)
/// ```
///
/// Every item call, and ``flush()``, comes in two forms of one name, as GRDB's
/// `DatabaseReader` carries both `read` and `async read`: code in an async context gets the
/// `async` form (and writes `await`), code in a synchronous context the synchronous one.
///
/// - The `async` forms never hold a thread of Swift's cooperative pool while something slow
///   happens: the PostgreSQL vault suspends while the server answers; the file vault answers
///   reads from memory at once, and runs each write (its fsync, its wait for `<file>.lock`), and
///   a read that would wait behind one, on Coffer's own threads while the caller suspends.
/// - The synchronous forms block the calling thread: the file vault for its fsync and lock, the
///   PostgreSQL vault until the server answers, within its deadlines (the work itself runs on
///   Coffer's own threads, so a caller that is itself a cooperative thread cannot starve it).
///   Call them from code that is not async (a command-line tool, a thread of your own).
///
/// The rules of both vaults hold:
/// 1. A keychain is thread-safe: open one per vault and process, and share it.
/// 2. A write is durable when it returns (the file vault's `.coalesced` durability defers the
///    fsync; ``flush()`` forces it).
/// 3. Several processes or instances may share one vault; each sees the others' writes on its
///    next call, and ``update(service:account:_:)`` is atomic across all
///    of them.
/// 4. After ``lock()`` the keys are gone from memory and calls throw
///    ``CofferError/Code/locked``.
///
/// Secrets: read them as ``SecureBytes`` (``secret(service:account:)``) where they matter;
/// a `Data` or `String` copy is the caller's to wipe, and a `String` cannot be wiped at all.
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

    /// The secret of an item as bytes, or `nil` when there is no such item, without blocking a
    /// thread. As the synchronous form.
    func data(service: String, account: String) async throws -> Data?

    /// The secret of an item as UTF-8 text, or `nil` when there is no such item.
    /// - Throws: ``CofferError/Code/decoding`` when the secret is not UTF-8; as ``data(service:account:)``.
    func string(service: String, account: String) throws -> String?

    /// The secret of an item as UTF-8 text, without blocking a thread. As the synchronous form.
    func string(service: String, account: String) async throws -> String?

    /// The secret of an item in guarded memory (wiped when released), or `nil` when there is no
    /// such item. The form for secrets that matter.
    /// - Throws: as ``data(service:account:)``.
    func secret(service: String, account: String) throws -> SecureBytes?

    /// The secret of an item in guarded memory, without blocking a thread. As the synchronous form.
    func secret(service: String, account: String) async throws -> SecureBytes?

    /// An item's attributes (never its secret), or `nil` when there is no such item.
    func item(service: String, account: String) throws -> VaultItem?

    /// An item's attributes, without blocking a thread. As the synchronous form.
    func item(service: String, account: String) async throws -> VaultItem?

    /// The attributes of every item (of `service`, when given), sorted by service then account.
    func items(service: String?) throws -> [VaultItem]

    /// The attributes of every item (of `service`, when given), without blocking a thread.
    func items(service: String?) async throws -> [VaultItem]

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

    /// Stores `secret`, without blocking a thread: durable when it returns, as the synchronous form.
    func set(_ secret: Data, service: String, account: String, label: String?, comment: String?) async throws

    /// Stores a UTF-8 text secret. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    func set(_ secret: String, service: String, account: String, label: String?, comment: String?) throws

    /// Stores a UTF-8 text secret, without blocking a thread.
    func set(_ secret: String, service: String, account: String, label: String?, comment: String?) async throws

    /// Stores a secret held in guarded memory. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) throws

    /// Stores a secret held in guarded memory, without blocking a thread.
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) async throws

    /// Removes an item. Returns whether it existed.
    @discardableResult
    func remove(service: String, account: String) throws -> Bool

    /// Removes an item, without blocking a thread. Returns whether it existed.
    @discardableResult
    func remove(service: String, account: String) async throws -> Bool

    /// Applies several changes as one commit: all of them survive, or none (the file vault: one
    /// append and one fsync; the PostgreSQL vault: one transaction).
    func apply(_ changes: [VaultChange]) throws

    /// Applies several changes as one commit, without blocking a thread.
    func apply(_ changes: [VaultChange]) async throws

    /// Adds new items as one commit, as ``apply(_:)`` does, unless one of them
    /// exists already.
    ///
    /// Whether one exists is decided while the vault's write lock is held, and the commit is
    /// made under that same hold (the file vault: `<file>.lock`, after catching up with the
    /// other writers; the PostgreSQL vault: the transaction that locks the vault's version row),
    /// so an item another writer stored meanwhile is never replaced: of two processes adding
    /// the same item at once, exactly one adds it. Checking with ``item(service:account:)``
    /// and then calling ``set(_:service:account:label:comment:)-(Data,_,_,_,_)`` is not atomic.
    ///
    /// - Parameter changes: `.set` changes only.
    /// - Returns: The items of `changes` that exist already, in the order of `changes` (then
    ///   nothing is written); empty when every item was added.
    /// - Throws: ``CofferError/Code/invalidArgument`` for a `.remove` (nothing is written); as
    ///   ``apply(_:)``.
    func add(_ changes: [VaultChange]) throws -> [VaultItemID]

    /// Adds new items as one commit unless one of them exists already, without blocking a thread.
    func add(_ changes: [VaultChange]) async throws -> [VaultItemID]

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

    /// Reads, transforms and writes one item's secret atomically, without blocking a thread: as
    /// the synchronous form.
    ///
    /// `transform` is `@Sendable` because it runs on one of Coffer's threads, not the caller's:
    /// the file vault runs the whole update (its wait for `<file>.lock`, the transform, the
    /// fsync) there; the PostgreSQL vault runs it inside the transaction that holds the vault's
    /// version row locked. So it may capture only `Sendable` values; to get something out of
    /// it, use a lock (`Mutex`) or an actor, not a captured `var`. It is not kept after the
    /// call returns. It still runs under the vault's write lock: keep it short, never wait in
    /// it, and do not call the keychain from it.
    ///
    /// ```swift
    /// try await keychain.update(service: "app", account: "launches") { old in
    ///     Data(String((old.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0) + 1).utf8)
    /// }
    /// ```
    func update(service: String, account: String, _ transform: @Sendable (Data?) throws -> Data?) async throws

    // MARK: Locking and durability

    /// Whether ``lock()`` was called (no key is in memory).
    var isLocked: Bool { get }

    /// Drops the keys from memory (they are wiped); later calls throw
    /// ``CofferError/Code/locked``. A file vault makes pending writes durable first and can be
    /// unlocked again (``Vault/unlock(_:kdfLimit:)``); a PostgreSQL vault is opened again.
    /// From async code with `.coalesced` writes pending, `await` ``flush()`` first, so
    /// that what `lock()` has left to do is only to drop the keys.
    func lock()

    /// Makes every write made so far durable now: nothing to do for a write that was durable
    /// when it returned (the file vault's default, every PostgreSQL write).
    /// - Throws: ``CofferError/Code/io`` when the disk refuses.
    func flush() throws

    /// Makes every write made so far durable now, without blocking a thread (the file vault's
    /// fsync runs on Coffer's own threads).
    func flush() async throws

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

    /// Stores `secret`, keeping the item's label and comment, without blocking a thread.
    public func set(_ secret: Data, service: String, account: String) async throws {
        try await set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a UTF-8 text secret, keeping the item's label and comment.
    public func set(_ secret: String, service: String, account: String) throws {
        try set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a UTF-8 text secret, keeping the item's label and comment, without blocking a thread.
    public func set(_ secret: String, service: String, account: String) async throws {
        try await set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a secret held in guarded memory, keeping the item's label and comment.
    public func set(_ secret: SecureBytes, service: String, account: String) throws {
        try set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// Stores a secret held in guarded memory, keeping the item's label and comment, without
    /// blocking a thread.
    public func set(_ secret: SecureBytes, service: String, account: String) async throws {
        try await set(secret, service: service, account: account, label: nil, comment: nil)
    }

    /// The attributes of every item, sorted by service then account.
    public func items() throws -> [VaultItem] { try items(service: nil) }

    /// The attributes of every item, sorted by service then account, without blocking a thread.
    public func items() async throws -> [VaultItem] { try await items(service: nil) }
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
