
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

/// A stream and the subscriber that feeds it; `unregister` runs when the consumer stops.
func makeValueStream<Value: Sendable>(
    register: (Subscriber<Value>) -> UInt64,
    unregister: @escaping @Sendable (UInt64) -> Void
) -> (AsyncStream<Value>, Subscriber<Value>) {
    let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: .unbounded)
    let subscriber = Subscriber(continuation)
    let id = register(subscriber)
    continuation.onTermination = { _ in unregister(id) }
    return (stream, subscriber)
}
