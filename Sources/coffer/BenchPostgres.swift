// `coffer bench-postgres`: the fleet store against a real server (trait `Postgres`).
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
//
// Medians of the samples, in one run against one server, so the ratio write / raw upsert is
// like for like. `make bench-postgres` starts a throwaway server for it.

import ArgumentParser
import Coffer
import Foundation
import Observation
import Synchronization
#if Postgres
import CofferPostgres
import PostgresNIO
#endif

struct BenchPostgresCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-postgres",
        abstract: "Measure the PostgreSQL fleet store against a server (postgres:// URL; needs the Postgres trait).")

    @Option(help: ArgumentHelp("The server (default: $COFFER_STORE).", valueName: "url")) var store: String?
    @Option(help: "Samples per figure.") var samples = 500

    func run() throws {
        #if Postgres
        guard let url = store ?? ProcessInfo.processInfo.environment["COFFER_STORE"] else {
            throw CLIError.usage("bench-postgres needs --store postgres://… or $COFFER_STORE")
        }
        let configuration = try PostgresConfiguration(url: url)
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
        var latencies: [Double] = []
        var fromStart: [Double] = []
        for _ in 0..<min(samples, 300) {
            let seen = Mutex<UInt64>(0)
            let signal = DispatchSemaphore(value: 0)
            _ = withObservationTracking { property.wrappedValue } onChange: {
                seen.withLock { $0 = monotonicNanoseconds() }
                signal.signal()
            }
            let start = monotonicNanoseconds()
            try writer.set(Int(start), for: "t")
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
        figures.append(
            ("postgres.change.latency", (latencies[latencies.count / 2], latencies[latencies.count * 99 / 100])))
        figures.append(
            ("postgres.change.fromwrite", (fromStart[fromStart.count / 2], fromStart[fromStart.count * 99 / 100])))

        writeOut("server: \(configuration)\n")
        for (name, figure) in figures {
            writeOut(
                name.padding(toLength: 26, withPad: " ", startingAt: 0)
                    + String(format: "median %9.1f µs   p99 %9.1f µs\n", figure.median / 1000, figure.p99 / 1000))
        }
        writeOut(String(format: "write / raw upsert: %.2f×\n", write[2] / raw[2]))
        #else
        throw CLIError(.failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }
}

#if Postgres
/// postgres-nio alone: one connection, one upsert statement, the same bytes.
final class RawUpsert: @unchecked Sendable {
    let connection: PostgresConnection
    let value: Data
    let logger = Logger(label: "bench")

    init(configuration: PostgresConfiguration, value: Data) throws {
        self.value = value
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

    /// Coffer's own write statement (version row, row, pg_notify) sent by postgres-nio alone:
    /// what the SQL costs, without Coffer's Swift layer.
    func coffersStatement(suite: String) throws {
        var binds = PostgresBindings()
        binds.append(suite)
        try binds.append(Data("k".utf8))
        try binds.append(value)
        binds.append("coffer_bench_raw")
        try run(
            """
            WITH v AS (INSERT INTO coffer_suites AS s (suite, version) VALUES ($1, 1) \
            ON CONFLICT (suite) DO UPDATE SET version = s.version + 1 RETURNING s.version), \
            w AS (INSERT INTO coffer_kv AS t (suite, key, value, version) SELECT $1, $2, $3, v.version FROM v \
            ON CONFLICT (suite, key) DO UPDATE SET value = excluded.value, version = excluded.version RETURNING t.version) \
            SELECT w.version FROM w, pg_notify($4, w.version::text)
            """, binds)
    }

    private func run(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws {
        _ = try connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).wait()
    }

    func close() {
        let closing: EventLoopFuture<Void> = connection.close()
        _ = try? closing.wait()
    }

    private static func wait<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let box = OutcomeBox<T>()
        let done = DispatchSemaphore(value: 0)
        Task {
            do { box.outcome = .success(try await operation()) } catch { box.outcome = .failure(error) }
            done.signal()
        }
        done.wait()
        return try box.outcome!.get()
    }
}
/// Written once by a task, read after it signals.
final class OutcomeBox<T>: @unchecked Sendable {
    var outcome: Result<T, any Error>?
}
#endif
