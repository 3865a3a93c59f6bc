public import CofferCore
import CofferRuntime
public import CofferCrypto
public import Foundation

/// A ``PersistenceStrategy`` over one service of a ``Vault``: each key is an account.
///
/// ```swift
/// let tokens = VaultStrategy(vault: vault, service: "api.example.com")
/// try tokens.set("s3cr3t", for: "alice")
/// ```
public final class VaultStrategy: BatchPersistenceStrategy, FlushablePersistenceStrategy,
    CompactablePersistenceStrategy, PlainValuePersistenceStrategy, CompareAndSwapPersistenceStrategy,
    ChangeObservingPersistenceStrategy, ServiceStrategy, SealedPersistenceStrategy
{
    // load, save, remove, keys, saveBatch, compareAndSwap and observeChanges are
    // ServiceStrategy's, shared with the PostgreSQL vault's strategy.

    /// The vault holding the items.
    public let vault: Vault
    /// The service every key of this strategy belongs to.
    public let service: String

    /// Keys of this strategy are accounts of `service` in `vault`.
    public init(vault: Vault, service: String) {
        self.vault = vault
        self.service = service
    }

    public func flush() throws { try vault.flush() }
    public func compact() throws { try vault.compact() }
}

/// How the default vault of a ``CofferContext`` is found and unlocked, for `.vault(service:account:)`.
///
/// ```swift
/// let context = CofferContext(directory: dir).with(VaultConfiguration(unlock: .keyFile(keyURL)))
/// ```
public struct VaultConfiguration: Sendable {
    /// The vault file; `nil` means `<context directory>/default.coffervault`.
    public var url: URL?
    /// How to unlock it.
    public var unlock: VaultUnlock
    /// Create the vault when it does not exist.
    public var createIfMissing: Bool
    /// Argon2id parameters used when creating it with a passphrase.
    public var kdf: Argon2idParameters
    /// The most Argon2id work the vault file may ask of an unlock (see ``Vault/defaultKDFLimit``).
    /// Opening allows at least ``kdf`` too, so a vault this configuration creates always reopens.
    public var kdfLimit: Argon2idParameters

    public init(
        url: URL? = nil, unlock: VaultUnlock, createIfMissing: Bool = true, kdf: Argon2idParameters = .moderate,
        kdfLimit: Argon2idParameters = Vault.defaultKDFLimit
    ) {
        self.url = url
        self.unlock = unlock
        self.createIfMissing = createIfMissing
        self.kdf = kdf
        self.kdfLimit = kdfLimit
    }
}

extension Backing {
    /// An item of the current context's default vault (see ``VaultConfiguration``), encrypted at rest.
    ///
    /// ```swift
    /// @Stored(backed: .vault(service: "api.github.com", account: "octocat")) var token: String? = nil
    /// ```
    public static func vault(service: String, account: String) -> Backing {
        Backing(
            description: "vault(service: \(service), account: \(account))",
            identity: .inContext(["vault", service, account])
        ) { context in
            (VaultStrategy(vault: try context.defaultVault(), service: service), account)
        }
    }

    /// An item of an explicit vault.
    public static func vault(_ vault: Vault, service: String, account: String) -> Backing {
        Backing(
            description: "vault(\(vault.url.path), service: \(service), account: \(account))",
            identity: .object(vault, [service, account])
        ) { _ in
            (VaultStrategy(vault: vault, service: service), account)
        }
    }
}

extension CofferContext {
    /// Opens and unlocks this context's default vault (see ``VaultConfiguration``) now, so that a
    /// server fails fast at start-up — a wrong key, a missing file — rather than on the first
    /// request that reads a `.vault` property; and so that no request pays for Argon2id.
    ///
    /// ```swift
    /// let context = CofferContext.current.with(VaultConfiguration(unlock: .passphrase(passphrase)))
    /// try await context.openVault()      // Argon2id on Coffer's threads, not the cooperative pool
    /// ```
    ///
    /// The KDF runs on Coffer's own threads and under no lock another property needs: properties
    /// of other stores in the context read and write meanwhile. Properties of the vault wait for
    /// it (they need its keys). Opening twice returns the same vault.
    @discardableResult
    public func openVault() async throws -> Vault {
        try await Offload.run { try self.defaultVault() }
    }

    /// The context's default vault, opened (and created when so configured) on first use.
    /// - Throws: ``CofferError/Code/locked`` when the context has no ``VaultConfiguration``, else
    ///   what opening the vault throws.
    public func defaultVault() throws -> Vault {
        guard let configuration = setting(VaultConfiguration.self) else {
            throw CofferError(
                .locked,
                "no default vault is configured: attach a VaultConfiguration to the CofferContext to say how to unlock it")
        }
        let url = configuration.url ?? directory.appendingPathComponent("default.coffervault")
        return try sharedStore(id: "vault:\(url.path)") { () throws -> Vault in
            if try !Vault.exists(at: url, fileSystem: fileSystem) && configuration.createIfMissing {
                return try Vault.create(
                    at: url, unlock: configuration.unlock, kdf: configuration.kdf, lockTimeout: lockTimeout,
                    fileSystem: fileSystem)
            }
            return try Vault.open(
                at: url, unlock: configuration.unlock, kdfLimit: configuration.kdfLimit.raised(to: configuration.kdf),
                lockTimeout: lockTimeout, fileSystem: fileSystem)
        }
    }
}
