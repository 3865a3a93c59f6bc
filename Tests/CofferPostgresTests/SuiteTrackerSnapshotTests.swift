#if Postgres
import CofferCore
import CofferPostgres
import Foundation
import Logging
import Testing

/// What a suite's change tracker makes of the snapshots a catch-up reads, with the readings two
/// real servers gave (a primary and its hot standby, PostgreSQL 15): a snapshot that does not
/// list the transactions still running, and a transaction counter turned back while a
/// transaction left open held `xmin` where it was, must never make a commit go unread.
@Suite("A suite's change tracker and the server's snapshots")
struct SuiteTrackerSnapshotTests {
    static func tracker() -> SuiteTracker {
        SuiteTracker(suite: "s", logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    static func row(_ key: String, _ writer: UInt64) -> SuiteTracker.Row {
        SuiteTracker.Row(key: Data(key.utf8), writer: writer)
    }

    @Test("After a hot standby's snapshot (no running transactions listed), the next catch-up reads from its xmin")
    func standbySnapshotReadsFromXmin() {
        let tracker = Self.tracker()
        tracker.apply(SuiteTracker.Reading(xmin: 830, xmax: 830, rows: []), newestBefore: 0)
        // On the standby: 836 runs on the primary (xmin 836), but the list is empty.
        tracker.apply(SuiteTracker.Reading(xmin: 836, xmax: 838, running: [], rows: []), newestBefore: 0)
        let next = tracker.start().horizon
        // Every writer from 836 on: the row 836 commits later is read.
        #expect(next == SuiteTracker.Since(xmin: 836, xmax: 836, running: []))
    }

    @Test("A primary's snapshot lists its running transactions, and the next catch-up reads only what it could not see")
    func primarySnapshotReadsFromXmax() {
        let tracker = Self.tracker()
        tracker.apply(SuiteTracker.Reading(xmin: 830, xmax: 830, rows: []), newestBefore: 0)
        tracker.apply(SuiteTracker.Reading(xmin: 836, xmax: 838, running: [836], rows: []), newestBefore: 0)
        #expect(tracker.start().horizon == SuiteTracker.Since(xmin: 836, xmax: 838, running: [836]))
    }

    @Test("An xmax below one seen before is a counter turned back, even while xmin is held back: everything is reread")
    func xmaxGoingBackIsARollback() {
        let tracker = Self.tracker()
        tracker.apply(SuiteTracker.Reading(xmin: 839, xmax: 840, running: [839], rows: []), newestBefore: 0)
        // A transaction left open at 839; 20 other commits; the follower's last snapshot.
        tracker.apply(SuiteTracker.Reading(xmin: 839, xmax: 861, running: [839], rows: [Self.row("a", 836)]), newestBefore: 0)
        #expect(tracker.start().newest == 836)
        // A lagging replica promoted: its counter is at 842 — below 861, above the held xmin 839
        // and the newest writer seen (836) — and it committed 841, which the catch-up's bounds
        // (writer >= 861, or 839) do not read. Only "everything changed" makes observers see it:
        // the rollback branch starts over (nothing known, the horizon the new server's).
        tracker.apply(SuiteTracker.Reading(xmin: 842, xmax: 842, rows: []), newestBefore: 836)
        #expect(tracker.start().newest == 0)
        #expect(tracker.start().horizon == SuiteTracker.Since(xmin: 842, xmax: 842, running: []))
        // From there on the new server's counter is the reference: a later catch-up is ordinary.
        tracker.apply(SuiteTracker.Reading(xmin: 844, xmax: 844, rows: [Self.row("next", 843)]), newestBefore: 0)
        #expect(tracker.start().newest == 843)
    }
}
#endif
