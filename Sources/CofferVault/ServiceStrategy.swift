// What the file vault's strategy and the PostgreSQL vault's share: a keychain of service/account
// items, and the strategy over one service of one, written once.
package import CofferCore
import CofferCrypto
package import Foundation

/// A keychain of items named by service and account: what a strategy over one service needs of
/// its vault. ``Vault`` is one, and so is CofferPostgres's `PostgresVault`.
package protocol ServiceKeychain: AnyObject, Sendable {
    func data(service: String, account: String) throws -> Data?
    func set(_ secret: Data, service: String, account: String, label: String?, comment: String?) throws
    @discardableResult func remove(service: String, account: String) throws -> Bool
    func items(service: String?) throws -> [VaultItem]
    func apply(_ changes: [VaultChange]) throws
    /// Reads, transforms and writes one secret atomically with respect to every writer.
    func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws
    /// Tells `handler` which items others change (`nil`: any may have).
    func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation
}

extension Vault: ServiceKeychain {}

/// A ``PersistenceStrategy`` over one service of a ``ServiceKeychain``, each key an account:
/// ``VaultStrategy`` and CofferPostgres's `PostgresVaultStrategy` are this, plus what their own
/// vault adds (a file vault flushes and compacts). Values are stored in plain form (a String's
/// UTF-8), so `coffer get` prints exactly what an `@Stored` property saved.
package protocol ServiceStrategy: BatchPersistenceStrategy, PlainValuePersistenceStrategy,
    CompareAndSwapPersistenceStrategy, ChangeObservingPersistenceStrategy
{
    associatedtype Keychain: ServiceKeychain
    /// The vault holding the items.
    var vault: Keychain { get }
    /// The service every key of this strategy belongs to.
    var service: String { get }
}

extension ServiceStrategy {
    public func load(_ key: String) throws -> Data? { try vault.data(service: service, account: key) }

    public func save(_ data: Data, for key: String) throws {
        try vault.set(data, service: service, account: key, label: nil, comment: nil)
    }

    public func remove(_ key: String) throws { try vault.remove(service: service, account: key) }

    public func keys() throws -> [String] { try vault.items(service: service).map(\.account) }

    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        try vault.apply(
            changes.map { change in
                if let data = change.data {
                    .set(service: service, account: change.key, secret: [UInt8](data), label: nil, comment: nil)
                } else {
                    .remove(service: service, account: change.key)
                }
            })
    }

    /// Stores `new` only if the item holds exactly `expected` (compared in constant time),
    /// atomically with respect to every writer of the vault: the file vault holds its lock after
    /// catching up with every other process, the PostgreSQL vault its version row from the read
    /// to the write.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool {
        var swapped = false
        try vault.update(service: service, account: key) { current in
            guard Self.holds(current, exactly: expected) else { return current }
            swapped = true
            return new
        }
        return swapped
    }

    /// Whether an item's bytes are exactly `expected` (`nil`: absent), compared in constant time.
    private static func holds(_ current: Data?, exactly expected: Data?) -> Bool {
        switch (current, expected) {
        case (nil, nil): true
        case (let current?, let expected?): SecureMemory.constantTimeEqual(current, expected)
        default: false
        }
    }

    /// Tells `handler` which accounts of this service others change (see the vault's
    /// `observeChanges(_:)`).
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        let service = self.service
        return vault.observeChanges { items in
            guard let items else { return handler(StoreChange(keys: nil)) }
            let accounts = Set(items.lazy.filter { $0.service == service }.map(\.account))
            if !accounts.isEmpty { handler(StoreChange(keys: accounts)) }
        }
    }
}
