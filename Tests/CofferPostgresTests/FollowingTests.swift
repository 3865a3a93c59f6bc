#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import Foundation
import Logging
import Testing

/// How a key-value suite's followers find what other instances wrote: by the writing
/// transaction, against the server's own snapshot (docs/FORMAT.md §4), so that commits finishing
/// out of order, forged rows and a server whose counter went back never leave a follower stale.
@Suite("Following a key-value suite")
struct FollowingTests {
    /// Polls `condition` every 10 ms, without holding a thread, until it holds or `timeout` passes.
    static func until(_ timeout: Double = 20, _ condition: () throws -> Bool) async rethrows -> Bool {
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return try condition()
    }

    /// A logger that keeps every warning's text.
    static func capturingLogger() -> (Logger, Protected<[String]>) {
        let warnings = Protected<[String]>([])
        let logger = Logger(label: "coffer.test") { _ in
            CapturingLogHandler { level, message, _ in
                if level >= .warning { warnings.withLock { $0.append("\(message)") } }
            }
        }
        return (logger, warnings)
    }

    @Test("A transaction that commits after a later one is still seen: writes of two keys do not wait for each other")
    func commitsOutOfOrder() async throws {
        let configuration = try sharedConfiguration()
        let suite = uniqueName("order")
        let slow = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let fast = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        try await slow.set(0, for: "a")
        try await fast.set(0, for: "b")
        let a = Stored(wrappedValue: -1, backed: .postgres(follower, key: "a"))
        let b = Stored(wrappedValue: -1, backed: .postgres(follower, key: "b"))
        // A hang guard, not a speed target: in a full run on 2 cores this test has waited over
        // 20 s here twice (every test of that run took 200 s; alone it takes 1 s), so the wait
        // is long and the failure says what the loads were doing.
        let loaded = await Self.until(90) { a.wrappedValue == 0 && b.wrappedValue == 0 }
        let state =
            "a: \(a.wrappedValue), loading \(a.isLoading), \(String(describing: a.loadError)); "
            + "b: \(b.wrappedValue), loading \(b.isLoading), \(String(describing: b.loadError))"
        #expect(loaded, "\(state)")

        // The slow writer's transaction has its id (its row is locked) and waits inside `update`…
        let entered = Protected(false)
        let release = Protected(false)
        // Its transform blocks until the test lets it go: run from Coffer's own pool, the
        // transform is moved to a growing pool (as a caller on that pool gets), so it never holds
        // one of the cooperative threads this test's own waits need (2 on a 2-core machine; with
        // another test's transform holding the other, every await of the process stalled).
        let slowWrite = Task(executorPreference: BlockingPool.jobs) {
            try await slow.update("a") { (n: Int?) -> Int? in
                #expect(BlockingPool.isCurrentThread, "the blocking transform holds a cooperative thread")
                entered.withLock { $0 = true }
                while !release.withLock({ $0 }) { Thread.sleep(forTimeInterval: 0.01) }
                return 1
            }
        }
        #expect(await Self.until { entered.withLock { $0 } })
        // …while a later transaction writes another key, commits, and the follower catches up
        // past it (the old suite-wide version row made this write wait for the slow one).
        try await fast.set(1, for: "b")
        #expect(await Self.until { b.wrappedValue == 1 }, "the write of b waited for the slow transaction on a")
        #expect(a.wrappedValue == 0)
        // The earlier transaction commits last: its row is older than what the follower has
        // seen, and it is still found.
        release.withLock { $0 = true }
        try await slowWrite.value
        #expect(await Self.until { a.wrappedValue == 1 }, "the follower missed a commit that finished out of order")
    }

    @Test("Forged rows (a writer far in the future, a key that is not UTF-8) are skipped and said, and never stop a follower")
    func forgedRows() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let suite = uniqueName("forged")
        let (logger, warnings) = Self.capturingLogger()
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite, logger: logger)
        try await writer.set(1, for: "v")
        let v = Stored(wrappedValue: 0, backed: .postgres(follower, key: "v"))
        #expect(await Self.until { v.wrappedValue == 1 })

        // Any role with INSERT, no key needed: a row claiming transaction 2⁶² (and version 2⁶²,
        // which froze every follower of the old version-ordered feed), and a key that is not UTF-8.
        try cluster.sql(
            "INSERT INTO coffer_kv (suite, key, value, version, writer) VALUES "
                + "('\(suite)', 'forged'::bytea, '\\x00'::bytea, 4611686018427387904, '4611686018427387904'), "
                + "('\(suite)', '\\xff'::bytea, '\\x00'::bytea, 0, pg_current_xact_id())")
        try await writer.set(2, for: "v")
        #expect(await Self.until { v.wrappedValue == 2 }, "a forged row stopped the follower")
        #expect(v.loadError == nil)
        try await writer.set(3, for: "v")
        #expect(await Self.until { v.wrappedValue == 3 })
        // The key that is not UTF-8 is left out of `keys()`, not an error hiding every other key.
        #expect(Set(try await follower.keys()) == ["v", "forged"])
        // Deleting the rows changes nothing for the follower.
        try cluster.sql("DELETE FROM coffer_kv WHERE suite = '\(suite)' AND key <> 'v'::bytea")
        try await writer.set(4, for: "v")
        #expect(await Self.until { v.wrappedValue == 4 })
        // Each kind said once, naming the suite, never the values.
        let said = warnings.withLock { $0 }
        #expect(said.filter { $0.contains("has not run") }.count == 1, "\(said)")
        #expect(said.filter { $0.contains("not UTF-8") }.count >= 1, "\(said)")
        #expect(said.allSatisfy { $0.contains(suite) }, "\(said)")
    }

    @Test("A row whose key is not UTF-8, read with a legitimate write: the write reaches the follower while the warning about the row is still being logged")
    func skippedRowDelaysNothing() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let suite = uniqueName("skipped")
        // The application's log handler takes its time over the warning about the skipped row
        // (held here until released; at most 30 s). The feed once logged it before telling the
        // observers of the changes read with it, and on its own task: the follower stayed a
        // write behind for as long as the handler took.
        let release = DispatchSemaphore(value: 0)
        let warnings = Protected<[String]>([])
        let logger = Logger(label: "coffer.test") { _ in
            CapturingLogHandler { level, message, _ in
                guard level >= .warning else { return }
                if "\(message)".contains("not UTF-8") { _ = release.wait(timeout: .now() + 30) }
                warnings.withLock { $0.append("\(message)") }
            }
        }
        defer { for _ in 0..<4 { release.signal() } }
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite, logger: logger)
        try await writer.set(1, for: "v")
        let v = Stored(wrappedValue: 0, backed: .postgres(follower, key: "v"))
        #expect(await Self.until { v.wrappedValue == 1 })

        // Forged by SQL (a bytea key that is not UTF-8, written by a real transaction), then a
        // legitimate write, which notifies: one catch-up reads both (or a poll reads the forged
        // row first; either way the warning is being logged when the write arrives).
        try cluster.sql(
            "INSERT INTO coffer_kv (suite, key, value, version, writer) VALUES "
                + "('\(suite)', '\\xfffe'::bytea, '\\x00'::bytea, 0, pg_current_xact_id())")
        try await writer.set(2, for: "v")
        #expect(await Self.until(15) { v.wrappedValue == 2 }, "the skipped row held the follower back")
        try await writer.set(3, for: "v")
        #expect(await Self.until(15) { v.wrappedValue == 3 }, "the skipped row held the next catch-up back")
        #expect(v.loadError == nil)

        // The row was skipped and said, naming the suite.
        release.signal()
        #expect(await Self.until { warnings.withLock { $0 }.contains { $0.contains("not UTF-8") && $0.contains(suite) } })
    }

    @Test("A reload refused by the server is tried again by itself: the follower catches up with no further change")
    func failedReloadRetried() async throws {
        let cluster = try PostgresTestCluster()  // roles are the cluster's: a cluster of its own
        defer { cluster.stop() }
        try cluster.sql("CREATE ROLE follower LOGIN; GRANT USAGE, CREATE ON SCHEMA public TO follower;")
        let writer = PostgresKeyValueStrategy(configuration: try PostgresConfiguration(url: cluster.url), suite: "s")
        try await writer.set(1, for: "v")
        try cluster.sql("GRANT SELECT ON coffer_kv, coffer_suites TO follower;")
        let follower = PostgresKeyValueStrategy(
            configuration: try PostgresConfiguration(url: "postgres://follower@127.0.0.1:\(cluster.port)/postgres?sslmode=disable"),
            suite: "s")
        let v = Stored(wrappedValue: 0, backed: .postgres(follower, key: "v"))
        #expect(await Self.until { v.wrappedValue == 1 })

        // The follower may still see which keys changed (the catch-up's columns) but not read a
        // value: the change is reported once, and its reload fails.
        try cluster.sql("REVOKE SELECT ON coffer_kv FROM follower; GRANT SELECT (suite, key, writer) ON coffer_kv TO follower;")
        try await writer.set(2, for: "v")
        #expect(await Self.until { v.loadError != nil }, "the reload did not fail")
        #expect(v.wrappedValue == 1)
        #expect(v.isLoading, "a reload still being tried says so")
        let refusal = try #require(v.loadError)
        #expect(refusal.code == .io && "\(refusal)".contains("permission denied"), "\(refusal)")

        // Access given back, and nothing else written: the follower gets there by itself.
        try cluster.sql("GRANT SELECT ON coffer_kv TO follower;")
        #expect(await Self.until { v.wrappedValue == 2 }, "a failed reload was never tried again")
        #expect(await Self.until { v.loadError == nil && !v.isLoading })
    }

    @Test("A server restored from a backup (its transaction counter back): the follower rereads everything and follows on")
    func restoredServer() async throws {
        let cluster = try PostgresTestCluster()
        defer { cluster.stop() }
        var configuration = try PostgresConfiguration(url: cluster.url)
        configuration.timeout = 2
        let suite = "restored"
        let (logger, warnings) = Self.capturingLogger()
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite, logger: logger)
        for n in 1...5 { try await writer.set(n, for: "v") }
        let v = Stored(wrappedValue: 0, backed: .postgres(follower, key: "v"))
        #expect(await Self.until { v.wrappedValue == 5 })

        // A cold backup holding 5; then 60 more writes, which the follower follows.
        try cluster.stopServer()
        try cluster.backUp(as: "backup")
        try cluster.start()
        for n in 6...65 { try await Self.retrying { try await writer.set(n, for: "v") } }
        #expect(await Self.until { v.wrappedValue == 65 })

        // Restored: the database holds 5 again, and its transaction ids restart below those the
        // follower has seen. New writes get ids the follower's old horizon would skip.
        try cluster.stopServer()
        try cluster.restore("backup")
        try cluster.start()
        #expect(await Self.until { v.wrappedValue == 5 }, "the follower kept a value the database no longer holds")
        for n in 100...103 { try await Self.retrying { try await writer.set(n, for: "v") } }
        #expect(await Self.until { v.wrappedValue == 103 }, "the follower stopped following after the restore")
        let said = warnings.withLock { $0 }
        #expect(said.filter { $0.contains("went back") }.count == 1, "\(said)")
    }

    /// Runs `write` again while the server is still coming back (the pool reconnects).
    static func retrying(_ write: () async throws -> Void) async throws {
        for attempt in 1... {
            do {
                return try await write()
            } catch let error as CofferError where error.code == .io && attempt < 20 {
                try await Task.sleep(for: .milliseconds(250))
            }
        }
    }
}
#endif
