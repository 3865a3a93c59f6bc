import CofferCore

/// One `values` stream of a node: delivers each version at most once, in version order.
final class Subscriber<Value: Sendable>: Sendable {
    let continuation: AsyncStream<Value>.Continuation
    private let delivered = Locked<UInt64?>(nil)

    init(_ continuation: AsyncStream<Value>.Continuation) {
        self.continuation = continuation
    }

    /// Yields `value` unless this stream already has `version` or a newer one.
    ///
    /// `yield` runs under this subscriber's own lock so two notifying threads cannot reorder
    /// values; it only enqueues (and at most schedules the waiting task), it never runs user code.
    func deliver(_ value: Value, version: UInt64) {
        delivered.withLock { last in
            if let last, version <= last { return }
            last = version
            continuation.yield(value)
        }
    }
}

/// The `values` streams of a node, by id.
struct Subscribers<Value: Sendable>: Sendable {
    private var next: UInt64 = 0
    private var all: [UInt64: Subscriber<Value>] = [:]

    var isEmpty: Bool { all.isEmpty }
    var snapshot: [Subscriber<Value>] { Array(all.values) }

    mutating func insert(_ subscriber: Subscriber<Value>) -> UInt64 {
        next += 1
        all[next] = subscriber
        return next
    }

    mutating func remove(_ id: UInt64) {
        all[id] = nil
    }

    mutating func removeAll() -> [Subscriber<Value>] {
        defer { all = [:] }
        return Array(all.values)
    }
}

/// The `values` streams of one node.
///
/// A separate object so that a stream's termination handler can unregister without a weak
/// reference to the node (a weakly referenced object pays slower reference counting on every
/// read).
final class SubscriberList<Value: Sendable>: Sendable {
    private let subscribers = Locked(Subscribers<Value>())

    var snapshot: [Subscriber<Value>] { subscribers.withLock { $0.snapshot } }

    /// A new stream and the subscriber that feeds it; it unregisters when the consumer stops.
    /// `owner`, if any, is kept alive until then (a ``StoredMap``'s entry, which keeps the cell
    /// feeding the stream registered).
    func makeStream(keeping owner: (any Sendable)? = nil) -> (AsyncStream<Value>, Subscriber<Value>) {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: .unbounded)
        let subscriber = Subscriber(continuation)
        let id = subscribers.withLock { $0.insert(subscriber) }
        continuation.onTermination = { [self] _ in
            withExtendedLifetime(owner) { subscribers.withLock { $0.remove(id) } }
        }
        return (stream, subscriber)
    }

    /// Ends every stream (the node is going away).
    func finishAll() {
        for subscriber in subscribers.withLock({ $0.removeAll() }) { subscriber.continuation.finish() }
    }
}
