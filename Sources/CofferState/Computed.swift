public import CofferCore
public import Observation

/// A value derived from other ``Stored`` and ``Computed`` values, which it finds by reading them.
///
/// ```swift
/// final class Editor {
///     @Stored var text = ""
///     @Computed var wordCount: Int
///
///     init() {
///         $wordCount = Computed { [$text] in $text.wrappedValue.split(separator: " ").count }
///     }
/// }
/// ```
///
/// - **Automatic dependencies.** Every `Stored` or `Computed` read while the closure runs is an
///   input for that run, and only for that run: a branch not taken is not a dependency.
/// - **Lazy and cached.** The closure runs on the first read after an input changed, never
///   before, and never twice for the same inputs. A result equal to the previous one (when
///   `Value` is `Equatable`) does not disturb the values computed from it.
/// - **Glitch-free.** In a diamond (`a → b, a → c, b + c → d`) `d` recomputes once per change
///   of `a` and never sees a new `b` with an old `c`.
/// - **Cycles** (a value that reads itself, directly or not) do not hang or crash: the read that
///   closes the loop returns the last value (or `fallback`, or the type's literal zero: `nil`,
///   `false`, `0`, `""`, `[]`, `[:]`) and ``error`` holds a ``CofferError/Code/cycle`` error
///   naming the loop. Only a type with none of those, on its very first computation, traps,
///   because there is no value to return; give it a `fallback`.
/// - **Observation.** Reading registers with Swift's Observation; when an input changes, the
///   computed value notifies (it may then turn out equal — it is not recomputed until read).
/// - **Declaring it.** `@Computed var name: T` starts unassigned; assign the closure in `init`
///   with `$name = Computed { … }` (assigning adopts that closure). Reading an unassigned value
///   is a programmer error, like reading an uninitialised variable: it stops the program with a
///   message naming the property's type; ``error`` and ``isAssigned`` report it without reading.
/// - The closure must be `@Sendable` and should be pure. Capture the projected values it reads
///   (`[$token]`), not `self`, so the model is not kept alive by its own computed values.
@propertyWrapper
public final class Computed<Value: Sendable>: Sendable {
    // The graph node lives in its own object: the graph links to it weakly, and a weakly
    // referenced object pays a slower reference count on every retain. This object, which models
    // hold and reads go through, is never referenced weakly.
    @usableFromInline let node: ComputedNode<Value>

    /// An unassigned value, for `@Computed var name: T`; assign `$name = Computed { … }` in `init`.
    public init() {
        node = ComputedNode(name: nil, fallback: nil, compute: nil)
    }

    /// A value computed by `compute`, which runs lazily on a read after an input changed.
    ///
    /// - Parameters:
    ///   - name: A name for error messages, such as the property's name.
    ///   - fallback: The value a read returns when it closes a dependency cycle before any
    ///     value was computed.
    ///   - compute: Computes the value from other `Stored` and `Computed` values.
    public init(_ name: String? = nil, fallback: Value? = nil, _ compute: @escaping @Sendable () -> Value) {
        node = ComputedNode(name: name, fallback: fallback, compute: compute)
    }

    /// The value, computed now if an input changed since the last read.
    public var wrappedValue: Value {
        // Inlinable, like `Stored.wrappedValue`: an up-to-date read is a lock and a copy.
        @inlinable get { node.currentValue }
    }

    /// The computed value itself; assigning one adopts its closure (and its name and fallback).
    public var projectedValue: Computed<Value> {
        get { self }
        set { node.adopt(newValue.node) }
    }

    /// Whether a closure has been assigned.
    public var isAssigned: Bool { node.isAssigned }

    /// The name given at creation, if any.
    public var name: String? { node.name }

    /// A ``CofferError/Code/cycle`` error when the last computation closed a dependency cycle
    /// (``CofferError/Code/invalidArgument`` while unassigned), else `nil`. Observable.
    public var error: CofferError? { node.error }

    /// The current value, then each new one, until the consumer stops iterating.
    ///
    /// A change of an input is delivered when it changes this value; writes inside one
    /// ``batch(_:)`` are delivered once.
    public var values: AsyncStream<Value> { node.values }
}

extension Computed: Observable {}

/// The graph node of a ``Computed``: its closure, cache, inputs, dependents and observers.
@usableFromInline
final class ComputedNode<Value: Sendable>: Sendable {
    @usableFromInline
    struct State: Sendable {
        var compute: (@Sendable () -> Value)?
        var name: String?
        var fallback: Value?
        @usableFromInline var value: Value?
        @usableFromInline var version: UInt64 = 0
        /// The epoch at which the inputs were last known up to date; 0 means "never computed".
        @usableFromInline var verifiedEpoch: UInt64 = 0
        /// Bumped when the closure is replaced, so a run of the old closure is not kept.
        var generation: UInt64 = 0
        var sources: [SourceRecord] = []
        /// An input changed since the last read, and observers were told.
        @usableFromInline var stale = false
        /// Runs of the closure in progress (on any thread).
        var computing = 0
        var error: CofferError?
    }


    @usableFromInline let state: Locked<State>
    private let dependentLinks = Locked(DependentLinks())
    private let subscribers = SubscriberList<Value>()
    @usableFromInline let registrar = ObservationRegistrar()
    // See `Stored.valueKeyPath`.
    @usableFromInline nonisolated(unsafe) let valueKeyPath: KeyPath<ComputedNode, Value> = \ComputedNode.currentValue
    private let errorKeyPath: any KeyPath<ComputedNode, CofferError?> & Sendable = \ComputedNode.error
    private let isEqual: (@Sendable (Value, Value) -> Bool)?

    init(name: String?, fallback: Value?, compute: (@Sendable () -> Value)?) {
        state = Locked(State(compute: compute, name: name, fallback: fallback))
        isEqual = ValueTraits.equality(for: Value.self)
    }

    deinit {
        subscribers.finishAll()
    }

    /// The value, as a read of the `Computed` returns it: registered with Observation and with
    /// the computation running on this thread.
    @inlinable
    var currentValue: Value {
        registrar.access(self, keyPath: valueKeyPath)
        let (value, version) = refresh()
        recordRead(version: version)
        return value
    }

    /// Whether a closure has been assigned.
    var isAssigned: Bool { state.withLock { $0.compute != nil } }

    /// The name given at creation, if any.
    var name: String? { state.withLock { $0.name } }

    /// A ``CofferError/Code/cycle`` error when the last computation closed a dependency cycle
    /// (``CofferError/Code/invalidArgument`` while unassigned), else `nil`. Observable.
    var error: CofferError? {
        registrar.access(self, keyPath: errorKeyPath)
        guard isAssigned else {
            return CofferError(.invalidArgument, "\(nodeName) was read before a closure was assigned to it")
        }
        _ = refresh()
        return state.withLock { $0.error }
    }

    /// The current value, then each new one, until the consumer stops iterating.
    ///
    /// A change of an input is delivered when it changes this value; writes inside one
    /// ``batch(_:)`` are delivered once.
    var values: AsyncStream<Value> {
        let (stream, subscriber) = subscribers.makeStream()
        let (value, version) = refresh()
        subscriber.deliver(value, version: version)
        return stream
    }

    // MARK: Refreshing

    /// The up-to-date value and version.
    @inlinable @inline(__always)
    func refresh() -> (Value, UInt64) {
        let epoch = Graph.currentEpoch
        let hit = state.withLock { s -> (Value, UInt64)? in
            guard s.verifiedEpoch == epoch, !s.stale, let value = s.value else { return nil }
            return (value, s.version)
        }
        if let hit { return hit }
        return refreshSlowly()
    }

    /// Records this read into the computed value running on this thread, if any.
    @usableFromInline
    func recordRead(version: UInt64) {
        CofferState.recordRead(of: self, version: version)
    }

    @usableFromInline
    func refreshSlowly() -> (Value, UInt64) {
        if let frame = Frame.find(self) { return valueClosingCycle(at: frame) }
        let frame = Frame(node: self, parent: Frame.current)
        return Frame.with(frame) {
            // Clear `stale` before reading the epoch: a change after this point either moves the
            // epoch past the one recorded below or finds `stale` false and notifies again.
            let snapshot = state.withLock { s in
                s.stale = false
                return (s.compute, s.generation, s.verifiedEpoch, s.value, s.version, s.sources)
            }
            let epoch = Graph.currentEpoch
            let (compute, generation, verifiedEpoch, cached, version, sources) = snapshot
            guard let compute else { unassigned() }

            if verifiedEpoch != 0, let cached {
                // Bring the inputs up to date in the order they were read; stop at the first that
                // changed (what the closure does after it may not be read this time).
                var upToDate = true
                for source in sources where source.node.currentVersion() != source.version {
                    upToDate = false
                    break
                }
                if upToDate {
                    state.withLock { s in
                        if s.generation == generation, s.verifiedEpoch < epoch { s.verifiedEpoch = epoch }
                    }
                    return (cached, version)
                }
            }

            state.withLock { $0.computing += 1 }
            frame.computing = true
            let value = compute()
            frame.computing = false
            let (result, errorChanged) = state.withLock { s -> ((Value, UInt64), Bool) in
                s.computing -= 1
                // A newer run (or a new closure) already stored its result: keep that one.
                guard s.generation == generation, epoch >= s.verifiedEpoch else { return ((value, s.version), false) }
                if let old = s.value, let isEqual, isEqual(old, value) {
                    // Same value: the version stays, so nothing computed from it reruns.
                } else {
                    s.value = value
                    s.version += 1
                }
                s.sources = frame.sources
                s.verifiedEpoch = epoch
                let errorChanged = s.error != nil || frame.cycle != nil
                s.error = frame.cycle
                return ((s.value ?? value, s.version), errorChanged)
            }
            if errorChanged { registrar.withMutation(of: self, keyPath: errorKeyPath) {} }
            return result
        }
    }

    /// A read of this value while it is being refreshed on this thread: a cycle. Marks every
    /// node in the loop and returns a value that breaks it.
    private func valueClosingCycle(at start: Frame) -> (Value, UInt64) {
        var loop: [Frame] = []
        var frame = Frame.current
        while let f = frame {
            loop.append(f)
            if f === start { break }
            frame = f.parent
        }
        let names = loop.reversed().map(\.node.nodeName) + [nodeName]
        let error = CofferError(.cycle, "dependency cycle: \(names.joined(separator: " → "))")
        for f in loop { f.cycle = error }
        let (value, version) = state.withLock { ($0.value ?? $0.fallback, $0.version) }
        if let value = value ?? ValueTraits.literalZero(of: Value.self) { return (value, version) }
        preconditionFailure(
            "CofferState: \(error.message); \(nodeName) has no value yet to break it with. Give it one: Computed(fallback: …) { … }"
        )
    }

    private func unassigned() -> Never {
        preconditionFailure(
            "CofferState: \(nodeName) was read before a closure was assigned to it. Assign it in init: `$name = Computed { … }`"
        )
    }

    /// Takes over `other`'s closure (and name and fallback), then tells dependents and observers.
    func adopt(_ other: ComputedNode<Value>) {
        guard other !== self else { return }
        let (compute, name, fallback) = other.state.withLock { ($0.compute, $0.name, $0.fallback) }
        let wasComputed = state.withLock { s in
            s.compute = compute
            if let name { s.name = name }
            if let fallback { s.fallback = fallback }
            s.generation += 1
            s.verifiedEpoch = 0
            s.sources = []
            return s.value != nil
        }
        guard wasComputed else { return }
        Graph.bumpEpoch()
        notifyChanged()
        Graph.propagate(from: [self])
    }
}

extension ComputedNode: Observable {}

extension ComputedNode: SourceNode {
    var nodeName: String {
        if let name = state.withLock({ $0.name }) { return "Computed<\(Value.self)>(\(name))" }
        return "Computed<\(Value.self)>"
    }

    func currentVersion() -> UInt64 { refresh().1 }

    func addDependent(_ node: any DependentNode) { dependentLinks.withLock { $0.insert(node) } }
    func removeDependent(_ id: ObjectIdentifier) { dependentLinks.withLock { $0.remove(id) } }
    func dependents() -> [any DependentNode] { dependentLinks.withLock { $0.live() } }
}

extension ComputedNode: DependentNode {
    func invalidate(from source: ObjectIdentifier) -> Invalidation {
        state.withLock { s in
            // While the closure runs its inputs are not known yet: treat every link as live.
            guard s.computing > 0 || s.sources.contains(where: { ObjectIdentifier($0.node) == source }) else {
                return .unrelated
            }
            if s.stale { return .alreadyStale }
            s.stale = true
            return .becameStale
        }
    }

    func notifyChanged() {
        registrar.withMutation(of: self, keyPath: valueKeyPath) {}
        let subscribers = subscribers.snapshot
        guard !subscribers.isEmpty else { return }
        let (value, version) = refresh()
        for subscriber in subscribers { subscriber.deliver(value, version: version) }
    }
}
