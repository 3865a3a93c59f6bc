#if Postgres
import CofferCore
import CofferCrypto
import Foundation
import Logging
import PostgresNIO

/// Coffer's table names, each qualified with the configured schema (a quoted identifier), so no
/// statement depends on `search_path`.
struct Tables: Sendable {
    /// The schema, quoted: `"public"`.
    let schema: String
    let suites: String
    let kv: String
    let vaults: String
    let vaultRows: String

    init(_ configuration: PostgresConfiguration) {
        schema = configuration.quotedSchema
        suites = schema + ".coffer_suites"
        kv = schema + ".coffer_kv"
        vaults = schema + ".coffer_vaults"
        vaultRows = schema + ".coffer_vault_rows"
    }
}

/// The tables (docs/FORMAT.md, "PostgreSQL tables"), created when missing.
enum Schema {
    /// The statements that create the tables (or bring older ones up to date) in `t`'s schema.
    static func statements(_ t: Tables) -> [String] {
        [
            "CREATE TABLE IF NOT EXISTS \(t.suites) (suite text PRIMARY KEY, version bigint NOT NULL)",
            "CREATE TABLE IF NOT EXISTS \(t.kv) (suite text NOT NULL, key bytea NOT NULL, value bytea, "
                + "version bigint NOT NULL, writer xid8 NOT NULL DEFAULT '0', PRIMARY KEY (suite, key))",
            "CREATE INDEX IF NOT EXISTS coffer_kv_changes ON \(t.kv) (suite, version)",
            // Tables made before key-value rows carried their writing transaction (docs/FORMAT.md
            // §4, "Migration"): the column (existing rows get 0, "older than any change"), its index.
            "ALTER TABLE \(t.kv) ADD COLUMN IF NOT EXISTS writer xid8 NOT NULL DEFAULT '0'",
            "CREATE INDEX IF NOT EXISTS coffer_kv_writers ON \(t.kv) (suite, writer)",
            "CREATE TABLE IF NOT EXISTS \(t.vaults) (name text PRIMARY KEY, vault_id bytea NOT NULL UNIQUE, "
                + "header bytea NOT NULL, version bigint NOT NULL)",
            "CREATE TABLE IF NOT EXISTS \(t.vaultRows) (vault_id bytea NOT NULL, row_key bytea NOT NULL, "
                + "record bytea NOT NULL, version bigint NOT NULL, PRIMARY KEY (vault_id, row_key))",
            "CREATE INDEX IF NOT EXISTS coffer_vault_rows_changes ON \(t.vaultRows) (vault_id, version)",
        ]
    }

    /// The servers (and databases) whose tables this process has already made sure of.
    private static let ensured = Locked<Set<String>>([])

    /// Creates the tables when missing, once per server and database per process. Concurrent
    /// first users (several instances starting together) are serialised by an advisory lock.
    static func ensure(on connection: PostgresConnection, configuration: PostgresConfiguration, logger: Logger)
        async throws
    {
        let identity = configuration.identity
        if ensured.withLock({ $0.contains(identity) }) { return }
        func run(_ sql: String) async throws -> [PostgresRow] {
            try await PostgresLink.run(sql, on: connection, logger: logger)
        }
        let t = Tables(configuration)
        var names = PostgresBindings()
        names.append("\(t.schema).coffer_vault_rows")
        names.append("\(t.schema).coffer_kv_writers")
        let present = try await PostgresLink.run(
            "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL", names, on: connection, logger: logger)
        if try present.first?.decode(Bool.self) != true {
            _ = try await run("BEGIN")
            do {
                // 0x436f66666572 is "Coffer".
                _ = try await run("SELECT pg_advisory_xact_lock(74187595630962)")
                // Only when missing: PostgreSQL checks the right to create schemas before it
                // honours IF NOT EXISTS, and a role may own tables in a schema it did not make.
                var schema = PostgresBindings()
                schema.append(t.schema)
                let exists = try await PostgresLink.run(
                    "SELECT to_regnamespace($1) IS NOT NULL", schema, on: connection, logger: logger)
                if try exists.first?.decode(Bool.self) != true { _ = try await run("CREATE SCHEMA \(t.schema)") }
                for statement in statements(t) { _ = try await run(statement) }
                _ = try await run("COMMIT")
            } catch {
                if !connection.isClosed { _ = try? await run("ROLLBACK") }
                if let error = error as? PSQLError, error.serverInfo?[.sqlState] == "42501" {
                    // A role that may use the tables but not change them (they belong to another).
                    throw CofferError(
                        .io,
                        "the Coffer tables at \(configuration) are missing or from an older version, and this role may "
                            + "not create or change them (SQLSTATE 42501): connect once as their owner to create or "
                            + "migrate them (docs/FORMAT.md, section 4)")
                }
                throw error
            }
        }
        ensured.withLock { _ = $0.insert(identity) }
    }

    /// The LISTEN/NOTIFY channel of a suite or vault: a prefix and 32 hex digits of a BLAKE2b
    /// hash of its name (a channel is an identifier of at most 63 bytes; a name may be anything).
    static func channel(_ prefix: String, _ name: [UInt8]) -> String {
        let digest = (try? BLAKE2b.hash(name, outputLength: 16)) ?? Array(name.prefix(16))
        return prefix + digest.map { String(format: "%02x", $0) }.joined()
    }
}

extension PostgresRow {
    /// The cells of the row, by column position.
    var cells: PostgresRandomAccessRow { makeRandomAccess() }
}

extension Data {
    /// The bytes as a buffer to bind.
    var buffer: ByteBuffer { ByteBuffer(bytes: self) }
}

extension ByteBuffer {
    var bytes: [UInt8] { getBytes(at: readerIndex, length: readableBytes) ?? [] }
    var data: Data { Data(bytes) }
}
#endif
