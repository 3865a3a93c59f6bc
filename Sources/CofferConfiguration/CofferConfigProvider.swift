#if Configuration
public import CofferCore
public import CofferVault
public import Configuration
import Foundation
import Synchronization

/// A swift-configuration `ConfigProvider` that reads settings and secrets from a Coffer store: a
/// key-value suite, the vault, or any ``PersistenceStrategy``.
///
/// A configuration key's components joined with `.` name the stored key (`http.timeout`), and
/// the value is decoded as the type the reader asks for, the way ``PersistenceStrategy/get(_:for:)``
/// would. Values from a vault are marked secret, so a `ConfigReader` redacts them in its access
/// logs and descriptions.
///
/// ```swift
/// let settings = try KeyValueFileStrategy(directory: dir, suite: "settings")
/// let vault = try Vault.open(at: vaultURL, unlock: .keyFile(keyURL))
/// let config = ConfigReader(providers: [
///     EnvironmentVariablesProvider(),                                  // overrides first
///     CofferConfigProvider(store: settings),
///     CofferConfigProvider(vault: vault, service: "api"),              // secrets
/// ])
/// let timeout = config.double(forKey: "http.timeout", default: 30)
/// let token = config.string(forKey: "github.token", isSecret: true)
/// ```
///
/// **Watching.** On a store that reports outside changes (every built-in one does: see
/// ``ChangeObservingPersistenceStrategy``), `watch…` methods deliver a new value when another
/// process, the `coffer` command or another store instance changes the key — a reloading
/// configuration with no polling. Writes made through the very instance the provider reads are
/// not reported by the store (they are this instance's own): `value` and `fetch` see them at
/// once, watches at the next outside change. To have a watch see the application's own writes,
/// give the provider a store instance of its own on the same file.
public final class CofferConfigProvider: Sendable {
    /// The name in the reader's access reports, such as `CofferConfigProvider[KeyValueFileStrategy]`.
    public let providerName: String
    private let store: any PersistenceStrategy
    private let secrets: SecretsSpecifier<String, ConfigContent>
    private let state = Locked(State())

    private struct ValueWatcher {
        let key: AbsoluteConfigKey
        let type: ConfigType
        let continuation: AsyncStream<Result<LookupResult, any Error>>.Continuation
        /// The last successful result told, to tell only changes.
        var last: LookupResult?
    }

    private struct State {
        var valueWatchers: [UInt64: ValueWatcher] = [:]
        var snapshotWatchers: [UInt64: AsyncStream<any ConfigSnapshot>.Continuation] = [:]
        var next: UInt64 = 0
        var observation: StoreObservation?
        /// Whether an observation is held or being started.
        var observing = false
        var watcherCount: Int { valueWatchers.count + snapshotWatchers.count }
    }

    /// A provider over `store`.
    ///
    /// - Parameters:
    ///   - store: Where the values live: a `KeyValueFileStrategy` suite, a `VaultStrategy`, any
    ///     strategy.
    ///   - name: Shown in the provider's name; the store's type unless given.
    ///   - secrets: Which values are secret (the reader redacts them): `.none`, `.all`,
    ///     `.specific(["db.password"])` (stored keys), or `.dynamic { key, content in … }`.
    public init(
        store: any PersistenceStrategy, name: String? = nil, secrets: SecretsSpecifier<String, ConfigContent>
    ) {
        self.store = store
        self.providerName = "CofferConfigProvider[\(name ?? String(describing: type(of: store)))]"
        self.secrets = secrets
    }

    /// A provider over `store` whose values are secret when it holds secrets (its
    /// `holdsSecrets`: a vault's, on disk or in PostgreSQL), and not otherwise: a reader never prints a vault's value because `secrets:` was left out.
    ///
    /// - Parameters:
    ///   - store: Where the values live: a `KeyValueFileStrategy` suite, a `VaultStrategy`, any
    ///     strategy.
    ///   - name: Shown in the provider's name; the store's type unless given.
    public convenience init(store: any PersistenceStrategy, name: String? = nil) {
        self.init(store: store, name: name, secrets: store.holdsSecrets ? .all : .none)
    }

    /// A provider over the items of one service of `vault`: each account is a key, and every
    /// value is secret.
    ///
    /// ```swift
    /// try vault.set("s3cr3t", service: "api", account: "db.password")
    /// let config = ConfigReader(provider: CofferConfigProvider(vault: vault, service: "api"))
    /// config.string(forKey: "db.password")       // "s3cr3t", shown as <REDACTED> in reports
    /// ```
    public convenience init(vault: Vault, service: String) {
        self.init(store: VaultStrategy(vault: vault, service: service), name: "vault: \(service)", secrets: .all)
    }

    deinit {
        let observation = state.withLock { s -> StoreObservation? in
            defer { s.observation = nil }
            return s.observation
        }
        observation?.cancel()
    }

    /// The stored key of a configuration key.
    static func storedKey(_ key: AbsoluteConfigKey) -> String { key.components.joined(separator: ".") }

    /// Decodes stored bytes as the configuration type asked for.
    static func decode(
        _ data: Data, as type: ConfigType, encoding: ValueEncoding, key: String, providerName: String
    ) throws -> ConfigContent {
        do {
            switch type {
            case .string: return .string(try ValueCodec.decode(String.self, from: data, as: encoding))
            case .int: return .int(try ValueCodec.decode(Int.self, from: data, as: encoding))
            case .double: return .double(try ValueCodec.decode(Double.self, from: data, as: encoding))
            case .bool: return .bool(try ValueCodec.decode(Bool.self, from: data, as: encoding))
            case .bytes: return .bytes([UInt8](try ValueCodec.decode(Data.self, from: data, as: encoding)))
            case .stringArray: return .stringArray(try ValueCodec.decode([String].self, from: data, as: encoding))
            case .intArray: return .intArray(try ValueCodec.decode([Int].self, from: data, as: encoding))
            case .doubleArray: return .doubleArray(try ValueCodec.decode([Double].self, from: data, as: encoding))
            case .boolArray: return .boolArray(try ValueCodec.decode([Bool].self, from: data, as: encoding))
            case .byteChunkArray:
                return .byteChunkArray(try ValueCodec.decode([Data].self, from: data, as: encoding).map { [UInt8]($0) })
            }
        } catch var error as CofferError {
            error.message = "configuration key \(key) (\(providerName)) cannot be read as \(type.rawValue): "
                + error.message
            throw error
        }
    }

    /// Looks `key` up in `data` (a snapshot's or the store's bytes).
    static func lookup(
        _ key: AbsoluteConfigKey, type: ConfigType, data: Data?, encoding: ValueEncoding,
        secrets: SecretsSpecifier<String, ConfigContent>, providerName: String
    ) throws -> LookupResult {
        let storedKey = storedKey(key)
        guard let data else { return LookupResult(encodedKey: storedKey, value: nil) }
        let content = try decode(data, as: type, encoding: encoding, key: storedKey, providerName: providerName)
        return LookupResult(
            encodedKey: storedKey,
            value: ConfigValue(content, isSecret: secrets.isSecret(key: storedKey, value: content)))
    }

    private func currentSnapshot() -> any ConfigSnapshot {
        do {
            var values: [String: Data] = [:]
            for key in try store.keys() {
                if let data = try store.load(key) { values[key] = data }
            }
            return CofferConfigSnapshot(
                providerName: providerName, values: .success(values), encoding: store.valueEncoding, secrets: secrets)
        } catch {
            return CofferConfigSnapshot(
                providerName: providerName, values: .failure(error), encoding: store.valueEncoding, secrets: secrets)
        }
    }

    // MARK: - Watching

    /// Starts observing the store with the first watcher (outside any lock: the store may call
    /// back at once on its own thread).
    private func startObservingIfNeeded() {
        guard let observable = store as? any ChangeObservingPersistenceStrategy else { return }
        let start = state.withLock { s -> Bool in
            guard !s.observing, s.watcherCount > 0 else { return false }
            s.observing = true
            return true
        }
        guard start else { return }
        // Weak: the store's watcher must not keep the provider alive.
        let observation: StoreObservation?
        do {
            observation = try observable.observeChanges { [weak self] change in self?.changed(change.keys) }
        } catch {
            // The watches still get the current value; they would wait for changes that never
            // come. Said once, never silently, and the next watch tries again.
            observation = nil
            CofferWarning.warn(
                CofferWarning(
                    .watchFailed,
                    "configuration watches of \(providerName) cannot follow changes made elsewhere: \(error)",
                    path: nil))
        }
        // Kept unless every watcher left meanwhile, or a later start already keeps one.
        let unused = state.withLock { s -> StoreObservation? in
            guard let observation else {
                s.observing = false
                return nil
            }
            guard s.watcherCount > 0, s.observation == nil else { return observation }
            s.observation = observation
            return nil
        }
        unused?.cancel()
    }

    /// Stops observing when the last watcher left.
    private func stopObservingIfUnused() {
        let observation = state.withLock { s -> StoreObservation? in
            guard s.watcherCount == 0 else { return nil }
            defer {
                s.observation = nil
                s.observing = false
            }
            return s.observation
        }
        observation?.cancel()
    }

    /// Tells the watchers of `keys` (all of them for `nil`) what the store holds now.
    private func changed(_ keys: Set<String>?) {
        let watchers = state.withLock { s in
            (
                s.valueWatchers.filter { keys?.contains(Self.storedKey($0.value.key)) ?? true },
                Array(s.snapshotWatchers.values)
            )
        }
        for (id, watcher) in watchers.0 {
            let result = Result { try value(forKey: watcher.key, type: watcher.type) }
            let tell = state.withLock { s -> Bool in
                guard s.valueWatchers[id] != nil else { return false }
                if case .success(let lookup) = result {
                    if s.valueWatchers[id]!.last == lookup { return false }
                    s.valueWatchers[id]!.last = lookup
                } else {
                    s.valueWatchers[id]!.last = nil
                }
                return true
            }
            if tell { watcher.continuation.yield(result) }
        }
        if !watchers.1.isEmpty {
            let snapshot = currentSnapshot()
            for continuation in watchers.1 { continuation.yield(snapshot) }
        }
    }
}

extension CofferConfigProvider: ConfigProvider {
    public func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        try Self.lookup(
            key, type: type, data: try store.load(Self.storedKey(key)), encoding: store.valueEncoding,
            secrets: secrets, providerName: providerName)
    }

    /// The store is the source of truth and reads catch up with other writers first: the same
    /// as ``value(forKey:type:)``.
    // The protocol is declared with NonisolatedNonsendingByDefault: these run on the caller.
    nonisolated(nonsending) public func fetchValue(forKey key: AbsoluteConfigKey, type: ConfigType) async throws -> LookupResult {
        try value(forKey: key, type: type)
    }

    /// The current value, then each change made outside this store instance.
    // The protocol is declared with NonisolatedNonsendingByDefault: these run on the caller.
    nonisolated(nonsending) public func watchValue<Return: ~Copyable>(
        forKey key: AbsoluteConfigKey,
        type: ConfigType,
        updatesHandler: nonisolated(nonsending) (
            _ updates: ConfigUpdatesAsyncSequence<Result<LookupResult, any Error>, Never>
        ) async throws -> Return
    ) async throws -> Return {
        try await watch(
            in: \.valueWatchers, { ValueWatcher(key: key, type: type, continuation: $0) },
            first: { id in
                let initial = Result { try value(forKey: key, type: type) }
                state.withLock { s in
                    if case .success(let lookup) = initial { s.valueWatchers[id]?.last = lookup }
                }
                return initial
            }, updatesHandler: updatesHandler)
    }

    /// Every value the store holds now, read once.
    public func snapshot() -> any ConfigSnapshot { currentSnapshot() }

    /// The current snapshot, then a new one after each change made outside this store instance.
    // The protocol is declared with NonisolatedNonsendingByDefault: these run on the caller.
    nonisolated(nonsending) public func watchSnapshot<Return: ~Copyable>(
        updatesHandler: nonisolated(nonsending) (_ updates: ConfigUpdatesAsyncSequence<any ConfigSnapshot, Never>)
            async throws -> Return
    ) async throws -> Return {
        try await watch(
            in: \.snapshotWatchers, { $0 }, first: { _ in currentSnapshot() }, updatesHandler: updatesHandler)
    }

    /// One watch of either kind: a stream that keeps the newest element, its continuation
    /// registered in `watchers` (as `watcher` makes it) before `first` reads the current state
    /// — so a change between the two is told again, never lost — and removed when
    /// `updatesHandler` returns or throws. `first` gets the watch's id.
    // Runs on the caller, as the two protocol methods that call it do.
    nonisolated(nonsending) private func watch<Element: Sendable, Watcher, Return: ~Copyable>(
        in watchers: WritableKeyPath<State, [UInt64: Watcher]>,
        _ watcher: (AsyncStream<Element>.Continuation) -> Watcher,
        first: (UInt64) -> Element,
        updatesHandler: nonisolated(nonsending) (_ updates: ConfigUpdatesAsyncSequence<Element, Never>) async throws
            -> Return
    ) async throws -> Return {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { s -> UInt64 in
            s.next += 1
            s[keyPath: watchers][s.next] = watcher(continuation)
            return s.next
        }
        startObservingIfNeeded()
        defer {
            state.withLock { _ = $0[keyPath: watchers].removeValue(forKey: id) }
            continuation.finish()
            stopObservingIfUnused()
        }
        continuation.yield(first(id))
        return try await updatesHandler(ConfigUpdatesAsyncSequence(stream))
    }
}

extension CofferConfigProvider: CustomStringConvertible {
    /// The provider's name and how many watches it serves; never a value.
    public var description: String {
        "\(providerName)[\(state.withLock { $0.watcherCount }) watchers]"
    }
}

/// The values of a ``CofferConfigProvider`` at one moment.
struct CofferConfigSnapshot: ConfigSnapshot, CustomStringConvertible {
    let providerName: String
    let values: Result<[String: Data], any Error>
    let encoding: ValueEncoding
    let secrets: SecretsSpecifier<String, ConfigContent>

    func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        try CofferConfigProvider.lookup(
            key, type: type, data: try values.get()[CofferConfigProvider.storedKey(key)], encoding: encoding,
            secrets: secrets, providerName: providerName)
    }

    /// The provider's name and the number of values; never a value.
    var description: String {
        switch values {
        case .success(let values): "\(providerName)[\(values.count) values]"
        case .failure(let error): "\(providerName)[unreadable: \(error)]"
        }
    }
}
#endif
