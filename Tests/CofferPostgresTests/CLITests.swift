#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import CofferVault
import Foundation
import Testing

/// `coffer --store postgres://…`: an operator rotates a secret for the whole fleet.
@Suite("coffer --store postgres://")
struct PostgresCLITests {
    /// Runs the built `coffer` with `input` on standard input; returns status, output, errors.
    static func coffer(_ arguments: [String], input: Data = Data()) throws -> (Int32, String, String) {
        let run = try HelperChild.run(
            arguments, executable: builtProduct(named: "coffer"), input: input, standardError: .capture)
        return (run.status, run.output, run.errors)
    }

    @Test("set, get, list and rm against a vault in PostgreSQL; a running instance sees the rotation")
    func rotate() throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-key-\(UUID().uuidString)")
        try Data(repeating: 0x42, count: 32).write(to: keyFile)
        defer { try? FileManager.default.removeItem(at: keyFile) }
        let name = uniqueName("cli")
        let store = ["--store", cluster.url + "&vault=\(name)", "--key-file", keyFile.path]

        // A set before init: the vault is not there, and set does not make one.
        var (status, out, err) = try Self.coffer(store + ["set", "db.internal", "app"], input: Data("first".utf8))
        #expect(status == 3, "\(err)")
        #expect(err.contains("init"), "\(err)")
        (status, out, err) = try Self.coffer(store + ["init"])
        #expect(status == 0, "\(err)")
        #expect(out.contains("created vault \(name)"), "\(out)")
        (status, out, err) = try Self.coffer(store + ["init"])
        #expect(status != 0, "a second init replaced the vault: \(out)")
        (status, out, err) = try Self.coffer(store + ["set", "db.internal", "app"], input: Data("first".utf8))
        #expect(status == 0, "\(err)")
        #expect(out.contains("stored"))
        let vault = try PostgresVault.open(name: name, unlock: .keyFile(keyFile), configuration: configuration)
        let property = Stored(wrappedValue: "", backed: .vault(vault, service: "db.internal", account: "app"))
        #expect(eventually { property.wrappedValue == "first" })  // loaded in the background

        (status, out, err) = try Self.coffer(store + ["set", "db.internal", "app"], input: Data("rotated".utf8))
        #expect(status == 0, "\(err)")
        #expect(eventually { property.wrappedValue == "rotated" })
        (status, out, err) = try Self.coffer(store + ["get", "db.internal", "app"])
        #expect(status == 0 && out == "rotated", "\(err)")
        (status, out, err) = try Self.coffer(store + ["list", "--json"])
        #expect(status == 0 && out.contains("\"account\" : \"app\""), "\(out) \(err)")
        (status, out, err) = try Self.coffer(store + ["rm", "db.internal", "app"])
        #expect(status == 0, "\(err)")
        #expect(eventually { property.wrappedValue == "" })
        (status, _, err) = try Self.coffer(store + ["get", "db.internal", "app"])
        #expect(status == 3, "\(err)")
    }

    @Test("An unreachable server: a clear error, and no password in it")
    func unreachable() throws {
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-key-\(UUID().uuidString)")
        try Data(repeating: 0x42, count: 32).write(to: keyFile)
        defer { try? FileManager.default.removeItem(at: keyFile) }
        // Port 1 on loopback: nothing listens there. The password comes from the environment.
        let run = try HelperChild.run(
            ["--store", "postgres://ops@127.0.0.1:1/app?sslmode=disable", "--key-file", keyFile.path, "get", "svc", "acct"],
            executable: builtProduct(named: "coffer"), environment: ["PGPASSWORD": "pa55-never-shown"],
            standardError: .capture)
        #expect(run.status != 0)
        #expect(run.output.isEmpty)
        #expect(run.errors.contains("PostgreSQL server at postgres://ops@127.0.0.1:1/app"), "\(run.errors)")
        #expect(run.errors.contains("unavailable"), "\(run.errors)")
        #expect(!run.errors.contains("pa55-never-shown"))
    }

    @Test("A password inside --store is refused (every local user sees arguments in ps): exit 2, and where to put it")
    func passwordInArguments() throws {
        for url in [
            "postgres://ops:pa55-never-shown@127.0.0.1:1/app",
            "postgres://ops:pa55/never-shown@127.0.0.1:1/app",  // an unescaped `/`: malformed, still refused
            "postgres://ops@127.0.0.1:1/app?password=pa55-never-shown",
        ] {
            let (status, out, err) = try Self.coffer(["--store", url, "get", "svc", "acct"])
            #expect(status == 2, "\(err)")
            #expect(out.isEmpty)
            #expect(err.contains("PGPASSWORD") && err.contains("pgpass"), "\(err)")
            #expect(!err.contains("pa55"), "\(err)")
        }
    }

    @Test("passwd, info and compact with --store are refused (exit 2), never run on the local file instead")
    func fileOnlyCommands() throws {
        let cluster = try PostgresTestCluster.shared
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-home-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let vaultFile = home.appendingPathComponent("local.coffer").path
        let keyFile = home.appendingPathComponent("key").path
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        // A local vault exists, so a command that ignored --store would succeed on it.
        var (status, _, err) = try Self.coffer(["--vault", vaultFile, "--key-file", keyFile, "init"])
        #expect(status == 0, "\(err)")
        let before = try Data(contentsOf: URL(fileURLWithPath: vaultFile))
        for command in [["passwd"], ["info"], ["compact"]] {
            (status, _, err) = try Self.coffer(
                ["--vault", vaultFile, "--key-file", keyFile, "--store", cluster.url + "&vault=x"] + command)
            #expect(status == 2, "\(command): \(err)")
            #expect(err.contains("file vault only"), "\(command): \(err)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: vaultFile)) == before)
    }

    @Test("verify --store names a forged row (exit 5, as list is); verify --repair --yes removes exactly it")
    func verifyAndRepair() throws {
        let cluster = try PostgresTestCluster.shared
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-key-\(UUID().uuidString)")
        try Data(repeating: 0x43, count: 32).write(to: keyFile)
        defer { try? FileManager.default.removeItem(at: keyFile) }
        let name = uniqueName("repair")
        let store = ["--store", cluster.url + "&vault=\(name)", "--key-file", keyFile.path]
        var (status, out, err) = try Self.coffer(store + ["init"])
        #expect(status == 0, "\(err)")
        for account in ["a", "b"] {
            (status, _, err) = try Self.coffer(store + ["set", "svc", account], input: Data("secret-\(account)".utf8))
            #expect(status == 0, "\(err)")
        }
        (status, out, err) = try Self.coffer(store + ["verify"])
        #expect(status == 0, "\(err)")
        #expect(out.contains("2 rows authenticated"), "\(out)")

        // A row inserted by a role with INSERT: every listing fails until it is gone.
        let id = try VaultSecurityTests.vaultID(name, cluster)
        try cluster.sql(
            "INSERT INTO coffer_vault_rows (vault_id, row_key, record, version) VALUES ('\\x\(id)', '\\xbad0', '\\x00', 99)")
        (status, _, err) = try Self.coffer(store + ["list"])
        #expect(status == 5, "\(err)")
        (status, out, err) = try Self.coffer(store + ["verify"])
        #expect(status == 5, "\(err)")
        #expect(err.contains("damaged: row bad0"), "\(err)")
        #expect(err.contains("beyond the vault's counter"), "\(err)")
        #expect(err.contains("--repair"), "\(err)")
        (status, out, err) = try Self.coffer(store + ["verify", "--repair", "--yes"])
        #expect(status == 0, "\(err)")
        #expect(out.contains("removed 1 damaged row"), "\(out)")
        (status, out, err) = try Self.coffer(store + ["list"])
        #expect(status == 0, "\(err)")
        #expect(out.contains("svc") && !out.contains("secret-"), "\(out)")
        (status, out, err) = try Self.coffer(store + ["get", "svc", "b"])
        #expect(status == 0 && out == "secret-b", "\(status) \(err)")
        // --repair means nothing for a file vault.
        (status, _, err) = try Self.coffer(["--vault", "/nonexistent/v.coffer", "verify", "--repair"])
        #expect(status == 2, "\(err)")
    }
}
#endif
