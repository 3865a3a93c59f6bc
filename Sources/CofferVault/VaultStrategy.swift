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
public final class VaultStrategy: ServiceStrategy, JointBatchPersistenceStrategy {
    // load, save, remove, keys, saveBatch, compareAndSwap, observeChanges, valueEncoding and
    // holdsSecrets are ServiceStrategy's (written once over any Keychain).

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

    /// One service of one vault: every `VaultStrategy` over them is this store, so `@Stored`
    /// properties of the service are committed together and observed once, however many
    /// strategies the `.vault` backings made. A part of the vault: a `batch { }` over several of
    /// its services is one commit too (``saveJointBatch(_:)``).
    public var id: StoreID? { StoreID(vault, ["service", service]) }

    /// Applies changes to items of several services of this vault as one commit (one journal
    /// append, one fdatasync).
    package func saveJointBatch(_ changes: [(part: any PersistenceStrategy, key: String, data: Data?)]) throws {
        try vault.applyWiping(
            changes.map { change in
                guard let part = change.part as? VaultStrategy, part.vault === vault else {
                    throw CofferError(
                        .invalidArgument,
                        "a batch for the vault \(vault.url.path) was given a change for \(type(of: change.part))")
                }
                return (part.service, change.key, change.data)
            })
    }
}

/// How the default vault of a ``CofferContext`` is found and unlocked, for `.vault(service:account:)`.
///
/// ```swift
/// let context = CofferContext(directory: dir).with(VaultConfiguration(unlock: .keyFile(keyURL)))
/// ```
public struct VaultConfiguration: Sendable {
    /// The vault file; `nil` means `<context directory>/default.coffer` (``defaultFileName``).
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

    /// The default vault's file name in a context's directory: the `coffer` command's too
    /// (`~/.local/share/coffer/default.coffer`), so a context named "coffer" shares its vault.
    public static let defaultFileName = "default.coffer"
    /// The name the library gave the default vault before it took the command's: a vault there
    /// is still opened when no ``defaultFileName`` exists beside it.
    static let formerDefaultFileName = "default.coffervault"

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
            store: .inContext(["vault", "service", service]), key: account
        ) { context in
            (VaultStrategy(vault: try context.defaultVault(), service: service), account)
        }
    }

    /// An item of an explicit vault. Shares its value with `.strategy(VaultStrategy(vault:service:), key:)`
    /// on the same item: both are a key of one store.
    public static func vault(_ vault: Vault, service: String, account: String) -> Backing {
        let strategy = VaultStrategy(vault: vault, service: service)
        return Backing(
            description: "vault(\(vault.url.path), service: \(service), account: \(account))",
            store: strategy.id, key: account
        ) { _ in
            (strategy, account)
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
        let url = try configuration.url ?? defaultVaultURL()
        return try sharedStore(id: .inContext(["vault", url.path])) { () throws -> Vault in
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

    /// `<directory>/default.coffer`, or `<directory>/default.coffervault` when only a vault under
    /// that former name exists (made by an earlier version of the library), so it is still found.
    /// - Throws: ``CofferError/Code/invalidArgument`` when vaults exist under both names: which
    ///   one holds the items this context expects cannot be told, and neither is chosen silently.
    func defaultVaultURL() throws -> URL {
        switch try VaultConfiguration.defaultVault(in: directory, fileSystem: fileSystem) {
        case .current(let url), .former(let url): return url
        case .both(let current, let former):
            throw CofferError(
                .invalidArgument,
                "two default vaults: \(current.path) and \(former.path) (its former name); keep one (move the other "
                    + "aside) or name the vault with VaultConfiguration(url:)",
                path: directory.path)
        }
    }
}

extension VaultConfiguration {
    /// Which file is the default vault in a directory (a context's, or the `coffer` command's
    /// data directory): the one rule both follow.
    package enum DefaultVault: Equatable {
        /// `default.coffer`: it exists, or neither name does (where a new vault is created).
        case current(URL)
        /// `default.coffervault`, the former name: only a vault under it exists.
        case former(URL)
        /// Vaults exist under both names: refused, since which one is meant cannot be told.
        case both(current: URL, former: URL)
    }

    /// The default vault in `directory` (see ``DefaultVault``).
    package static func defaultVault(in directory: URL, fileSystem: any FileSystem) throws -> DefaultVault {
        let url = directory.appendingPathComponent(defaultFileName)
        let former = directory.appendingPathComponent(formerDefaultFileName)
        switch (try Vault.exists(at: url, fileSystem: fileSystem), try Vault.exists(at: former, fileSystem: fileSystem)) {
        case (true, true): return .both(current: url, former: former)
        case (false, true): return .former(former)
        default: return .current(url)
        }
    }

    /// ``defaultVault(in:fileSystem:)`` on the real file system.
    package static func defaultVault(in directory: URL) throws -> DefaultVault {
        try defaultVault(in: directory, fileSystem: LiveFileSystem())
    }
}

extension VaultStrategy: FileLocatedPersistenceStrategy {
    package var fileStoreID: StoreID { StoreID(file: vault.url.path, ["service", service]) }
}
