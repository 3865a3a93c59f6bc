public import Foundation

/// Where values live: memory, a file per key, a key-value file, or the encrypted vault.
///
/// A strategy stores opaque bytes under string keys. It is synchronous, thread-safe and
/// `Sendable`: every method may be called from any thread or task. Failures throw a
/// ``CofferError``; a missing key is `nil` from ``load(_:)``, never an error.
///
/// ```swift
/// let store: any PersistenceStrategy = try KeyValueFileStrategy(directory: dir, suite: "prefs")
/// try store.set(42, for: "answer")
/// let answer = try store.get(Int.self, for: "answer")   // 42
/// ```
///
/// A strategy of your own implements the four methods; every other requirement has a default
/// that is right for a store which writes durably when `save` returns and holds no secrets
/// (``id``, ``valueEncoding``, ``holdsSecrets``, ``flush()``, ``compact()``). Three promises
/// no default can make are protocols of their own, adopted only by a store that keeps them:
/// ``BatchPersistenceStrategy`` (several changes in one atomic commit),
/// ``CompareAndSwapPersistenceStrategy`` (a swap atomic across every writer) and
/// ``ChangeObservingPersistenceStrategy`` (it tells when others change its values). A store that
/// waits on a network adopts ``AsyncPersistenceStrategy`` instead of writing the synchronous
/// methods.
///
/// Run `CofferTesting`'s conformance suite against your own strategy to check it behaves like
/// the built-in ones.
public protocol PersistenceStrategy: Sendable {
    /// The bytes stored under `key`, or `nil` when there are none.
    /// - Throws: ``CofferError`` when the store cannot be read (I/O, damage, a locked vault).
    func load(_ key: String) throws -> Data?
    /// Stores `data` under `key`, replacing what was there. Durable as the strategy documents.
    /// - Throws: ``CofferError``; on failure the previous value is still stored.
    func save(_ data: Data, for key: String) throws
    /// Removes `key`. Removing a key that is absent is not an error.
    /// - Throws: ``CofferError`` when the store cannot be written.
    func remove(_ key: String) throws
    /// Every key currently stored, in no particular order.
    /// - Throws: ``CofferError`` when the store cannot be read.
    func keys() throws -> [String]
    /// Which store this is (see ``StoreID``): `@Stored` properties on strategies with equal ids
    /// share their values, are persisted in one commit per `batch { }` and are observed once.
    /// By default a class strategy is the store of its own instance, and a value-type strategy
    /// is a store of its own each time it is used (`nil`).
    var id: StoreID? { get }
    /// How typed values become this strategy's bytes. By default ``ValueEncoding/tagged``; a
    /// store whose bytes other programs read as they are (the vault's secrets, printed by
    /// `coffer get`) returns ``ValueEncoding/plain``.
    var valueEncoding: ValueEncoding { get }
    /// Whether the values are secrets, sealed at rest (a vault's, on disk or in PostgreSQL).
    /// Integrations decide by this, never by a concrete type, what to treat as secret: the
    /// configuration provider marks every value of such a store `isSecret`, so access logs and
    /// descriptions redact it. By default `false`.
    var holdsSecrets: Bool { get }
    /// Makes every write made so far durable (fsync), for a store that writes lazily; returns
    /// when it is. By default nothing: a store whose `save` is durable when it returns has
    /// nothing to flush.
    /// - Throws: ``CofferError`` when the disk refuses.
    func flush() throws
    /// Rewrites the store's files with only the live values, for a store whose removed values
    /// linger until it rewrites them (an append-only journal). By default nothing: a store that
    /// removes a value when asked has nothing to rewrite.
    /// - Throws: ``CofferError`` when the store cannot be rewritten.
    func compact() throws
}

extension PersistenceStrategy {
    /// No identity: a value-type strategy is a store of its own each time it is used (its
    /// properties are committed and observed apart). Implement ``id`` to say which store it is.
    public var id: StoreID? { nil }
    /// ``ValueEncoding/tagged``: Coffer's compact binary form.
    public var valueEncoding: ValueEncoding { .tagged }
    /// `false`: the values are not secrets.
    public var holdsSecrets: Bool { false }
    /// Nothing to flush: every `save` is durable when it returns.
    public func flush() throws {}
    /// Nothing to rewrite: a removed value is gone when `remove` returns.
    public func compact() throws {}
}

extension PersistenceStrategy where Self: AnyObject {
    /// This instance: properties on the same instance are one store.
    public var id: StoreID? { StoreID(self) }
}

/// Which store: two ids are equal exactly when they name one store, where a key names the same
/// value whichever strategy instance or backing reaches it (swift-sharing's `SharedReaderKey.id`
/// plays this part). It is the one name Coffer gives a store: a strategy's ``PersistenceStrategy/id``,
/// a ``Backing``'s ``Backing/store``, and the key of a store a ``CofferContext`` opens once and
/// shares (``CofferContext/sharedStore(id:make:)``).
///
/// `@Stored` groups, shares and observes by it: properties with an equal store and key share one
/// value; inside one `batch { }` the properties of one store are persisted in one commit; and
/// however many properties follow one store, it is observed once.
///
/// A strategy states its id; nothing is inferred from its type. By default (when it does not
/// implement ``PersistenceStrategy/id``) a class strategy is the store of its own instance,
/// `StoreID(self)`, and a value-type strategy has none (`nil`: each use is a store of its own).
/// A strategy that is a view of something shared — a service of a vault, made anew for each
/// use — names that instead:
///
/// ```swift
/// public var id: StoreID? { StoreID(vault, ["service", service]) }
/// ```
///
/// Three forms: ``init(_:_:)`` (an object, or a part of it), ``init(named:)`` (a name alone, the
/// same in every context) and ``inContext(_:)`` (a name within the context a property is
/// created in, as the default key-value suite is).
public struct StoreID: Hashable, Sendable, CustomStringConvertible {
    /// The object the store is, or lives in; `nil` for a store named by ``parts`` alone.
    private let object: ObjectIdentifier?
    /// Keeps the object alive, so its identifier is not reused while this id is.
    private let anchor: Anchor?
    /// What names the store within `object` (or on its own).
    let parts: [String]
    /// Whether ``parts`` name the store within the property's ``CofferContext``.
    package let isContextual: Bool

    // An object reference rather than `any Sendable`: an id is copied and compared wherever a
    // cell is registered, found or released, and copying an existential box cost more than the
    // rest of those steps together.
    private struct Anchor: @unchecked Sendable {
        // @unchecked Sendable: it only keeps a `Sendable` object alive and is never read.
        let object: AnyObject
    }

    /// The store that is `object` (`parts` empty), or a part of it named by `parts`.
    public init(_ object: some AnyObject & Sendable, _ parts: [String] = []) {
        self.init(object: ObjectIdentifier(object), anchor: Anchor(object: object as AnyObject), parts: parts, isContextual: false)
    }

    /// A store named by `parts` alone, such as `["file", path]` for a value-type strategy over
    /// one file: equal names are one store, whichever instance carries them.
    public init(named parts: [String]) {
        self.init(object: nil, anchor: nil, parts: parts, isContextual: false)
    }

    /// A store named by `parts` within the ``CofferContext`` a property is created in, such as
    /// `["keyValue", suite]` for a context's key-value suite: equal in one context, distinct
    /// across contexts.
    public static func inContext(_ parts: [String]) -> StoreID {
        StoreID(object: nil, anchor: nil, parts: parts, isContextual: true)
    }

    /// The store of the file at `path` (symbolic links resolved, `.` and `..` removed), and
    /// `parts` naming the keys within it: equal for every instance opened on the same keys.
    package init(file path: String, _ parts: [String] = []) {
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path
        self.init(named: ["file", resolved] + parts)
    }

    /// The whole store this id is a part of: the object alone for ``init(_:_:)`` (a vault, for a
    /// service of it), else the id itself.
    package var whole: StoreID {
        guard object != nil, !parts.isEmpty else { return self }
        return StoreID(object: object, anchor: anchor, parts: [], isContextual: false)
    }

    private init(object: ObjectIdentifier?, anchor: Anchor?, parts: [String], isContextual: Bool) {
        self.object = object
        self.anchor = anchor
        self.parts = parts
        self.isContextual = isContextual
    }

    public static func == (a: StoreID, b: StoreID) -> Bool {
        a.object == b.object && a.isContextual == b.isContextual && a.parts == b.parts
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(object)
        hasher.combine(isContextual)
        hasher.combine(parts)
    }

    public var description: String {
        (object.map { "\($0)" } ?? (isContextual ? "context" : "named")) + (parts.isEmpty ? "" : ":" + parts.joined(separator: "/"))
    }
}

/// A strategy whose keys live in files. Its ``PersistenceStrategy/id`` tells instances apart;
/// two instances opened on the same files (a second `KeyValueFileStrategy` on one suite, a
/// second `Vault.open` of one vault) still hold the same keys, and where that matters — moving
/// a key onto itself would delete it — ``fileStoreID`` says so.
package protocol FileLocatedPersistenceStrategy: PersistenceStrategy {
    /// The store its files are (``StoreID/init(file:_:)``): equal for every instance on the
    /// same keys.
    var fileStoreID: StoreID { get }
}

/// A batch strategy that is one part of a larger store — a service of a vault — and can commit
/// its changes together with those of the store's other parts: `batch { }` over properties of
/// several services of one vault is one commit (one journal append), not one per service. The
/// parts of one store are those whose ``PersistenceStrategy/id`` names a part of one object
/// (``StoreID/init(_:_:)``, such as `StoreID(vault, ["service", service])`).
package protocol JointBatchPersistenceStrategy: BatchPersistenceStrategy {
    /// Commits every change, each to the key of its part (a strategy whose id is a part of the
    /// same object), as one commit: all of them survive a crash, or none does.
    /// - Throws: ``CofferError``, `.invalidArgument` when a part belongs to another store.
    func saveJointBatch(_ changes: [(part: any PersistenceStrategy, key: String, data: Data?)]) throws
}

/// How ``ValueCodec`` turns typed values into a strategy's bytes.
public enum ValueEncoding: Sendable, Hashable {
    /// Coffer's compact binary form: a tag byte, then the value (or JSON). The default.
    case tagged
    /// The value as another program expects to read it: a String's UTF-8, Data's bytes, numbers
    /// and Bool as their JSON text, anything else as JSON. Used by the vault, so `coffer get`
    /// prints exactly the secret an `@Stored` property saved, and `@Stored` reads what
    /// `coffer set` stored.
    case plain
}

/// A strategy that can persist several changes as one commit (one append, one fsync).
///
/// Its own protocol because it is a promise no default can keep: after a crash, all of a
/// batch's changes survive or none does. `batch { }` hands the changes of one such store to
/// ``saveBatch(_:)`` at once; on a store without it, each property is saved (and fails) on
/// its own.
public protocol BatchPersistenceStrategy: PersistenceStrategy {
    /// Applies every change in one commit: all of them survive a crash, or none does.
    /// A `nil` value removes the key.
    func saveBatch(_ changes: [(key: String, data: Data?)]) throws
}

/// A strategy that can replace one key's value only if it still holds what the caller read,
/// atomically with respect to every writer — other processes included. `$x.update { … }` is
/// built on it: read, transform (with no lock held, so the transform may read other
/// properties), then swap, and read again if someone wrote meanwhile. A counter incremented
/// that way from several processes is exact.
///
/// Its own protocol because no default can be atomic across processes: on a store without it,
/// `update` is exact among the writers of this process only.
public protocol CompareAndSwapPersistenceStrategy: PersistenceStrategy {
    /// Stores `new` under `key` (`nil` removes it) if the key holds exactly `expected` (`nil`:
    /// absent), as of the newest write of any process. Returns whether it stored.
    func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool
}

/// A remote store that can hold one key locked against every writer, of every process, while
/// its caller decides the key's next value: after a lost swap, `$x.update { … }` on it reads,
/// transforms and writes in one transaction instead of retrying the swap. Waiters on the lock
/// are served in turn (the server queues them), so every update ends in its turn however many
/// processes contend, where retried swaps can starve the slowest of them.
package protocol KeyLockingPersistenceStrategy: AsyncPersistenceStrategy, CompareAndSwapPersistenceStrategy {
    /// Locks `key` against every writer and returns the lock, holding the key's value. The lock
    /// is held until ``KeyLock/store(_:)`` or ``KeyLock/release()``, or until the store's
    /// deadline (the wait for the lock and for the decision together): the caller's decision
    /// must be quick. A lock dropped undecided is released.
    func lock(_ key: String) async throws -> any KeyLock
}

/// One key locked by ``KeyLockingPersistenceStrategy/lock(_:)``. Call one of ``store(_:)`` and
/// ``release()``, once.
package protocol KeyLock: Sendable {
    /// The bytes stored under the key when it was locked; `nil` when it is absent.
    var current: Data? { get }
    /// Stores `new` (`nil` removes the key), commits and releases the lock. Throws
    /// ``CofferError/Code/busy`` when the deadline passed first (nothing was stored), or the
    /// store's error when the write failed.
    func store(_ new: Data?) async throws
    /// Releases the lock and stores nothing.
    func release() async
}

/// What changed in a store outside the instance that reports it.
public struct StoreChange: Sendable, Hashable {
    /// The keys whose values may have changed, or `nil` when any may have (the file was replaced
    /// or removed, the watch overflowed, a poll found changes it cannot attribute).
    public var keys: Set<String>?

    public init(keys: Set<String>?) {
        self.keys = keys
    }
}

/// A strategy that can tell when its stored values change outside this instance: written by
/// another process, by the `coffer` command, or by another instance on the same file. `@Stored`
/// properties on such a strategy follow those changes by themselves (docs/STATE.md, "Changes
/// from elsewhere"); a network-backed store adopts it to carry changes between machines.
///
/// Its own protocol because a store either can tell or cannot, and a property follows only a
/// store that can (memory cannot be changed from elsewhere; a plain remote table may have no
/// way to notify).
///
/// Own writes are not reported. A burst may be reported as one change; the last change is
/// never dropped (a report means "catch up", and catching up reads everything).
public protocol ChangeObservingPersistenceStrategy: PersistenceStrategy {
    /// Starts calling `handler` after values change outside this instance, until the returned
    /// observation is cancelled or released. The handler runs on a Coffer thread with none of
    /// Coffer's locks held; it may read the store.
    func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation
}

/// An active ``ChangeObservingPersistenceStrategy/observeChanges(_:)``; stops when cancelled or
/// released. Cancelling the last observation of a process stops its watcher thread.
public final class StoreObservation: Sendable {
    private let onCancel: Locked<(@Sendable () -> Void)?>

    /// An observation that runs `onCancel` once, when cancelled or released.
    public init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = Locked(onCancel)
    }

    /// Stops the observation. Do not call it while holding a lock the handler takes.
    public func cancel() {
        let body = onCancel.withLock { body in
            defer { body = nil }
            return body
        }
        body?()
    }

    deinit { cancel() }
}

/// A store whose watch for outside changes can be stopped at once, whoever observes it (a
/// graceful shutdown stops watching before the process exits).
package protocol WatchStoppable: Sendable {
    /// Stops every observation of this store and its watch; observers are no longer told.
    func stopWatching()
}

/// A store whose calls wait on something slow outside the process — a network round trip, a
/// KDF — and so have an `async` form that suspends instead of holding a thread.
///
/// Its own protocol because it changes how `@Stored` drives the store, without ever blocking
/// its caller on it (docs/STATE.md, "Remote stores and async code"): a setter updates memory,
/// notifies and returns, and the write follows in order in the background
/// (`try await $x.flush()` waits for it); a first read shows the initial value and loads in the
/// background (`try await $x.load()` waits for the stored value).
///
/// Implement the four `async` methods. The synchronous requirements of ``PersistenceStrategy``
/// stay, for code that is not async and for the `coffer` command: by default they run the async
/// form on Coffer's own threads and block the caller until it ends, never needing a thread of
/// Swift's cooperative pool. A remote store that also keeps the promise of
/// ``BatchPersistenceStrategy`` or ``CompareAndSwapPersistenceStrategy`` adopts that protocol
/// too and implements the `async` form of its method here; the synchronous one then comes by
/// default.
///
/// Every call must end within a deadline the store documents (a statement timeout, a connect
/// timeout): ``CofferError/Code/busy`` or ``CofferError/Code/io``, never an endless wait.
public protocol AsyncPersistenceStrategy: PersistenceStrategy {
    /// The bytes stored under `key`, or `nil`.
    func load(_ key: String) async throws -> Data?
    /// Stores `data` under `key`; returns once the store has acknowledged it.
    func save(_ data: Data, for key: String) async throws
    /// Removes `key`; removing an absent key is not an error.
    func remove(_ key: String) async throws
    /// Every key currently stored.
    func keys() async throws -> [String]
    /// ``BatchPersistenceStrategy/saveBatch(_:)``, suspending instead of blocking: implement it
    /// (as one commit) when the store adopts ``BatchPersistenceStrategy``. By default each change
    /// is saved or removed in turn, which is not one commit.
    func saveBatch(_ changes: [(key: String, data: Data?)]) async throws
    /// ``CompareAndSwapPersistenceStrategy/compareAndSwap(_:expected:new:)``, suspending instead
    /// of blocking: implement it when the store adopts ``CompareAndSwapPersistenceStrategy``.
    /// By default it throws ``CofferError/Code/invalidArgument``: the store has no swap.
    func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool
}

extension AsyncPersistenceStrategy {
    /// Runs ``load(_:)-(String)`` for a synchronous caller (see ``AsyncPersistenceStrategy``).
    public func load(_ key: String) throws -> Data? {
        try SynchronousBridge.run(self, "AsyncPersistenceStrategy", "load(_:)") { try await self.load(key) }
    }
    /// Runs the async `save` for a synchronous caller.
    public func save(_ data: Data, for key: String) throws {
        try SynchronousBridge.run(self, "AsyncPersistenceStrategy", "save(_:for:)") { try await self.save(data, for: key) }
    }
    /// Runs the async `remove` for a synchronous caller.
    public func remove(_ key: String) throws {
        try SynchronousBridge.run(self, "AsyncPersistenceStrategy", "remove(_:)") { try await self.remove(key) }
    }
    /// Runs the async `keys` for a synchronous caller.
    public func keys() throws -> [String] {
        try SynchronousBridge.run(self, "AsyncPersistenceStrategy", "keys()") { try await self.keys() }
    }

    /// Each change in turn: not one commit (a store that adopts ``BatchPersistenceStrategy``
    /// implements this as one). A store that adopts ``BatchPersistenceStrategy`` and did not
    /// implement it gets ``CofferError/Code/invalidArgument`` before anything is written, not
    /// a batch that is quietly not all-or-nothing (Swift cannot refuse it at compile time).
    public func saveBatch(_ changes: [(key: String, data: Data?)]) async throws {
        if self is any BatchPersistenceStrategy {
            throw CofferError(
                .invalidArgument,
                "\(Self.self) adopts BatchPersistenceStrategy but does not implement the async saveBatch(_:) as one commit; nothing was written")
        }
        for change in changes {
            if let data = change.data { try await save(data, for: change.key) } else { try await remove(change.key) }
        }
    }

    /// No swap: throws ``CofferError/Code/invalidArgument`` (a store that adopts
    /// ``CompareAndSwapPersistenceStrategy`` implements this).
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool {
        let adopted = self is any CompareAndSwapPersistenceStrategy
        throw CofferError(
            .invalidArgument,
            adopted
                ? "\(Self.self) adopts CompareAndSwapPersistenceStrategy but does not implement the async compareAndSwap(_:expected:new:)"
                : "\(Self.self) has no compare-and-swap (it does not implement the async compareAndSwap)")
    }

    /// Reads a typed value (see ``PersistenceStrategy/get(_:for:)``), suspending instead of blocking.
    public func get<T: Codable>(_ type: T.Type = T.self, for key: String) async throws -> T? {
        guard let data = try await load(key) else { return nil }
        return try ValueCodec.decode(T.self, from: data, as: valueEncoding, source: "key \"\(key)\" of \(Self.self)")
    }

    /// Stores a typed value (see ``PersistenceStrategy/set(_:for:)``), suspending instead of blocking.
    public func set<T: Codable>(_ value: T, for key: String) async throws {
        try await save(ValueCodec.encode(value, as: valueEncoding), for: key)
    }
}

extension CompareAndSwapPersistenceStrategy where Self: AsyncPersistenceStrategy {
    /// Runs the async compare-and-swap for a synchronous caller.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool {
        try SynchronousBridge.run(self, "CompareAndSwapPersistenceStrategy", "compareAndSwap(_:expected:new:)") {
            try await self.compareAndSwap(key, expected: expected, new: new)
        }
    }
}

extension BatchPersistenceStrategy where Self: AsyncPersistenceStrategy {
    /// Runs the async `saveBatch` for a synchronous caller.
    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        try SynchronousBridge.run(self, "BatchPersistenceStrategy", "saveBatch(_:)") { try await self.saveBatch(changes) }
    }
}

/// The synchronous forms of an ``AsyncPersistenceStrategy``'s calls: each runs the `async`
/// form on Coffer's threads and waits (``Offload/wait(_:)``).
///
/// Guarded against a store that lacks the `async` form: Swift then takes the synchronous form
/// as the `async` requirement's witness too (a synchronous function satisfies an `async`
/// requirement), so the bridge would call itself without end, a blocked thread per turn. The
/// bridge marks the task it starts with the store (the instance for a class, else its type)
/// and the method; met again inside it for both, it throws instead.
package enum SynchronousBridge {
    struct Entry: Hashable, Sendable {
        let store: ObjectIdentifier
        let method: String
    }

    @TaskLocal static var entered: Set<Entry> = []

    package static func run<T: Sendable, Store: PersistenceStrategy>(
        _ store: Store, _ promise: String, _ method: String,
        _ operation: @escaping @Sendable () async throws -> T
    ) throws -> T {
        let identity = type(of: store as Any) is AnyClass ? ObjectIdentifier(store as AnyObject) : ObjectIdentifier(Store.self)
        let entry = Entry(store: identity, method: method)
        guard !entered.contains(entry) else {
            throw CofferError(
                .invalidArgument,
                "\(Store.self) adopts \(promise) but does not implement the async \(method) (its synchronous form "
                    + "runs the async one); nothing was done")
        }
        let marked = entered.union([entry])
        return try Offload.wait { try await $entered.withValue(marked) { try await operation() } }
    }
}

extension PersistenceStrategy {
    /// Reads a typed value stored with ``set(_:for:)``, or `nil` when the key is absent.
    ///
    /// Bool, integers, Double, Float, String and Data use Coffer's compact binary encoding
    /// (``ValueEncoding/plain`` on a store that asks for it); other `Codable` values are JSON.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/decoding`` when the bytes are not a `T`.
    public func get<T: Codable>(_ type: T.Type = T.self, for key: String) throws -> T? {
        guard let data = try load(key) else { return nil }
        return try ValueCodec.decode(T.self, from: data, as: valueEncoding, source: "key \"\(key)\" of \(Self.self)")
    }

    /// Stores a typed value under `key` (see ``get(_:for:)`` for the encoding).
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored.
    public func set<T: Codable>(_ value: T, for key: String) throws {
        try save(ValueCodec.encode(value, as: valueEncoding), for: key)
    }
}
