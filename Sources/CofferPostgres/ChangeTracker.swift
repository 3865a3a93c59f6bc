// What both PostgreSQL stores share to report changes from elsewhere: where their observers
// start, which versions this instance wrote itself, and how catching up orders the two.
#if Postgres
import CofferCore
import PostgresNIO

/// The change observation of one PostgreSQL store (a key-value suite, a vault): its observers and
/// their ``ChangeFeed``, the newest version they have been told about, and the versions this
/// instance wrote, which are not reported as changes from elsewhere.
///
/// Every write to a store raises the store's version and stamps the rows it writes with it, so
/// "changed since the last report" is "rows with a newer version". The store says which rows those
/// are and what its observers hear of them; this type keeps the rest: suppressing this instance's
/// own writes, moving the starting point forward, and making everyone reread when the starting
/// point is unknown because the server was down when observing started.
final class ChangeTracker<Change: Sendable>: Sendable {
    private struct State {
        /// The newest store version the observers have been told about; `nil` until the feed's
        /// first catch-up reads it.
        var seen: Int64?
        /// Versions this instance wrote, not to be reported as outside changes.
        var own: Set<Int64> = []
    }

    private let observers = FeedObservers<Change>()
    private let state = Locked(State())

    init() {}

    /// Adds `handler`. The first observer starts a feed on `channel` that calls `catchUp` (the
    /// store's, holding the store weakly).
    ///
    /// Nothing is read here (the caller may be a setter or a first read, which never wait on the
    /// network): the starting point is unknown until the feed's first catch-up, which reads the
    /// store's version and tells every observer to reread everything once.
    func observe(
        _ handler: @escaping @Sendable (Change) -> Void, link: PostgresLink, channel: String,
        catchUp: @escaping @Sendable () async throws -> Void
    ) -> StoreObservation {
        observers.add(handler) {
            state.withLock {
                $0.seen = nil
                $0.own = []
            }
            return ChangeFeed(link: link, channel: channel, catchUp: catchUp)
        }
    }

    /// Reads what changed since the last report and tells the observers.
    ///
    /// - Parameters:
    ///   - version: reads the store's version (for a starting point that is unknown).
    ///   - everything: what observers hear when the starting point is unknown: reread all.
    ///   - changed: the store's counter, its rows written after the given version (none above
    ///     the counter), each with its version, and whether the store was restored.
    ///   - report: what observers hear of the changed rows this instance did not write (never
    ///     called with none).
    ///
    /// A counter below the starting point, or a store restored, makes everyone reread and
    /// starts again from the counter.
    func catchUp<Row>(
        version: () async throws -> Int64, everything: Change,
        changed: (_ since: Int64) async throws -> (counter: Int64, rows: [(row: Row, version: Int64)], restored: Bool),
        report: ([Row]) -> Change
    ) async throws {
        guard observers.isObserved else { return }
        guard let since = state.withLock({ $0.seen }) else {
            let now = try await version()
            state.withLock { $0.seen = max($0.seen ?? 0, now) }
            observers.notify(everything)
            return
        }
        let (counter, rows, restored) = try await changed(since)
        if restored || counter < since {
            state.withLock {
                $0.seen = counter
                $0.own = []
            }
            observers.notify(everything)
            return
        }
        guard !rows.isEmpty else { return }
        let newest = rows.map(\.version).max() ?? since
        let own = state.withLock { t -> Set<Int64> in
            defer {
                t.seen = max(t.seen ?? 0, newest)
                t.own = t.own.filter { $0 > newest }
            }
            return t.own
        }
        let outside = rows.filter { !own.contains($0.version) }.map(\.row)
        if !outside.isEmpty { observers.notify(report(outside)) }
    }

    /// Forgets the starting point: the next catch-up makes everyone reread.
    func restart() {
        state.withLock {
            $0.seen = nil
            $0.own = []
        }
    }

    /// Notes a version this instance committed, so that catching up does not report it.
    func markOwn(_ version: Int64) {
        guard observers.isObserved else { return }
        state.withLock { t in
            // Unknown start: the first catch-up makes everyone reread anyway.
            if let seen = t.seen, version > seen { t.own.insert(version) }
        }
    }
}
#endif
