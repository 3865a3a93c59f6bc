#if Postgres
import CofferCore
public import Foundation

/// Where the PostgreSQL server is and how to log in: from a `postgres://` URL, from libpq's
/// usual `PG*` environment variables, or spelled out.
///
/// ```swift
/// let settings = try PostgresConfiguration(url: "postgres://app@db.internal/settings?sslmode=require")
/// let settings = PostgresConfiguration.environment()   // PGHOST, PGPORT, PGUSER, PGPASSWORD, …
/// ```
///
/// Its ``description`` never shows the password; neither does any error Coffer reports.
public struct PostgresConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// Whether the connection is encrypted (libpq's `sslmode`, less `allow`).
    public enum TLSMode: String, Sendable, Hashable {
        /// Plain TCP (the only mode over a Unix socket).
        case disable
        /// TLS when the server offers it, else plain.
        case prefer
        /// TLS, or no connection; the server's certificate is not checked (libpq's `require`).
        case require
        /// TLS with the certificate checked against the trusted roots (``rootCertificatePath``, else the
        /// system's), its host name not (libpq's `verify-ca`).
        case verifyCA = "verify-ca"
        /// TLS with the certificate and its host name checked (libpq's `verify-full`).
        case verifyFull = "verify-full"
    }

    /// A host name or address, or the directory of the server's Unix socket when it starts with `/`.
    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    /// The database; `nil` means the user's name, as with libpq.
    public var database: String?
    public var tls: TLSMode
    /// PEM file of the certificates trusted to sign the server's (libpq's `sslrootcert`).
    public var rootCertificatePath: String?
    /// Seconds a call may wait for a connection (connecting and logging in included) before the
    /// server counts as unavailable (``CofferError/Code/io``).
    public var connectTimeout: Double
    /// Seconds a statement may wait for a lock another session holds, and may run: the server's
    /// `lock_timeout` and `statement_timeout`. Past it a call fails with ``CofferError/Code/busy``
    /// and nothing is written; a server that has not answered a second later (stopped, cut off)
    /// loses the connection and the call fails with ``CofferError/Code/io``. `nil`: the
    /// ``CofferContext/lockTimeout`` of the context a `.postgres` property resolves in, else 10 s.
    public var timeout: Double?
    /// The most connections the process's pool for these settings opens (postgres-nio's
    /// `PostgresClient`); every store with equal settings shares the pool.
    public var maximumConnections: Int
    /// Seconds an unused pooled connection stays open.
    public var idleTimeout: Double
    /// The schema of Coffer's tables (`public` unless named). Every statement names its tables
    /// with this schema, and each connection's `search_path` is set to it alone, so a schema
    /// another role makes (one named after the login role, which PostgreSQL's default
    /// `search_path` puts first) can never stand in for Coffer's tables.
    public var schema: String

    /// Why these settings cannot be used (a `PGSSLMODE` libpq would refuse), reported by the
    /// first call that connects.
    var refusal: String?

    public init(
        host: String = "localhost", port: Int = 5432, user: String, password: String? = nil, database: String? = nil,
        tls: TLSMode = .prefer, rootCertificatePath: String? = nil, connectTimeout: Double = 5, timeout: Double? = nil,
        maximumConnections: Int = 10, idleTimeout: Double = 30, schema: String = "public"
    ) {
        self.schema = schema
        self.timeout = timeout
        self.maximumConnections = max(1, maximumConnections)
        self.idleTimeout = idleTimeout
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.tls = tls
        self.rootCertificatePath = rootCertificatePath
        self.connectTimeout = connectTimeout
    }

    /// The path of the Unix socket, when ``host`` names a directory.
    public var unixSocketPath: String? {
        host.hasPrefix("/") ? "\(host)/.s.PGSQL.\(port)" : nil
    }

    /// `postgres://user@host:port/database` (no password), and the TLS mode.
    public var description: String {
        let place = host.hasPrefix("/") ? "\(unixSocketPath!)" : "\(host.contains(":") ? "[\(host)]" : host):\(port)"
        return "postgres://\(user)@\(place)/\(database ?? user) (tls: \(tls.rawValue))"
    }

    /// The settings libpq would take from the environment: `PGHOST` (a host or a socket
    /// directory), `PGPORT`, `PGUSER` (else `USER`), `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`,
    /// `PGSSLROOTCERT`, `PGCONNECT_TIMEOUT`. Unset ones take libpq's defaults, except that the
    /// host defaults to `localhost` (not a socket directory whose place varies by system).
    /// Without a password, a store reads it from libpq's password file when it is made
    /// (``passwordFromFile(environment:)``).
    public static func environment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> PostgresConfiguration {
        fromVariables(environment)
    }

    /// ``environment(_:)`` without the password file.
    private static func fromVariables(_ environment: [String: String]) -> PostgresConfiguration {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        var configuration = PostgresConfiguration(
            user: value("PGUSER") ?? value("USER") ?? "postgres")
        if let host = value("PGHOST") { configuration.host = host }
        if let port = value("PGPORT").flatMap(Int.init) { configuration.port = port }
        configuration.password = value("PGPASSWORD")
        configuration.database = value("PGDATABASE")
        if let mode = value("PGSSLMODE") {
            // An unknown mode is refused, as libpq refuses it: a misspelled `verify-full` must
            // not quietly become `prefer`, which checks no certificate.
            if let tls = TLSMode(libpq: mode) {
                configuration.tls = tls
            } else {
                configuration.refusal = PostgresConfiguration.sslmodeRule.replacingOccurrences(of: "sslmode", with: "PGSSLMODE")
            }
        }
        configuration.rootCertificatePath = value("PGSSLROOTCERT")
        if let timeout = value("PGCONNECT_TIMEOUT").flatMap(Double.init), timeout > 0 {
            configuration.connectTimeout = timeout
        }
        return configuration
    }

    /// Parses `postgres://[user[:password]@][host][:port][/database][?sslmode=…&host=/socket/dir&connect_timeout=…]`
    /// (also `statement_timeout=` seconds for ``timeout``, `pool_max_conns=` for
    /// ``maximumConnections``, and `schema=` for ``schema``)
    /// (or `postgresql://`). What the URL leaves out comes from the environment, as with libpq.
    /// - Throws: ``CofferError/Code/invalidArgument`` for another scheme or a malformed URL
    ///   (the message never repeats the URL, which may hold a password).
    public init(url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let lowered = url.lowercased()
        guard lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://") else {
            throw CofferError(.invalidArgument, "a PostgreSQL URL starts with postgres:// or postgresql://")
        }
        guard let components = URLComponents(string: url) else {
            throw CofferError(
                .invalidArgument,
                "the PostgreSQL URL is malformed: a user name or password holding / @ : ? # or % must be "
                    + "percent-encoded (better: leave the password out and use PGPASSWORD or ~/.pgpass)")
        }
        self = .fromVariables(environment)
        if let user = components.user, !user.isEmpty { self.user = user }
        if let password = components.password, !password.isEmpty { self.password = password }
        if let host = components.host, !host.isEmpty { self.host = host }
        if let port = components.port {
            guard (1...65535).contains(port) else {
                throw CofferError(.invalidArgument, "a PostgreSQL port is a number from 1 to 65535")
            }
            self.port = port
        }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        if !path.isEmpty { database = path.removingPercentEncoding ?? path }
        for item in components.queryItems ?? [] {
            guard let value = item.value else { continue }
            switch item.name {
            case "sslmode":
                guard let mode = TLSMode(libpq: value) else { throw CofferError(.invalidArgument, Self.sslmodeRule) }
                tls = mode
                refusal = nil
            case "host": host = value
            case "port": if let port = Int(value) { self.port = port }
            case "user": user = value
            case "password": password = value
            case "dbname": database = value
            case "sslrootcert": rootCertificatePath = value
            case "connect_timeout": if let timeout = Double(value), timeout > 0 { connectTimeout = timeout }
            case "statement_timeout": if let timeout = Double(value), timeout > 0 { self.timeout = timeout }
            case "pool_max_conns": if let count = Int(value), count > 0 { maximumConnections = count }
            case "schema": schema = value
            default: continue
            }
        }
    }

    /// The password for these settings from libpq's password file (stores read it when made
    /// from settings without a password): `PGPASSFILE`, else
    /// `~/.pgpass`. Lines are `host:port:database:user:password`, `*` matches anything, `\:` and
    /// `\\` escape, `#` starts a comment, the first matching line wins; a host that is a socket
    /// directory matches `localhost`. As with libpq, a file that others may read (any group or
    /// other permission) is ignored, as is one that is not a regular file.
    public func passwordFromFile(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        let path: String
        if let file = environment["PGPASSFILE"], !file.isEmpty {
            path = file
        } else if let home = environment["HOME"], !home.isEmpty {
            path = home + "/.pgpass"
        } else {
            return nil
        }
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_mode & 0o077 == 0,
            status.st_size < 1 << 20,
            let text = try? String(contentsOfFile: path, encoding: .utf8)
        else { return nil }
        let wanted = [host.hasPrefix("/") ? "localhost" : host, String(port), database ?? user, user]
        for line in text.split(whereSeparator: \.isNewline) where !line.hasPrefix("#") {
            var fields: [String] = []
            var field = ""
            var escaped = false
            for character in line {
                if escaped {
                    field.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == ":" && fields.count < 4 {
                    fields.append(field)
                    field = ""
                } else {
                    field.append(character)
                }
            }
            fields.append(field)
            guard fields.count == 5 else { continue }
            if zip(fields, wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return fields[4] }
        }
        return nil
    }

    /// What `sslmode` may be (libpq's spellings, exactly).
    static let sslmodeRule = "sslmode must be disable, allow, prefer, require, verify-ca or verify-full (lower case, as libpq spells them)"

    /// The statement and lock deadline in effect: ``timeout``, else 10 s.
    public var effectiveTimeout: Double { timeout.map { max($0, 0.001) } ?? 10 }

    /// A key naming the server, database and schema (never the password): stores are shared per key.
    var identity: String { "\(user)@\(host):\(port)/\(database ?? user)#\(schema)" }

    /// ``schema`` as a quoted SQL identifier (`"public"`): how every statement and each
    /// connection's `search_path` name it.
    package var quotedSchema: String { "\"" + schema.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

    /// Why no connection should be made with these settings (an unknown `PGSSLMODE`, an empty
    /// schema name or one with a NUL), else `nil`.
    var refusalError: CofferError? {
        if let refusal { return CofferError(.invalidArgument, refusal) }
        if schema.isEmpty || schema.utf8.contains(0) {
            return CofferError(.invalidArgument, "the schema of Coffer's tables must be a non-empty name without NUL")
        }
        return nil
    }
}

extension PostgresConfiguration: CustomReflectable {
    /// What `dump` and debuggers show: every field but the password, which shows as set or not.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "host": host, "port": port, "user": user, "password": password == nil ? "(none)" : "(set)",
                "database": database as Any, "tls": tls, "rootCertificatePath": rootCertificatePath as Any,
                "connectTimeout": connectTimeout, "timeout": timeout as Any,
                "maximumConnections": maximumConnections, "idleTimeout": idleTimeout, "schema": schema,
            ], displayStyle: .struct)
    }
}

extension PostgresConfiguration.TLSMode {
    /// libpq's `sslmode` spelling (`allow` counts as `prefer`).
    init?(libpq value: String) {
        if value == "allow" {
            self = .prefer
        } else {
            self.init(rawValue: value)
        }
    }
}
#endif
