#if Postgres
import CofferCrypto
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import CofferVault
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Every wait on the server is bounded: backends terminated under a writer, a row
/// lock held by another session, a backend stopped with SIGSTOP, a server that accepts and never
/// answers — each call ends with a value or a clear `.busy`/`.io`, and async callers never hold a
/// thread of the cooperative pool meanwhile.
///
/// The bounds asserted here are correctness bounds (a call that never ends fails them), set with
/// wide margins for a loaded machine; the real figures are benchmark rows (`coffer-bench postgres`, `make bench-postgres`).
@Suite("PostgreSQL deadlines", .serialized)
struct DeadlineTests {
    /// Short deadlines, so a test that waits for one stays short.
    static func configuration(_ url: String, timeout: Double = 1, connect: Double = 4) throws -> PostgresConfiguration {
        var configuration = try PostgresConfiguration(url: url)
        configuration.timeout = timeout
        configuration.connectTimeout = connect
        return configuration
    }

    /// The longest any one call may take with these settings: a lease, a statement, the client's
    /// grace second; plus a wide margin for a loaded test machine.
    static func bound(_ configuration: PostgresConfiguration) -> Double {
        configuration.connectTimeout + configuration.effectiveTimeout + 1 + 4
    }

    /// Runs `body`, returning its outcome and how long it took.
    static func timed<T>(_ body: () throws -> T) -> (Result<T, any Error>, Double) {
        let start = Date()
        let result = Result { try body() }
        return (result, Date().timeIntervalSince(start))
    }

    static func timed<T>(_ body: () async throws -> T) async -> (Result<T, any Error>, Double) {
        let start = Date()
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        return (result, Date().timeIntervalSince(start))
    }

    /// The code of a CofferError, else a failure naming what was thrown.
    static func code(_ error: any Error) -> CofferError.Code? {
        (error as? CofferError)?.code
    }

    @Test("Backends terminated every 0.1–0.3 s, 100 times, under writers doing update: no hang, every call bounded, the count exact")
    func terminatedBackends() async throws {
        let cluster = try PostgresTestCluster()
        defer { cluster.stop() }
        let configuration = try Self.configuration(cluster.url, timeout: 2, connect: 4)
        let bound = Self.bound(configuration)
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: "terminated")
        try await store.set(0, for: "n")
        let counter = Stored(wrappedValue: 0, backed: .postgres(store, key: "n"))

        struct Tally: Sendable {
            var acknowledged = 0
            var uncertain = 0  // .io "may or may not have been committed"
            var refused = 0  // any other clear CofferError
            var slowest = 0.0  // store.update: one transaction
            var slowestProperty = 0.0  // $n.update: a flush, then read and compare-and-swap until it wins
            var strange: [String] = []
        }
        let tally = Protected(Tally())
        let stop = Protected(false)
        @Sendable func record(_ outcome: Result<Void, any Error>, _ seconds: Double, property: Bool = false) {
            tally.withLock { t in
                if property { t.slowestProperty = max(t.slowestProperty, seconds) } else { t.slowest = max(t.slowest, seconds) }
                switch outcome {
                case .success: t.acknowledged += 1
                case .failure(let error as CofferError) where error.code == .io:
                    if error.message.contains("may or may not") { t.uncertain += 1 } else { t.refused += 1 }
                case .failure(let error as CofferError) where error.code == .busy: t.refused += 1
                case .failure(let error): t.strange.append("\(type(of: error)): \(error)")
                }
            }
        }
        // Two synchronous writers on threads of their own, two async ones: store.update and $n.update.
        let threads = (0..<2).map { _ in
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                while !stop.withLock({ $0 }) {
                    let (outcome, seconds) = Self.timed { try store.update("n") { (n: Int?) in (n ?? 0) + 1 } }
                    record(outcome, seconds)
                }
                done.signal()
            }
            return done
        }
        let writers = (0..<2).map { _ in
            Task {
                while !stop.withLock({ $0 }) {
                    let (outcome, seconds) = await Self.timed { try await counter.update { $0 += 1 } }
                    record(outcome.map { _ in () }, seconds, property: true)
                }
            }
        }
        var terminations = 0
        for _ in 0..<100 {
            try await Task.sleep(for: .milliseconds(Int.random(in: 100...300)))
            let killed = try cluster.sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    + "WHERE application_name = 'coffer' AND pid <> pg_backend_pid()")
            terminations += Int(killed.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
        stop.withLock { $0 = true }
        for writer in writers { await writer.value }
        for done in threads {
            #expect(done.wait(timeout: .now() + bound) == .success, "a writer thread hung")
        }

        let final = try await store.get(Int.self, for: "n") ?? -1
        let t = tally.withLock { $0 }
        #expect(terminations >= 50, "the backends were not terminated: \(terminations)")
        #expect(t.acknowledged > 50, "too few writes went through: \(t)")
        #expect(t.strange.isEmpty, "\(t.strange.prefix(3))")
        #expect(t.slowest < bound, "a call took \(t.slowest) s, past its deadline")
        // `$n.update` is several calls — a flush, then read and compare-and-swap until it wins,
        // each bounded, a read retried once — and starts no new attempt after the context's lock
        // timeout (10 s). Its sum has no tight bound on a loaded machine (49.7 s seen in CI while
        // the whole suite ran on 2 cores): asserted here is that it ends.
        #expect(t.slowestProperty < 120, "$n.update took \(t.slowestProperty) s")
        // Every acknowledged increment is there; a write whose connection died before its answer
        // may or may not be (it said so).
        #expect(final >= t.acknowledged && final <= t.acknowledged + t.uncertain, "final \(final), \(t)")
    }

    @Test("A row lock held by another session: .busy within the lock deadline, nothing written; then the write goes through")
    func heldRowLock() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try Self.configuration(cluster.url, timeout: 1)
        let suite = uniqueName("locked")
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        try await store.set(1, for: "n")
        let vault = try await PostgresVault.create(name: uniqueName("locked"), unlock: .key(testKey), configuration: configuration)
        try await vault.set("one", service: "svc", account: "a")

        // Another session holds the key's row and the vault's version row for 6 s.
        let holder = Thread {
            _ = try? cluster.sql(
                "BEGIN; SELECT 1 FROM coffer_kv WHERE suite = '\(suite)' AND key = 'n'::bytea FOR UPDATE; "
                    + "SELECT 1 FROM coffer_vaults WHERE name = '\(vault.name)' FOR UPDATE; SELECT pg_sleep(6); COMMIT;")
        }
        holder.start()
        #expect(try eventually {
            try cluster.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(6)%' AND state = 'active' "
                + "AND pid <> pg_backend_pid()").hasPrefix("1")
        })
        let property = Stored(wrappedValue: 0, backed: .postgres(store, key: "n"))
        let attempts: [(String, () async throws -> Void)] = [
            ("set", { try await store.set(2, for: "n") }),
            ("sync set", { try store.set(2, for: "n") }),
            ("update", { try await store.update("n") { (n: Int?) in (n ?? 0) + 1 } }),
            ("$x.save", { try await property.save(5) }),
            ("vault set", { try await vault.set("two", service: "svc", account: "a") }),
        ]
        for (name, attempt) in attempts {
            let (outcome, seconds) = await Self.timed(attempt)
            guard case .failure(let error) = outcome else {
                Issue.record("\(name) went through while the row was locked")
                continue
            }
            #expect(Self.code(error) == .busy, "\(name): \(error)")
            #expect("\(error)".contains("lock"), "\(name): \(error)")
            #expect(seconds < Self.bound(configuration), "\(name) took \(seconds) s")
        }
        #expect(try await store.get(Int.self, for: "n") == 1)  // reads are not blocked by a row lock
        // Once the lock is gone the same writes go through.
        while holder.isExecuting { try await Task.sleep(for: .milliseconds(100)) }
        try await property.save(7)
        #expect(try await store.get(Int.self, for: "n") == 7)
        #expect(property.saveError == nil)
    }

    @Test("A backend stopped with SIGSTOP: .io within the deadline, and the next call works on a new connection")
    func stoppedBackend() async throws {
        let cluster = try PostgresTestCluster()
        defer { cluster.stop() }
        var configuration = try Self.configuration(cluster.url, timeout: 1)
        configuration.maximumConnections = 1
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: "stopped")
        try await store.set(1, for: "n")
        let pids = try cluster.sql(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'coffer' AND pid <> pg_backend_pid()")
            .split(separator: "\n").compactMap { pid_t($0.trimmingCharacters(in: .whitespaces)) }
        try #require(pids.count == 1, "expected the pool's one connection, found \(pids)")
        #expect(kill(pids[0], SIGSTOP) == 0)
        defer { kill(pids[0], SIGCONT) }

        let (read, readSeconds) = await Self.timed { try await store.get(Int.self, for: "n") }
        if case .failure(let error) = read {
            #expect(Self.code(error) == .io, "\(error)")
        } else {
            Issue.record("a read answered by a stopped backend")
        }
        #expect(readSeconds < Self.bound(configuration), "the read took \(readSeconds) s")
        kill(pids[0], SIGCONT)
        // The pool replaces the closed connection: a call may still find the pool's one slot
        // taken by the abandoned statement (`.io`, unavailable), but the store recovers by itself.
        var outcomes: [String] = []
        for _ in 0..<5 {
            let (write, _) = await Self.timed { try await store.set(2, for: "n") }
            if case .failure(let error) = write {
                #expect(Self.code(error) == .io, "\(error)")
                outcomes.append("\(error)")
                continue
            }
            break
        }
        #expect(outcomes.count < 5, "\(outcomes)")
        #expect(try await store.get(Int.self, for: "n") == 2)

        // A write on a stopped backend says it may or may not have been committed.
        // The backend of the connection closed above can linger in pg_stat_activity for a moment
        // (seen in CI): wait until the pool's one live connection is the only one listed.
        var listed: [pid_t] = []
        for _ in 0..<100 {
            listed = try cluster.sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'coffer' AND pid <> pg_backend_pid()")
                .split(separator: "\n").compactMap { pid_t($0.trimmingCharacters(in: .whitespaces)) }
            if listed.count == 1 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let pid = try #require(listed.count == 1 ? listed[0] : nil, "coffer backends: \(listed)")
        #expect(kill(pid, SIGSTOP) == 0)
        defer { kill(pid, SIGCONT) }
        let (stalled, writeSeconds) = await Self.timed { try await store.set(3, for: "n") }
        kill(pid, SIGCONT)
        if case .failure(let error as CofferError) = stalled {
            #expect(error.code == .io)
            #expect(error.message.contains("may or may not have been committed"), "\(error)")
        } else {
            Issue.record("a write answered by a stopped backend: \(stalled)")
        }
        #expect(writeSeconds < Self.bound(configuration), "the write took \(writeSeconds) s")
    }

    @Test("A server that accepts and never answers: every call .io within the connect deadline, sync and async")
    func silentServer() async throws {
        let silent = try SilentServer()
        defer { silent.close() }
        let configuration = try Self.configuration(
            "postgres://coffer@127.0.0.1:\(silent.port)/postgres?sslmode=disable", timeout: 1, connect: 1)
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: "silent")  // nobody answers anyway
        let (sync, syncSeconds) = Self.timed { try store.load("k") }
        let (async, asyncSeconds) = await Self.timed { try await store.load("k") }
        let (vault, vaultSeconds) = await Self.timed {
            try await PostgresVault.open(name: "v", unlock: .key(testKey), configuration: configuration)
        }
        for (outcome, seconds) in [(sync.map { _ in () }, syncSeconds), (async.map { _ in () }, asyncSeconds),
            (vault.map { _ in () }, vaultSeconds)]
        {
            if case .failure(let error) = outcome {
                #expect(Self.code(error) == .io, "\(error)")
                #expect("\(error)".contains("unavailable"), "\(error)")
            } else {
                Issue.record("a silent server answered")
            }
            #expect(seconds < Self.bound(configuration), "a call took \(seconds) s")
        }
    }

    @Test("Nothing listening (a server stopped, a port never served): each call fails as unavailable well before the connect deadline; the server back, the next call works")
    func refusedConnectionFailsFast() async throws {
        let cluster = try PostgresTestCluster()
        defer { cluster.stop() }
        // A connect deadline of 20 s: a call held by a refused connection (postgres-nio's pool
        // backing off and queueing it) would end at 20 s; 10 s is the hang guard.
        let configuration = try Self.configuration(cluster.url, timeout: 2, connect: 20)
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: "refused")
        try await store.set(1, for: "n")
        let vault = try await PostgresVault.create(
            name: "refused", unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await vault.set("one", service: "svc", account: "a")
        try cluster.stopServer()
        // Settings no call has used yet: a pool that never reached the server.
        let fresh = PostgresKeyValueStrategy(
            configuration: try Self.configuration(cluster.url, timeout: 3, connect: 20), suite: "refused")

        let calls: [(String, () async throws -> Void)] = [
            ("write", { try await store.set(2, for: "n") }),
            ("second write", { try await store.set(3, for: "n") }),
            ("sync read", { _ = try store.load("n") }),
            ("vault write", { try await vault.set("two", service: "svc", account: "a") }),
            ("vault open", { _ = try await PostgresVault.open(name: "refused", unlock: .key(testKey), configuration: configuration) }),
            ("first call of a new pool", { _ = try await fresh.load("n") }),
        ]
        for (name, call) in calls {
            let (outcome, seconds) = await Self.timed(call)
            guard case .failure(let error) = outcome else {
                Issue.record("\(name) succeeded with nothing listening")
                continue
            }
            #expect(Self.code(error) == .io, "\(name): \(error)")
            #expect("\(error)".contains("unavailable"), "\(name): \(error)")
            #expect(seconds < 10, "\(name) took \(seconds) s: held for the connect deadline (20 s)")
        }
        // A write that failed for want of a connection says that nothing was written.
        let (refused, _) = await Self.timed { try await store.set(4, for: "n") }
        #expect("\(refused.failure.map { "\($0)" } ?? "")".contains("nothing was written"), "\(refused)")

        try cluster.start()
        try await store.set(5, for: "n")
        #expect(try await store.get(Int.self, for: "n") == 5)
        #expect(try await fresh.get(Int.self, for: "n") == 5)
        try await vault.set("three", service: "svc", account: "a")
        #expect(try await vault.string(service: "svc", account: "a") == "three")
    }

    @Test("A partition from async code: 64 writes and 64 loads against a silent server hold no thread; a 5 ms sleep elsewhere wakes")
    func partitionFromAsyncCode() async throws {
        let silent = try SilentServer()
        defer { silent.close() }
        let configuration = try Self.configuration(
            "postgres://coffer@127.0.0.1:\(silent.port)/postgres?sslmode=disable", timeout: 2, connect: 2)
        let stores = (0..<8).map { PostgresKeyValueStrategy(configuration: configuration, suite: "partition-\($0)") }
        let properties = (0..<64).map { Stored(wrappedValue: 0, backed: .postgres(stores[$0 % 8], key: "k\($0)")) }

        // The unrelated task: sleeps 5 ms over and over while the others wait on the network.
        let lateness = Task {
            var worst = 0.0
            let end = Date() + 3
            while Date() < end {
                let start = Date()
                try? await Task.sleep(for: .milliseconds(5))
                worst = max(worst, Date().timeIntervalSince(start) - 0.005)
            }
            return worst
        }
        let outcomes = await withTaskGroup(of: (CofferError.Code?, Double).self) { group in
            for (index, property) in properties.enumerated() {
                group.addTask {
                    property.wrappedValue = index + 1  // returns at once; the write waits in the background
                    let (outcome, seconds) = await Self.timed { try await property.load() }
                    return (outcome.failure.flatMap(Self.code), seconds)
                }
            }
            var all: [(CofferError.Code?, Double)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        let worst = await lateness.value
        #expect(worst < 1, "a 5 ms sleep woke \(worst) s late: threads were held")
        #expect(outcomes.count == 64)
        for (code, seconds) in outcomes {
            #expect(code == .io)
            #expect(seconds < 2 * Self.bound(configuration), "a load took \(seconds) s")  // its flush, then its read
        }
        for (index, property) in properties.enumerated() {
            #expect(property.wrappedValue == index + 1)  // kept in memory
            #expect(property.saveError?.code == .io)
        }
    }

    @Test("A setter from async code returns before the round trip; the value is committed right after; flush waits for it")
    func setterDoesNotWait() async throws {
        let configuration = try Self.configuration(try PostgresTestCluster.shared.url, timeout: 5)
        let suite = uniqueName("setter")
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let reader = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        let flag = Stored(wrappedValue: 0, backed: .postgres(store, key: "flag"))
        try await flag.load()
        // Writes in order, the last one wins: 200 setters, then one flush.
        for value in 1...200 { flag.wrappedValue = value }
        #expect(flag.wrappedValue == 200)
        try await flag.flush()
        #expect(try await reader.get(Int.self, for: "flag") == 200)
        #expect(flag.saveError == nil)
        // Without a flush the value reaches the server by itself, shortly after.
        flag.wrappedValue = 201
        let deadline = Date() + 10
        var stored: Int?
        while Date() < deadline {
            stored = try await reader.get(Int.self, for: "flag")
            if stored == 201 { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(stored == 201)
    }

    @Test("A first read of a remote property does not wait: the initial value, isLoading, then the stored value")
    func firstReadDoesNotWait() async throws {
        let configuration = try Self.configuration(try PostgresTestCluster.shared.url, timeout: 5)
        let suite = uniqueName("first")
        try await PostgresKeyValueStrategy(configuration: configuration, suite: suite).set("stored", for: "mode")
        let silent = try SilentServer()
        defer { silent.close() }
        // Against a silent server: the read returns the initial value at once, loading.
        let unreachable = try Self.configuration(
            "postgres://coffer@127.0.0.1:\(silent.port)/postgres?sslmode=disable", timeout: 1, connect: 1)
        let cut = Stored(wrappedValue: "initial", backed: .postgres(PostgresKeyValueStrategy(configuration: unreachable), key: "m"))
        #expect(cut.wrappedValue == "initial")
        #expect(cut.isLoading)
        // The load fails, says why, and is tried again by itself (the server may come back).
        #expect(await Self.eventuallyAsync { cut.loadError?.code == .io })
        #expect(cut.isLoading)
        #expect(cut.wrappedValue == "initial")
        // Against the real one: the stored value arrives by itself.
        let mode = Stored(wrappedValue: "initial", backed: .postgres(PostgresKeyValueStrategy(configuration: configuration, suite: suite), key: "mode"))
        _ = mode.wrappedValue
        #expect(await Self.eventuallyAsync { mode.wrappedValue == "stored" })
        #expect(try await mode.load() == "stored")
        #expect(await Self.eventuallyAsync { !mode.isLoading })
    }

    static func eventuallyAsync(timeout: Double = 10, _ condition: () -> Bool) async -> Bool {
        let deadline = Date() + timeout
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}

/// A TCP listener on loopback that accepts connections and never answers: a partition, or a
/// server that hangs during start-up.
final class SilentServer: @unchecked Sendable {
    // @unchecked Sendable: `descriptor` is written once in init; `accepted` under `lock`.
    let port: Int
    private let descriptor: Int32
    private let lock = NSLock()
    private var accepted: [Int32] = []
    private var closed = false

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw CofferError(.io, "socket failed") }
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, 256) == 0 else { throw CofferError(.io, "bind/listen failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(descriptor, nil, nil)
                guard client >= 0 else { return }
                lock.lock()
                if closed {
                    lock.unlock()
                    Glibc.close(client)
                    return
                }
                accepted.append(client)  // held open, never read or written
                lock.unlock()
            }
        }
    }

    func close() {
        lock.lock()
        closed = true
        let all = accepted
        accepted = []
        lock.unlock()
        shutdown(descriptor, Int32(SHUT_RDWR))
        Glibc.close(descriptor)
        for client in all { Glibc.close(client) }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
#endif
