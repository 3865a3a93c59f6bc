#if Postgres
import CofferCore
import CofferRuntime
import Foundation
import Logging
import PostgresNIO

/// A store's way to the server: postgres-nio's `PostgresClient` pool, shared by every store of the
/// process with the same settings, and a deadline on every call.
///
/// Nothing here blocks a thread: every call is `async`, the pool's connections do their I/O on
/// NIO's event loops, and the synchronous API of the stores runs these calls on Coffer's own
/// threads (`Offload.wait`). Every wait is bounded (docs/STATE.md, "Deadlines (PostgreSQL)"):
/// - a connection is leased within ``PostgresConfiguration/connectTimeout``, else the call fails
///   with ``CofferError/Code/io`` ("unavailable") and the lease request is withdrawn. While the
///   server has not been reached since a sign of an outage, a call first opens a connection of its
///   own (``ClientRegistry``): one refused (nothing listening) fails the call at once, with the
///   reason, and one reached puts the calls back on the pool (a new pool after a lease failed);
/// - each statement waits for a lock at most ``PostgresConfiguration/effectiveTimeout`` and runs
///   at most as long (the server's `lock_timeout` and `statement_timeout`, set when a connection
///   starts): ``CofferError/Code/busy``;
/// - a server that has not answered one second after that (stopped, partitioned) has its
///   connection closed by the client: ``CofferError/Code/io``, saying a write may or may not have
///   been committed. The pool opens a new connection for the next call.
final class PostgresLink: Sendable {
    let configuration: PostgresConfiguration
    let logger: Logger
    /// Coffer's tables, named in the configured schema.
    let tables: Tables

    /// The logger of queries when the caller gave none: nothing below critical (a failed query is
    /// reported as a `CofferError`, and postgres-nio's own messages may show bound values).
    static let quietLogger: Logger = {
        var logger = Logger(label: "coffer.postgres")
        logger.logLevel = .critical
        return logger
    }()

    /// Why every call fails at once (a name no row may have), else `nil`.
    let refusal: CofferError?

    init(configuration: PostgresConfiguration, logger: Logger? = nil, name: (kind: String, value: String)? = nil) {
        var configuration = configuration
        // The password file is read when a store is made from the settings (libpq reads it at
        // connect time): settings changed after they were parsed still find their line.
        if configuration.password == nil { configuration.password = configuration.passwordFromFile() }
        self.configuration = configuration
        // Settings and names are checked once, here; every call throws the refusal at once.
        self.refusal = name.flatMap { Self.refusal(of: $0.value, as: $0.kind) } ?? configuration.refusalError
        self.logger = logger ?? Self.quietLogger
        self.tables = Tables(configuration)
    }

    /// Seconds a statement may wait for a lock or run.
    var timeout: Double { configuration.effectiveTimeout }

    /// Runs `body` with a leased connection, within the deadlines above. A read (`idempotent`)
    /// whose connection is lost is run once more on another; a write is not — it reports that it
    /// may or may not have been committed.
    func withConnection<T: Sendable>(
        idempotent: Bool, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await once(body)
            } catch let failure as Failure {
                // Only a connection lost mid-call is worth another try within the deadline; a
                // server unreachable or silent for a whole deadline is reported at once.
                if failure.retriable, idempotent, attempt == 1 { continue }
                throw translate(failure, write: !idempotent)
            }
        }
    }

    /// Runs `body` in a transaction; commits when it returns `commit: true`, else rolls back.
    func transaction<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> (T, commit: Bool)
    ) async throws -> T {
        let logger = logger
        return try await withConnection(idempotent: false) { connection in
            // Read committed whatever the server's default: the row locks of update and
            // compareAndSwap wait for each other there, where a stricter level would fail them.
            try await Self.run("BEGIN ISOLATION LEVEL READ COMMITTED", on: connection, logger: logger)
            let result: (T, commit: Bool)
            do {
                result = try await body(connection)
            } catch {
                if !connection.isClosed { _ = try? await Self.run("ROLLBACK", on: connection, logger: logger) }
                throw error
            }
            try await Self.run(result.commit ? "COMMIT" : "ROLLBACK", on: connection, logger: logger)
            return result.0
        }
    }

    /// Runs `sql` with `binds` on `connection` and returns its rows.
    @discardableResult
    func run(_ sql: String, _ binds: PostgresBindings = PostgresBindings(), on connection: PostgresConnection)
        async throws -> [PostgresRow]
    {
        try await Self.run(sql, binds, on: connection, logger: logger)
    }

    @discardableResult
    static func run(
        _ sql: String, _ binds: PostgresBindings = PostgresBindings(), on connection: PostgresConnection, logger: Logger
    ) async throws -> [PostgresRow] {
        try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).collect()
    }

    // MARK: - One attempt, bounded

    /// Why one attempt failed, before it becomes a ``CofferError``.
    struct Failure: Error {
        enum Kind {
            /// No connection within the connect timeout.
            case unavailable(lastError: (any Error)?)
            /// The server did not answer within the deadline; the client closed the connection.
            case noAnswer
            /// The server or the connection failed.
            case failed(any Error)
            /// The connection closed while the call held it (the server stopped or crashed).
            case closed
            /// A connection of its own, tried because the pool's server had not been reached
            /// since its last failure (or ever), failed: refused, unreachable, or rejected.
            case unreachable(any Error)
        }
        let kind: Kind
        /// Whether a read may be run once more on another connection: its connection was lost
        /// mid-call (not a whole deadline spent waiting).
        var retriable: Bool {
            switch kind {
            case .closed: true
            case .failed: lost
            case .unavailable, .noAnswer, .unreachable: false
            }
        }
        /// Whether the connection is gone (as opposed to one statement refused).
        var lost: Bool {
            switch kind {
            case .unavailable, .noAnswer, .closed, .unreachable: true
            case .failed(let error):
                if let error = error as? PSQLError {
                    PostgresLink.isConnectionLoss(error)
                } else {
                    PostgresLink.isPoolFailure(error)
                }
            }
        }
    }

    private enum Phase: Sendable {
        case leasing
        /// The connect deadline passed before a connection was leased: the work must not start.
        case abandoned
        case running(PostgresConnection)
        case finished
    }

    private enum Outcome<T: Sendable>: Sendable {
        case value(T)
        case failed(any Error)
        case unavailable
        case noAnswer
        case closed
        /// The server was probed (see ``ClientRegistry/admit(_:logger:connect:)``) and not reached.
        case unreachable(any Error)
    }

    private struct Abandoned: Error {}

    private func once<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        if let refusal { throw refusal }
        let configuration = configuration
        let logger = logger
        let phase = Guarded(Phase.leasing)
        let verdict = Verdict<Outcome<T>>()
        let timer = DeadlineTimer.shared
        // The pool the lease was last asked of (`nil` while the call waits for a probe).
        let askedOf = Guarded<PostgresClient?>(nil)
        let connect: @Sendable () async throws -> PostgresConnection = { [self] in try await connectDirectly(probe: true) }
        // The lease is given up at the connect deadline (the work must then not start).
        let connectDeadline = timer.arm(at: .now + .seconds(configuration.connectTimeout)) {
            let gaveUp = phase.withLock { phase -> Bool in
                guard case .leasing = phase else { return false }
                phase = .abandoned
                return true
            }
            if gaveUp { verdict.settle(.unavailable) }
        }
        let answerLimit = Duration.seconds(timeout + 1)
        // The work is a task of its own, not a child: the call returns at its deadline even if the
        // work cannot end (a lease request the pool never answers, a statement on a connection
        // whose close is not noticed). It runs beside its caller (Coffer's threads for a
        // synchronous caller, the cooperative pool for an async one); the deadlines are the
        // process's one timer thread (no task per call).
        let work = Offload.startBesideCaller {
            do {
                // A probe already under way when this call came may have been refused by a server
                // that was still starting (57P03): its failure sends this call to one more probe,
                // begun after it came, whose outcome is this call's.
                var mayAskAgain = true
                while true {
                    let leasing = phase.withLock { phase -> Bool in
                        if case .leasing = phase { return true }
                        return false
                    }
                    guard leasing else { return }
                    // The pool only once the server was reached since its last failure: else a
                    // connection of its own first (shared by the calls arriving meanwhile), which
                    // a refused connect fails at once. See `ClientRegistry.admit`.
                    let client: PostgresClient
                    switch try ClientRegistry.admit(configuration, logger: logger, connect: connect) {
                    case .pool(let pool):
                        client = pool
                    case .probe(let probe, let started):
                        askedOf.withLock { $0 = nil }
                        if case .failure(let error) = await probe.outcome {
                            if !started, mayAskAgain {
                                mayAskAgain = false
                                continue
                            }
                            verdict.settle(.unreachable(error))
                            return
                        }
                        continue  // reached: the pool, now
                    }
                    askedOf.withLock { $0 = client }
                    do {
                        let value = try await self.lease(
                            client, configuration: configuration, logger: logger, phase: phase, verdict: verdict,
                            answerLimit: answerLimit, connectDeadline: connectDeadline, body)
                        verdict.settle(.value(value))
                        return
                    } catch where PostgresLink.isPoolFailure(error) && phase.withLock({ if case .leasing = $0 { true } else { false } }) {
                        // The pool refused the lease before any work began: it was shut down
                        // (replaced after an outage) or its circuit breaker is open (it keeps
                        // failing requests at once). Nothing was sent: ask again, through the
                        // current pool or a new probe, within the same deadline.
                        ClientRegistry.poolFailed(client, for: configuration)
                    }
                }
            } catch {
                verdict.settle(.failed(error))
            }
        }
        let outcome = await verdict.value
        timer.disarm(connectDeadline)
        let pool = askedOf.withLock { $0 }
        switch outcome {
        case .value(let value): return value
        case .unavailable:
            work.cancel()  // withdraws the lease request
            // postgres-nio's pool backs off between failed connection attempts (up to a minute)
            // and queues requests meanwhile: the next call probes the server with a connection
            // of its own, and a new pool replaces this one once it is reached. (A pool whose
            // connections are all held by calls is busy, not cut off: it is kept.)
            if let pool { ClientRegistry.suspect(pool, for: configuration, replacePool: true) }
            throw Failure(kind: .unavailable(lastError: nil))
        case .unreachable(let error as CofferError): throw error
        case .unreachable(let error): throw Failure(kind: .unreachable(error))
        case .noAnswer:
            if let pool { ClientRegistry.suspect(pool, for: configuration, replacePool: false) }
            throw Failure(kind: .noAnswer)
        case .closed:
            if let pool { ClientRegistry.suspect(pool, for: configuration, replacePool: false) }
            throw Failure(kind: .closed)
        case .failed(let error as CofferError): throw error
        case .failed(let error as BodyError): throw error.error
        case .failed(let error):
            let failure = Failure(kind: .failed(error))
            if failure.lost, let pool { ClientRegistry.suspect(pool, for: configuration, replacePool: false) }
            throw failure
        }
    }

    /// Leases a connection of `client` and runs `body` on it, within the deadlines of ``once(_:)``.
    private func lease<T: Sendable>(
        _ client: PostgresClient, configuration: PostgresConfiguration, logger: Logger, phase: Guarded<Phase>,
        verdict: Verdict<Outcome<T>>, answerLimit: Duration, connectDeadline: DeadlineTimer.Token,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let timer = DeadlineTimer.shared
        return try await client.withConnection { connection in
            let go = phase.withLock { phase -> Bool in
                if case .abandoned = phase { return false }
                phase = .running(connection)
                return true
            }
            guard go else { throw Abandoned() }
            timer.disarm(connectDeadline)
            ClientRegistry.began(client)
            // A server that has not answered by the statement deadline (which the server
            // itself should have enforced: it is stopped, or the network is cut) has its
            // connection closed.
            let answerDeadline = timer.arm(at: .now + answerLimit) {
                // Taken from the work in one step, so a connection it has already handed
                // back to the pool (and another call may hold) is never closed.
                let stalled = phase.withLock { phase -> PostgresConnection? in
                    guard case .running(let connection) = phase else { return nil }
                    phase = .finished
                    return connection
                }
                guard let stalled else { return }
                ClientRegistry.ended(client)  // a closed connection keeps no pool busy
                // Settled before the close: the close fails the statement in flight, and the
                // work, settling that failure first, made a read's silent deadline look like a
                // connection lost mid-call, which a read tries once more on a new connection
                // (seen under load: a read "answered" by a backend stopped with SIGSTOP, a
                // deadline late).
                verdict.settle(.noAnswer)
                // Fails the statement in flight; the work ends when it notices.
                let _: EventLoopFuture<Void> = stalled.close()
            }
            // A connection that closes under the call (the server crashed or was
            // stopped) ends it at once. postgres-nio does not always fail a statement
            // in flight when its connection closes: a server stopped with
            // `pg_ctl -m immediate` left one waiting for the answer deadline (11 s).
            // Any close of a pooled connection (the server stopped, or the pool closed an
            // idle one) makes the next call probe the server first.
            CloseWatch.begin(connection, whenClosed: {
                ClientRegistry.suspect(client, for: configuration, replacePool: false)
            }) {
                let closed = phase.withLock { phase -> Bool in
                    guard case .running(let running) = phase, running === connection else { return false }
                    phase = .finished
                    return true
                }
                guard closed else { return }
                ClientRegistry.ended(client)
                verdict.settle(.closed)
            }
            defer {
                CloseWatch.end(connection)
                timer.disarm(answerDeadline)
                // Whoever moves the phase out of `.running` (this, or the deadline closing
                // a stalled connection) ends the count of calls holding one.
                let wasRunning = phase.withLock { phase -> Bool in
                    guard case .running = phase else { return false }
                    phase = .finished
                    return true
                }
                if wasRunning { ClientRegistry.ended(client) }
            }
            try await Schema.ensure(on: connection, configuration: configuration, logger: logger)
            return try await body(connection)
        }
    }

    /// An error of the caller's own code run inside a call (an `update`'s transform): handed back
    /// as it was thrown.
    struct BodyError: Error {
        let error: any Error
    }

    /// Runs a caller's code inside a call (an `update`'s transform) on Coffer's growing pool when
    /// the call runs on the fixed pool of async work (``BlockingPool/jobs``): the caller's code
    /// may block (a synchronous Coffer call inside it), and with every thread of that pool held
    /// every other async call of the process would wait behind it.
    static func callersCodeOffJobs<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
        guard BlockingPool.isJobsThread else { return try body() }
        return try await Offload.run(body)
    }

    /// Runs a caller's closure inside a call, marking what it throws as its own.
    static func callersCode<R>(_ body: () throws -> R) throws -> R {
        do { return try body() } catch let error as CofferError { throw error } catch { throw BodyError(error: error) }
    }

    // MARK: - The pool

    /// Opens a connection of its own (not pooled), within the connect timeout (postgres-nio's
    /// deadline covers the TCP connect, TLS and the start-up exchange): the change feed's LISTEN
    /// connection, and the probe of a server not reached since its last failure (named
    /// `coffer-probe` in `pg_stat_activity`). Throws the driver's error as it is.
    func connectDirectly(probe: Bool = false) async throws -> PostgresConnection {
        if let refusal { throw refusal }
        var settings: PostgresConnection.Configuration
        if let socket = configuration.unixSocketPath {
            settings = PostgresConnection.Configuration(
                unixSocketPath: socket, username: configuration.user, password: configuration.password,
                database: configuration.database)
        } else {
            let tls: PostgresConnection.Configuration.TLS
            switch try ClientRegistry.tls(configuration) {
            case nil: tls = .disable
            case .some((let settings, prefer: true)): tls = .prefer(try NIOSSLContext(configuration: settings))
            case .some((let settings, prefer: false)): tls = .require(try NIOSSLContext(configuration: settings))
            }
            settings = PostgresConnection.Configuration(
                host: configuration.host, port: configuration.port, username: configuration.user,
                password: configuration.password, database: configuration.database, tls: tls)
        }
        settings.options.connectTimeout = .milliseconds(Int64(configuration.connectTimeout * 1000))
        settings.options.additionalStartupParameters = ClientRegistry.startupParameters(configuration).map {
            probe && $0.0 == "application_name" ? ($0.0, "coffer-probe") : $0
        }
        let id = ClientRegistry.nextConnectionID()
        return try await PostgresConnection.connect(configuration: settings, id: id, logger: logger)
    }

    /// Opens a connection of its own (not pooled), within the connect timeout: the change feed's
    /// LISTEN connection.
    func connectForListening() async throws -> PostgresConnection {
        do {
            return try await connectDirectly()
        } catch let error as PSQLError {
            throw translate(Failure(kind: .failed(error)), write: false, connecting: true)
        }
    }

    // MARK: - Errors

    /// Why a suite or vault name cannot be used: empty, or holding a NUL (PostgreSQL's `text`
    /// cannot hold one); `nil` when it can. The same `.invalidArgument` the file stores give.
    static func refusal(of name: String, as kind: String) -> CofferError? {
        if name.isEmpty { return CofferError(.invalidArgument, "a \(kind) name must not be empty") }
        if name.utf8.contains(0) { return CofferError(.invalidArgument, "a \(kind) name must not contain NUL") }
        return nil
    }

    /// Whether the error is the pool's own (postgres-nio's `ConnectionPoolError`: the pool was
    /// shut down — replaced after an outage — or its connection attempts keep failing).
    static func isPoolFailure(_ error: any Error) -> Bool {
        String(describing: type(of: error)).hasSuffix("ConnectionPoolError")
    }

    /// Whether the error means the connection is gone (the server stopped, restarted, or the
    /// network dropped), as opposed to the server refusing one statement.
    static func isConnectionLoss(_ error: PSQLError) -> Bool {
        switch error.code {
        case .server:
            // Class 08 (connection exception), 57P01–57P03 (shutdown, crash, cannot connect now).
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        case .serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown:
            return true
        default:
            return false
        }
    }

    /// A ``CofferError`` for a failed attempt: what failed, where, and what it means for a write.
    /// Never the query's bound values (they are the stored bytes) nor the password.
    func translate(_ failure: Failure, write: Bool, connecting: Bool = false) -> CofferError {
        let server = "the PostgreSQL server at \(configuration)"
        let unsure = "so it may or may not have been committed (read the value again)"
        switch failure.kind {
        case .unavailable:
            return CofferError(
                .io, "\(server) is unavailable: no connection within \(configuration.connectTimeout.secondsText) s")
        case .noAnswer:
            let limit = (timeout + 1).secondsText
            return CofferError(
                .io,
                write
                    ? "\(server) did not answer within \(limit) s and the connection was closed, \(unsure)"
                    : "\(server) did not answer within \(limit) s (unavailable); the connection was closed")
        case .closed:
            return CofferError(
                .io,
                write
                    ? "the connection to \(server) closed before the write was acknowledged, \(unsure)"
                    : "\(server) is unavailable: the connection closed")
        case .unreachable(let error):
            // No connection was made: nothing was sent, so a write did nothing.
            let said = translate(Failure(kind: .failed(error)), write: false, connecting: true).message
            return CofferError(.io, write ? "\(said); nothing was written" : said)
        case .failed(let error):
            guard let error = error as? PSQLError else {
                if PostgresLink.isPoolFailure(error) {
                    return CofferError(
                        .io, write ? "\(server) is unavailable (no connection), so nothing was written" : "\(server) is unavailable (no connection)")
                }
                if error is CancellationError {
                    return CofferError(.io, "a call to \(server) was cancelled" + (write ? ", \(unsure)" : ""))
                }
                // A reply that does not decode as expected (a column of another type): named by
                // its type only, since such errors may carry the cell's bytes.
                return CofferError(.io, "\(server) sent an unexpected reply (\(type(of: error)))")
            }
            var reason: String
            let state = error.serverInfo?[.sqlState]
            if error.code == .server, let info = error.serverInfo {
                reason = info[.message] ?? "an error"
                if let state { reason += " (SQLSTATE \(state))" }
            } else if let underlying = error.underlying {
                // A message that did not decode carries the server's bytes (a row's values):
                // named by its type only.
                let kind = String(describing: type(of: underlying))
                reason = kind.contains("Decoding") ? "\(error.code) (\(kind))" : "\(underlying)"
            } else {
                reason = "\(error.code)"
            }
            if connecting { return CofferError(.io, "\(server) is unavailable: \(reason)") }
            if state == "55P03" {
                return CofferError(
                    .busy,
                    "waited \(timeout.secondsText) s for a lock another session of \(server) holds; nothing was written: "
                        + reason)
            }
            if state == "57014" {
                return CofferError(
                    .busy, "a statement did not finish within \(timeout.secondsText) s at \(server); nothing was written: \(reason)")
            }
            if failure.lost {
                return CofferError(
                    .io,
                    write
                        ? "the connection to \(server) was lost before the write was acknowledged, \(unsure): \(reason)"
                        : "\(server) is unavailable: \(reason)")
            }
            return CofferError(.io, "\(server) refused a statement: \(reason)")
        }
    }
}

/// What to do when a pooled connection closes under the call holding it: one callback on each
/// connection's `closeFuture` for its whole life, not one per call (a pooled connection serves
/// millions of calls, and each callback would be kept until the connection closes).
enum CloseWatch {
    private static let handlers = Locked<[ObjectIdentifier: (@Sendable () -> Void)?]>([:])

    /// `handler` runs if `connection` closes before ``end(_:)``; `whenClosed` runs when it closes,
    /// whenever that is (only the first call's is kept: a connection belongs to one pool).
    static func begin(
        _ connection: PostgresConnection, whenClosed: @escaping @Sendable () -> Void,
        _ handler: @escaping @Sendable () -> Void
    ) {
        let id = ObjectIdentifier(connection)
        let first = handlers.withLock { handlers -> Bool in
            let first = handlers[id] == nil
            handlers[id] = .some(handler)
            return first
        }
        guard first else { return }
        connection.closeFuture.whenComplete { _ in
            // A closed connection is never handed out again: its entry goes with it.
            let handler = handlers.withLock { $0.removeValue(forKey: id) } ?? nil
            handler?()
            whenClosed()
        }
    }

    /// The call is over: a later close is not its concern.
    static func end(_ connection: PostgresConnection) {
        handlers.withLock { handlers in
            let id = ObjectIdentifier(connection)
            if handlers[id] != nil { handlers[id] = .some(nil) }
        }
    }
}

/// The process's pools: one `PostgresClient` per server, login, pool size and deadline, running
/// for the life of the process (an idle pool holds no connection after
/// ``PostgresConfiguration/idleTimeout``), and whether its server has been reached since its last
/// failure.
///
/// postgres-nio's pool (1.33) remembers failed connects: after one fails it tries again only on
/// its own backoff timer (100 ms growing by 1.25× per failure, up to a minute), queues every
/// request until one succeeds, and after 60 s of failures fails requests at once
/// (`connectionCreationCircuitBreakerTripped`); none of this can be configured. So a call made
/// while nothing listens waited its whole connect deadline, and a call made once the server was
/// back could wait for the backoff or be failed by a pool replaced under it. Coffer therefore
/// sends calls to the pool only while its server is *proven*: at first, and after any sign of an
/// outage (a connection of the pool closed or lost, a lease not granted within the deadline, the
/// pool failing a lease), a call first opens a connection of its own (a *probe*, one at a time
/// per pool; calls arriving meanwhile share its outcome). Refused, it fails every waiting call at
/// once with the driver's reason; silent, it ends within the connect timeout; reached, the
/// server is proven again — and a pool that may be backing off (a lease timed out or failed) is
/// replaced by a new one, which connects at once.
enum ClientRegistry {
    private struct Entry {
        var pool: (client: PostgresClient, run: Task<Void, Never>)?
        var reach = Reach.unproven(replacePool: false)
    }

    private enum Reach {
        /// Reached since the last sign of an outage: calls go to the pool.
        case proven
        /// Not reached since a sign of an outage (or ever): the next call probes. `replacePool`:
        /// the pool may be backing off, and is replaced once the server is reached.
        case unproven(replacePool: Bool)
        /// A probe is under way; calls wait for its outcome.
        case probing(Probe, replacePool: Bool)
    }

    /// How a call gets a connection.
    enum Admission {
        case pool(PostgresClient)
        /// Wait for this probe's outcome: reached, ask again; not reached, fail with its error.
        /// `started`: begun for this call (else it was under way when the call came).
        case probe(Probe, started: Bool)
    }

    private static let entries = Locked<[PostgresConfiguration: Entry]>([:])

    /// How many calls hold a connection of each pool now.
    private static let running = Locked<[ObjectIdentifier: Int]>([:])

    static func began(_ client: PostgresClient) {
        running.withLock { $0[ObjectIdentifier(client), default: 0] += 1 }
    }

    static func ended(_ client: PostgresClient) {
        running.withLock { all in
            let id = ObjectIdentifier(client)
            all[id, default: 1] -= 1
            if all[id] == 0 { all[id] = nil }
        }
    }

    private static func isRunning(_ client: PostgresClient) -> Bool {
        running.withLock { $0[ObjectIdentifier(client)] != nil }
    }

    /// The pool for `configuration` when its server is proven; else the probe to wait for,
    /// started here (with `connect`) when none is under way.
    static func admit(
        _ configuration: PostgresConfiguration, logger: Logger,
        connect: @escaping @Sendable () async throws -> PostgresConnection
    ) throws -> Admission {
        let (admission, started) = try entries.withLock { all -> (Admission, Probe?) in
            var entry = all[configuration] ?? Entry()
            switch entry.reach {
            case .proven:
                let client: PostgresClient
                if let pool = entry.pool {
                    client = pool.client
                } else {
                    let made = try makeClient(configuration, logger: logger)
                    entry.pool = made
                    client = made.client
                }
                all[configuration] = entry
                return (.pool(client), nil)
            case .probing(let probe, _):
                return (.probe(probe, started: false), nil)
            case .unproven(let replacePool):
                let probe = Probe()
                entry.reach = .probing(probe, replacePool: replacePool)
                all[configuration] = entry
                return (.probe(probe, started: true), probe)
            }
        }
        if let started {
            // A task of its own: its outcome is recorded even when the call that started it gave
            // up. postgres-nio's connect deadline bounds it.
            Offload.start {
                let outcome: Result<Void, any Error>
                do {
                    let connection = try await connect()
                    try? await connection.close()
                    outcome = .success(())
                } catch {
                    outcome = .failure(error)
                }
                finish(started, for: configuration, outcome)
                started.settle(outcome)
            }
        }
        return admission
    }

    /// Records a probe's outcome: reached, the server is proven (and a pool that may be backing
    /// off is replaced, unless a call holds one of its connections); not reached, the next call
    /// probes again.
    private static func finish(_ probe: Probe, for configuration: PostgresConfiguration, _ outcome: Result<Void, any Error>) {
        let replaced = entries.withLock { all -> Task<Void, Never>? in
            guard var entry = all[configuration], case .probing(let current, let replacePool) = entry.reach,
                current === probe
            else { return nil }
            defer { all[configuration] = entry }
            guard case .success = outcome else {
                entry.reach = .unproven(replacePool: replacePool)
                return nil
            }
            entry.reach = .proven
            guard replacePool, let pool = entry.pool, !isRunning(pool.client) else { return nil }
            entry.pool = nil
            return pool.run
        }
        replaced?.cancel()  // ends the old pool: requests still queued on it fail, and are asked again
    }

    /// A sign that `client`'s server may be gone (when `client` is still the pool for
    /// `configuration`): the next call probes it first. `replacePool`: the pool may be backing
    /// off (a lease was not granted within the deadline), so it is replaced once the server is
    /// reached — unless a call holds one of its connections now: then the pool is busy (every
    /// connection waiting on a lock, say), not cut off, and nothing is suspected.
    static func suspect(_ client: PostgresClient, for configuration: PostgresConfiguration, replacePool: Bool) {
        entries.withLock { all in
            guard var entry = all[configuration], entry.pool?.client === client else { return }
            if replacePool, isRunning(client) { return }
            switch entry.reach {
            case .proven: entry.reach = .unproven(replacePool: replacePool)
            case .unproven(let replace): entry.reach = .unproven(replacePool: replace || replacePool)
            case .probing(let probe, let replace): entry.reach = .probing(probe, replacePool: replace || replacePool)
            }
            all[configuration] = entry
        }
    }

    /// `client` failed a lease by itself (shut down, or its circuit breaker open): when it is
    /// still the pool for `configuration`, it is ended and the next call probes the server.
    static func poolFailed(_ client: PostgresClient, for configuration: PostgresConfiguration) {
        let run = entries.withLock { all -> Task<Void, Never>? in
            guard var entry = all[configuration], let pool = entry.pool, pool.client === client else { return nil }
            entry.pool = nil
            if case .proven = entry.reach { entry.reach = .unproven(replacePool: false) }
            all[configuration] = entry
            return pool.run
        }
        run?.cancel()
    }

    private static let ids = Locked(0)

    static func nextConnectionID() -> Int {
        ids.withLock { id in
            id += 1
            return id
        }
    }

    private static func makeClient(_ configuration: PostgresConfiguration, logger: Logger) throws
        -> (client: PostgresClient, run: Task<Void, Never>)
    {
        var settings: PostgresClient.Configuration
        if let socket = configuration.unixSocketPath {
            settings = PostgresClient.Configuration(
                unixSocketPath: socket, username: configuration.user, password: configuration.password,
                database: configuration.database)
        } else {
            let mode: PostgresClient.Configuration.TLS
            switch try tls(configuration) {
            case nil: mode = .disable
            case .some((let settings, prefer: true)): mode = .prefer(settings)
            case .some((let settings, prefer: false)): mode = .require(settings)
            }
            settings = PostgresClient.Configuration(
                host: configuration.host, port: configuration.port, username: configuration.user,
                password: configuration.password, database: configuration.database, tls: mode)
        }
        settings.options.connectTimeout = .seconds(configuration.connectTimeout)
        settings.options.maximumConnections = configuration.maximumConnections
        settings.options.minimumConnections = 0
        settings.options.connectionIdleTimeout = .seconds(configuration.idleTimeout)
        settings.options.keepAliveBehavior = .init(frequency: .seconds(30))
        settings.options.additionalStartupParameters = startupParameters(configuration)
        let client = PostgresClient(configuration: settings, backgroundLogger: logger)
        // On Coffer's threads: the pool must serve synchronous callers even while they hold
        // every thread of the cooperative pool (each blocked in `Offload.wait`).
        let run = Offload.start { await client.run() }
        return (client, run)
    }

    /// The server's own deadlines for every statement of a connection (no round trip per call):
    /// how long a statement waits for a lock, how long it runs, and how long a transaction may
    /// sit idle (a client that vanished mid-transaction releases its locks).
    static func startupParameters(_ configuration: PostgresConfiguration) -> [(String, String)] {
        let milliseconds = Int((configuration.effectiveTimeout * 1000).rounded(.up))
        return [
            ("application_name", "coffer"),
            ("lock_timeout", "\(milliseconds)"),
            // Half a second more, so a wait for a lock is reported as one (55P03), and before the
            // client's own cut-off one second after the deadline.
            ("statement_timeout", "\(milliseconds + 500)"),
            ("idle_in_transaction_session_timeout", "\(max(milliseconds * 2, 5000))"),
            // Only Coffer's schema (pg_catalog is searched first, implicitly): no other schema,
            // such as one named after the login role, is searched for a table or a function.
            ("search_path", configuration.quotedSchema),
        ]
    }

    /// The TLS settings (`nil`: plain), and whether TLS is only preferred.
    static func tls(_ configuration: PostgresConfiguration) throws -> (TLSConfiguration, prefer: Bool)? {
        guard configuration.tls != .disable else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        switch configuration.tls {
        case .disable, .prefer, .require: tls.certificateVerification = .none
        case .verifyCA: tls.certificateVerification = .noHostnameVerification
        case .verifyFull: tls.certificateVerification = .fullVerification
        }
        if let roots = configuration.rootCertificatePath { tls.trustRoots = .file(roots) }
        do {
            _ = try NIOSSLContext(configuration: tls)
        } catch {
            throw CofferError(.invalidArgument, "the TLS settings for \(configuration) are unusable: \(error)")
        }
        return (tls, configuration.tls == .prefer)
    }
}

extension Duration {
    /// A duration of `seconds` (fractions kept to the millisecond).
    static func seconds(_ seconds: Double) -> Duration {
        .milliseconds(Int64((seconds * 1000).rounded()))
    }
}
#endif

#if Postgres
/// The first outcome of a race, awaited once: later ones are ignored.
final class Verdict<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiter: CheckedContinuation<Value, Never>?
    }
    private let state = Guarded(State())

    /// Settles the verdict unless it is settled already.
    func settle(_ value: Value) {
        let waiter = state.withLock { s -> CheckedContinuation<Value, Never>? in
            guard s.value == nil else { return nil }
            s.value = value
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: value)
    }

    /// The first value settled.
    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { s -> Value? in
                    if let value = s.value { return value }
                    s.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}

/// A ``Locked`` value that closures and tasks can share (a `Locked` itself cannot be captured).
final class Guarded<State: Sendable>: Sendable {
    private let locked: Locked<State>

    init(_ value: State) { locked = Locked(value) }

    func withLock<R: Sendable>(_ body: (inout State) throws -> R) rethrows -> R {
        try locked.withLock { state in try body(&state) }
    }
}

#endif

#if Postgres
/// The outcome of one probe of a server (a connection of its own, opened and closed), awaited by
/// every call that arrived while it ran.
final class Probe: Sendable {
    private struct State {
        var outcome: Result<Void, any Error>?
        var waiters: [CheckedContinuation<Result<Void, any Error>, Never>] = []
    }
    private let state = Guarded(State())

    func settle(_ outcome: Result<Void, any Error>) {
        let waiters = state.withLock { s -> [CheckedContinuation<Result<Void, any Error>, Never>] in
            guard s.outcome == nil else { return [] }
            s.outcome = outcome
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    var outcome: Result<Void, any Error> {
        get async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { s -> Result<Void, any Error>? in
                    if let outcome = s.outcome { return outcome }
                    s.waiters.append(continuation)
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}
#endif
