import CofferCore
import Foundation

/// Runs `body` as one batch: its writes notify once and persist in one commit per store.
///
/// Inside the batch, reads see each write at once (computed values included). When the
/// outermost batch ends — normally or by throwing — every property written in it notifies its
/// observers once, with its final value, and then persists: the changes for one store (one
/// ``PersistenceStrategy/id``; every service of one vault) are saved with a single `saveBatch`
/// call when the strategy is a ``BatchPersistenceStrategy`` (one append and one fsync for the
/// key-value file and the vault), else key by key. A property on a remote
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
    /// Where to persist, or `nil`: memory; a remote store (the participant's own writer persists
    /// it); a backing that failed to resolve (the participant reports that failure itself).
    func batchBinding() -> StoreBinding?
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
    /// When each participant was last written in this batch (a counter): a commit applies its
    /// changes in that order, so when two properties name one stored value (two spellings of one
    /// vault item), the one written last wins, as it would without the batch.
    private var lastWrite: [ObjectIdentifier: Int] = [:]
    private var writes = 0
    /// Objects kept alive until the batch ends: a ``StoredMap`` entry written in the batch, so
    /// its cell stays registered and a read of the key in the batch sees the write.
    private var kept: [AnyObject] = []

    static var current: BatchScope? {
        guard let raw = batchSlot.value else { return nil }
        return Unmanaged<BatchScope>.fromOpaque(raw).takeUnretainedValue()
    }

    func add(_ participant: any BatchParticipant) {
        writes += 1
        if lastWrite.updateValue(writes, forKey: ObjectIdentifier(participant)) == nil { participants.append(participant) }
    }

    /// Keeps `object` alive until the batch has notified and persisted.
    func keep(_ object: AnyObject) { kept.append(object) }

    /// Notifies, then persists one group per store.
    func finish() {
        Graph.bumpEpoch()
        Graph.propagate(from: participants.map { $0.batchDidEnd() })

        var groups: [CommitGroup] = []
        var groupOfStore: [CommitGroup.Store: Int] = [:]
        for participant in participants {
            guard let binding = participant.batchBinding() else { continue }
            let member = CommitGroup.Member(
                participant: participant, binding: binding, lastWrite: lastWrite[ObjectIdentifier(participant)] ?? 0)
            // A strategy without an identity (a value type) is a group of its own.
            if let store = CommitGroup.store(of: binding.strategy) {
                if let index = groupOfStore[store] {
                    groups[index].members.append(member)
                    continue
                }
                groupOfStore[store] = groups.count
            }
            groups.append(CommitGroup(strategy: binding.strategy, members: [member]))
        }

        for group in groups {
            for (participant, error) in Self.persist(group) { participant.reportPersistOutcome(error) }
        }
    }

    /// Persists a group under all its members' persist locks (taken in address order, so two
    /// batches can never deadlock) and returns each member's outcome.
    private static func persist(_ group: CommitGroup) -> [(any BatchParticipant, CofferError?)] {
        let ordered = group.members.sorted {
            UInt(bitPattern: ObjectIdentifier($0.participant)) < UInt(bitPattern: ObjectIdentifier($1.participant))
        }
        let strategy = group.strategy
        var outcomes: [(any BatchParticipant, CofferError?)] = []
        withPersistLocks(ordered[...]) {
            var changes: [(member: CommitGroup.Member, data: Data?)] = []
            var versions: [UInt64] = []
            for member in ordered {
                guard let change = member.participant.pendingChange(encoding: member.binding.encoding) else { continue }
                switch change.data {
                case .failure(let error):
                    outcomes.append((member.participant, error))
                case .success(let data):
                    changes.append((member, data))
                    versions.append(change.version)
                }
            }
            guard !changes.isEmpty else { return }
            // The locks are taken in address order; the changes go to the store in write order.
            let byWrite = changes.indices.sorted { changes[$0].member.lastWrite < changes[$1].member.lastWrite }
            changes = byWrite.map { changes[$0] }
            versions = byWrite.map { versions[$0] }
            func commitAll(_ commit: () throws -> Void) {
                do {
                    try commit()
                    for (change, version) in zip(changes, versions) { change.member.participant.markPersisted(version) }
                    outcomes += changes.map { ($0.member.participant, nil) }
                } catch {
                    let failure = CofferError.wrapping(error, "saving a batch of \(changes.count) to \(type(of: strategy))")
                    outcomes += changes.map { ($0.member.participant, failure) }
                }
            }
            if let joint = strategy as? any JointBatchPersistenceStrategy {
                return commitAll {
                    try joint.saveJointBatch(changes.map { ($0.member.binding.strategy, $0.member.binding.key, $0.data) })
                }
            }
            if let batchStrategy = strategy as? any BatchPersistenceStrategy {
                // One store: its strategies (equal ids) name the same value by the same key.
                return commitAll { try batchStrategy.saveBatch(changes.map { ($0.member.binding.key, $0.data) }) }
            }
            for (change, version) in zip(changes, versions) {
                let (participant, key) = (change.member.participant, change.member.binding.key)
                do {
                    if let data = change.data { try strategy.save(data, for: key) } else { try strategy.remove(key) }
                    participant.markPersisted(version)
                    outcomes.append((participant, nil))
                } catch {
                    outcomes.append((participant, .wrapping(error, "saving \(key) to \(type(of: strategy))")))
                }
            }
        }
        return outcomes
    }

    private static func withPersistLocks(_ members: ArraySlice<CommitGroup.Member>, _ body: () -> Void) {
        guard let first = members.first else { return body() }
        first.participant.withPersistLock { withPersistLocks(members.dropFirst(), body) }
    }
}

/// The properties of one batch that one commit persists: those of one store.
private struct CommitGroup {
    struct Member {
        let participant: any BatchParticipant
        let binding: StoreBinding
        /// When the participant was last written in the batch (see ``BatchScope``).
        let lastWrite: Int
    }

    /// What a group is keyed by: a store's identity, or a whole store whose parts commit jointly.
    enum Store: Hashable {
        case store(StoreID)
        case joint(StoreID)
    }

    /// The strategy of the group's first member: it commits for all of them.
    let strategy: any PersistenceStrategy
    var members: [Member]

    /// The group `strategy` commits in, or `nil` for a strategy without an identity.
    static func store(of strategy: any PersistenceStrategy) -> Store? {
        if strategy is any JointBatchPersistenceStrategy, let id = strategy.id { return .joint(id.whole) }
        return strategy.id.map(Store.store)
    }
}
