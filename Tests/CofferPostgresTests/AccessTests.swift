#if Postgres
import CofferCore
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// What other roles of the database can make Coffer do: a role with only `CREATE` on the
/// database, and settings that would quietly weaken the connection.
@Suite("PostgreSQL: other roles and unsafe settings")
struct AccessTests {
    /// The value bytes Coffer stores for `value` (as `'\x…'::bytea`).
    static func byteaLiteral(_ value: String) throws -> String {
        let bytes = try ValueCodec.encode(value, as: .tagged)
        return "'\\x" + bytes.map { String(format: "%02x", $0) }.joined() + "'::bytea"
    }

    @Test("A schema named after the app's role, made by a role with only CREATE, never stands in for Coffer's tables")
    func searchPathHijack() async throws {
        let cluster = try PostgresTestCluster()  // roles are the cluster's: a cluster of its own
        defer { cluster.stop() }
        try cluster.sql(
            "CREATE ROLE app LOGIN; CREATE ROLE mallory LOGIN; GRANT CREATE ON DATABASE postgres TO mallory; "
                + "GRANT USAGE, CREATE ON SCHEMA public TO app;")
        let url = "postgres://app@127.0.0.1:\(cluster.port)/postgres?sslmode=disable"
        let first = try PostgresConfiguration(url: url)
        // The application's first run makes its tables (in public) and stores its settings.
        try await PostgresKeyValueStrategy(configuration: first, suite: "standard").set("https://api.example", for: "api.endpoint")
        _ = try await PostgresVault.openOrCreate(name: "prod", unlock: .key(testKey), configuration: first)

        // Mallory, with CREATE on the database and nothing else, makes schema "app" (PostgreSQL's
        // default search_path, "$user", public, searches it first for role app) with look-alike
        // tables the app may use, holding her endpoint.
        try cluster.sql(
            """
            SET ROLE mallory;
            CREATE SCHEMA app;
            CREATE TABLE app.coffer_suites (suite text PRIMARY KEY, version bigint NOT NULL);
            CREATE TABLE app.coffer_kv (suite text NOT NULL, key bytea NOT NULL, value bytea, version bigint NOT NULL,
                writer xid8 NOT NULL DEFAULT '0', PRIMARY KEY (suite, key));
            CREATE INDEX coffer_kv_writers ON app.coffer_kv (suite, writer);
            CREATE TABLE app.coffer_vaults (name text PRIMARY KEY, vault_id bytea NOT NULL UNIQUE, header bytea NOT NULL,
                version bigint NOT NULL);
            CREATE TABLE app.coffer_vault_rows (vault_id bytea NOT NULL, row_key bytea NOT NULL, record bytea NOT NULL,
                version bigint NOT NULL, PRIMARY KEY (vault_id, row_key));
            INSERT INTO app.coffer_kv VALUES ('standard', 'api.endpoint'::bytea, \(try Self.byteaLiteral("https://evil.example")), 0, '0');
            GRANT USAGE ON SCHEMA app TO app;
            GRANT ALL ON ALL TABLES IN SCHEMA app TO app;
            """)

        // A new instance (new connections: another pool size) reads, writes and opens its vault.
        var later = first
        later.maximumConnections = 3
        let store = PostgresKeyValueStrategy(configuration: later, suite: "standard")
        #expect(try await store.get(String.self, for: "api.endpoint") == "https://api.example")
        try await store.set("s3cr3t-token", for: "api.token")
        let vault = try await PostgresVault.openOrCreate(name: "prod", unlock: .key(testKey), configuration: later)
        try await vault.set("db-password", service: "db", account: "app")

        // Nothing reached Mallory's tables; everything is in public's.
        #expect(try cluster.sql("SELECT count(*) FROM app.coffer_kv").hasPrefix("1"))
        #expect(try cluster.sql("SELECT count(*) FROM app.coffer_vaults").hasPrefix("0"))
        #expect(try cluster.sql("SELECT count(*) FROM app.coffer_vault_rows").hasPrefix("0"))
        #expect(try cluster.sql("SELECT count(*) FROM public.coffer_kv WHERE key = 'api.token'::bytea").hasPrefix("1"))
        #expect(try cluster.sql("SELECT count(*) FROM public.coffer_vaults WHERE name = 'prod'").hasPrefix("1"))
    }

    @Test("schema= puts Coffer's tables in a schema of their own, created when missing")
    func namedSchema() async throws {
        let cluster = try PostgresTestCluster.shared
        let schema = "coffer \(UUID().uuidString.prefix(6))"  // a space: quoted as an identifier
        var configuration = try sharedConfiguration()
        configuration.schema = schema
        let suite = uniqueName("s")
        let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
        try await store.set(42, for: "answer")
        #expect(try await store.get(Int.self, for: "answer") == 42)
        #expect(try cluster.sql("SELECT count(*) FROM \"\(schema)\".coffer_kv").hasPrefix("1"))
        // The default schema's store does not see it.
        let other = PostgresKeyValueStrategy(configuration: try sharedConfiguration(), suite: suite)
        #expect(try await other.get(Int.self, for: "answer") == nil)
        let fromURL = try PostgresConfiguration(url: "postgres://u@h/d?schema=app_settings")
        #expect(fromURL.schema == "app_settings")
        var empty = configuration
        empty.schema = ""
        await #expect(throws: CofferError.self) {
            try await PostgresKeyValueStrategy(configuration: empty, suite: "s").set(1, for: "k")
        }
    }

    @Test("An sslmode libpq would refuse is refused, in the URL and in PGSSLMODE, never taken as prefer")
    func unknownSSLMode() async throws {
        for mode in ["verify_full", "VERIFY-FULL", "required", ""] where !mode.isEmpty {
            #expect(throws: CofferError.self) {
                try PostgresConfiguration(url: "postgres://u@127.0.0.1:1/d?sslmode=\(mode)", environment: [:])
            }
            let configuration = PostgresConfiguration.environment(["PGUSER": "u", "PGHOST": "127.0.0.1", "PGSSLMODE": mode])
            let store = PostgresKeyValueStrategy(configuration: configuration, suite: "s")
            do {
                try await store.set(1, for: "k")
                Issue.record("PGSSLMODE=\(mode) was accepted")
            } catch let error as CofferError {
                #expect(error.code == .invalidArgument, "\(error)")
                #expect(error.message.contains("PGSSLMODE"), "\(error)")
            }
        }
        // The spellings libpq takes still work.
        for mode in ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] {
            #expect(PostgresConfiguration.environment(["PGUSER": "u", "PGSSLMODE": mode]).tls.rawValue != "")
            _ = try PostgresConfiguration(url: "postgres://u@h/d?sslmode=\(mode)", environment: [:])
        }
    }

    @Test("The password file is read as libpq reads it: first match, wildcards, escapes, and ignored when others may read it")
    func passwordFile() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pgpass-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(
            """
            # comment
            other.host:5432:*:app:wrong
            db.internal:5432:app:app:first\\:with\\\\escapes
            *:*:*:app:fallback
            """.utf8
        ).write(to: file)
        chmod(file.path, 0o600)
        let environment = ["PGPASSFILE": file.path]
        func lookup(_ url: String) throws -> String? {
            try PostgresConfiguration(url: url, environment: [:]).passwordFromFile(environment: environment)
        }
        #expect(try lookup("postgres://app@db.internal/app") == "first:with\\escapes")
        #expect(try lookup("postgres://app@elsewhere:6543/x") == "fallback")
        #expect(try lookup("postgres://ops@db.internal/app") == nil)
        // Settings changed after parsing find their own line (a store reads the file when made).
        var changed = try PostgresConfiguration(url: "postgres://app@db.internal/other", environment: [:])
        #expect(changed.passwordFromFile(environment: environment) == "fallback")
        changed.database = "app"
        #expect(changed.passwordFromFile(environment: environment) == "first:with\\escapes")
        let socket = PostgresConfiguration.environment(["PGHOST": "/run/postgresql", "PGUSER": "app"])
        #expect(socket.passwordFromFile(environment: environment) == "fallback")
        // Parsing itself reads no file; an explicit (non-empty) password is kept.
        #expect(try PostgresConfiguration(url: "postgres://app@db.internal/app", environment: environment).password == nil)
        #expect(try PostgresConfiguration(url: "postgres://app:@db.internal/app", environment: [:]).password == nil)
        // A file others may read is ignored, as libpq ignores it.
        chmod(file.path, 0o640)
        #expect(try lookup("postgres://app@db.internal/app") == nil)
    }

    @Test("An empty name or one with a NUL is refused as .invalidArgument, as the file stores refuse it, before any round trip")
    func badNames() async throws {
        let configuration = try sharedConfiguration()
        for suite in ["", "a\u{0}b"] {
            let store = PostgresKeyValueStrategy(configuration: configuration, suite: suite)
            do {
                try await store.set(1, for: "k")
                Issue.record("suite \(suite.debugDescription) was accepted")
            } catch let error as CofferError {
                #expect(error.code == .invalidArgument, "\(error)")
            }
        }
        for name in ["", "prod\u{0}"] {
            await #expect(throws: CofferError.self) {
                _ = try await PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
            }
            do {
                _ = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
            } catch let error as CofferError {
                #expect(error.code == .invalidArgument, "\(error)")
            }
        }
    }

    @Test("A fleet vault's strategy is sealed, so integrations (the configuration provider) treat its values as secret")
    func fleetVaultIsSealed() async throws {
        let vault = try await PostgresVault.create(
            name: uniqueName("sealed"), unlock: .key(testKey), configuration: try sharedConfiguration())
        let strategy: any PersistenceStrategy = PostgresVaultStrategy(vault: vault, service: "app")
        #expect(strategy.holdsSecrets)
        #expect(!(PostgresKeyValueStrategy(configuration: try sharedConfiguration()) as any PersistenceStrategy).holdsSecrets)
    }

    @Test("A malformed postgres:// URL is called malformed (not 'must start with postgres://'), and the message holds none of it")
    func malformedURL() throws {
        do {
            // A password with an unescaped `/`: once split there, with its tail shown as the database.
            _ = try PostgresConfiguration(url: "postgres://ops:pa55/never@127.0.0.1:1/app", environment: [:])
            Issue.record("a malformed URL was accepted")
        } catch let error as CofferError {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains("malformed"), "\(error)")
            #expect(!error.message.contains("pa55"), "\(error)")
        }
        #expect(throws: CofferError.self) {
            try PostgresConfiguration(url: "postgres://ops@db.internal:99999999999/app", environment: [:])
        }
        do {
            _ = try PostgresConfiguration(url: "mysql://db.internal/app", environment: [:])
            Issue.record("another scheme was accepted")
        } catch let error as CofferError {
            #expect(error.message.contains("starts with postgres://"), "\(error)")
        }
    }
}
#endif
