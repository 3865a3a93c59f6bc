// The cell: the one value of a key in this process, its word cache for lock-free reads, and
// Observation. What the cell does with a store lives beside it, one concern a file:
//
// - Binding.swift: resolving the backing, once, into an immutable ``StoreBinding``;
// - StoredCell+Subscription.swift: following changes made elsewhere, and sibling reloads;
// - StoredCell+Load.swift: the first load and `load()`;
// - StoredCell+Save.swift: a setter's write, `save(_:)`, and the errors they record;
// - StoredCell+Update.swift: `update { }`, the compare-and-swap loop;
// - StoredCell+Batch.swift: taking part in `batch { }`;
// - StoredCell+RemoteWrites.swift, StoredCell+RemoteLoads.swift, StoredCell+Async.swift: a
//   store that waits on a network, and the `try await` forms.
public import CofferCore
import Foundation
public import Observation
public import Synchronization

/// The one value of a key in this process: every ``Stored`` bound to the same store, key and
/// value type holds the same cell (see ``CellRegistry``), so a write through any of them is
/// seen at once by all, and notifies every observer, stream and computed value of every one.
/// A memory-only property, or one whose backing names no ``Backing/store``, has a cell of its
/// own. The cell holds what used to be each property's own state: the value, its version, the
/// last error, the Observation registrar, the `values` streams and the computed dependents.
@usableFromInline
final class StoredCell<Value: Sendable>: Sendable {
    /// What the backing resolved to (Binding.swift).
    enum Resolution: Sendable {
        case unresolved
        /// Resolved once, for good.
        case store(StoreBinding)
        case memory
        /// Resolving failed: the next use tries again.
        case failed
    }

    @usableFromInline
    struct State: Sendable {
        @usableFromInline var value: Value
        @usableFromInline var version: UInt64 = 0
        @usableFromInline var loaded = false
        var resolution = Resolution.unresolved
        var error: CofferError?
        /// The version the strategy holds.
        var persistedVersion: UInt64 = 0
        /// The subscription to outside changes of the resolved strategy, if it can tell them.
        var subscription: ChangeRouter.Unsubscribe?
        /// A subscription is being made (outside the lock) by the thread that resolved.
        var subscribing = false
        /// Set when the last property went away: nothing subscribes any more.
        var detached = false
        /// How many writes were made here (setters, `save`): an update adopts its result only
        /// if none was made since it began (such a write is newer, and may be stored already).
        var writes: UInt64 = 0
        /// The last failure of a load, and of a save, each cleared by the next success of its kind.
        var loadError: CofferError?
        var saveError: CofferError?
        // The remote path (StoredCell+RemoteWrites.swift, +RemoteLoads.swift).
        /// A load runs in the background (the first one, or a reload after a change elsewhere).
        var isLoading = false
        /// A change elsewhere arrived while a background load ran: load once more after it.
        var reloadPending = false
        /// The background writer runs: one write in flight for this key.
        var writerActive = false
        /// A `save` asked to write even though the store holds the value (a retry).
        var forceSave = false
        /// Callers of `flush` waiting for the writer to store a version (or fail).
        var flushWaiters: [(version: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
        /// The first load of a local store runs on this gate's thread: others wait for it.
        var firstLoad: FirstLoadGate?
    }

    // The read path's fields first: they share the object's first cache line with its header,
    // and their offsets do not depend on `Value` (fields after a `Value`-sized one do).
    @usableFromInline let registrar = ObservationRegistrar()
    /// The value's bytes, for a lock-free read, when `Value` is small and trivially copyable
    /// (``usesWordPath``, ``usesPairPath``). Written only while `state` is locked, next to
    /// `state.value`.
    @usableFromInline let word = Atomic<UInt64>(0)
    /// The value's second word (``usesPairPath``: an `Int?`, a `Double?`, two words).
    @usableFromInline let secondWord = Atomic<UInt64>(0)
    /// Even when the two words are a whole value, odd while they are being written: a read of
    /// both that sees the same even count before and after read a whole value (a sequence lock;
    /// writers are the holders of `state`'s lock).
    @usableFromInline let wordSequence = Atomic<UInt64>(0)
    /// True once the value is loaded and the words hold it (``usesWordPath`` and ``usesPairPath``
    /// only). Never cleared.
    @usableFromInline let wordReady = Atomic<Bool>(false)
    // A key path is immutable; `nonisolated(unsafe)` because `KeyPath` is not declared `Sendable`,
    // and a plain `KeyPath` (no existential) keeps the read path free of retains. Both are made
    // once per value type (``CellTypeTraits``), not per cell.
    @usableFromInline nonisolated(unsafe) let valueKeyPath: KeyPath<StoredCell, Value>
    // What a property's release reads and writes, next (the line after the read path's): a
    // table of 100k entries released at once reads them from memory.
    /// How many properties use this cell (``CellRegistry``).
    let users = Atomic<Int>(1)
    /// When it went unused, while it waits to be let go (``CellRegistry``); 0 otherwise.
    let releasedAt = Atomic<UInt64>(0)
    /// Whether the cell is in the registry (``registryKey`` is set): read without copying the key.
    let isRegistered: Bool

    /// Where the value persists (the backing of the property that created the cell).
    let backing: Backing
    /// The value before anything was stored, and after the stored copy is removed (the initial
    /// value of the property that created the cell).
    let initialValue: Value
    /// The context the backing resolves in: the one in effect when this property was created.
    let context: CofferContext

    @usableFromInline let state: Locked<State>
    let dependentLinks = Locked(DependentLinks())
    /// The `values` streams' list, made with the first stream: most cells never stream, and a
    /// list made for each cost an allocation and a generic deinit on every release. Held as
    /// `AnyObject` (always a `SubscriberList<Value>`), so the cell's own release needs no
    /// run-time metadata for it.
    private let streamList = Locked<AnyObject?>(nil)

    /// The list of `values` streams, if one was ever made.
    var subscribersIfAny: SubscriberList<Value>? {
        streamList.withLock { $0 }.map { unsafeDowncast($0, to: SubscriberList<Value>.self) }
    }

    /// The list of `values` streams, made on first need.
    var subscribers: SubscriberList<Value> {
        let list = streamList.withLock { list -> AnyObject in
            if let list { return list }
            let made = SubscriberList<Value>()
            list = made
            return made
        }
        return unsafeDowncast(list, to: SubscriberList<Value>.self)
    }
    /// Serialises persistence of this property, so an older value never overwrites a newer one.
    let persistLock = Locked(false)
    /// Remote updates of this cell in this process take turns: racing each other's
    /// compare-and-swap, eight tasks updating one key could lose to each other for seconds.
    let updateTurn = AsyncTurn()
    /// Whether cells of another value type share this key (set by ``CellRegistry``).
    let hasSiblings = Atomic<Bool>(false)
    /// As ``valueKeyPath``, for ``error``.
    nonisolated(unsafe) let errorKeyPath: KeyPath<StoredCell, CofferError?>
    let isEqual: (@Sendable (Value, Value) -> Bool)?
    let isNil: (@Sendable (Value) -> Bool)?
    /// How the value becomes bytes and back: `ValueCodec` when `Value` is `Codable`, else
    /// `nil` (the property is memory-only; its initialisers allow no other backing).
    let coding: (any CodingWitness)?

    /// Where this cell is registered, or `nil` for a cell of one property.
    let registryKey: CellRegistry.Key?

    init(initialValue: Value, backing: Backing, context: CofferContext, registryKey: CellRegistry.Key?) {
        self.backing = backing
        self.initialValue = initialValue
        self.context = context
        self.registryKey = registryKey
        self.isRegistered = registryKey != nil
        self.state = Locked(State(value: initialValue))
        let traits = CellTypeTraits<Value>.shared
        self.valueKeyPath = traits.valueKeyPath
        self.errorKeyPath = traits.errorKeyPath
        self.isEqual = traits.isEqual
        self.isNil = traits.isNil
        self.coding = traits.coding
    }

    deinit {
        subscribersIfAny?.finishAll()
    }

    /// The value: from memory after the first read.
    @usableFromInline
    var wrappedValue: Value {
        // Inlinable: the hot path. A read is Observation's access check, one uncontended lock and
        // a copy, specialised for `Value` in the caller's module.
        @inlinable get {
            registrar.access(self, keyPath: valueKeyPath)
            // Int, Double, Bool, a raw enum: one atomic load, no lock, when no computed value is
            // running anywhere (so there is no read to record).
            if Self.usesWordPath, wordReady.load(ordering: .acquiring), Graph.nothingComputing {
                return Self.value(ofWord: word.load(ordering: .acquiring))
            }
            // Int?, Double?: two atomic loads between two loads of the sequence count.
            if Self.usesPairPath, wordReady.load(ordering: .acquiring), Graph.nothingComputing, let value = readPair() {
                return value
            }
            let (value, version) = read()
            recordRead(version: version)
            return value
        }
        set { write(newValue) }
    }

    /// The current value, then each new one, until the consumer stops iterating.
    ///
    /// Every change is delivered (the buffer is unbounded); writes inside one ``batch(_:)`` are
    /// delivered once, as their final value.
    var values: AsyncStream<Value> { values(keeping: nil) }

    /// ``values``, keeping `owner` alive until the consumer stops iterating.
    func values(keeping owner: (any Sendable)?) -> AsyncStream<Value> {
        let (stream, subscriber) = subscribers.makeStream(keeping: owner)
        let (value, version) = read()
        subscriber.deliver(value, version: version)
        return stream
    }

    // MARK: The value and its word

    /// True when `Value` fits in a machine word and has no references (Int, Double, Bool, a raw
    /// enum): reads then come from ``word`` with one atomic load instead of the lock.
    @inlinable
    static var usesWordPath: Bool { _isPOD(Value.self) && MemoryLayout<Value>.size <= MemoryLayout<UInt64>.size }

    /// True when `Value` fits in two machine words and has no references (`Int?`, `Double?`):
    /// reads then come from ``word`` and ``secondWord`` under a sequence count, without the lock.
    @inlinable
    static var usesPairPath: Bool {
        _isPOD(Value.self) && MemoryLayout<Value>.size > MemoryLayout<UInt64>.size
            && MemoryLayout<Value>.size <= 2 * MemoryLayout<UInt64>.size
    }

    /// The value from its two words, or `nil` when a write ran meanwhile (the caller locks).
    @inlinable @inline(__always)
    func readPair() -> Value? {
        let before = wordSequence.load(ordering: .acquiring)
        guard before & 1 == 0 else { return nil }
        let words = (word.load(ordering: .relaxed), secondWord.load(ordering: .relaxed))
        atomicMemoryFence(ordering: .acquiring)
        guard wordSequence.load(ordering: .relaxed) == before else { return nil }
        return withUnsafeBytes(of: words) { $0.loadUnaligned(as: Value.self) }
    }

    @inlinable @inline(__always)
    static func value(ofWord word: UInt64) -> Value {
        withUnsafeBytes(of: word) { $0.loadUnaligned(as: Value.self) }
    }

    @inlinable @inline(__always)
    static func word(of value: Value) -> UInt64 {
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { target in
            withUnsafeBytes(of: value) { target.copyMemory(from: $0) }
        }
        return word
    }

    /// Changes the state under its lock and keeps ``word`` in step with the value. Every change
    /// of `value` or `loaded` goes through here.
    func mutate<R: Sendable>(_ body: (inout State) -> R) -> R {
        state.withLock { s in
            let result = body(&s)
            if Self.usesWordPath, s.loaded {
                word.store(Self.word(of: s.value), ordering: .releasing)
                wordReady.store(true, ordering: .releasing)
            } else if Self.usesPairPath, s.loaded {
                var words: (UInt64, UInt64) = (0, 0)
                withUnsafeMutableBytes(of: &words) { target in
                    withUnsafeBytes(of: s.value) { target.copyMemory(from: $0) }
                }
                let count = wordSequence.load(ordering: .relaxed)
                wordSequence.store(count &+ 1, ordering: .relaxed)
                atomicMemoryFence(ordering: .releasing)
                word.store(words.0, ordering: .relaxed)
                secondWord.store(words.1, ordering: .relaxed)
                wordSequence.store(count &+ 2, ordering: .releasing)
                wordReady.store(true, ordering: .releasing)
            }
            return result
        }
    }

    @inlinable @inline(__always)
    func read() -> (Value, UInt64) {
        if let hit = state.withLock({ $0.loaded ? ($0.value, $0.version) : nil }) { return hit }
        return readAfterLoading()
    }

    @usableFromInline
    func readAfterLoading() -> (Value, UInt64) {
        loadIfNeeded()
        return state.withLock { ($0.value, $0.version) }
    }

    /// Records this read into the computed value running on this thread, if any.
    @usableFromInline
    func recordRead(version: UInt64) {
        CofferState.recordRead(of: self, version: version)
    }

    func isEqualValues(_ lhs: Value, _ rhs: Value) -> Bool {
        isEqual?(lhs, rhs) ?? false
    }

    /// Whether `value` is an `Optional`'s `nil` (stored as a removal).
    func isNilValue(_ value: Value) -> Bool { isNil?(value) == true }

    // MARK: Telling observers

    /// Tells everyone the value changed: computed dependents, Observation, `values` streams.
    ///
    /// Observation is told after the locked update (an empty `withMutation`), not around it, so
    /// that an equal write and a write inside a batch can be recognised first and never notify.
    func valueDidChange() {
        Graph.bumpEpoch()
        notifyOwnObservers()
        Graph.propagate(from: [self])
    }

    /// Tells Observation and the `values` streams of this property (not its dependents).
    func notifyOwnObservers() {
        registrar.withMutation(of: self, keyPath: valueKeyPath) {}
        if MapChanges.isListened { reportToMapChanges() }
        if let subscribers = subscribersIfAny?.snapshot, !subscribers.isEmpty {
            let (value, version) = state.withLock { ($0.value, $0.version) }
            for subscriber in subscribers { subscriber.deliver(value, version: version) }
        }
    }
}

extension StoredCell: Observable {}

// MARK: Graph participation

extension StoredCell: SourceNode {
    var nodeName: String { "Stored<\(Value.self)>(\(backing))" }

    func currentVersion() -> UInt64 { read().1 }

    func addDependent(_ node: any DependentNode) { dependentLinks.withLock { $0.insert(node) } }
    func removeDependent(_ id: ObjectIdentifier) { dependentLinks.withLock { $0.remove(id) } }
    func dependents() -> [any DependentNode] { dependentLinks.withLock { $0.live() } }
}
