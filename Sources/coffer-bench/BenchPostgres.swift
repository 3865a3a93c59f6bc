// `coffer-bench postgres`: the fleet store against a real server (trait `Postgres`).
//
//   postgres.write            PostgresKeyValueStrategy.save of a 32-byte value (one statement:
//                             version row, row, NOTIFY), acknowledged by the server's COMMIT
//   postgres.raw.upsert       the same bytes through postgres-nio alone: one INSERT … ON
//                             CONFLICT DO UPDATE on a two-column table, same connection settings
//   postgres.raw.coffersql    Coffer's write statement sent by postgres-nio alone (what the SQL
//                             itself costs: the version row and NOTIFY on top of the upsert)
//   postgres.read             PostgresKeyValueStrategy.load of that key
//   postgres.change.latency   one instance's acknowledged write (its COMMIT answered) → another
//                             instance's `@Stored` Observation callback (two connections,
//                             LISTEN/NOTIFY, catch-up query, the property's reload)
//   postgres.change.fromwrite the same from just before the write starts (includes its commit)
//   postgres.setter           a `.postgres` @Stored setter called from async code: memory,
//                             notification and hand-off to the background writer (no round trip)
//   postgres.write.onetask    one task awaiting `$x.save` in a loop (writes per second)
//   postgres.write.concurrent 32 tasks awaiting `$x.save`, each its own key, over 8 suites
//   postgres.raw.concurrent   32 tasks sending a plain upsert through postgres-nio's own
//                             PostgresClient (same pool size), the same bytes
//   postgres.raw.coffersql.concurrent  Coffer's write statement, same keys and suites, sent by
//                             that PostgresClient alone: write.concurrent / this is the cost of
//                             Coffer's Swift layer, apart from its SQL
//   postgres.partition.stall  64 property writes and 64 `load`s from tasks against a server that
//                             accepts and never answers: how late an unrelated task's 5 ms sleep
//                             wakes (max and median over 3 s)
//   postgres.open.100k        a new store instance on a suite of 100,000 keys: a `@Stored` of one
//                             key loaded and its store followed (the feed's first catch-up done)
//   postgres.follow.latency.100k  another instance's acknowledged write of one key of that suite
//                             → this instance's `@Stored` of that key told (as change.latency)
//   postgres.catchup.100k     a follower of that suite that missed 100 changes (100 commits of
//                             other keys it was not notified of) and is then notified of one more:
//                             from that write's acknowledgement to its observer told all 101 keys
//   (each with the rows the follower's catch-ups read: what changed, never the 100,000)
//
// Medians of the samples, in one run against one server, so the ratio write / raw upsert is
// like for like. `make bench-postgres` starts a throwaway server for it.

import ArgumentParser
import Coffer
import CofferBenchHarness
import Foundation
import Observation
#if Postgres
import CofferPostgres
import PostgresNIO
#endif

struct BenchPostgresCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "postgres",
        abstract: "Measure the PostgreSQL fleet store against a server (postgres:// URL; needs the Postgres trait).")

    @Option(
        help: ArgumentHelp(
            "The server: postgres://user@host:port/db?sslmode=disable (default: $COFFER_STORE, where a password belongs).",
            valueName: "url"))
    var store: String?
    @Option(help: "Samples per figure.") var samples = 500

    func run() throws {
        #if Postgres
        guard let url = store ?? ProcessInfo.processInfo.environment["COFFER_STORE"], !url.isEmpty else {
            throw ValidationError("coffer-bench postgres needs --store postgres://… or $COFFER_STORE")
        }
        let configuration = try PostgresConfiguration(url: url)
        // The baselines are postgres-nio connections made here without TLS: under a mode that
        // requires TLS they would send the benchmark's traffic in clear, so such a mode is refused.
        guard configuration.tls == .disable || configuration.tls == .prefer else {
            throw ValidationError(
                "coffer-bench postgres compares Coffer with plain postgres-nio connections, which it makes without TLS: "
                    + "run it with sslmode=disable against a server on a network you trust")
        }
        let value = Data((0..<32).map { UInt8($0) })
        let suite = "bench-\(UInt32.random(in: 0...UInt32.max))"
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let encoded = try ValueCodec.encode(value, as: writer.valueEncoding)
        try writer.save(encoded, for: "k")  // connects, creates the tables

        func median(_ body: () throws -> Void) rethrows -> (median: Double, p99: Double) {
            var times: [Double] = []
            for _ in 0..<samples {
                let start = monotonicNanoseconds()
                try body()
                times.append(Double(monotonicNanoseconds() - start))
            }
            times.sort()
            return (times[times.count / 2], times[min(times.count - 1, times.count * 99 / 100)])
        }
        var figures: [(String, (median: Double, p99: Double))] = []
        // Interleaved rounds, so drift of the machine hits both alike.
        var write: [Double] = []
        var raw: [Double] = []
        var same: [Double] = []
        let rawStore = try RawUpsert(configuration: configuration, value: encoded)
        for _ in 0..<5 {
            write.append(try median { try writer.save(encoded, for: "k") }.median)
            raw.append(try median { try rawStore.upsert() }.median)
            same.append(try median { try rawStore.coffersStatement(suite: suite + "-raw") }.median)
        }
        rawStore.close()
        write.sort()
        raw.sort()
        same.sort()
        figures.append(("postgres.write", (write[2], write.last!)))
        figures.append(("postgres.raw.upsert", (raw[2], raw.last!)))
        figures.append(("postgres.raw.coffersql", (same[2], same.last!)))
        figures.append(("postgres.read", try median { _ = try writer.load("k") }))

        let reader = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let property = Stored(wrappedValue: 0, backed: .postgres(reader, key: "t"))
        _ = try property.load()
        Thread.sleep(forTimeInterval: 0.5)  // the LISTEN connection is up
        let (latency, fromStart) = try changeLatency(writer, key: "t", to: property)
        figures.append(("postgres.change.latency", latency))
        figures.append(("postgres.change.fromwrite", fromStart))
        let (large, reads) = try largeSuiteFigures(configuration, suite: suite + "-large")
        figures += large

        figures.append(("postgres.setter", try setterFigure(configuration, suite: suite)))
        let rates = try throughput(configuration, encoded: encoded, prefix: suite)
        // Leaves nothing behind in the measured database: the suites' rows, the baseline's table.
        let cleaner = try RawUpsert(configuration: configuration, value: encoded)
        try cleaner.removeLeftovers(suitePrefix: suite)
        cleaner.close()

        writeOut("server: \(configuration)\n")
        for (name, figure) in figures {
            writeOut(
                name.padding(toLength: max(26, name.count + 1), withPad: " ", startingAt: 0)
                    + String(format: "median %9.1f µs   p99 %9.1f µs\n", figure.median / 1000, figure.p99 / 1000))
        }
        writeOut(String(format: "write / raw upsert: %.2f×\n", write[2] / raw[2]))
        for (name, rate) in rates {
            writeOut(name.padding(toLength: 34, withPad: " ", startingAt: 0) + String(format: "%9.0f writes/s\n", rate))
        }
        let onetask = rates.first { $0.0 == "postgres.write.onetask" }!.1
        let concurrent = rates.first { $0.0 == "postgres.write.concurrent" }!.1
        let rawConcurrent = rates.first { $0.0 == "postgres.raw.concurrent" }!.1
        let rawCoffer = rates.first { $0.0 == "postgres.raw.coffersql.concurrent" }!.1
        writeOut(String(format: "concurrent / raw concurrent: %.2f×   concurrent / one task: %.2f×   concurrent / raw coffersql: %.2f×\n",
            concurrent / rawConcurrent, concurrent / onetask, concurrent / rawCoffer))
        let stall = try partitionStall()
        writeOut(
            "postgres.partition.stall".padding(toLength: 26, withPad: " ", startingAt: 0)
                + String(format: "median %9.1f µs   max %9.1f µs late\n", stall.median * 1e6, stall.max * 1e6))
        for (name, read) in reads {
            writeOut(
                name.padding(toLength: 30, withPad: " ", startingAt: 0)
                    + String(format: "%9.1f rows per catch-up (%d rows, %d catch-ups)\n",
                        Double(read.rows) / Double(max(read.catchUps, 1)), read.rows, read.catchUps))
        }
        #else
        throw BenchError("this coffer-bench was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }
}

#if Postgres
extension BenchPostgresCommand {
    /// From an acknowledged `writer.set` of `key` to `property`'s Observation callback (median
    /// and p99 of up to 300), and the same from just before the write starts.
    func changeLatency(_ writer: PostgresKeyValueStrategy, key: String, to property: Stored<Int>) throws
        -> (latency: (median: Double, p99: Double), fromStart: (median: Double, p99: Double))
    {
        var latencies: [Double] = []
        var fromStart: [Double] = []
        for _ in 0..<min(samples, 300) {
            let seen = Locked<UInt64>(0)
            let signal = DispatchSemaphore(value: 0)
            _ = withObservationTracking { property.wrappedValue } onChange: {
                seen.withLock { $0 = monotonicNanoseconds() }
                signal.signal()
            }
            let start = monotonicNanoseconds()
            try writer.set(Int(start), for: key)
            let acknowledged = monotonicNanoseconds()
            if signal.wait(timeout: .now() + 2) == .timedOut {
                latencies.append(2e9)  // counted as 2 s: never dropped from the figures
                fromStart.append(2e9)
                continue
            }
            let callback = seen.withLock { $0 }
            // The notification can beat the COMMIT's answer to the writer: then it counts as 0.
            latencies.append(callback > acknowledged ? Double(callback - acknowledged) : 0)
            fromStart.append(Double(callback &- start))
            usleep(1000)
        }
        latencies.sort()
        fromStart.sort()
        return (
            (latencies[latencies.count / 2], latencies[latencies.count * 99 / 100]),
            (fromStart[fromStart.count / 2], fromStart[fromStart.count * 99 / 100])
        )
    }

    /// A suite of 100,000 keys (written by one SQL statement): opening it, following one key of
    /// it, and catching up after 100 missed changes; with the rows the followers' catch-ups read.
    func largeSuiteFigures(_ configuration: PostgresConfiguration, suite: String) throws
        -> (figures: [(String, (median: Double, p99: Double))], reads: [(String, (catchUps: Int, rows: Int))])
    {
        let size = 100_000
        let writer = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let zero = try ValueCodec.encode(0, as: writer.valueEncoding)
        let raw = try RawUpsert(configuration: configuration, value: zero)
        defer { raw.close() }
        try raw.fill(suite: suite, count: size)
        func percentiles(_ times: [Double]) -> (median: Double, p99: Double) {
            let sorted = times.sorted()
            return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)])
        }
        var figures: [(String, (median: Double, p99: Double))] = []

        // Open: a new instance (the process's pool already connected), one key's `@Stored`
        // loaded, and the store followed (its feed LISTENing and caught up once).
        var opens: [Double] = []
        for round in 0..<20 {
            let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
            let following = DispatchSemaphore(value: 0)
            let start = monotonicNanoseconds()
            let observation = try store.observeChanges { change in if change.keys == nil { following.signal() } }
            let property = Stored(wrappedValue: -1, backed: .postgres(store, key: "k\(round * 4999)"))
            let value = try property.load()
            let followed = following.wait(timeout: .now() + 5) == .success
            let elapsed = Double(monotonicNanoseconds() - start)
            observation.cancel()
            guard value == 0, followed else {
                throw BenchError("opening the 100k-key suite: value \(value), following \(followed)")
            }
            opens.append(elapsed)
        }
        figures.append(("postgres.open.100k", percentiles(opens)))

        // Following one key of the suite: another instance's write → this instance's property.
        let reader = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let property = Stored(wrappedValue: -1, backed: .postgres(reader, key: "k50000"))
        _ = try property.load()
        Thread.sleep(forTimeInterval: 0.5)  // the LISTEN connection is up
        let followStart = reader.catchUpReads
        let (latency, _) = try changeLatency(writer, key: "k50000", to: property)
        let followReads = reader.catchUpReads
        figures.append(("postgres.follow.latency.100k", latency))

        // Catching up 100 missed changes: 100 commits of other keys (Coffer's statement, no
        // notification), then one notified write; timed from its acknowledgement to the
        // follower's observer told of all 101 keys. A round whose missed commits a periodic
        // catch-up (every 5 s) found before the notification is not counted, and run again.
        let follower = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let told = Locked<(keys: Int, at: UInt64)>((0, 0))
        let marker = DispatchSemaphore(value: 0)
        let first = DispatchSemaphore(value: 0)
        let observation = try follower.observeChanges { change in
            guard let keys = change.keys else {
                first.signal()
                return
            }
            guard keys.contains("marker") else { return }
            told.withLock { $0 = (keys.count, monotonicNanoseconds()) }
            marker.signal()
        }
        defer { observation.cancel() }
        guard first.wait(timeout: .now() + 5) == .success else {
            throw BenchError("the follower of the 100k-key suite did not start following within 5 s")
        }
        let missed = 100
        var catchUps: [Double] = []
        let catchUpStart = follower.catchUpReads
        var round = 0
        while catchUps.count < min(samples, 50) && round < 200 {
            round += 1
            for change in 0..<missed { try raw.write(suite: suite, key: "k\((round * missed + change) * 7 % size)") }
            try writer.set(round, for: "marker")
            let acknowledged = monotonicNanoseconds()
            guard marker.wait(timeout: .now() + 2) == .success else {
                throw BenchError("the follower of the 100k-key suite missed a notified write for 2 s")
            }
            let (keys, at) = told.withLock { $0 }
            if keys == missed + 1 { catchUps.append(at > acknowledged ? Double(at - acknowledged) : 0) }
        }
        guard !catchUps.isEmpty else { throw BenchError("no catch-up of 100 missed changes was measured") }
        let catchUpEnd = follower.catchUpReads
        figures.append(("postgres.catchup.100k", percentiles(catchUps)))
        let reads = [
            ("postgres.follow.latency.100k", (followReads.catchUps - followStart.catchUps, followReads.rows - followStart.rows)),
            ("postgres.catchup.100k", (catchUpEnd.catchUps - catchUpStart.catchUps, catchUpEnd.rows - catchUpStart.rows)),
        ]
        return (figures, reads)
    }

    /// The setter's own cost from async code: the median of `samples` setters with distinct
    /// values (each hands the value to the background writer), then one flush.
    func setterFigure(_ configuration: PostgresConfiguration, suite: String) throws -> (median: Double, p99: Double) {
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let samples = samples
        return try runAsync {
            let property = Stored(wrappedValue: 0, backed: .postgres(store, key: "setter"))
            try await property.load()
            var times: [Double] = []
            for round in 0..<max(samples, 1000) {
                let start = monotonicNanoseconds()
                property.wrappedValue = round + 1
                times.append(Double(monotonicNanoseconds() - start))
                if round % 100 == 99 { try await property.flush() }  // the writer keeps up
            }
            try await property.flush()
            times.sort()
            return (times[times.count / 2], times[times.count * 99 / 100])
        }
    }

    /// Writes per second: one task awaiting `save`; 32 tasks awaiting `save` on their own keys
    /// over 8 suites; 32 tasks sending a plain upsert through a `PostgresClient` of the same size.
    func throughput(_ configuration: PostgresConfiguration, encoded: Data, prefix: String) throws -> [(String, Double)] {
        let seconds = 3.0
        return try runAsync {
            let suites = (0..<8).map { PostgresKeyValueStrategy(configuration: configuration, suite: "\(prefix)-c\($0)") }
            let properties = (0..<32).map { Stored(wrappedValue: 0, backed: .postgres(suites[$0 % 8], key: "k\($0)")) }
            for property in properties { try await property.save(0) }  // connections open, rows exist

            func rate(_ tasks: Int, _ write: @escaping @Sendable (Int, Int) async throws -> Void) async throws -> Double {
                let end = Date() + seconds
                let start = Date()
                let count = try await withThrowingTaskGroup(of: Int.self) { group in
                    for task in 0..<tasks {
                        group.addTask {
                            var done = 0
                            while Date() < end {
                                try await write(task, done)
                                done += 1
                            }
                            return done
                        }
                    }
                    return try await group.reduce(0, +)
                }
                return Double(count) / Date().timeIntervalSince(start)
            }
            var settings = PostgresClient.Configuration(
                host: configuration.host, port: configuration.port, username: configuration.user,
                password: configuration.password, database: configuration.database, tls: .disable)
            settings.options.maximumConnections = configuration.maximumConnections
            let client = PostgresClient(configuration: settings)
            let running = Task { await client.run() }
            defer { running.cancel() }
            try await client.query("CREATE TABLE IF NOT EXISTS coffer_bench_raw (key bytea PRIMARY KEY, value bytea)")
            let value = encoded
            // Interleaved, so drift of the machine hits all alike; the medians of three rounds.
            var one: [Double] = []
            var many: [Double] = []
            var raw: [Double] = []
            var rawCoffer: [Double] = []
            let schema = configuration.quotedSchema
            for _ in 0..<3 {
                one.append(try await rate(1) { _, round in try await properties[0].save(round) })
                many.append(try await rate(32) { task, round in try await properties[task].save(round) })
                raw.append(
                    try await rate(32) { task, _ in
                        let key = Data("k\(task)".utf8)
                        try await client.query(
                            "INSERT INTO coffer_bench_raw (key, value) VALUES (\(key), \(value)) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                        )
                    })
                // Coffer's own write statement (PostgresKeyValueStrategy's `write`) on the same
                // 32 keys of the same 8 suites, sent by postgres-nio alone: what the SQL allows,
                // so write.concurrent / this is what Coffer's Swift layer costs.
                rawCoffer.append(
                    try await rate(32) { task, _ in
                        var binds = PostgresBindings()
                        binds.append("\(prefix)-c\(task % 8)")
                        try binds.append(Data("k\(task)".utf8))
                        try binds.append(value)
                        _ = try await client.query(
                            PostgresQuery(
                                unsafeSQL: """
                                    INSERT INTO \(schema).coffer_kv AS t (suite, key, value, version, writer) \
                                    VALUES ($1, $2, $3, 0, pg_current_xact_id()) ON CONFLICT (suite, key) \
                                    DO UPDATE SET value = excluded.value, writer = excluded.writer RETURNING t.writer::text
                                    """, binds: binds)
                        ).collect()
                    })
            }
            return [
                ("postgres.write.onetask", one.sorted()[1]), ("postgres.write.concurrent", many.sorted()[1]),
                ("postgres.raw.concurrent", raw.sorted()[1]), ("postgres.raw.coffersql.concurrent", rawCoffer.sorted()[1]),
            ]
        }
    }

    /// How late a 5 ms sleep of an unrelated task wakes while 64 property writes and 64 loads
    /// wait on a server that accepts and never answers: (median, max) in seconds.
    func partitionStall() throws -> (median: Double, max: Double) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw BenchError("socket failed") }
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 512) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else { throw BenchError("bind failed") }
        let port = Int(UInt16(bigEndian: address.sin_port))  // the kernel accepts; nobody answers
        var silent = PostgresConfiguration(host: "127.0.0.1", port: port, user: "coffer", tls: .disable)
        silent.connectTimeout = 2
        silent.timeout = 2
        let stores = (0..<8).map { PostgresKeyValueStrategy(configuration: silent, suite: "stall-\($0)") }
        return try runAsync {
            let properties = (0..<64).map { Stored(wrappedValue: 0, backed: .postgres(stores[$0 % 8], key: "k\($0)")) }
            let sleeper = Task {
                var late: [Double] = []
                let end = Date() + 3
                while Date() < end {
                    let start = monotonicNanoseconds()
                    try? await Task.sleep(for: .milliseconds(5))
                    late.append(max(0, Double(monotonicNanoseconds() - start) / 1e9 - 0.005))
                }
                return late.sorted()
            }
            await withTaskGroup(of: Void.self) { group in
                for (index, property) in properties.enumerated() {
                    group.addTask {
                        property.wrappedValue = index + 1
                        _ = try? await property.load()
                    }
                }
            }
            let late = await sleeper.value
            return (late[late.count / 2], late.last ?? 0)
        }
    }

    func runAsync<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        try runBlocking(operation)
    }
}

/// Runs async work from this synchronous command on Swift's own executor (as an app's tasks
/// run), blocking the calling thread until it ends.
func runBlocking<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
    let box = OutcomeBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        do { box.outcome = .success(try await operation()) } catch { box.outcome = .failure(error) }
        done.signal()
    }
    done.wait()
    return try box.outcome!.get()
}

/// postgres-nio alone: one connection, one upsert statement, the same bytes.
final class RawUpsert: @unchecked Sendable {
    let connection: PostgresConnection
    let value: Data
    let logger = Logger(label: "bench")

    /// The quoted schema of Coffer's tables.
    let schema: String

    init(configuration: PostgresConfiguration, value: Data) throws {
        self.value = value
        schema = configuration.quotedSchema
        let settings = PostgresConnection.Configuration(
            host: configuration.host, port: configuration.port, username: configuration.user,
            password: configuration.password, database: configuration.database, tls: .disable)
        let logger = self.logger
        connection = try Self.wait {
            try await PostgresConnection.connect(configuration: settings, id: 1, logger: logger)
        }
        try run("CREATE TABLE IF NOT EXISTS coffer_bench_raw (key bytea PRIMARY KEY, value bytea)")
    }

    func upsert() throws {
        var binds = PostgresBindings()
        try binds.append(Data("k".utf8))
        try binds.append(value)
        try run(
            "INSERT INTO coffer_bench_raw (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            binds)
    }

    /// Coffer's own write (the row stamped with its transaction, then the suite's notification
    /// after the commit, one per write here) sent by postgres-nio alone: what the SQL costs,
    /// without Coffer's Swift layer or its sharing of notifications.
    func coffersStatement(suite: String) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data("k".utf8))
        try binds.append(value)
        try run(
            """
            INSERT INTO \(schema).coffer_kv AS t (suite, key, value, version, writer) VALUES ($1, $2, $3, 0, pg_current_xact_id()) \
            ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, writer = excluded.writer \
            RETURNING t.writer::text
            """, binds)
        try run("SELECT pg_notify('coffer_bench_raw', '')")
    }

    /// Writes `count` keys `k0`… into `suite` with one statement, each row as Coffer writes it.
    func fill(suite: String, count: Int) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(value)
        binds.append(count - 1)
        try run(
            """
            INSERT INTO \(schema).coffer_kv AS t (suite, key, value, version, writer) \
            SELECT $1, convert_to('k' || i, 'UTF8'), $2, 0, pg_current_xact_id() FROM generate_series(0, $3) AS i \
            ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, writer = excluded.writer
            """, binds)
        try run("ANALYZE \(schema).coffer_kv")
    }

    /// Coffer's write of `key` in `suite` (one transaction), with no notification.
    func write(suite: String, key: String) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data(key.utf8))
        try binds.append(value)
        try run(
            """
            INSERT INTO \(schema).coffer_kv AS t (suite, key, value, version, writer) VALUES ($1, $2, $3, 0, pg_current_xact_id()) \
            ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, writer = excluded.writer
            """, binds)
    }

    /// Deletes the rows of every suite this run made (their names start with `suitePrefix`) and
    /// the baseline's table.
    func removeLeftovers(suitePrefix: String) throws {
        var binds = PostgresBindings()
        binds.append(suitePrefix + "%")
        try run("DELETE FROM \(schema).coffer_kv WHERE suite LIKE $1", binds)
        try run("DELETE FROM \(schema).coffer_suites WHERE suite LIKE $1", binds)
        try run("DROP TABLE IF EXISTS coffer_bench_raw")
    }

    private func run(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws {
        _ = try connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).wait()
    }

    func close() {
        let closing: EventLoopFuture<Void> = connection.close()
        _ = try? closing.wait()
    }

    private static func wait<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        try runBlocking(operation)
    }
}
/// Written once by a task, read after it signals.
final class OutcomeBox<T>: @unchecked Sendable {
    var outcome: Result<T, any Error>?
}
#endif
