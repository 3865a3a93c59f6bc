public import CofferCore
import Foundation
import Synchronization

/// What changed in a ``StoredMap``'s store, as ``StoredMap/changes`` tells it.
public enum StoredMapChange: Sendable, Hashable {
    /// These keys may have changed (in this process, or written elsewhere): read them again.
    case keys(Set<String>)
    /// Any key may have changed — the store was replaced or removed, its watch overflowed, a
    /// poll found changes it cannot attribute: reload whatever you show.
    case unknown
}

/// Typed values under keys chosen at run time — per tenant, user, session, flag name — in one
/// store: a key-value suite, a vault service, a PostgreSQL suite (`.strategy(store)`).
///
/// ```swift
/// let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false)
/// flags["beta-ui"] = true                   // persisted, as a @Stored setter
/// let on = flags["beta-ui"]                 // the first read of a key loads it
/// try flags.update("launches-\(user)") { _ in }   // read-modify-write, atomic across processes
/// for await change in flags.changes { … }   // which keys changed, here or elsewhere
/// ```
///
/// Each key is a ``Stored`` property underneath (``entry(_:)`` returns it), so everything a
/// `@Stored` property does holds per key: one value per key in the process — an entry and a
/// `@Stored(backed: .keyValue(suite: "flags", key: "beta-ui"))` of the same `Value` type share
/// it —, changes made elsewhere followed while someone holds the key, Observation and
/// ``Stored/values``, ``Computed`` values, ``batch(_:)``, errors per key in ``Stored/error``.
///
/// **Costs.** Nothing here grows with the number of keys in use: making or finding an entry is
/// a dictionary lookup; a key is followed (one entry in its store's table, under the one
/// observation of the store) only while something holds its entry, and its cell is let go in
/// the background (after lingering about 250 ms, to be taken up by an entry made again for the
/// key). The map keeps its store observed from its first use until it goes away, so entries
/// made and dropped per request do not start and stop the store's watch. The map itself holds the
/// entries of the ``keepsRecent`` keys it made last, so that repeated reads come from memory
/// and a background load lands; older ones are let go, and a key nobody holds costs nothing.
///
/// **Remote stores.** On an ``AsyncPersistenceStrategy`` (PostgreSQL) nothing blocks on the
/// network, as with `@Stored`: the first read of a key shows ``defaultValue`` and loads in the
/// background (``Stored/isLoading``), and a write returns before the server acknowledges it.
/// In async code, `try await map.load(key)` reads the stored value, and the `async` forms of
/// `save(_:for:)`, `update(_:_:)`, `remove(_:)` and
/// `keys()` wait for the server.
public final class StoredMap<Value: Codable & Sendable>: Sendable {
    /// Where every key of the map persists.
    public let store: StoreChoice
    /// The value of a key with nothing stored, and after its stored value is removed.
    public let defaultValue: Value
    /// The context the store resolves in: ``CofferContext/inEffect`` when the map was made.
    public let context: CofferContext
    /// How many of the entries it made last the map keeps alive (0: none).
    public let keepsRecent: Int

    private let recent: Locked<RecentEntries<Value>>
    /// The map's hold on its store's observation (see ``holdStore(through:)``), and whether it
    /// was taken (or the store cannot be observed): one relaxed load per use after that.
    private let storeHold = Locked<ChangeRouter.Unsubscribe?>(nil)
    private let holdsStore = Atomic<Bool>(false)
    private let holder = StoreHolder()
    /// The store's strategy, resolved on first need by `keys()` and ``changes``.
    private let resolved = Locked<Resolved?>(nil)

    private enum Resolved: Sendable {
        case store(any PersistenceStrategy)
        case memory
    }

    /// A map whose keys persist in `store`, resolved in ``CofferContext/inEffect``.
    ///
    /// - Parameters:
    ///   - store: Where the keys persist: `.keyValue(suite:)`, `.vault(service:)`,
    ///     `.strategy(_:)` (a PostgreSQL suite, say), `.disk`, `.memory`.
    ///   - defaultValue: The value of a key with nothing stored.
    ///   - keepsRecent: How many of the entries it made last the map keeps alive, so that a
    ///     key read again soon is served from memory, and a remote key's background load is
    ///     not thrown away. 0 keeps none: each use of a key nobody holds loads it anew.
    public init(store: StoreChoice, default defaultValue: Value, keepsRecent: Int = 256) {
        self.store = store
        self.defaultValue = defaultValue
        self.context = CofferContext.inEffect
        self.keepsRecent = max(0, keepsRecent)
        self.recent = Locked(RecentEntries())
    }

    /// A map of optional values, `nil` for a key with nothing stored; storing `nil` removes the key.
    ///
    /// ```swift
    /// let tokens = StoredMap<String?>(store: .vault(service: "tenants"))
    /// ```
    public convenience init<Wrapped: Codable & Sendable>(store: StoreChoice, keepsRecent: Int = 256)
    where Value == Wrapped? {
        self.init(store: store, default: nil, keepsRecent: keepsRecent)
    }

    deinit {
        // The entries the map kept go with it; one whose write is still on its way to a remote
        // store is kept until the server has it (see `keepUntilStored`).
        for entry in recent.withLock({ Array($0.byKey.values) }) { Self.keepUntilStored(entry) }
        if let hold = storeHold.withLock({ $0 }) { ChangeRouter.unsubscribe(hold) }
    }

    /// Keeps the store observed from the first use of an entry that resolved it until the map
    /// goes away. The observation of a store (a watch thread and descriptors for a file, a
    /// listening connection for PostgreSQL) lasts while anything follows the store; without
    /// this, a map whose entries are made and dropped per request started and stopped it with
    /// each one — most of the cost of such an entry. The hold follows no key: a key is followed
    /// only while its entry is held, as before.
    private func holdStore(through entry: Stored<Value>) {
        guard !holdsStore.load(ordering: .relaxed) else { return }
        guard let binding = entry.cell.resolvedBinding else {
            // Memory: nothing to observe, ever. Not resolved yet: the next use tries again.
            if entry.cell.isResolved { holdsStore.store(true, ordering: .relaxed) }
            return
        }
        let token = ChangeRouter.subscribe(listener: holder, to: binding.strategy)
        let unused = storeHold.withLock { held -> ChangeRouter.Unsubscribe? in
            guard held == nil else { return token }
            held = token
            return nil
        }
        if let unused { ChangeRouter.unsubscribe(unused) }
        holdsStore.store(true, ordering: .relaxed)
    }

    // MARK: Keys

    /// The value of `key`, loaded on its first use; setting it persists it, as a `@Stored`
    /// setter does (`nil` removes an optional key).
    ///
    /// `map[key] += 1` reads and then writes: a write made elsewhere in between is lost. Use
    /// `update(_:_:)` to change a value from the one stored.
    public subscript(key: String) -> Value {
        get {
            let entry = entry(key)
            let value = entry.wrappedValue
            holdStore(through: entry)
            return value
        }
        set {
            let entry = entry(key)
            // Inside a batch, the entry lives until the batch has persisted it, so a read of
            // the key in the batch sees the write (the cell stays the key's one cell).
            BatchScope.current?.keep(entry)
            entry.wrappedValue = newValue
            holdStore(through: entry)
            Self.keepUntilStored(entry)
        }
    }

    /// The ``Stored`` property of `key`: its value and Observation, ``Stored/values``,
    /// ``Stored/error``, `load`, `save`, `update`, `flush` and their async forms.
    ///
    /// Every entry of one key — from this map, another map on the same store, or a `@Stored`
    /// with the same backing and `Value` type — shares one value. Hold it as long as you follow
    /// the key (a view, a request); when the last holder lets go, the key stops being followed.
    public func entry(_ key: String) -> Stored<Value> {
        if keepsRecent > 0, let kept = recent.withLock({ $0.byKey[key] }) { return kept }
        let made = Stored(wrappedValue: defaultValue, backed: store.backing(key: key), in: context)
        // A cell already in use (or taken up) has resolved the store: the map holds it from now.
        holdStore(through: made)
        guard keepsRecent > 0 else { return made }
        let (entry, evicted) = recent.withLock { $0.insert(made, for: key, capacity: keepsRecent) }
        // The entry let go (if nobody else holds it) is released here, with no lock held.
        if let evicted { Self.keepUntilStored(evicted) }
        return entry
    }

    /// Keeps `entry` alive until its writes still on their way to a remote store are
    /// acknowledged (or have failed). Let go before, its cell would leave the registry, and a
    /// new entry of the key would load the value from before those writes and never hear of
    /// them (a store does not report its own instance's writes). Local stores write before the
    /// setter returns: nothing to keep.
    private static func keepUntilStored(_ entry: Stored<Value>) {
        guard entry.cell.hasRemoteWriteOnItsWay else { return }
        _ = Offload.start { try? await entry.flush() }  // a failure is in the entry's saveError
    }

    /// Reads `key` from the store now, replacing the value in memory (see ``Stored/load()``).
    /// - Returns: The stored value, or ``defaultValue`` when nothing is stored.
    /// - Throws: ``CofferError`` when the store cannot be read or the stored bytes are not a
    ///   `Value` (``CofferError/Code/decoding``; also in `entry(key).error`).
    @discardableResult
    public func load(_ key: String) throws -> Value { try using(key) { try $0.load() } }

    /// `load(_:)` without blocking a thread: the way to get the stored value of a
    /// remote key in async code (a request handler), where a first read shows the default.
    @discardableResult
    public func load(_ key: String) async throws -> Value { try await using(key) { try await $0.load() } }

    /// Sets `key` to `value` and writes it before returning (see ``Stored/save(_:)``).
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored.
    public func save(_ value: Value, for key: String) throws { try using(key) { try $0.save(value) } }

    /// Sets `key` to `value` and waits until the store has acknowledged it.
    public func save(_ value: Value, for key: String) async throws { try await using(key) { try await $0.save(value) } }

    /// Reads `key` from the store, lets `body` change it, and writes it back as one step: no
    /// write of another thread or process is lost in between (see ``Stored/update(_:)``).
    ///
    /// ```swift
    /// try requests.update(tenant) { $0 += 1 }      // exact when several processes count at once
    /// ```
    /// - Returns: The value stored.
    @discardableResult
    public func update(_ key: String, _ body: (inout Value) throws -> Void) throws -> Value {
        try using(key) { try $0.update(body) }
    }

    /// `update(_:_:)` suspending instead of blocking on a remote store.
    @discardableResult
    public func update(_ key: String, _ body: (inout Value) throws -> Void) async throws -> Value {
        try await using(key) { try await $0.update(body) }
    }

    /// Removes `key` from the store: it reads ``defaultValue`` again, in every entry of it.
    /// Writes at once, even inside a ``batch(_:)``.
    /// - Throws: ``CofferError`` when the store cannot remove it (also in `entry(key).error`);
    ///   the value in memory is then unchanged.
    public func remove(_ key: String) throws { try using(key) { try $0.cell.removeStored() } }

    /// `remove(_:)` without blocking a thread; on a remote store, the writes of the key
    /// still on their way land first, and the removal after them.
    public func remove(_ key: String) async throws { try await using(key) { try await $0.cell.removeStoredAsync() } }

    /// The current value of `key`, then each new one, until the consumer stops iterating; the
    /// key is followed (its entry held) meanwhile. See ``Stored/values``.
    public func values(of key: String) -> AsyncStream<Value> {
        let entry = entry(key)
        let stream = entry.cell.values(keeping: entry)
        holdStore(through: entry)
        return stream
    }

    /// `body` on the entry of `key`, then the map's hold on the store (the entry has resolved it).
    private func using<R>(_ key: String, _ body: (Stored<Value>) throws -> R) rethrows -> R {
        let entry = entry(key)
        defer { holdStore(through: entry) }
        return try body(entry)
    }

    private func using<R>(_ key: String, _ body: (Stored<Value>) async throws -> R) async rethrows -> R {
        let entry = entry(key)
        defer { holdStore(through: entry) }
        return try await body(entry)
    }

    // MARK: The store

    /// The keys the store holds now (a value written here and not yet acknowledged by a remote
    /// store may be missing).
    /// - Throws: ``CofferError`` when the store cannot be opened or listed.
    public func keys() throws -> [String] {
        guard case .store(let strategy) = try resolve() else { return [] }
        do {
            return try strategy.keys()
        } catch {
            throw CofferError.wrapping(error, "listing the keys of \(store)")
        }
    }

    /// `keys()` without blocking a thread: a remote store is awaited, a local one listed on
    /// Coffer's threads.
    public func keys() async throws -> [String] {
        let resolved = try await Offload.run { try self.resolve() }
        guard case .store(let strategy) = resolved else { return [] }
        do {
            if let remote = strategy as? any AsyncPersistenceStrategy { return try await remote.keys() }
            return try await Offload.run { try strategy.keys() }
        } catch {
            throw CofferError.wrapping(error, "listing the keys of \(store)")
        }
    }

    /// The map's changes, until the consumer stops iterating: which keys changed, whether
    /// written in this process (through any entry or `@Stored` of this store) or elsewhere
    /// (another instance, process or machine, when the store can tell:
    /// ``ChangeObservingPersistenceStrategy``), or ``StoredMapChange/unknown`` when the store
    /// cannot tell which.
    ///
    /// A change may be told more than once (a key followed here is told when the store reports
    /// it and again when its entry has reloaded it); treat each as "read these keys again".
    /// Iterating keeps the store observed (one observation per store, whatever the number of
    /// keys); finding who to tell costs one lookup per change, never a scan of the keys. The
    /// stream ends at once when the store cannot be opened (`keys()` says why) or has no
    /// identity (``PersistenceStrategy/id``).
    public var changes: AsyncStream<StoredMapChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: StoredMapChange.self, bufferingPolicy: .unbounded)
        guard case .store(let strategy)? = try? resolve(), let storeID = strategy.id else {
            continuation.finish()
            return stream
        }
        let feed = MapChangeFeed(continuation)
        MapChanges.add(feed, for: storeID)
        let outside = ChangeRouter.subscribe(listener: feed, to: strategy)
        continuation.onTermination = { _ in
            MapChanges.remove(feed, for: storeID)
            if let outside { ChangeRouter.unsubscribe(outside) }
        }
        return stream
    }

    /// The store's strategy, resolved once (opening a vault may run Argon2id: the async callers
    /// resolve on Coffer's threads); a failure is tried again by the next call.
    private func resolve() throws -> Resolved {
        if let known = resolved.withLock({ $0 }) { return known }
        let made: Resolved
        do {
            // Any key names the store; the strategy is the same for all of them.
            made = try store.backing(key: "").resolve(context).map { .store($0.strategy) } ?? .memory
        } catch {
            throw CofferError.wrapping(error, "opening \(store)")
        }
        return resolved.withLock { known in
            if let known { return known }
            known = made
            return made
        }
    }
}

/// The entries a ``StoredMap`` made last, at most `capacity`, the oldest let go first: a ring of
/// keys beside a dictionary, O(1) per entry made.
private struct RecentEntries<Value: Codable & Sendable>: Sendable {
    var byKey: [String: Stored<Value>] = [:]
    /// The keys in the order their entries were made; once full, `next` is the oldest.
    var order: [String] = []
    var next = 0

    /// Keeps `entry` for `key`, unless another thread kept one meanwhile (then that one is the
    /// key's entry). Returns the key's entry, and the entry let go to make room.
    mutating func insert(_ entry: Stored<Value>, for key: String, capacity: Int) -> (Stored<Value>, Stored<Value>?) {
        if let existing = byKey[key] { return (existing, nil) }
        var evicted: Stored<Value>?
        if order.count < capacity {
            order.append(key)
        } else {
            evicted = byKey.removeValue(forKey: order[next])
            order[next] = key
            next = (next + 1) % capacity
        }
        byKey[key] = entry
        return (entry, evicted)
    }
}

/// What a ``StoredMap`` holds its store's observation with: a listener that needs no news.
private final class StoreHolder: StoreChangeListener {
    func storeDidChange(_ change: StoreChange) {}
}

/// One iteration of ``StoredMap/changes``: told by the cells of its store (changes made in
/// this process) and by ``ChangeRouter`` (changes made elsewhere).
private final class MapChangeFeed: StoreChangeListener {
    let continuation: AsyncStream<StoredMapChange>.Continuation

    init(_ continuation: AsyncStream<StoredMapChange>.Continuation) {
        self.continuation = continuation
    }

    func storeDidChange(_ change: StoreChange) {
        continuation.yield(change.keys.map { .keys($0) } ?? .unknown)
    }
}
