import CofferCore
import Foundation

/// Runs `body` as one batch: its writes notify once and persist in one commit per strategy.
///
/// Inside the batch, reads see each write at once (computed values included). When the
/// outermost batch ends — normally or by throwing — every property written in it notifies its
/// observers once, with its final value, and then persists: the changes for one strategy are
/// saved with a single `saveBatch` call when the strategy is a ``BatchPersistenceStrategy``
/// (one append and one fsync for the key-value file), else key by key. A property on a remote
/// store (``AsyncPersistenceStrategy``) is persisted by its own background writer after the
/// batch, key by key and in order, not as one transaction; the batch does not wait for it.
///
/// ```swift
/// batch {
///     settings.width = 1280
///     settings.height = 800      // observers of both see one change; one commit
/// }
/// ```
///
/// - A batch belongs to the thread that runs it; writes from other threads meanwhile are not
///   part of it. Nested batches join the outermost one.
/// - It is not a transaction for the values in memory: a `body` that throws keeps (and
///   persists) the writes it made before throwing.
/// - Failures surface in each property's `error`, as for single writes.
/// - Returns: What `body` returns.
/// - Throws: What `body` throws.
public func batch<Result>(_ body: () throws -> Result) rethrows -> Result {
    if BatchScope.current != nil { return try body() }
    let scope = BatchScope()
    batchSlot.value = Unmanaged.passUnretained(scope).toOpaque()
    defer {
        batchSlot.value = nil
        scope.finish()
    }
    return try withExtendedLifetime(scope) { try body() }
}

/// A property that can defer its notification and persistence to the end of a batch.
protocol BatchParticipant: AnyObject, Sendable {
    /// Notifies its own observers of the final value; returns itself for the propagation to
    /// computed dependents, which the batch does once for all participants.
    func batchDidEnd() -> any SourceNode
    /// The strategy and key to persist to, or `nil` (memory, or a backing that failed to
    /// resolve — the participant reports that failure itself).
    func batchTarget() -> (strategy: any PersistenceStrategy, key: String)?
    func withPersistLock(_ body: () -> Void)
    /// The bytes to persist (`nil` data removes), unless the store already has the newest value.
    func pendingChange(encoding: ValueEncoding) -> PendingChange?
    func markPersisted(_ version: UInt64)
    /// Records the outcome in the participant's observable `error`. Called with no lock held.
    func reportPersistOutcome(_ error: CofferError?)
}

struct PendingChange {
    var version: UInt64
    var data: Result<Data?, CofferError>
}

/// The writes of one batch on one thread. Thread-confined.
final class BatchScope {
    private var participants: [any BatchParticipant] = []
    private var seen: Set<ObjectIdentifier> = []

    static var current: BatchScope? {
        guard let raw = batchSlot.value else { return nil }
        return Unmanaged<BatchScope>.fromOpaque(raw).takeUnretainedValue()
    }

    func add(_ participant: any BatchParticipant) {
        if seen.insert(ObjectIdentifier(participant)).inserted { participants.append(participant) }
    }

    /// Notifies, then persists one group per strategy instance.
    func finish() {
        Graph.bumpEpoch()
        Graph.propagate(from: participants.map { $0.batchDidEnd() })

        var groups: [(strategy: any PersistenceStrategy, members: [(participant: any BatchParticipant, key: String)])] = []
        var groupOfStrategy: [ObjectIdentifier: Int] = [:]
        for participant in participants {
            guard let (strategy, key) = participant.batchTarget() else { continue }
            // Strategies that are classes group by identity; a value-type strategy is its own group.
            if type(of: strategy) is AnyObject.Type {
                let id = ObjectIdentifier(strategy as AnyObject)
                if let index = groupOfStrategy[id] {
                    groups[index].members.append((participant, key))
                    continue
                }
                groupOfStrategy[id] = groups.count
            }
            groups.append((strategy, [(participant, key)]))
        }

        for group in groups {
            let outcomes = Self.persist(group.members, to: group.strategy)
            for (participant, error) in outcomes { participant.reportPersistOutcome(error) }
        }
    }

    /// Persists a group under all its members' persist locks (taken in address order, so two
    /// batches can never deadlock) and returns each member's outcome.
    private static func persist(
        _ members: [(participant: any BatchParticipant, key: String)], to strategy: any PersistenceStrategy
    ) -> [(any BatchParticipant, CofferError?)] {
        let ordered = members.sorted {
            UInt(bitPattern: ObjectIdentifier($0.participant)) < UInt(bitPattern: ObjectIdentifier($1.participant))
        }
        var outcomes: [(any BatchParticipant, CofferError?)] = []
        withPersistLocks(ordered[...]) {
            var changes: [(key: String, data: Data?)] = []
            var included: [(participant: any BatchParticipant, version: UInt64)] = []
            for (participant, key) in ordered {
                guard let change = participant.pendingChange(encoding: strategy.valueEncoding) else { continue }
                switch change.data {
                case .failure(let error):
                    outcomes.append((participant, error))
                case .success(let data):
                    changes.append((key, data))
                    included.append((participant, change.version))
                }
            }
            guard !included.isEmpty else { return }
            if let batchStrategy = strategy as? any BatchPersistenceStrategy {
                do {
                    try batchStrategy.saveBatch(changes)
                    for member in included { member.participant.markPersisted(member.version) }
                    outcomes += included.map { ($0.participant, nil) }
                } catch {
                    let failure = CofferError.wrapping(error, "saving a batch of \(changes.count) to \(type(of: strategy))")
                    outcomes += included.map { ($0.participant, failure) }
                }
                return
            }
            for (index, member) in included.enumerated() {
                let change = changes[index]
                do {
                    if let data = change.data { try strategy.save(data, for: change.key) } else { try strategy.remove(change.key) }
                    member.participant.markPersisted(member.version)
                    outcomes.append((member.participant, nil))
                } catch {
                    outcomes.append((member.participant, .wrapping(error, "saving \(change.key) to \(type(of: strategy))")))
                }
            }
        }
        return outcomes
    }

    private static func withPersistLocks(
        _ members: ArraySlice<(participant: any BatchParticipant, key: String)>, _ body: () -> Void
    ) {
        guard let first = members.first else { return body() }
        first.participant.withPersistLock { withPersistLocks(members.dropFirst(), body) }
    }
}
