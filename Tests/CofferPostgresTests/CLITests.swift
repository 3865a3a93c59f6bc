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

        var (status, out, err) = try Self.coffer(store + ["set", "db.internal", "app"], input: Data("first".utf8))
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
        // Port 1 on loopback: nothing listens there.
        let (status, out, err) = try Self.coffer(
            ["--store", "postgres://ops:pa55-never-shown@127.0.0.1:1/app?sslmode=disable", "--key-file", keyFile.path,
             "get", "svc", "acct"])
        #expect(status != 0)
        #expect(out.isEmpty)
        #expect(err.contains("PostgreSQL server at postgres://ops@127.0.0.1:1/app"), "\(err)")
        #expect(err.contains("unavailable"), "\(err)")
        #expect(!err.contains("pa55-never-shown"))
    }
}
#endif
