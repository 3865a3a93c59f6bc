import CofferCore
public import Synchronization

// The dependency graph: how `@Computed` values find their inputs, stay up to date and tell
// their observers.
//
// It is a push-pull graph with version numbers (the shape of Preact signals and Reactively):
//
// - Every node has a `version` that grows when its value changes. A global `epoch` grows on
//   every change of any `Stored` value.
// - **Pull (values).** A computed node remembers the inputs it read last time and their
//   versions, and the epoch at which it last checked them. A read in the same epoch is a cache
//   hit. Otherwise it brings each remembered input up to date, in the order it read them, and
//   recomputes only when one of them has a new version. Inputs that change value only when
//   they really change (equal results keep the version) make chains and diamonds recompute
//   once per change, never with a mix of old and new inputs, and never for a branch the last
//   run did not take.
// - **Push (notifications).** Inputs keep weak links to the computed nodes that read them. A
//   change marks dependents stale (once: a stale node is not walked again until it is read),
//   then tells their Observation registrars and `values` streams. No value is computed during
//   the push; observers read, and reading pulls.
//
// Computation is synchronous, so the "current computation" is thread-local: a read of a node
// while a computed closure runs on this thread records the node as an input of that closure.

/// The process-wide change counter: grows on every change of any `Stored` value.
@usableFromInline
enum Graph: Sendable {
    @usableFromInline static let epoch = Atomic<UInt64>(1)

    static func bumpEpoch() {
        epoch.wrappingAdd(1, ordering: .sequentiallyConsistent)
    }

    @inlinable
    static var currentEpoch: UInt64 { epoch.load(ordering: .sequentiallyConsistent) }

    /// How many refreshes of computed values are in progress, on all threads.
    ///
    /// While it is zero no computation is running anywhere, so a read has nothing to record and
    /// can skip the thread-local lookup. A thread only needs to see its own increments (a
    /// computation records the reads made by its own closure, on its own thread), which relaxed
    /// ordering gives.
    @usableFromInline static let activeFrames = Atomic<Int>(0)

    /// True when no computed value is being refreshed on any thread.
    @inlinable
    static var nothingComputing: Bool { activeFrames.load(ordering: .relaxed) == 0 }

    /// Marks the dependents of `sources` stale, transitively, then notifies each newly stale node
    /// once (Observation, `values` streams). Called with no lock held.
    static func propagate(from sources: [any SourceNode]) {
        var work: [(node: any DependentNode, from: any SourceNode)] = []
        for source in sources { work += source.dependents().map { ($0, source) } }
        guard !work.isEmpty else { return }
        var notify: [any DependentNode] = []
        while let (node, from) = work.popLast() {
            switch node.invalidate(from: ObjectIdentifier(from)) {
            case .becameStale:
                notify.append(node)
                if let asSource = node as? any SourceNode {
                    work.append(contentsOf: asSource.dependents().map { ($0, asSource) })
                }
            case .alreadyStale:
                break
            case .unrelated:
                from.removeDependent(ObjectIdentifier(node))
            }
        }
        for node in notify { node.notifyChanged() }
    }
}

/// What a dependent did when told that one of its inputs changed.
enum Invalidation {
    /// It was up to date and is now stale: notify its observers and walk on.
    case becameStale
    /// It was already stale: its observers were told, and its own dependents were walked.
    case alreadyStale
    /// It no longer reads this input (a dynamic branch moved): drop the link.
    case unrelated
}

/// A node that others can read: a `Stored` or a `Computed`.
protocol SourceNode: AnyObject, Sendable {
    /// Brings the node up to date (loading or recomputing it) and returns its version.
    func currentVersion() -> UInt64
    /// A short name for messages, such as `Computed<Int>("total")`.
    var nodeName: String { get }
    func addDependent(_ node: any DependentNode)
    func removeDependent(_ id: ObjectIdentifier)
    func dependents() -> [any DependentNode]
}

/// A node that reads others: a `Computed`.
protocol DependentNode: AnyObject, Sendable {
    func invalidate(from source: ObjectIdentifier) -> Invalidation
    /// Tells Observation and the `values` streams; called with no lock held.
    func notifyChanged()
}

/// An input as a computation saw it.
struct SourceRecord: Sendable {
    let node: any SourceNode
    let version: UInt64
}

/// The weak links from an input to the computed nodes that read it.
struct DependentLinks: Sendable {
    private struct Weak: Sendable {
        weak var node: (any DependentNode)?
    }
    private var links: [ObjectIdentifier: Weak] = [:]

    mutating func insert(_ node: any DependentNode) {
        links[ObjectIdentifier(node)] = Weak(node: node)
    }

    mutating func remove(_ id: ObjectIdentifier) {
        links[id] = nil
    }

    /// The live dependents; links to deallocated nodes are dropped.
    mutating func live() -> [any DependentNode] {
        guard !links.isEmpty else { return [] }
        var result: [any DependentNode] = []
        result.reserveCapacity(links.count)
        for (id, link) in links {
            if let node = link.node { result.append(node) } else { links[id] = nil }
        }
        return result
    }
}

/// One node being refreshed on this thread: validating its inputs, or running its closure.
///
/// Frames form a per-thread stack (through `parent`). A node found on its own thread's stack is
/// a cycle. Thread-confined: created, used and dropped by one synchronous call on one thread.
final class Frame {
    let node: any SourceNode
    let parent: Frame?
    /// True while the node's closure runs: reads then record into this frame.
    var computing = false
    private(set) var sources: [SourceRecord] = []
    var cycle: CofferError?

    init(node: any SourceNode, parent: Frame?) {
        self.node = node
        self.parent = parent
    }

    /// Records `node` as an input, once, with the version first seen, and links it to the
    /// computing node at once so a change that lands during the computation still reaches it.
    func record(_ source: any SourceNode, version: UInt64) {
        for existing in sources where existing.node === source { return }
        sources.append(SourceRecord(node: source, version: version))
        if let dependent = node as? any DependentNode { source.addDependent(dependent) }
    }

    // MARK: The thread-local stack

    /// The innermost frame on this thread, if a refresh is in progress.
    static var current: Frame? {
        guard let raw = frameSlot.value else { return nil }
        return Unmanaged<Frame>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Runs `body` with `frame` as the innermost frame. The caller keeps `frame` alive.
    static func with<R>(_ frame: Frame, _ body: () -> R) -> R {
        let previous = frameSlot.value
        Graph.activeFrames.wrappingAdd(1, ordering: .relaxed)
        frameSlot.value = Unmanaged.passUnretained(frame).toOpaque()
        defer {
            frameSlot.value = previous
            Graph.activeFrames.wrappingSubtract(1, ordering: .relaxed)
        }
        return withExtendedLifetime(frame) { body() }
    }

    /// The frame of `node` on this thread's stack, if it is being refreshed here.
    static func find(_ node: AnyObject) -> Frame? {
        var frame = current
        while let f = frame {
            if f.node === node { return f }
            frame = f.parent
        }
        return nil
    }
}

/// Records a read of `source` into the computation running on this thread, if any.
@inline(__always)
func recordRead(of source: any SourceNode, version: UInt64) {
    guard let raw = frameSlot.value else { return }
    let frame = Unmanaged<Frame>.fromOpaque(raw).takeUnretainedValue()
    if frame.computing { frame.record(source, version: version) }
}

/// This thread's innermost `Frame` (a thread-local slot of the platform layer).
let frameSlot = ThreadLocalSlot()
/// This thread's outermost `BatchScope`.
let batchSlot = ThreadLocalSlot()
