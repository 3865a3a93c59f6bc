#if Postgres
public import CofferCore
public import CofferVault
import CofferCrypto
public import Foundation

/// A ``PersistenceStrategy`` over one service of a ``PostgresVault``: each key is an account.
/// Values are stored in plain form (a String's UTF-8), as in `VaultStrategy`, so `coffer get`
/// prints exactly what an `@Stored` property saved. A compare-and-swap, and `$x.update { … }`
/// on a property, hold the vault's version row locked from the read to the write.
///
/// Every call is `async` (``AsyncPersistenceStrategy``): `@Stored` properties on it never block
/// their caller on the network. The synchronous forms run the async ones on Coffer's threads.
public final class PostgresVaultStrategy: AsyncPersistenceStrategy, BatchPersistenceStrategy,
    CompareAndSwapPersistenceStrategy, ChangeObservingPersistenceStrategy, KeychainItemsStrategy,
    KeyLockingPersistenceStrategy
{
    /// The vault holding the items.
    public let vault: PostgresVault
    /// The service every key of this strategy belongs to.
    public let service: String

    public init(vault: PostgresVault, service: String) {
        self.vault = vault
        self.service = service
    }

    package var keychain: any Keychain { vault }

    /// ``ValueEncoding/plain``, as in `VaultStrategy`.
    public var valueEncoding: ValueEncoding { .plain }
    /// `true`: a vault's values are secrets, sealed at rest.
    public var holdsSecrets: Bool { true }

    public func load(_ key: String) async throws -> Data? { try await vault.data(service: service, account: key) }

    public func save(_ data: Data, for key: String) async throws {
        try await vault.set(data, service: service, account: key, label: nil, comment: nil)
    }

    public func remove(_ key: String) async throws { try await vault.remove(service: service, account: key) }

    public func keys() async throws -> [String] { try await vault.items(service: service).map(\.account) }

    public func saveBatch(_ changes: [(key: String, data: Data?)]) async throws {
        let service = service
        try await vault.apply(
            changes.map { change in
                if let data = change.data {
                    .set(service: service, account: change.key, secret: [UInt8](data), label: nil, comment: nil)
                } else {
                    .remove(service: service, account: change.key)
                }
            })
    }

    /// Stores `new` only if the item holds exactly `expected` (compared in constant time), with
    /// the vault's version row locked from the read to the write.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool {
        let swapped = Guarded(false)
        try await vault.update(service: service, account: key) { current in
            let holds: Bool =
                switch (current, expected) {
                case (nil, nil): true
                case (let current?, let expected?): SecureMemory.constantTimeEqual(current, expected)
                default: false
                }
            guard holds else { return current }
            swapped.withLock { $0 = true }
            return new
        }
        return swapped.withLock { $0 }
    }

    /// Locks the vault's version row in a transaction of its own and returns once the item is
    /// read; the transaction writes what the caller then decides (``KeyLock``).
    package func lock(_ key: String) async throws -> any KeyLock {
        let (vault, service) = (vault, service)
        return try await HeldRow.hold(secret: true, until: .now + .seconds(vault.link.timeout)) { offer in
            try await vault.withCurrentKeys {
                try await vault.updateOnce(service: service, account: key) { current in
                    // A copy of its own, which the lock zeroes: `updateOnce` zeroes `current`.
                    let copy = current.map { secret in
                        secret.withUnsafeBytes { bytes in
                            bytes.baseAddress.map { Data(bytes: $0, count: bytes.count) } ?? Data()
                        }
                    }
                    return switch try await offer(copy) {
                    case .release, .expired: current
                    case .store(let new): new
                    }
                }
            }
        }
    }

    /// Tells `handler` which accounts of this service others change (see
    /// ``PostgresVault/observeChanges(_:)``).
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        vault.observeChanges(StoreChange.accounts(of: service, handler))
    }
}

extension Backing {
    /// An item of a vault kept in PostgreSQL, encrypted in this process.
    ///
    /// ```swift
    /// @Stored(backed: .vault(fleetVault, service: "api.example.com", account: "deploy")) var token: String? = nil
    /// ```
    public static func vault(_ vault: PostgresVault, service: String, account: String) -> Backing {
        Backing(
            description: "vault(postgres: \(vault.name), service: \(service), account: \(account))",
            store: StoreID(vault, ["service", service]), key: account
        ) { _ in
            (vault.strategy(service: service), account)
        }
    }
}

extension PostgresVault {
    /// The strategy for `service`, one per service and vault, so properties on it share one
    /// subscription (and one LISTEN connection per vault).
    ///
    /// The vault remembers its strategies weakly: a strategy holds its vault, and a vault that held
    /// its strategies would never be freed (nor its keys wiped) once one had been made.
    public func strategy(service: String) -> PostgresVaultStrategy {
        strategies.withLock { all in
            if let existing = all[service]?.strategy { return existing }
            let strategy = PostgresVaultStrategy(vault: self, service: service)
            all = all.filter { $0.value.strategy != nil }
            all[service] = WeakStrategy(strategy: strategy)
            return strategy
        }
    }
}

/// A strategy the vault's cache does not keep alive.
struct WeakStrategy: @unchecked Sendable {
    // @unchecked Sendable: a weak reference to a Sendable class, read and written under the
    // vault's lock.
    weak var strategy: PostgresVaultStrategy?
}
#endif
