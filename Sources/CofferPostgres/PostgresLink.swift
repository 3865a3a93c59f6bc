#if Postgres
import CofferCore
import Dispatch
import Foundation
import PostgresNIO

/// One connection to the server, used by one thread at a time, reconnected when it drops.
///
/// Coffer's strategies are synchronous, so every query here blocks its caller until the server
/// answers (`EventLoopFuture.wait()`: NIO's own threads do the I/O, never Swift's cooperative
/// pool). Connecting is async-only in postgres-nio; it runs as a task on ``BridgeExecutor``, a
/// thread of Coffer's, so a caller that happens to be a cooperative-pool thread cannot starve it.
final class PostgresLink: @unchecked Sendable {
    let configuration: PostgresConfiguration
    private let lock = NSLock()
    /// Guarded by `lock`, which is held for a whole call (one query or one transaction).
    private var connection: PostgresConnection?

    static let logger: Logger = {
        var logger = Logger(label: "coffer.postgres")
        logger.logLevel = .critical
        return logger
    }()

    init(configuration: PostgresConfiguration) {
        self.configuration = configuration
    }

    deinit {
        connection.map(closeQuietly)
    }

    /// Runs `body` with a live connection. A read (`idempotent`) that loses its connection is
    /// run once more on a new one; a write is not — it reports that it may not have committed.
    func withConnection<T>(idempotent: Bool, _ body: (PostgresConnection) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        var attempt = 0
        while true {
            attempt += 1
            let live: PostgresConnection
            if let current = connection, !current.isClosed {
                live = current
            } else {
                connection = nil
                live = try Self.connect(configuration)
                try Schema.ensure(on: live, configuration: configuration)
                connection = live
            }
            do {
                return try body(live)
            } catch let error as PSQLError {
                let lost = Self.isConnectionLoss(error) || live.isClosed
                if lost {
                    closeQuietly(live)
                    connection = nil
                    if idempotent && attempt == 1 { continue }
                }
                throw Self.translate(error, configuration: configuration, lost: lost, write: !idempotent)
            } catch let error as CofferError {
                throw error
            } catch {
                // A reply that does not decode as expected (a column of another type): named by
                // its type only, since such errors may carry the cell's bytes.
                throw CofferError(
                    .io, "the PostgreSQL server at \(configuration) sent an unexpected reply (\(type(of: error)))")
            }
        }
    }

    /// Runs `body` in a transaction on the link's connection; commits when it returns
    /// `commit: true`, else rolls back.
    func transaction<T>(_ body: (PostgresConnection) throws -> (T, commit: Bool)) throws -> T {
        try withConnection(idempotent: false) { connection in
            try Self.run("BEGIN", on: connection)
            let result: (T, commit: Bool)
            do {
                result = try body(connection)
            } catch {
                if !connection.isClosed { _ = try? Self.run("ROLLBACK", on: connection) }
                throw error
            }
            try Self.run(result.commit ? "COMMIT" : "ROLLBACK", on: connection)
            return result.0
        }
    }

    /// Closes the connection (the next call opens a new one).
    func close() {
        lock.lock()
        defer { lock.unlock() }
        connection.map(closeQuietly)
        connection = nil
    }

    // MARK: - Queries

    /// Runs `sql` with `binds` and returns its rows.
    @discardableResult
    static func run(_ sql: String, _ binds: PostgresBindings = PostgresBindings(), on connection: PostgresConnection)
        throws -> [PostgresRow]
    {
        try connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).wait().rows
    }

    // MARK: - Connecting

    /// Opens a new connection, authenticated, within the configured timeout.
    /// - Throws: ``CofferError/Code/io`` naming the server (never the password) and the reason.
    static func connect(_ configuration: PostgresConfiguration) throws -> PostgresConnection {
        var settings: PostgresConnection.Configuration
        if let socket = configuration.unixSocketPath {
            settings = PostgresConnection.Configuration(
                unixSocketPath: socket, username: configuration.user, password: configuration.password,
                database: configuration.database)
        } else {
            settings = PostgresConnection.Configuration(
                host: configuration.host, port: configuration.port, username: configuration.user,
                password: configuration.password, database: configuration.database,
                tls: try tls(configuration))
        }
        settings.options.connectTimeout = .milliseconds(Int64(configuration.connectTimeout * 1000))
        let id = nextID.withLock { id -> Int in
            id += 1
            return id
        }
        let final = settings
        do {
            return try BridgeExecutor.shared.wait {
                try await PostgresConnection.connect(configuration: final, id: id, logger: logger)
            }
        } catch let error as PSQLError {
            throw translate(error, configuration: configuration, lost: true, write: false, connecting: true)
        } catch {
            throw CofferError(
                .io, "cannot connect to the PostgreSQL server at \(configuration): \(String(describing: type(of: error)))")
        }
    }

    private static let nextID = Locked(0)

    private static func tls(_ configuration: PostgresConfiguration) throws -> PostgresConnection.Configuration.TLS {
        guard configuration.tls != .disable else { return .disable }
        var tls = TLSConfiguration.makeClientConfiguration()
        switch configuration.tls {
        case .disable, .prefer, .require: tls.certificateVerification = .none
        case .verifyCA: tls.certificateVerification = .noHostnameVerification
        case .verifyFull: tls.certificateVerification = .fullVerification
        }
        if let roots = configuration.rootCertificatePath { tls.trustRoots = .file(roots) }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: tls)
        } catch {
            throw CofferError(.invalidArgument, "the TLS settings for \(configuration) are unusable: \(error)")
        }
        return configuration.tls == .prefer ? .prefer(context) : .require(context)
    }

    // MARK: - Errors

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

    /// A ``CofferError`` for a postgres-nio error: what failed, where, and what it means for a
    /// write. Never the query's bound values (they are the stored bytes) nor the password.
    static func translate(
        _ error: PSQLError, configuration: PostgresConfiguration, lost: Bool, write: Bool, connecting: Bool = false
    ) -> CofferError {
        var reason: String
        if error.code == .server, let info = error.serverInfo {
            reason = info[.message] ?? "an error"
            if let state = info[.sqlState] { reason += " (SQLSTATE \(state))" }
        } else if let underlying = error.underlying {
            reason = "\(underlying)"
        } else {
            reason = "\(error.code)"
        }
        if connecting {
            return CofferError(
                .io, "the PostgreSQL server at \(configuration) is unavailable: \(reason)")
        }
        if lost {
            let what =
                write
                ? "the connection to the PostgreSQL server at \(configuration) was lost before the write was "
                    + "acknowledged, so it may or may not have been committed (read the value again)"
                : "the PostgreSQL server at \(configuration) is unavailable"
            return CofferError(.io, "\(what): \(reason)")
        }
        return CofferError(.io, "the PostgreSQL server at \(configuration) refused a statement: \(reason)")
    }
}

/// Closes a connection without waiting for it.
func closeQuietly(_ connection: PostgresConnection) {
    let closing: EventLoopFuture<Void> = connection.close()
    // Kept alive until closed: postgres-nio asserts a connection is closed before it goes.
    closing.whenComplete { _ in withExtendedLifetime(connection) {} }
}

/// Runs async work to completion for a blocking caller, on a thread of its own: the task's
/// jobs never need Swift's cooperative pool (whose threads the caller may be blocking).
final class BridgeExecutor: TaskExecutor, @unchecked Sendable {
    static let shared = BridgeExecutor()
    private let queue = DispatchQueue(label: "coffer.postgres.bridge")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Runs `operation` and blocks until it finishes.
    func wait<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let result = Locked<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task(executorPreference: self) {
            let outcome: Result<T, any Error>
            do { outcome = .success(try await operation()) } catch { outcome = .failure(error) }
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }
}
#endif
