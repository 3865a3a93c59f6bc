public import CofferCore
import Foundation
public import Observation
public import Synchronization

/// The one value of a key in this process: every ``Stored`` bound to the same store, key and
/// value type holds the same cell (see ``CellRegistry``), so a write through any of them is
/// seen at once by all, and notifies every observer, stream and computed value of every one.
/// A memory-only property, or one whose backing has no ``Backing/identity``, has a cell of its
/// own. The cell holds what used to be each property's own state: the value, its version, the
/// last error, the Observation registrar, the `values` streams and the computed dependents.
@usableFromInline
final class StoredCell<Value: Sendable>: Sendable {
    enum Resolution: Sendable {
        case unresolved
        case resolved(strategy: any PersistenceStrategy, key: String)
        case memory
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
        // The remote path (StoredCell+Remote.swift): a store that waits on a network.
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

    /// Where the value persists (the backing of the property that created the cell).
    let backing: Backing
    /// The value before anything was stored, and after the stored copy is removed (the initial
    /// value of the property that created the cell).
    let initialValue: Value
    /// The context the backing resolves in: ``CofferContext/current`` when this property was created.
    let context: CofferContext

    @usableFromInline let state: Locked<State>
    private let dependentLinks = Locked(DependentLinks())
    private let subscribers = SubscriberList<Value>()
    /// Serialises persistence of this property, so an older value never overwrites a newer one.
    let persistLock = Locked(false)
    /// Remote updates of this cell in this process take turns: racing each other's
    /// compare-and-swap, eight tasks updating one key could lose to each other for seconds.
    let updateTurn = AsyncTurn()
    @usableFromInline let registrar = ObservationRegistrar()
    /// The value's bytes, for a lock-free read, when `Value` is small and trivially copyable
    /// (``usesWordPath``). Written only while `state` is locked, next to `state.value`.
    @usableFromInline let word = Atomic<UInt64>(0)
    /// True once the value is loaded and `word` holds it (``usesWordPath`` only). Never cleared.
    @usableFromInline let wordReady = Atomic<Bool>(false)
    /// Whether cells of another value type share this key (set by ``CellRegistry``).
    let hasSiblings = Atomic<Bool>(false)
    // A key path is immutable; `nonisolated(unsafe)` because `KeyPath` is not declared `Sendable`,
    // and a plain `KeyPath` (no existential) keeps the read path free of retains.
    @usableFromInline nonisolated(unsafe) let valueKeyPath: KeyPath<StoredCell, Value> = \StoredCell.wrappedValue
    private let errorKeyPath: any KeyPath<StoredCell, CofferError?> & Sendable = \StoredCell.error
    private let isEqual: (@Sendable (Value, Value) -> Bool)?
    private let isNil: (@Sendable (Value) -> Bool)?
    /// How the value becomes bytes and back: `ValueCodec` when `Value` is `Codable`, else
    /// `nil` (the property is memory-only; its initialisers allow no other backing).
    private let coding: (any CodingWitness)?

    /// Where this cell is registered, or `nil` for a cell of one property.
    let registryKey: CellRegistry.Key?

    init(initialValue: Value, backing: Backing, context: CofferContext, registryKey: CellRegistry.Key?) {
        self.backing = backing
        self.initialValue = initialValue
        self.context = context
        self.registryKey = registryKey
        self.state = Locked(State(value: initialValue))
        self.isEqual = ValueTraits.equality(for: Value.self)
        self.isNil = ValueTraits.nilTest(for: Value.self)
        self.coding = ValueTraits.coding(for: Value.self)
    }

    deinit {
        subscribers.finishAll()
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
            let (value, version) = read()
            recordRead(version: version)
            return value
        }
        set { write(newValue) }
    }

    /// The last load or save failure, or `nil` once a load or save succeeds. Observable.
    var error: CofferError? {
        status { $0.error }
    }

    /// The last load failure, cleared by the next successful load. Observable.
    var loadError: CofferError? { status { $0.loadError } }

    /// The last save failure, cleared by the next successful save. Observable.
    var saveError: CofferError? { status { $0.saveError } }

    /// Whether a load from a remote store runs in the background. Observable.
    var isLoading: Bool { status { $0.isLoading } }

    /// Reads one of the observable status fields (they share one key path for Observation).
    private func status<T: Sendable>(_ field: (State) -> T) -> T {
        registrar.access(self, keyPath: errorKeyPath)
        loadIfNeeded()
        return state.withLock { field($0) }
    }

    /// Tells Observation that the status (errors, loading) changed.
    func statusDidChange() {
        registrar.withMutation(of: self, keyPath: errorKeyPath) {}
    }

    /// The current value, then each new one, until the consumer stops iterating.
    ///
    /// Every change is delivered (the buffer is unbounded); writes inside one ``batch(_:)`` are
    /// delivered once, as their final value.
    var values: AsyncStream<Value> {
        let (stream, subscriber) = subscribers.makeStream()
        let (value, version) = read()
        subscriber.deliver(value, version: version)
        return stream
    }

    // MARK: Throwing paths

    /// Reads the value from the strategy now, replacing the one in memory.
    ///
    /// A missing key gives ``initialValue``. Observers are notified when the value changes.
    /// - Returns: The loaded value.
    /// - Throws: ``CofferError`` when the backing cannot be resolved, the strategy cannot read,
    ///   or the stored bytes are not a `Value` (``CofferError/Code/decoding``). The value in
    ///   memory is then unchanged, and ``error`` holds the failure.
    @discardableResult
    func load() throws -> Value {
        try load(keepingUnsavedWrite: false)
    }

    /// ``load()``; with `keepingUnsavedWrite` (a reload because the store changed elsewhere), a
    /// write made here that is not persisted yet — inside a batch, or between the setter and its
    /// save — is newer than what the store holds and is kept: it is about to be written over the
    /// other writer's value (the last write wins). Without this, a reload racing a batch put the
    /// older stored value back in memory and the batch then found nothing left to persist.
    func load(keepingUnsavedWrite: Bool) throws -> Value {
        let resolved: (strategy: any PersistenceStrategy, key: String)?
        switch target() {
        case .failure(let error):
            setLoadError(error)
            throw error
        case .success(let target): resolved = target
        }
        if let (strategy, key) = resolved, let remote = strategy as? any AsyncPersistenceStrategy {
            // A synchronous caller of a remote store: the async load, on Coffer's threads.
            return try Offload.wait { try await self.loadRemote(remote, key: key) }
        }
        let outcome: Result<(value: Value, changed: Bool), CofferError> = persistLock.withLock { _ in
            guard let (strategy, key) = resolved else {
                return .success((mutate { s in s.loaded = true; return s.value }, false))
            }
            let loaded: Value
            do {
                loaded = try strategy.load(key).map { try decodeValue($0, as: strategy.valueEncoding) } ?? initialValue
            } catch {
                mutate { $0.loaded = true }
                return .failure(.wrapping(error, "loading \(backing)"))
            }
            let (value, changed) = mutate { s -> (Value, Bool) in
                guard let changed = adoptStored(loaded, in: &s, keepingUnsavedWrite: keepingUnsavedWrite) else {
                    return (s.value, false)
                }
                return (loaded, changed)
            }
            return .success((value, changed))
        }
        switch outcome {
        case .success(let result):
            setLoadError(nil)
            if result.changed { valueDidChange() }
            return result.value
        case .failure(let error):
            setLoadError(error)
            throw error
        }
    }

    /// Sets the value and writes it to the strategy before returning, even inside a ``batch(_:)``.
    ///
    /// Unlike the setter, this writes even when `value` equals the current one, so it also
    /// retries a save that failed earlier.
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored; the value stays in
    ///   memory and ``error`` holds the failure.
    func save(_ value: Value) throws {
        if case .success(let (strategy, _)?) = target(), strategy is any AsyncPersistenceStrategy {
            // A synchronous caller of a remote store: the async save, on Coffer's threads.
            return try Offload.wait { try await self.saveRemote(value) }
        }
        write(value, persist: false)
        if let error = persist(force: true) { throw error }
    }

    /// Reads, transforms and writes the value as one step (see ``Stored/update(_:)``).
    @discardableResult
    func update(_ body: (inout Value) throws -> Void) throws -> Value {
        let target: (strategy: any PersistenceStrategy, key: String)?
        switch self.target() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let resolved): target = resolved
        }
        // `body` runs with no lock held (it may read or write this property, or others), so
        // each form is optimistic: read, transform, then apply only if nothing changed meanwhile.
        guard let (strategy, key) = target else {
            while true {  // memory: compare the version
                let (current, version) = read()
                var value = current
                try body(&value)
                let applied: Bool? = mutate { s in
                    guard s.version == version else { return nil }
                    return adoptStored(value, in: &s, keepingUnsavedWrite: false)
                }
                if let changed = applied {
                    if changed { valueDidChange() }
                    return value
                }
            }
        }
        do {
            // A write made here and not saved yet (inside a batch, or on its way to a remote
            // store) is newer than the store: saved first, so `body` starts from it.
            if strategy is any AsyncPersistenceStrategy {
                try Offload.wait { try await self.flush() }
            } else if let error = persist(force: false) {
                throw error
            }
            // Each attempt ends by the store's own limits; no new one starts after the context's
            // lock timeout, so a value that keeps changing elsewhere ends in `.busy`.
            let giveUp = ContinuousClock.now + context.lockTimeout
            while true {
                try checkUpdateBudget(giveUp)
                let before = state.withLock { $0.writes }
                let current = try strategy.load(key)
                var value = try current.map { try decodeValue($0, as: strategy.valueEncoding) } ?? initialValue
                try body(&value)
                let next: Data? = isNil?(value) == true ? nil : try encodeValue(value, as: strategy.valueEncoding)
                let swapped: Bool
                if let swappable = strategy as? any CompareAndSwapPersistenceStrategy {
                    swapped = try swappable.compareAndSwap(key, expected: current, new: next)  // across processes
                } else {
                    // Within this process only: the persist lock serialises this property's writers.
                    swapped = try persistLock.withLock { _ throws -> Bool in
                        guard try strategy.load(key) == current else { return false }
                        if let next { try strategy.save(next, for: key) } else { try strategy.remove(key) }
                        return true
                    }
                }
                guard swapped else { continue }  // another writer got in between: run `body` again
                let changed = persistLock.withLock { _ in adopt(value, ifNoWriteSince: before) }
                setSaveError(nil)
                if changed { valueDidChange() }
                notifySiblings()
                return value
            }
        } catch let error as CofferError {
            setSaveError(error)
            throw error
        }
    }

    /// Makes `value`, which the store now holds, the value in memory; returns whether it
    /// changed. A write made here meanwhile and not saved yet is newer, and is kept.
    func adopt(_ value: Value) -> Bool {
        mutate { s in adoptStored(value, in: &s, keepingUnsavedWrite: true) ?? false }
    }

    /// ``adopt(_:)`` unless a write was made here since `writes` counted it (it may already be
    /// stored, after the value being adopted: it is the newer one).
    func adopt(_ value: Value, ifNoWriteSince writes: UInt64) -> Bool {
        mutate { s in
            guard s.writes == writes else { return false }
            return adoptStored(value, in: &s, keepingUnsavedWrite: true) ?? false
        }
    }

    /// Makes `value`, which the store holds, the value in `s`, and records that the store holds
    /// it; returns whether it changed, or `nil` when `keepingUnsavedWrite` kept a newer write
    /// made here that is not saved yet.
    func adoptStored(_ value: Value, in s: inout State, keepingUnsavedWrite: Bool) -> Bool? {
        if keepingUnsavedWrite, s.loaded, s.version != s.persistedVersion { return nil }
        s.loaded = true
        let changed = !isEqualValues(s.value, value)
        if changed {
            s.value = value
            s.version += 1
        }
        s.persistedVersion = s.version
        return changed
    }

    // MARK: Internals

    /// True when `Value` fits in a machine word and has no references (Int, Double, Bool, a raw
    /// enum): reads then come from ``word`` with one atomic load instead of the lock.
    @inlinable
    static var usesWordPath: Bool { _isPOD(Value.self) && MemoryLayout<Value>.size <= MemoryLayout<UInt64>.size }

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

    /// The first load. A failure keeps the initial value and sets ``error`` without a
    /// notification: nobody can have read the value or the error before (both load first).
    ///
    /// Nothing here runs under the cell's lock but the last step: resolving (which may open a
    /// vault), subscribing and reading the store happen first, and the first result to arrive
    /// is kept. A remote store is not read here at all: the value stays the initial one, and a
    /// background load brings the stored one (``isLoading`` meanwhile).
    private func loadIfNeeded() {
        guard !state.withLock({ $0.loaded }) else { return }
        switch target() {
        case .failure(let error):
            mutate { s in
                guard !s.loaded else { return }
                s.loaded = true
                s.error = error
                s.loadError = error
            }
        case .success(nil):
            mutate { $0.loaded = true }
        case .success(let (strategy, key)?):
            if let remote = strategy as? any AsyncPersistenceStrategy {
                let start = mutate { s -> Bool in
                    guard !s.loaded else { return false }
                    s.loaded = true
                    s.isLoading = true
                    return true
                }
                if start { startBackgroundLoad(remote, key: key) }
                return
            }
            // One thread loads; the others that read first wait for its result rather than read
            // the store again (a vault decrypts on every load). A local store answers in
            // microseconds, so the wait is as short as the lock it replaces; the state lock is
            // not held, so writes and reads of loaded cells go on. The loading thread itself
            // (a strategy that reads this property while loading it) never waits for itself.
            let gate = mutate { s -> FirstLoadGate?? in
                if s.loaded { return .some(nil) }
                if let gate = s.firstLoad { return gate.isOwnedByCurrentThread ? nil : .some(gate) }
                s.firstLoad = FirstLoadGate()
                return nil
            }
            if case .some(let running) = gate {
                running?.wait()
                return
            }
            let loaded: Result<Value?, CofferError>
            do {
                loaded = .success(try strategy.load(key).map { try decodeValue($0, as: strategy.valueEncoding) })
            } catch {
                loaded = .failure(.wrapping(error, "loading \(backing)"))
            }
            let finished = mutate { s -> FirstLoadGate? in
                let gate = s.firstLoad
                s.firstLoad = nil
                guard !s.loaded else { return gate }
                s.loaded = true
                switch loaded {
                case .success(let value?): s.value = value
                case .success(nil): break
                case .failure(let error):
                    s.error = error
                    s.loadError = error
                }
                return gate
            }
            finished?.open()
        }
    }

    /// The strategy and key, resolving the backing on first use (and again after a failure).
    ///
    /// Resolving runs with no lock held (opening a context's vault runs Argon2id); when two
    /// threads resolve at once, the first result stored is used by both. The thread that stores
    /// it subscribes the cell to outside changes, also with no lock held.
    func target() -> Result<(strategy: any PersistenceStrategy, key: String)?, CofferError> {
        func known(_ s: State) -> Result<(strategy: any PersistenceStrategy, key: String)?, CofferError>? {
            switch s.resolution {
            case .resolved(let strategy, let key): .success((strategy, key))
            case .memory: .success(nil)
            case .unresolved, .failed: nil
            }
        }
        if let resolved = state.withLock({ known($0) }) { return resolved }
        let made: Result<(strategy: any PersistenceStrategy, key: String)?, CofferError>
        do {
            made = .success(try backing.resolve(context))
        } catch {
            made = .failure(.wrapping(error, "opening \(backing)"))
        }
        let (result, subscribe) = state.withLock {
            s -> (Result<(strategy: any PersistenceStrategy, key: String)?, CofferError>, Bool) in
            if let resolved = known(s) { return (resolved, false) }
            switch made {
            case .success(let (strategy, key)?):
                s.resolution = .resolved(strategy: strategy, key: key)
                let subscribe = !s.detached && s.subscription == nil && !s.subscribing
                if subscribe { s.subscribing = true }
                return (made, subscribe)
            case .success(nil):
                s.resolution = .memory
            case .failure:
                s.resolution = .failed
            }
            return (made, false)
        }
        if subscribe, case .success(let (strategy, key)?) = result {
            let token = ChangeRouter.subscribe(self, to: strategy, key: key)
            let unused = state.withLock { s -> ChangeRouter.Unsubscribe? in
                s.subscribing = false
                guard !s.detached else { return token }
                s.subscription = token
                return nil
            }
            if let unused { ChangeRouter.unsubscribe(unused) }
        }
        return result
    }

    /// Decodes stored bytes as a `Value`; a failure names the backing and the type.
    func decodeValue(_ data: Data, as encoding: ValueEncoding) throws -> Value {
        guard let coding else { throw notCodable() }
        return try coding.decode(Value.self, from: data, as: encoding, source: backing.description)
    }

    /// Encodes the value for the strategy.
    func encodeValue(_ value: Value, as encoding: ValueEncoding) throws -> Data {
        guard let coding else { throw notCodable() }
        return try coding.encode(value, as: encoding)
    }

    /// Unreachable through the public initialisers (a non-`Codable` value is memory-only), but a
    /// `Backing` is a value anyone can build: say what is wrong rather than trap.
    private func notCodable() -> CofferError {
        CofferError(
            .invalidArgument,
            "\(backing) cannot store a \(Value.self): it is not Codable. Make it Codable, or keep the property in memory"
        )
    }

    /// Ends an `update` that would start a new attempt after `giveUp` (the context's lock
    /// timeout after it began): the value kept changing elsewhere.
    func checkUpdateBudget(_ giveUp: ContinuousClock.Instant) throws(CofferError) {
        guard ContinuousClock.now >= giveUp else { return }
        throw CofferError(
            .busy,
            "\(backing) kept changing elsewhere for \(context.lockTimeout.inSeconds.secondsText) s; "
                + "the update was not applied")
    }

    /// Whether `value` is an `Optional`'s `nil` (stored as a removal).
    func isNilValue(_ value: Value) -> Bool { isNil?(value) == true }

    /// Whether the backing is resolved (to a store, or to memory).
    var isResolved: Bool {
        state.withLock { s in
            switch s.resolution {
            case .resolved, .memory: true
            case .unresolved, .failed: false
            }
        }
    }

    /// Writes a value not stored yet (a batch's, say) to a local store now.
    func persistPending() -> CofferError? { persist(force: false) }

    func isEqualValues(_ lhs: Value, _ rhs: Value) -> Bool {
        isEqual?(lhs, rhs) ?? false
    }

    func write(_ newValue: Value, persist shouldPersist: Bool = true) {
        loadIfNeeded()
        let changed = mutate { s in
            if let isEqual, isEqual(s.value, newValue) { return false }
            s.value = newValue
            s.version += 1
            s.writes += 1
            return true
        }
        guard changed else { return }
        if let scope = BatchScope.current {
            Graph.bumpEpoch()
            scope.add(self)
            return
        }
        valueDidChange()
        if shouldPersist { persistAfterWrite() }
    }

    /// Persists a write: at once on a local store; on a remote one, by the background writer,
    /// so the setter returns without waiting on the network.
    private func persistAfterWrite() {
        if case .success(let (strategy, key)?) = target(), let remote = strategy as? any AsyncPersistenceStrategy {
            scheduleWrite(remote, key: key)
        } else {
            _ = persist(force: false)
        }
    }

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
    private func notifyOwnObservers() {
        registrar.withMutation(of: self, keyPath: valueKeyPath) {}
        let subscribers = subscribers.snapshot
        if !subscribers.isEmpty {
            let (value, version) = state.withLock { ($0.value, $0.version) }
            for subscriber in subscribers { subscriber.deliver(value, version: version) }
        }
    }

    /// Writes the newest value to the strategy unless it is there already, and records the
    /// outcome in ``error``. Returns the failure, if any.
    @discardableResult
    private func persist(force: Bool) -> CofferError? {
        let resolved = self.target()
        let outcome: CofferError?? = persistLock.withLock { _ in
            let target: (strategy: any PersistenceStrategy, key: String)?
            switch resolved {
            case .failure(let error): return .some(error)
            case .success(let resolved): target = resolved
            }
            guard let (strategy, key) = target else { return .none }
            let (value, version, persisted) = state.withLock { ($0.value, $0.version, $0.persistedVersion) }
            guard force || version != persisted else { return .none }
            do {
                if let isNil, isNil(value) {
                    try strategy.remove(key)
                } else {
                    try strategy.save(encodeValue(value, as: strategy.valueEncoding), for: key)
                }
                state.withLock { $0.persistedVersion = max($0.persistedVersion, version) }
                return .some(nil)
            } catch {
                return .some(.wrapping(error, "saving \(backing)"))
            }
        }
        guard let result = outcome else { return nil }
        setSaveError(result)
        if result == nil { notifySiblings() }
        return result
    }

    /// Tells the properties bound to this key with another value type that it was stored anew.
    func notifySiblings() {
        guard let registryKey, hasSiblings.load(ordering: .relaxed) else { return }
        for sibling in CellRegistry.siblings(of: registryKey) { sibling.reloadAfterSiblingChange() }
    }

    /// Records the outcome of a load: ``loadError`` and ``error``, notifying Observation when
    /// either appears, changes or clears.
    func setLoadError(_ error: CofferError?) {
        let notify = state.withLock { s in
            let notify = s.error != nil || s.loadError != nil || error != nil
            s.loadError = error
            s.error = error  // the outcome of the latest load or save
            return notify
        }
        if notify { statusDidChange() }
    }

    /// Records the outcome of a save: ``saveError`` and ``error``.
    func setSaveError(_ error: CofferError?) {
        let notify = state.withLock { s in
            let notify = s.error != nil || s.saveError != nil || error != nil
            s.saveError = error
            s.error = error
            return notify
        }
        if notify { statusDidChange() }
    }
}

extension StoredCell: Observable {}

// MARK: Graph and batch participation

extension StoredCell: SourceNode {
    var nodeName: String { "Stored<\(Value.self)>(\(backing))" }

    func currentVersion() -> UInt64 { read().1 }

    func addDependent(_ node: any DependentNode) { dependentLinks.withLock { $0.insert(node) } }
    func removeDependent(_ id: ObjectIdentifier) { dependentLinks.withLock { $0.remove(id) } }
    func dependents() -> [any DependentNode] { dependentLinks.withLock { $0.live() } }
}

extension StoredCell: BatchParticipant {
    func batchDidEnd() -> any SourceNode {
        notifyOwnObservers()
        return self
    }

    func batchTarget() -> (strategy: any PersistenceStrategy, key: String)? {
        switch target() {
        case .failure(let error):
            setSaveError(error)
            return nil
        case .success(let (strategy, key)?) where strategy is any AsyncPersistenceStrategy:
            // A remote store: the background writer persists it, in order with the other writes.
            scheduleWrite(strategy as! any AsyncPersistenceStrategy, key: key)
            return nil
        case .success(let target):
            return target
        }
    }

    func withPersistLock(_ body: () -> Void) {
        persistLock.withLock { _ in body() }
    }

    func pendingChange(encoding: ValueEncoding) -> PendingChange? {
        let (value, version, persisted) = state.withLock { ($0.value, $0.version, $0.persistedVersion) }
        guard version != persisted else { return nil }
        if let isNil, isNil(value) { return PendingChange(version: version, data: .success(nil)) }
        do {
            return PendingChange(version: version, data: .success(try encodeValue(value, as: encoding)))
        } catch {
            return PendingChange(version: version, data: .failure(.wrapping(error, "encoding for \(backing)")))
        }
    }

    func markPersisted(_ version: UInt64) {
        state.withLock { $0.persistedVersion = max($0.persistedVersion, version) }
    }

    func reportPersistOutcome(_ error: CofferError?) {
        setSaveError(error)
        if error == nil { notifySiblings() }
    }
}

extension StoredCell: RegisteredCell, OutsideChangeReceiver {
    func reloadAfterSiblingChange() {
        if reloadRemotely() { return }
        _ = try? load(keepingUnsavedWrite: true)  // a failure is recorded in `error`
    }

    /// Another process (or instance) changed the key: reload it. The value in memory is kept
    /// when that fails (a locked vault, a removed file), and `error` says why. A remote store is
    /// reloaded in the background: this runs on the store's feed, which must not wait.
    func reloadAfterOutsideChange() {
        guard state.withLock({ $0.loaded && !$0.detached }) else { return }  // nobody read it yet
        if reloadRemotely() { return }
        _ = try? load(keepingUnsavedWrite: true)
    }

    /// The last property using this cell went away: stop following outside changes.
    func detach() {
        let subscription = state.withLock { s -> ChangeRouter.Unsubscribe? in
            s.detached = true
            defer { s.subscription = nil }
            return s.subscription
        }
        if let subscription { ChangeRouter.unsubscribe(subscription) }
    }
}

/// The first load of a cell from a local store, for the threads that wait for it.
final class FirstLoadGate: @unchecked Sendable {
    // @unchecked Sendable: `isOpen` is guarded by `condition`; `owner` never changes.
    private let condition = NSCondition()
    private var isOpen = false
    private let owner = pthread_self()

    /// Whether the calling thread is the one loading.
    var isOwnedByCurrentThread: Bool { pthread_equal(owner, pthread_self()) != 0 }

    /// Waits until the load has stored its result.
    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }
}
