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
    /// are persisted in one commit per `batch { }` and observed once. By default a class
    /// strategy is the store of its own instance, and a value-type strategy has no identity.
    var id: StoreID? { get }
}

/// Which store a strategy is: two strategies with equal ids are one store, where a key names the
/// same value through either of them (swift-sharing's `SharedReaderKey.id` plays this part).
///
/// `@Stored` groups and observes by it: inside one `batch { }` the properties of one store are
/// persisted in one commit, and however many properties follow one store, it is observed once.
/// A class strategy is, by default, the store of its own instance (``StoreID/init(_:_:)``); a
/// strategy that is a view of something shared — a service of a vault, made anew for each use —
/// names that instead:
///
/// ```swift
/// public var id: StoreID? { StoreID(vault, ["service", service]) }
/// ```
public struct StoreID: Hashable, Sendable, CustomStringConvertible {
    /// The object the store is, or lives in; `nil` for a store named by ``parts`` alone.
    private let object: ObjectIdentifier?
    /// Keeps the object alive, so its identifier is not reused while this id is.
    private let anchor: Anchor?
    /// What names the store within `object` (or on its own).
    let parts: [String]

    // An object reference rather than `any Sendable`: an id is copied and compared wherever a
    // cell is registered, found or released, and copying an existential box cost more than the
    // rest of those steps together.
    private struct Anchor: @unchecked Sendable {
        // @unchecked Sendable: it only keeps a `Sendable` object alive and is never read.
        let object: AnyObject
    }

    /// The store that is `object` (`parts` empty), or a part of it named by `parts`.
    public init(_ object: some AnyObject & Sendable, _ parts: [String] = []) {
        self.object = ObjectIdentifier(object)
        self.anchor = Anchor(object: object as AnyObject)
        self.parts = parts
    }

    /// A store named by `parts` alone, such as `["file", path]` for a value-type strategy over
    /// one file: equal names are one store, whichever instance carries them.
    public init(named parts: [String]) {
        self.object = nil
        self.anchor = nil
        self.parts = parts
    }

    /// The identity of `value` when it is a store or holds one: a strategy's ``PersistenceStrategy/id``,
    /// else the instance of a class (a vault, say); `nil` for a value without one. A shutdown
    /// uses it to handle each store once, however many ways it is reachable.
    package static func of(_ value: any Sendable) -> StoreID? {
        if let strategy = value as? any PersistenceStrategy { return strategy.id }
        guard type(of: value) is AnyObject.Type else { return nil }
        return StoreID(object: ObjectIdentifier(value as AnyObject), anchor: Anchor(object: value as AnyObject), parts: [])
    }

    private init(object: ObjectIdentifier?, anchor: Anchor?, parts: [String]) {
        self.object = object
        self.anchor = anchor
        self.parts = parts
    }

    public static func == (a: StoreID, b: StoreID) -> Bool { a.object == b.object && a.parts == b.parts }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(object)
        hasher.combine(parts)
    }

    public var description: String {
        (object.map { "\($0)" } ?? "named") + (parts.isEmpty ? "" : ":" + parts.joined(separator: "/"))
    }
}

extension PersistenceStrategy {
    /// No identity: a value-type strategy is a store of its own each time it is used (its
    /// properties are committed and observed apart). Implement ``id`` to say which store it is.
    public var id: StoreID? { nil }
}

extension PersistenceStrategy where Self: AnyObject {
    /// This instance: properties on the same instance are one store.
    public var id: StoreID? { StoreID(self) }
}

/// A strategy whose keys live in files: where, so that two instances opened on the same files
/// (a second `KeyValueFileStrategy` on one suite, a second `Vault.open` of one vault) are known
/// to be one store where that matters — moving a key onto itself would delete it.
package protocol FileLocatedPersistenceStrategy: PersistenceStrategy {
    /// The file (or directory) holding the keys, and what else names them within it (a vault's
    /// service): equal for every instance on the same keys, once the path is resolved.
    var fileLocation: (path: String, within: [String]) { get }
}

extension FileLocatedPersistenceStrategy {
    /// ``fileLocation`` with the path's symbolic links resolved and `.`/`..` removed.
    package var resolvedFileLocation: [String] {
        let location = fileLocation
        return [URL(fileURLWithPath: location.path).resolvingSymlinksInPath().standardizedFileURL.path] + location.within
    }
}

/// A batch strategy that is one part of a larger store — a service of a vault — and can commit
/// its changes together with those of the store's other parts: `batch { }` over properties of
/// several services of one vault is one commit (one journal append), not one per service.
package protocol JointBatchPersistenceStrategy: BatchPersistenceStrategy {
    /// The whole store: equal for every part of it.
    var jointStoreID: StoreID { get }
    /// Commits every change, each to the key of its part (a strategy with the same
    /// ``jointStoreID``), as one commit: all of them survive a crash, or none does.
    /// - Throws: ``CofferError``, `.invalidArgument` when a part belongs to another store.
    func saveJointBatch(_ changes: [(part: any PersistenceStrategy, key: String, data: Data?)]) throws
}

/// A strategy whose bytes other programs read as they are (the vault's secrets, read by
/// `coffer get`): typed values are stored in ``ValueEncoding/plain`` form.
public protocol PlainValuePersistenceStrategy: PersistenceStrategy {}

/// A strategy whose values are secrets, sealed at rest (a vault's, on disk or in PostgreSQL).
/// Integrations decide by this capability, never by a concrete type, what to treat as secret:
/// the configuration provider marks every value of such a store `isSecret`, so access logs and
/// descriptions redact it.
public protocol SealedPersistenceStrategy: PersistenceStrategy {}

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
public protocol BatchPersistenceStrategy: PersistenceStrategy {
    /// Applies every change in one commit: all of them survive a crash, or none does.
    /// A `nil` value removes the key.
    func saveBatch(_ changes: [(key: String, data: Data?)]) throws
}

/// A strategy whose removed values linger in its files until it rewrites them (an append-only
/// journal), and that can rewrite them now.
public protocol CompactablePersistenceStrategy: PersistenceStrategy {
    /// Rewrites the store's files with only the live values, so removed ones are gone from them.
    func compact() throws
}

/// A strategy that can replace one key's value only if it still holds what the caller read,
/// atomically with respect to every writer — other processes included. `$x.update { … }` is
/// built on it: read, transform (with no lock held, so the transform may read other
/// properties), then swap, and read again if someone wrote meanwhile. A counter incremented
/// that way from several processes is exact.
public protocol CompareAndSwapPersistenceStrategy: PersistenceStrategy {
    /// Stores `new` under `key` (`nil` removes it) if the key holds exactly `expected` (`nil`:
    /// absent), as of the newest write of any process. Returns whether it stored.
    func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool
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

/// A strategy that writes lazily and can be asked to make its writes durable now.
public protocol FlushablePersistenceStrategy: PersistenceStrategy {
    /// Makes every write made so far durable (fsync). Returns when it is.
    func flush() throws
}

/// A store whose calls wait on something slow outside the process — a network round trip, a
/// KDF — and so have an `async` form that suspends instead of holding a thread.
///
/// `@Stored` drives such a store without ever blocking its caller on it (docs/STATE.md,
/// "Remote stores and async code"): a setter updates memory, notifies and returns, and the write follows in
/// order in the background (`try await $x.flush()` waits for it); a first read shows the initial
/// value and loads in the background (`try await $x.load()` waits for the stored value). The
/// synchronous requirements of ``PersistenceStrategy`` stay, for code that is not async and for
/// the `coffer` command: by default they run the async form on Coffer's own threads and block
/// the caller until it ends, never needing a thread of Swift's cooperative pool.
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
}

/// An ``AsyncPersistenceStrategy`` with an async compare-and-swap (`try await $x.update { … }`).
public protocol AsyncCompareAndSwapPersistenceStrategy: AsyncPersistenceStrategy, CompareAndSwapPersistenceStrategy {
    /// ``CompareAndSwapPersistenceStrategy/compareAndSwap(_:expected:new:)``, suspending instead of blocking.
    func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool
}

/// An ``AsyncPersistenceStrategy`` that commits several changes at once.
public protocol AsyncBatchPersistenceStrategy: AsyncPersistenceStrategy, BatchPersistenceStrategy {
    /// ``BatchPersistenceStrategy/saveBatch(_:)``, suspending instead of blocking.
    func saveBatch(_ changes: [(key: String, data: Data?)]) async throws
}

extension AsyncPersistenceStrategy {
    /// Runs ``load(_:)-(String)`` for a synchronous caller (see ``AsyncPersistenceStrategy``).
    public func load(_ key: String) throws -> Data? { try Offload.wait { try await self.load(key) } }
    /// Runs the async `save` for a synchronous caller.
    public func save(_ data: Data, for key: String) throws { try Offload.wait { try await self.save(data, for: key) } }
    /// Runs the async `remove` for a synchronous caller.
    public func remove(_ key: String) throws { try Offload.wait { try await self.remove(key) } }
    /// Runs the async `keys` for a synchronous caller.
    public func keys() throws -> [String] { try Offload.wait { try await self.keys() } }

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

extension AsyncCompareAndSwapPersistenceStrategy {
    /// Runs the async compare-and-swap for a synchronous caller.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool {
        try Offload.wait { try await self.compareAndSwap(key, expected: expected, new: new) }
    }
}

extension AsyncBatchPersistenceStrategy {
    /// Runs the async `saveBatch` for a synchronous caller.
    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        try Offload.wait { try await self.saveBatch(changes) }
    }
}

extension PersistenceStrategy {
    /// How typed values become this strategy's bytes: ``ValueEncoding/plain`` for a
    /// ``PlainValuePersistenceStrategy``, else ``ValueEncoding/tagged``.
    public var valueEncoding: ValueEncoding { self is any PlainValuePersistenceStrategy ? .plain : .tagged }

    /// Reads a typed value stored with ``set(_:for:)``, or `nil` when the key is absent.
    ///
    /// Bool, integers, Double, Float, String and Data use Coffer's compact binary encoding;
    /// other `Codable` values are JSON.
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
