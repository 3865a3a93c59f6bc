#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import Foundation
import Testing

/// What a follower of a large suite reads to catch up: the rows that changed since its last
/// catch-up, by the `(suite, writer)` index, never the suite's other rows, also while a
/// transaction left open elsewhere on the server holds the snapshot's `xmin` back.
@Suite("A follower's catch-up reads what changed, not what exists")
struct FollowerCatchUpCostTests {
    static let size = 100_000

    /// Writes `size` keys (`k0`…) into `suite` in one transaction, by SQL (a Coffer write per key
    /// would take minutes), each row stamped with its writing transaction as Coffer stamps it.
    static func fill(_ suite: String, _ cluster: PostgresTestCluster) throws {
        try cluster.sql(
            "INSERT INTO coffer_kv (suite, key, value, version, writer) SELECT '\(suite)', "
                + "convert_to('k' || i, 'UTF8'), '\\x00'::bytea, 0, pg_current_xact_id() "
                + "FROM generate_series(0, \(size - 1)) AS i")
    }

    /// The changes a store's observation reports, in order.
    final class Heard: Sendable {
        let changes = Protected<[StoreChange]>([])

        func record(_ change: StoreChange) { changes.withLock { $0.append(change) } }

        var count: Int { changes.withLock { $0.count } }

        /// Whether a change reported after the first `start` names `key`.
        func named(_ key: String, after start: Int) -> Bool {
            changes.withLock { $0.dropFirst(start).contains { $0.keys?.contains(key) == true } }
        }
    }

    @Test("After one change of a 100k-key suite a catch-up reads one row, after a batch of 100 it reads 100, by the index")
    func oneChangeReadsOneRow() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let suite = uniqueName("large")
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        try await writer.set(0, for: "created")  // the tables exist (this test may be the process's first)
        try Self.fill(suite, cluster)

        let heard = Heard()
        let observation = try follower.observeChanges { heard.record($0) }
        defer { observation.cancel() }
        // The first catch-up reads only the snapshot (and tells everyone to reread).
        #expect(await FollowingTests.until(60) { heard.count >= 1 })
        #expect(follower.catchUpReads.rows == 0)

        var start = heard.count
        var before = follower.catchUpReads.rows
        try await writer.set(1, for: "k500")
        #expect(await FollowingTests.until(60) { heard.named("k500", after: start) }, "the follower missed the change")
        #expect(follower.catchUpReads.rows - before == 1, "one change of \(Self.size) keys: \(follower.catchUpReads)")

        // A follower that missed 100 changes (one transaction, one notification) reads those 100.
        start = heard.count
        before = follower.catchUpReads.rows
        try await writer.saveBatch((0..<100).map { (key: "k\($0 * 7)", data: try ValueCodec.encode($0, as: writer.valueEncoding)) })
        #expect(await FollowingTests.until(60) { heard.named("k693", after: start) }, "the follower missed the batch")
        #expect(follower.catchUpReads.rows - before == 100, "100 changes of \(Self.size) keys: \(follower.catchUpReads)")

        // The server reads those rows by the (suite, writer) index, not by scanning the table.
        let xmax = try cluster.sql("SELECT pg_snapshot_xmax(pg_current_snapshot())")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let plan = try cluster.sql(
            "PREPARE catch_up (text, text, boolean, text[]) AS \(follower.catchUpStatement); "
                + "EXPLAIN (COSTS OFF) EXECUTE catch_up ('\(suite)', '\(xmax)', true, '{}')")
        #expect(plan.contains("coffer_kv_writers"), "\(plan)")
        #expect(!plan.contains("Seq Scan"), "\(plan)")
    }

    @Test("A transaction left open elsewhere: each catch-up still reads only what changed since the last, and the open one's write is seen when it commits")
    func openTransactionDoesNotMakeCatchUpsReread() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let suite = uniqueName("held")
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        // The holder's transaction stays open (idle in it) for as long as the test needs.
        var patient = configuration
        patient.timeout = 120
        let holder = PostgresKeyValueStrategy(configuration: patient, suite: suite)
        try await writer.set(0, for: "held")

        let heard = Heard()
        let observation = try follower.observeChanges { heard.record($0) }
        defer { observation.cancel() }
        #expect(await FollowingTests.until(60) { heard.count >= 1 })

        // A transaction with an id, left open: it holds every snapshot's `xmin` at its id.
        let entered = Protected(false)
        let release = Protected(false)
        // Started on Coffer's pool so that its blocking transform holds no cooperative thread
        // (see `FollowingTests.commitsOutOfOrder`).
        let held = Task(executorPreference: BlockingPool.jobs) {
            try await holder.update("held") { (n: Int?) -> Int? in
                #expect(BlockingPool.isCurrentThread, "the blocking transform holds a cooperative thread")
                entered.withLock { $0 = true }
                let deadline = Date() + 100
                while !release.withLock({ $0 }) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
                return 42
            }
        }
        defer { release.withLock { $0 = true } }
        #expect(await FollowingTests.until(60) { entered.withLock { $0 } })

        // 100k rows written after it began, then read once by the follower.
        try Self.fill(suite, cluster)
        var start = heard.count
        try await writer.set(1, for: "marker")
        #expect(await FollowingTests.until(60) { heard.named("marker", after: start) })
        #expect(heard.named("k99999", after: start), "the follower missed the rows written by SQL")

        // One more change: read alone, not with the 100k rows written since the open transaction
        // began (reading from the last `xmin` reread them at every catch-up).
        start = heard.count
        var before = follower.catchUpReads.rows
        try await writer.set(2, for: "k5")
        #expect(await FollowingTests.until(60) { heard.named("k5", after: start) }, "the follower missed the change")
        #expect(follower.catchUpReads.rows - before == 1, "one change while a transaction is open: \(follower.catchUpReads)")

        // The open transaction commits: its write (older than the rows read since) is found.
        start = heard.count
        before = follower.catchUpReads.rows
        release.withLock { $0 = true }
        try await held.value
        #expect(await FollowingTests.until(60) { heard.named("held", after: start) }, "the follower missed the open transaction's write")
        #expect(follower.catchUpReads.rows - before == 1, "\(follower.catchUpReads)")
        #expect(try await follower.get(Int.self, for: "held") == 42)
    }
}
#endif
