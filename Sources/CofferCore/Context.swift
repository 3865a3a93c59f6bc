public import Foundation
import Synchronization

/// How soon a write must survive what.
public enum Durability: Sendable, Hashable {
    /// When the call returns, the write survives power loss (fdatasync before returning).
    case immediate
    /// When the call returns, the write is in the kernel, so it survives the process crashing;
    /// it reaches stable storage within `window`, or at an explicit `flush()`.
    case coalesced(window: Duration)

    /// Coalesced with a one-second window.
    public static let coalesced = Durability.coalesced(window: .seconds(1))
}

/// Where the default stores live: the base directory, the durability, the file system, and any
/// settings other modules attach (the vault's unlock, for example).
///
/// `.keyValue`, `.disk` and `.vault` spellings without an explicit store use
/// ``CofferContext/current``. Override it for a scope — parallel tests each get their own
/// directory and never touch the user's files:
///
/// ```swift
/// let context = try CofferContext.temporary()
/// try CofferContext.$current.withValue(context) {
///     let model = AccountModel()      // its @Stored properties resolve against `context`
/// }
/// ```
///
/// A property captures the context in effect when it is created.
public final class CofferContext: Sendable {
    /// The application's name; the default directory is `$XDG_DATA_HOME/<appName>`.
    public let appName: String
    /// The base directory of every default store.
    public let directory: URL
    /// Durability of the default key-value suites (the vault always writes immediately).
    public let durability: Durability
    /// How long a write waits for another process's lock before failing with ``CofferError/Code/busy``.
    public let lockTimeout: Duration
    /// The file system a test put in place of the kernel's, or `nil` for the kernel's own.
    /// CofferRuntime's `fileSystem` resolves `nil` to its `LiveFileSystem`: this module holds the
    /// vocabulary only and names no implementation.
    package let fileSystemOverride: (any FileSystem)?
    private let settings: [ObjectIdentifier: any Sendable]
    private let stores = Locked<[StoreID: StoreSlot]>([:])

    /// How long a write waits for another process's lock by default, in the library and in the
    /// `coffer` command alike: long enough for another process's vault unlock (Argon2id, up to
    /// a second or two on a loaded machine) or compaction, short enough to report a stuck lock.
    public static let defaultLockTimeout: Duration = .seconds(10)

    /// Creates a context rooted at `directory`.
    public convenience init(
        directory: URL,
        appName: String = CofferContext.defaultAppName,
        durability: Durability = .coalesced,
        lockTimeout: Duration = CofferContext.defaultLockTimeout
    ) {
        self.init(
            directory: directory, appName: appName, durability: durability, lockTimeout: lockTimeout,
            fileSystem: nil, settings: [:])
    }

    /// Creates a context whose default stores use `fileSystem` (`nil`: the kernel's), for tests
    /// that inject faults.
    package convenience init(
        directory: URL,
        appName: String = CofferContext.defaultAppName,
        durability: Durability = .coalesced,
        lockTimeout: Duration = CofferContext.defaultLockTimeout,
        fileSystem: (any FileSystem)?
    ) {
        self.init(
            directory: directory, appName: appName, durability: durability, lockTimeout: lockTimeout,
            fileSystem: fileSystem, settings: [:])
    }

    private init(
        directory: URL, appName: String, durability: Durability, lockTimeout: Duration, fileSystem: (any FileSystem)?,
        settings: [ObjectIdentifier: any Sendable]
    ) {
        self.directory = directory
        self.appName = appName
        self.durability = durability
        self.lockTimeout = lockTimeout
        self.fileSystemOverride = fileSystem
        self.settings = settings
    }

    /// The context in effect for this task (the ``standard`` one unless overridden).
    @TaskLocal public static var current: CofferContext = .standard

    /// `$XDG_DATA_HOME/<appName>`, else `~/.local/share/<appName>` (on macOS, Application Support),
    /// where `appName` is ``defaultAppName``. Made on first use, and the same instance after.
    public static var standard: CofferContext {
        AppName.state.withLock { state in
            if let made = state.standard { return made }
            let name = state.name ?? processAppName
            let made = CofferContext(directory: defaultDirectory(appName: name), appName: name)
            state.standard = made
            return made
        }
    }

    /// The folder name of the ``standard`` context: the name given to ``setDefaultAppName(_:)``,
    /// else the process's name (`myapp` for `/usr/bin/myapp`; under `swift test`, the test
    /// bundle's, such as `MyAppPackageTests.xctest`).
    public static var defaultAppName: String {
        AppName.state.withLock { $0.name ?? processAppName }
    }

    /// A context in a new private (`0700`) temporary directory, for tests and demos.
    ///
    /// A test that puts its own file system in place uses CofferRuntime's
    /// `temporary(prefix:durability:fileSystem:)`, which makes the directory through it.
    public static func temporary(prefix: String = "coffer", durability: Durability = .coalesced) throws -> CofferContext {
        let path = temporaryPath(prefix: prefix)
        try makePrivateDirectory(path)
        return CofferContext(directory: URL(fileURLWithPath: path), durability: durability)
    }

    /// A new, unused path in the system's temporary directory: `<tmp>/<prefix>-<random>`.
    package static func temporaryPath(prefix: String) -> String {
        var generator = SystemRandomNumberGenerator()
        let base = FileManager.default.temporaryDirectory.path
        return "\(base)/\(prefix)-\(String(generator.next() as UInt64, radix: 36))"
    }

    /// The default base directory for an application.
    public static func defaultDirectory(appName: String) -> URL {
        let environment = ProcessInfo.processInfo.environment
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            return URL(fileURLWithPath: xdg).appendingPathComponent(appName)
        }
        let home = environment["HOME"] ?? NSHomeDirectory()
        #if os(Linux)
        return URL(fileURLWithPath: home).appendingPathComponent(".local/share").appendingPathComponent(appName)
        #else
        return URL(fileURLWithPath: home).appendingPathComponent("Library/Application Support")
            .appendingPathComponent(appName)
        #endif
    }

    /// A copy of this context with `setting` attached (one setting per type), sharing no open stores.
    public func with<Setting: Sendable>(_ setting: Setting) -> CofferContext {
        var settings = self.settings
        settings[ObjectIdentifier(Setting.self)] = setting
        return CofferContext(
            directory: directory, appName: appName, durability: durability, lockTimeout: lockTimeout,
            fileSystem: fileSystemOverride, settings: settings)
    }

    /// The setting of type `Setting` attached with ``with(_:)``, if any.
    public func setting<Setting: Sendable>(_ type: Setting.Type) -> Setting? {
        settings[ObjectIdentifier(Setting.self)] as? Setting
    }

    /// The store `id` names in this context, created by `make` on first use, so every property
    /// of a context shares one instance per file (one journal per file per process). The id is
    /// the one a backing of the store gives (``Backing/store``), such as
    /// `StoreID.inContext(["keyValue", suite])`.
    ///
    /// `make` runs with no lock held that other stores need: opening a vault (Argon2id, up to a
    /// second) never delays a property of another store. Callers asking for the same `id`
    /// meanwhile wait for that one `make`, and share its store or its error; the next call after
    /// a failure tries again.
    public func sharedStore<Store: Sendable>(id: StoreID, make: () throws -> Store) throws -> Store {
        while true {
            let step = stores.withLock { stores -> StoreStep in
                switch stores[id] {
                case .ready(let store)?: return .ready(store)
                case .opening(let gate)?: return .wait(gate)
                case nil:
                    let gate = OpeningGate()
                    stores[id] = .opening(gate)
                    return .open(gate)
                }
            }
            switch step {
            case .ready(let existing):
                guard let store = existing as? Store else {
                    throw CofferError(.invalidArgument, "the store \(id) of this context is a \(type(of: existing)), not a \(Store.self)")
                }
                return store
            case .wait(let gate):
                if case .failure(let error) = gate.wait() { throw error }
                continue  // opened: the next turn finds it
            case .open(let gate):
                let made = Result { try make() }
                stores.withLock { stores in
                    switch made {
                    case .success(let store): stores[id] = .ready(store)
                    case .failure: stores[id] = nil
                    }
                }
                gate.open(made.map { _ in () })
                let store = try made.get()
                noteStandardUseInTests()
                return store
            }
        }
    }

    /// Every store opened through ``sharedStore(id:make:)`` so far (a graceful shutdown flushes
    /// and locks them).
    package var openStores: [any Sendable] {
        stores.withLock { stores in
            stores.values.compactMap { slot -> (any Sendable)? in
                if case .ready(let store) = slot { return store }
                return nil
            }
        }
    }
}

/// What a caller of `sharedStore` does: take the store, wait for another caller to open it, or open it.
private enum StoreStep {
    case ready(any Sendable)
    case wait(OpeningGate)
    case open(OpeningGate)
}

/// A store of a context: opened, or being opened by one caller while others wait.
private enum StoreSlot: Sendable {
    case ready(any Sendable)
    case opening(OpeningGate)
}

/// Where callers wait for a store another caller is opening.
private final class OpeningGate: @unchecked Sendable {
    // @unchecked Sendable: `outcome` is guarded by `condition`.
    private let condition = NSCondition()
    private var outcome: Result<Void, any Error>?

    func open(_ result: Result<Void, any Error>) {
        condition.lock()
        outcome = result
        condition.broadcast()
        condition.unlock()
    }

    func wait() -> Result<Void, any Error> {
        condition.lock()
        defer { condition.unlock() }
        while outcome == nil { condition.wait() }
        return outcome!
    }
}

/// How a `@Stored` property persists its value: a strategy and the key within it.
///
/// Spelled at the use site as `.memory`, `.keyValue(key:)`, `.disk(key:)`, `.vault(service:account:)`
/// (each declared by the module that owns the strategy), or ``strategy(_:key:)`` for any
/// ``PersistenceStrategy`` of your own.
public struct Backing: Sendable, CustomStringConvertible {
    /// A readable name of where the value lives, such as `keyValue(suite: network, key: timeout)`.
    public let description: String
    /// Resolves the strategy and key in a context; `nil` means memory only.
    public let resolve: @Sendable (CofferContext) throws -> (strategy: any PersistenceStrategy, key: String)?
    /// Which stored value this is, known without opening anything: a store and a key in it.
    package let value: ValueID?

    /// One stored value: a key of a store (``StoreID``).
    package struct ValueID: Hashable, Sendable, CustomStringConvertible {
        let store: StoreID
        let key: String

        /// Whether the store is named relative to the property's context (``StoreID/inContext(_:)``).
        package var isContextual: Bool { store.isContextual }

        package var description: String { "\(store)/\(key)" }
    }

    /// A backing resolved by `resolve` when the property is first used.
    ///
    /// `store` and `key` say which stored value it is, known without opening anything: every
    /// `@Stored` property with an equal store and key (and the same value type) shares one value
    /// in the process. Without a `store` (memory, and backings that cannot tell) each property
    /// has a value of its own (prefer ``strategy(_:key:)`` or pass one).
    ///
    /// ```swift
    /// Backing(description: "shelf(key: \(key))", store: StoreID(shelf), key: key) { _ in (ShelfView(shelf), key) }
    /// ```
    public init(
        description: String, store: StoreID? = nil, key: String = "",
        resolve: @escaping @Sendable (CofferContext) throws -> (strategy: any PersistenceStrategy, key: String)?
    ) {
        self.description = description
        self.value = store.map { ValueID(store: $0, key: key) }
        self.resolve = resolve
    }

    /// The store the value lives in, as given when the backing was made (see ``StoreID``);
    /// `nil` when the backing names none.
    public var store: StoreID? { value?.store }

    /// Memory only: the value lives as long as the property and is never written anywhere.
    public static let memory = Backing(description: "memory") { _ in nil }

    /// Any strategy and a key in it. Properties on the same store (equal
    /// ``PersistenceStrategy/id``s: by default the same class instance) and key share one value;
    /// a strategy without an id (a value type) gives each property a value of its own.
    public static func strategy(_ strategy: any PersistenceStrategy, key: String) -> Backing {
        Backing(description: "\(type(of: strategy))(key: \(key))", store: strategy.id, key: key) { _ in
            (strategy, key)
        }
    }
}

// MARK: The context of a new property

extension CofferContext {
    /// The context a property created now resolves in, and that `@Stored` and `StoredGroup`
    /// capture: the one a dependency system scoped for this task (CofferDependencies'
    /// `withDependencies { $0.cofferContext = … }`), else ``current``.
    public static var inEffect: CofferContext {
        guard ScopedContext.isInstalled.load(ordering: .acquiring),
            let scoped = ScopedContext.provider.withLock({ $0 })?()
        else { return current }
        return scoped
    }

    /// Installs where ``inEffect`` finds a context a dependency system scoped: `provider` returns
    /// it, or `nil` outside such a scope. One provider per process; installing again replaces it.
    package static func setScopedContextProvider(_ provider: @escaping @Sendable () -> CofferContext?) {
        ScopedContext.provider.withLock { $0 = provider }
        ScopedContext.isInstalled.store(true, ordering: .releasing)
    }

    private enum ScopedContext {
        /// Set once a provider is installed: until then ``inEffect`` takes no lock.
        static let isInstalled = Atomic<Bool>(false)
        static let provider = Locked<(@Sendable () -> CofferContext?)?>(nil)
    }
}

// MARK: The default application name, and the standard context in tests

extension CofferContext {
    fileprivate enum AppName {
        struct State {
            var name: String?
            var standard: CofferContext?
        }
        static let state = Locked(State())
    }

    private static var processAppName: String { ProcessInfo.processInfo.processName }

    /// Names the folder of the ``standard`` context: `$XDG_DATA_HOME/<name>`.
    ///
    /// Call it first thing at startup, before any property or ``current`` is used: the
    /// standard context is made on first use and keeps its directory.
    ///
    /// ```swift
    /// @main struct Tool {
    ///     static func main() throws {
    ///         try CofferContext.setDefaultAppName("com.example.tool")   // ~/.local/share/com.example.tool
    ///         …
    /// ```
    /// - Throws: ``CofferError`` with code ``CofferError/Code/invalidArgument`` when `name` is
    ///   empty, `.` or `..`, or holds a `/` or a NUL; or when the standard context is already in
    ///   use under another name (its stores would otherwise be split across two folders).
    public static func setDefaultAppName(_ name: String) throws {
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.contains("\0") else {
            throw CofferError(.invalidArgument, "an app name must be one folder name (not empty, no \"/\"), got \"\(name)\"")
        }
        try AppName.state.withLock { state in
            if let standard = state.standard, standard.appName != name {
                throw CofferError(
                    .invalidArgument,
                    "the default context is already in use as \"\(standard.appName)\" (\(standard.directory.path)): "
                        + "call setDefaultAppName(_:) before any property or CofferContext.current is used")
            }
            state.name = name
        }
    }

    /// Whether this process is a test runner (XCTest or Swift Testing): its name ends in
    /// `.xctest` (how `swift test` names the runner), or Xcode's test environment is set.
    package static let isRunningTests: Bool = {
        let environment = ProcessInfo.processInfo.environment
        return processAppName.hasSuffix(".xctest") || environment["XCTestConfigurationFilePath"] != nil
            || environment["XCTestBundlePath"] != nil || environment["XCTestSessionIdentifier"] != nil
    }()

    /// Tells, once per process, that a test opened a store in the ``standard`` context — the
    /// user's real data folder, shared by every test — and how to give the test its own.
    private func noteStandardUseInTests() {
        guard Self.isRunningTests, AppName.state.withLock({ $0.standard === self }) else { return }
        CofferWarning.warn(
            CofferWarning(
                .standardContextInTests,
                "a test opened a store in the default context, so it reads and writes the real data folder "
                    + "of app \"\(appName)\" (shared by every test run). Give the test its own folder: create "
                    + "the model inside `CofferContext.$current.withValue(try .temporary()) { … }`",
                path: directory.path))
    }
}
