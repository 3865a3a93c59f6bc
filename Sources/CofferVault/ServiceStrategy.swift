// The strategy over one service of a keychain, written once for the file vault's and the
// PostgreSQL vault's.
package import CofferCore
import CofferCrypto
package import Foundation

/// A ``PersistenceStrategy`` over one service of a ``Keychain``, each key an account:
/// ``VaultStrategy`` is this, plus what the file vault adds (it flushes and compacts).
/// CofferPostgres's `PostgresVaultStrategy` does the same with the vault's `async` calls. Values
/// are stored in plain form (a String's UTF-8), so `coffer get` prints exactly what an `@Stored`
/// property saved.
package protocol ServiceStrategy: BatchPersistenceStrategy, CompareAndSwapPersistenceStrategy,
    ChangeObservingPersistenceStrategy, KeychainItemsStrategy
{
    associatedtype Store: Keychain
    /// The vault holding the items.
    var vault: Store { get }
    /// The service every key of this strategy belongs to.
    var service: String { get }
}

extension ServiceStrategy {
    package var keychain: any Keychain { vault }

    /// ``ValueEncoding/plain``: `coffer get` prints exactly what an `@Stored` property saved.
    public var valueEncoding: ValueEncoding { .plain }
    /// `true`: a vault's values are secrets, sealed at rest.
    public var holdsSecrets: Bool { true }

    public func load(_ key: String) throws -> Data? { try vault.data(service: service, account: key) }

    public func save(_ data: Data, for key: String) throws {
        try vault.set(data, service: service, account: key, label: nil, comment: nil)
    }

    public func remove(_ key: String) throws { try vault.remove(service: service, account: key) }

    public func keys() throws -> [String] { try vault.items(service: service).map(\.account) }

    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        try vault.applyWiping(changes.map { (service, $0.key, $0.data) })
    }

    /// Stores `new` only if the item holds exactly `expected` (compared in constant time),
    /// atomically with respect to every writer of the vault (``Keychain/update(service:account:_:)``).
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

    /// Tells `handler` which accounts of this service others change (see
    /// ``Keychain/observeChanges(_:)``).
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        vault.observeChanges(StoreChange.accounts(of: service, handler))
    }
}

extension StoreChange {
    /// A keychain observer that tells `handler` the accounts of `service` among the items
    /// changed (`nil`: any may have), and nothing when none of them is of `service`.
    package static func accounts(
        of service: String, _ handler: @escaping @Sendable (StoreChange) -> Void
    ) -> @Sendable (Set<VaultItemID>?) -> Void {
        { items in
            guard let items else { return handler(StoreChange(keys: nil)) }
            let accounts = Set(items.lazy.filter { $0.service == service }.map(\.account))
            if !accounts.isEmpty { handler(StoreChange(keys: accounts)) }
        }
    }
}
