#if Postgres
public import CofferCore
public import CofferVault

/// A ``PersistenceStrategy`` over one service of a ``PostgresVault``: each key is an account.
/// Values are stored in plain form (a String's UTF-8), as in `VaultStrategy`, so `coffer get`
/// prints exactly what an `@Stored` property saved. A compare-and-swap holds the vault's version
/// row locked from the read to the write.
public final class PostgresVaultStrategy: BatchPersistenceStrategy, PlainValuePersistenceStrategy,
    CompareAndSwapPersistenceStrategy, ChangeObservingPersistenceStrategy, ServiceStrategy
{
    // Every strategy method is ServiceStrategy's (CofferVault), shared with `VaultStrategy`.

    /// The vault holding the items.
    public let vault: PostgresVault
    /// The service every key of this strategy belongs to.
    public let service: String

    public init(vault: PostgresVault, service: String) {
        self.vault = vault
        self.service = service
    }
}

extension PostgresVault: ServiceKeychain {}

extension Backing {
    /// An item of a vault kept in PostgreSQL, encrypted in this process.
    ///
    /// ```swift
    /// @Stored(backed: .vault(fleetVault, service: "api.example.com", account: "deploy")) var token: String? = nil
    /// ```
    public static func vault(_ vault: PostgresVault, service: String, account: String) -> Backing {
        Backing(
            description: "vault(postgres: \(vault.name), service: \(service), account: \(account))",
            identity: .object(vault, [service, account])
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
