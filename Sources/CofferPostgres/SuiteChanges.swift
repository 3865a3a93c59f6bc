// How a key-value suite's observers learn what other instances wrote: rows stamped with the
// writing transaction, a horizon read from the server's own snapshot, and one notification sent
// after many commits.
#if Postgres
import CofferCore
package import Foundation
package import Logging
import PostgresNIO

/// The change observation of one key-value suite, ordered by the server's transaction ids.
///
/// Every key-value row carries `writer`, the id (`xid8`) of the transaction that last wrote it.
/// A catch-up reads, in one statement and so under one snapshot, that snapshot (`xmin`: every
/// transaction with a smaller id has ended; `xmax`: the next id; `xip`: the ids still running
/// between them) and the rows the previous catch-up's snapshot could not see: those whose writer
/// is at least its `xmax`, or one of its `xip`. A transaction that had not committed at the
/// previous catch-up is one of those, so every row committed since is read: no commit is missed
/// however commits interleave, and no write has to lock anything shared to keep them in order
/// (the suite-wide version row this replaces made every write of a suite wait for the previous
/// one's commit). A row the previous snapshot saw is not read again, so a catch-up reads what
/// changed since the last one, by the `(suite, writer)` index, however large the suite, even
/// while a transaction left open elsewhere holds `xmin` back (reading from the previous `xmin`
/// reread every row written since that transaction began, at every catch-up). A row of this
/// instance's own writes is not reported.
///
/// What the server says is checked against what this instance knew:
/// - the snapshot's `xmin` below the previous one, its `xmax` below any seen before, or its `xmax`
///   not above a writer this instance has seen: the server's transaction counter went back (a
///   backup restored, a lagging replica promoted). Every observer rereads everything, and it is logged
///   once as a warning;
/// - a row whose writer is not below the snapshot's `xmax` cannot have been committed by this
///   server (a forged row, or rows restored from another cluster): it is not reported as a change
///   and never moves the horizon, so it cannot stop anyone following; logged once;
/// - a key that is not UTF-8: skipped and logged once, never an error that stops catching up.
package final class SuiteTracker: Sendable {
    /// A row as a catch-up reads it.
    package struct Row: Sendable {
        package var key: Data
        package var writer: UInt64

        package init(key: Data, writer: UInt64) {
            self.key = key
            self.writer = writer
        }
    }

    /// What one catch-up statement returns: the snapshot and the rows written since.
    package struct Reading: Sendable {
        package var xmin: UInt64
        package var xmax: UInt64
        /// The transactions running when the snapshot was taken (between `xmin` and `xmax`).
        package var running: [UInt64] = []
        package var rows: [Row]

        package init(xmin: UInt64, xmax: UInt64, running: [UInt64] = [], rows: [Row]) {
            self.xmin = xmin
            self.xmax = xmax
            self.running = running
            self.rows = rows
        }
    }

    /// What the next catch-up reads: rows whose writer is at least `xmax` or one of `running`
    /// (the previous snapshot's; what it could not see). `xmin` checks the counter did not go back.
    package struct Since: Sendable, Equatable {
        package var xmin: UInt64
        package var xmax: UInt64
        package var running: [UInt64]

        package init(xmin: UInt64, xmax: UInt64, running: [UInt64]) {
            self.xmin = xmin
            self.xmax = xmax
            self.running = running
        }

        /// What the next catch-up starts from after a snapshot `reading` took. A snapshot names
        /// every transaction still running only when it is complete: on a primary its `xmin` (the
        /// oldest running) is one of them, or nothing runs (`xmin == xmax`). A hot standby's
        /// (`pg_current_snapshot()` in recovery) lists none, and a transaction running on the
        /// primary would never be read once it commits: from such a snapshot the next catch-up
        /// reads every writer from `xmin` on, as one that cannot trust the list must.
        init(after reading: Reading) {
            let complete = reading.xmin == reading.xmax || reading.running.contains(reading.xmin)
            self.xmin = reading.xmin
            self.xmax = complete ? reading.xmax : reading.xmin
            self.running = complete ? reading.running : []
        }
    }

    private struct Stamp: Hashable {
        var key: Data
        var writer: UInt64
    }

    private struct State {
        /// The snapshot of the last catch-up; `nil` until the feed's first catch-up reads it.
        var horizon: Since?
        /// The newest transaction id known to have committed here (read in a row, or this
        /// instance's own write).
        var newest: UInt64 = 0
        /// The largest `xmax` a snapshot showed: on one server it never decreases.
        var xmaxSeen: UInt64 = 0
        /// Rows the next catch-up may read that were already reported, or written by this instance.
        var known: Set<Stamp> = []
        /// What has been logged already (each kind once per observation).
        var warned: Set<String> = []
        /// How many catch-ups read rows, and how many rows they read (``reads``).
        var catchUps = 0
        var rowsRead = 0
    }

    private let observers = FeedObservers<StoreChange>()
    private let state = Locked(State())
    private let suite: String
    private let logger: Logger

    package init(suite: String, logger: Logger) {
        self.suite = suite
        self.logger = logger
    }

    /// Adds `handler`; the first observer starts a feed on `channel` (see ``ChangeTracker``),
    /// which does not wake for notifications whose payload is `ownToken` (this instance's).
    func observe(
        _ handler: @escaping @Sendable (StoreChange) -> Void, link: PostgresLink, channel: String, ownToken: String,
        catchUp: @escaping @Sendable () async throws -> Void
    ) -> StoreObservation {
        observers.add(handler) {
            state.withLock { $0 = State() }
            return ChangeFeed(
                link: link, channel: channel, poll: Self.pollInterval, ignoring: ownToken, catchUp: catchUp)
        }
    }

    /// How often a feed catches up without a notification: a writer that died between its commit
    /// and its notification (or a notification lost with a connection) is seen within this time.
    static let pollInterval = Duration.seconds(5)

    /// Whether anyone observes.
    var isObserved: Bool { observers.isObserved }

    /// What a catch-up starts from: the previous snapshot (`nil` when only the snapshot is
    /// needed: the first catch-up), and the newest transaction known to have committed before
    /// the catch-up's statement is sent (every one of them is below its snapshot's `xmax`).
    package func start() -> (horizon: Since?, newest: UInt64) {
        state.withLock { ($0.horizon, $0.newest) }
    }

    /// How many catch-ups this observation made that asked for rows, and how many rows they
    /// read in all: what following a suite costs, whatever its size (for tests and the benchmark).
    var reads: (catchUps: Int, rows: Int) {
        state.withLock { ($0.catchUps, $0.rowsRead) }
    }

    /// Notes rows this instance committed (transaction `writer`), so catching up does not report
    /// them as changes from elsewhere.
    func markOwn(_ keys: [Data], writer: UInt64) {
        guard observers.isObserved else { return }
        state.withLock { t in
            t.newest = max(t.newest, writer)
            // Unknown start: the first catch-up makes everyone reread anyway.
            guard let horizon = t.horizon, writer >= horizon.xmin else { return }
            for key in keys { t.known.insert(Stamp(key: key, writer: writer)) }
        }
    }

    /// Applies one catch-up's reading and tells the observers. `newestBefore` is ``start()``'s:
    /// a write of this instance that committed while the statement ran may be newer than the
    /// snapshot, so the counter check compares against what was known before it.
    package func apply(_ reading: Reading, newestBefore: UInt64) {
        enum Verdict {
            case everything(rolledBack: Bool)
            case keys(Set<String>, impossible: Int, undecodable: Int)
        }
        let verdict = state.withLock { t -> Verdict in
            let snapshot = Since(after: reading)
            guard let horizon = t.horizon else {
                t.horizon = snapshot
                t.xmaxSeen = reading.xmax
                t.newest = max(t.newest, reading.rows.map(\.writer).filter { $0 < reading.xmax }.max() ?? 0)
                return .everything(rolledBack: false)
            }
            t.catchUps += 1
            t.rowsRead += reading.rows.count
            // `xmax` (one past the newest completed transaction) never goes back on one server,
            // even while a transaction left open holds `xmin` where it was.
            if reading.xmin < horizon.xmin || reading.xmax < t.xmaxSeen || reading.xmax <= newestBefore {
                // The counter went back: start over from what the server says now.
                t.horizon = snapshot
                t.xmaxSeen = reading.xmax
                t.known = []
                t.newest = reading.rows.map(\.writer).filter { $0 < reading.xmax }.max() ?? 0
                return .everything(rolledBack: true)
            }
            var keys = Set<String>()
            var impossible = 0
            var undecodable = 0
            for row in reading.rows {
                guard row.writer < reading.xmax else {
                    impossible += 1
                    continue
                }
                t.newest = max(t.newest, row.writer)
                guard t.known.insert(Stamp(key: row.key, writer: row.writer)).inserted else { continue }
                guard let key = String(validating: row.key, as: UTF8.self) else {
                    undecodable += 1
                    continue
                }
                keys.insert(key)
            }
            t.horizon = snapshot
            t.xmaxSeen = max(t.xmaxSeen, reading.xmax)
            // What the next catch-up can still return: only writes this snapshot could not see
            // (a row it saw is read again only once a newer write changes its writer). So the
            // set holds this instance's writes not yet seen, however long `xmin` is held back.
            let unseen = Set(snapshot.running)
            t.known = t.known.filter { $0.writer >= snapshot.xmax || unseen.contains($0.writer) }
            return .keys(keys, impossible: impossible, undecodable: undecodable)
        }
        // The observers hear of the changes first; what was skipped is said after, and not on
        // the feed's task: a skipped row (and the application's log handler, however slow) never
        // delays the changes read with it, nor the next catch-up.
        switch verdict {
        case .everything(let rolledBack):
            observers.notify(StoreChange(keys: nil))
            if rolledBack {
                warnOnce(
                    "rollback",
                    "the server's transaction counter went back (a backup restored or a replica promoted?): "
                        + "every observer of suite \(suite) rereads every value")
            }
        case .keys(let keys, let impossible, let undecodable):
            if !keys.isEmpty { observers.notify(StoreChange(keys: keys)) }
            if impossible > 0 {
                warnOnce(
                    "impossible",
                    "\(impossible) row(s) of suite \(suite) name a writing transaction this server has not run "
                        + "(rows restored from another cluster, or forged): not reported as changes")
            }
            if undecodable > 0 {
                warnOnce("undecodable", "\(undecodable) row(s) of suite \(suite) have a key that is not UTF-8: skipped")
            }
        }
    }

    /// Logs `message` once per kind and observation, from a task of its own (see ``apply(_:newestBefore:)``).
    private func warnOnce(_ kind: String, _ message: String) {
        guard state.withLock({ $0.warned.insert(kind).inserted }) else { return }
        let logger = logger
        Offload.start { logger.warning("\(message)") }
    }

    /// The catch-up statement: a row with no key holding the statement's snapshot (as text,
    /// `xmin:xmax:xip,…`), and (unless `$3` is false) every row of suite `$1` that the previous
    /// snapshot could not see: its writer at least `$2` (that snapshot's `xmax`) or one of `$4`
    /// (its `xip`). Both parts read the statement's one snapshot; the rows come by the
    /// `(suite, writer)` index (docs/FORMAT.md §4).
    static func catchUpStatement(_ tables: Tables) -> String {
        """
        SELECT NULL::bytea, pg_current_snapshot()::text \
        UNION ALL \
        SELECT k.key, k.writer::text FROM \(tables.kv) AS k WHERE $3 AND k.suite = $1 \
        AND (k.writer >= $2::text::xid8 OR k.writer = ANY ($4::text[]::xid8[]))
        """
    }

    /// Decodes the catch-up statement's rows.
    static func reading(_ rows: [PostgresRow]) throws -> Reading {
        var reading = Reading(xmin: 0, xmax: 0, rows: [])
        var snapshot: String?
        for row in rows {
            let cells = row.cells
            let writer = try cells[1].decode(String.self)
            if let key = try cells[0].decode(Data?.self) {
                reading.rows.append(Row(key: key, writer: try xid(writer)))
            } else {
                snapshot = writer
            }
        }
        // `xmin:xmax:xip,xip,…` (the `xip` list may be empty).
        let parts = snapshot?.split(separator: ":", omittingEmptySubsequences: false) ?? []
        guard parts.count == 3 else {
            throw CofferError(.io, "the PostgreSQL server sent no snapshot, or one that is not xmin:xmax:xip")
        }
        reading.xmin = try xid(String(parts[0]))
        reading.xmax = try xid(String(parts[1]))
        reading.running = try parts[2].split(separator: ",").map { try xid(String($0)) }
        return reading
    }

    /// A transaction id as the server writes it (decimal).
    static func xid(_ text: String) throws -> UInt64 {
        guard let value = UInt64(text) else {
            throw CofferError(.io, "the PostgreSQL server sent a transaction id that is not a number")
        }
        return value
    }
}

/// Sends a suite's notification after its writes commit, one for many: each commit asks for a
/// notification sent after it, and commits made while one is being sent share the next. A
/// notification sent inside the writing transaction (as the vault does) would be delivered at
/// commit, but PostgreSQL serialises the commits of every transaction that notifies (one lock
/// held across each commit's WAL flush), which capped a suite's writes at a fraction of the
/// server's rate; sent after, it is a transaction of its own that writes nothing.
///
/// The notifications of every suite written by the process through one pool go out together:
/// at most one notifying statement per ``NotificationBatch/spacing`` per pool, naming every
/// suite (and writing instance) that committed since the last. A write after a quiet spell is
/// announced at once; writes that follow closely share the next statement. (One statement per
/// suite instance, as before, made the notifications alone a third of a busy process's
/// transactions: eight suites written by 32 tasks sent 1,600 a second.)
///
/// The write does not wait for it: its `save` returns at the commit, and the notification is
/// sent by a background task counted by ``RemoteWrites`` (so `RemoteWrites.settle()` before a
/// process exits waits for it too). One that cannot be sent (the server went away right after
/// the commit) is not the write's failure: followers find the write at their next catch-up
/// (``SuiteTracker/pollInterval`` at the latest).
final class CommitNotifier: Sendable {
    /// The payload of this store instance's notifications: random, so its own feed tells them
    /// from another instance's (in this process or elsewhere) and does not catch up on writes
    /// this instance made and already knows.
    let token: String = {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in String(generator.next() as UInt64, radix: 36) }.joined(separator: "-")
    }()

    private let batch: NotificationBatch
    private let channel: String

    init(link: PostgresLink, channel: String) {
        self.batch = NotificationBatch.shared(for: link)
        self.channel = channel
    }

    /// Asks for a notification sent after this call, and returns at once.
    func committed() {
        batch.request(channel: channel, payload: token)
    }
}

/// The notifications a process still has to send through one pool, sent together.
final class NotificationBatch: Sendable {
    private struct Pending: Hashable {
        let channel: String
        let payload: String
    }

    private struct State {
        var pending: Set<Pending> = []
        var running = false
        var lastSent: ContinuousClock.Instant?
    }

    /// The least time between two notifying statements of a pool.
    static let spacing = Duration.milliseconds(5)

    private static let batches = Locked<[PostgresConfiguration: NotificationBatch]>([:])

    /// The batch of the pool `link` uses (one per configuration, for the life of the process).
    static func shared(for link: PostgresLink) -> NotificationBatch {
        batches.withLock { batches in
            if let batch = batches[link.configuration] { return batch }
            // A link of its own, with no store's name or logger: a store whose name is refused
            // must not silence the notifications of every other store of the pool.
            let batch = NotificationBatch(link: PostgresLink(configuration: link.configuration))
            batches[link.configuration] = batch
            return batch
        }
    }

    private let state = Locked(State())
    private let link: PostgresLink

    private init(link: PostgresLink) {
        self.link = link
    }

    func request(channel: String, payload: String) {
        let start = state.withLock { s -> Bool in
            s.pending.insert(Pending(channel: channel, payload: payload))
            guard !s.running else { return false }
            s.running = true
            return true
        }
        if start { RemoteWrites.run { await self.drain() } }
    }

    private func drain() async {
        while true {
            if let last = state.withLock({ $0.lastSent }), ContinuousClock.now < last + Self.spacing {
                try? await Task.sleep(until: last + Self.spacing, clock: .continuous)
            }
            // Everything requested so far is covered by the statement sent next.
            let taken = state.withLock { s -> Set<Pending> in
                defer { s.pending = [] }
                if s.pending.isEmpty { s.running = false }
                return s.pending
            }
            guard !taken.isEmpty else { return }
            var binds = PostgresBindings()
            binds.append(taken.map(\.channel))
            binds.append(taken.map(\.payload))
            let link = link
            _ = try? await link.withConnection(idempotent: true) { [binds] connection in
                try await link.run(
                    "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)", binds, on: connection)
            }
            state.withLock { $0.lastSent = .now }
        }
    }
}
#endif
