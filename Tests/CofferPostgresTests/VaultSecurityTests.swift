#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// What a database administrator sees and can do to a vault's rows.
@Suite("PostgreSQL vault security")
struct VaultSecurityTests {
    /// The hex of a vault's id, for SQL aimed at its rows.
    static func vaultID(_ name: String, _ cluster: PostgresTestCluster) throws -> String {
        try cluster.sql("SELECT encode(vault_id, 'hex') FROM coffer_vaults WHERE name = '\(name)'")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func expectCorrupted(_ body: () throws -> Any?) {
        do {
            let value = try body()
            Issue.record("a tampered row was returned as a value: \(String(describing: value))")
        } catch let error as CofferError {
            #expect(error.code == .corrupted, "\(error)")
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test("A flipped byte, a changed version, a row copied onto another item, a row from another vault: .corrupted")
    func tamperedRows() throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("tamper")
        let vault = try PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
        try vault.set("first secret", service: "svc", account: "a")  // version 1
        try vault.set("second secret", service: "svc", account: "b")  // version 2
        let id = try Self.vaultID(name, cluster)
        func reopened() throws -> PostgresVault {
            try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        }

        // A flipped byte in the ciphertext of b.
        try cluster.sql(
            "UPDATE coffer_vault_rows SET record = set_byte(record, 40, get_byte(record, 40) # 1) "
                + "WHERE vault_id = '\\x\(id)' AND version = 2")
        Self.expectCorrupted { try reopened().string(service: "svc", account: "b") }
        Self.expectCorrupted { try reopened().items() }
        #expect(try reopened().string(service: "svc", account: "a") == "first secret")
        try reopened().set("second again", service: "svc", account: "b")  // version 3, sealed anew
        #expect(try reopened().string(service: "svc", account: "b") == "second again")

        // The version alone changed.
        try cluster.sql("UPDATE coffer_vault_rows SET version = version + 10 WHERE vault_id = '\\x\(id)' AND version = 1")
        Self.expectCorrupted { try reopened().string(service: "svc", account: "a") }
        try cluster.sql("UPDATE coffer_vault_rows SET version = version - 10 WHERE vault_id = '\\x\(id)' AND version = 11")
        #expect(try reopened().string(service: "svc", account: "a") == "first secret")

        // a's row (record and version) copied onto b's row key.
        try cluster.sql(
            "UPDATE coffer_vault_rows AS t SET record = s.record, version = s.version FROM coffer_vault_rows AS s "
                + "WHERE t.vault_id = '\\x\(id)' AND s.vault_id = t.vault_id AND s.version = 1 AND t.version = 3")
        Self.expectCorrupted { try reopened().string(service: "svc", account: "b") }
        #expect(try reopened().string(service: "svc", account: "a") == "first secret")

        // The same item of another vault (another master key and vault id, even with the same unlock key).
        for otherKey in [testKey, try SecureBytes(copying: [UInt8](repeating: 7, count: 32))] {
            let otherName = uniqueName("other")
            let other = try PostgresVault.create(name: otherName, unlock: .key(otherKey), configuration: configuration)
            try other.set("the other vault's secret", service: "svc", account: "c")
            let otherID = try Self.vaultID(otherName, cluster)
            let victimName = uniqueName("victim")
            let victim = try PostgresVault.create(name: victimName, unlock: .key(testKey), configuration: configuration)
            try victim.set("the victim's secret", service: "svc", account: "c")
            let victimID = try Self.vaultID(victimName, cluster)
            // The other vault's row put in place of the victim's row for the same item, whole.
            try cluster.sql(
                "UPDATE coffer_vault_rows AS t SET record = s.record, version = s.version FROM coffer_vault_rows AS s "
                    + "WHERE t.vault_id = '\\x\(victimID)' AND s.vault_id = '\\x\(otherID)'")
            Self.expectCorrupted {
                try PostgresVault.open(name: victimName, unlock: .key(testKey), configuration: configuration)
                    .string(service: "svc", account: "c")
            }
            // And the row inserted whole (its own row key) into the victim vault.
            try cluster.sql(
                "INSERT INTO coffer_vault_rows SELECT '\\x\(victimID)', row_key, record, version FROM coffer_vault_rows "
                    + "WHERE vault_id = '\\x\(otherID)'")
            Self.expectCorrupted {
                try PostgresVault.open(name: victimName, unlock: .key(testKey), configuration: configuration).items()
            }
        }
    }

    @Test("A row rolled back to an older sealed version: an instance that saw the newer one reports it")
    func rollback() throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("rollback")
        let vault = try PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
        try vault.set("old password", service: "db", account: "app")
        let id = try Self.vaultID(name, cluster)
        try cluster.sql("CREATE TABLE saved_\(id) AS SELECT * FROM coffer_vault_rows WHERE vault_id = '\\x\(id)'")
        try vault.set("new password", service: "db", account: "app")
        #expect(try vault.string(service: "db", account: "app") == "new password")
        try cluster.sql(
            "UPDATE coffer_vault_rows AS t SET record = s.record, version = s.version FROM saved_\(id) AS s "
                + "WHERE t.vault_id = s.vault_id AND t.row_key = s.row_key")
        // This instance has read the newer version: the older one is refused (the server's own
        // transaction counter did not go back, so this is no restore).
        do {
            _ = try vault.string(service: "db", account: "app")
            Issue.record("a rolled-back row was returned")
        } catch let error as CofferError {
            #expect(error.code == .rolledBack, "\(error)")
        }
        // A fresh instance cannot tell (SECURITY.md): it reads the older, authentic secret.
        let fresh = try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        #expect(try fresh.string(service: "db", account: "app") == "old password")
        // A row deleted outright is reported by the instance that had read it.
        try cluster.sql("DELETE FROM coffer_vault_rows WHERE vault_id = '\\x\(id)'")
        Self.expectCorrupted { try fresh.string(service: "db", account: "app") }
        try cluster.sql("DROP TABLE saved_\(id)")
    }

    @Test("After a rollback by SQL, writes are refused as .rolledBack (nothing written) until acceptRollback(): never acknowledged, then refused on reading back")
    func writeAfterRollback() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("wrollback")
        let vault = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let id = try Self.vaultID(name, cluster)
        func stored() throws -> String {
            try cluster.sql(
                "SELECT v.version || '/' || r.version FROM coffer_vaults AS v JOIN coffer_vault_rows AS r "
                    + "ON r.vault_id = v.vault_id WHERE v.vault_id = '\\x\(id)'"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func expectRolledBack(_ what: String, _ body: () async throws -> Void) async {
            do {
                try await body()
                Issue.record("\(what) succeeded on a rolled-back vault")
            } catch let error as CofferError {
                #expect(error.code == .rolledBack, "\(what): \(error)")
                #expect(error.message.contains("acceptRollback"), "\(what): \(error.message)")
                #expect(!error.message.contains("a6") && !error.message.contains("a7"), "\(what): \(error.message)")
            } catch {
                Issue.record("\(what): \(error)")
            }
        }
        try await vault.set("a1", service: "s", account: "x")
        try await vault.set("a2", service: "s", account: "x")
        try cluster.sql("CREATE TABLE saved_\(id) AS SELECT * FROM coffer_vault_rows WHERE vault_id = '\\x\(id)'")
        for n in 3...5 { try await vault.set("a\(n)", service: "s", account: "x") }
        #expect(try await vault.string(service: "s", account: "x") == "a5")  // this instance has read version 5
        // The row and the vault's counter put back by SQL (the server's own counter not): the
        // next write would get version 3, below the 5 this instance read.
        try cluster.sql(
            "UPDATE coffer_vault_rows AS t SET record = s.record, version = s.version FROM saved_\(id) AS s "
                + "WHERE t.vault_id = s.vault_id AND t.row_key = s.row_key; "
                + "UPDATE coffer_vaults SET version = 2 WHERE vault_id = '\\x\(id)'; DROP TABLE saved_\(id)")
        #expect(try stored() == "2/2")
        // The write is refused (it was acknowledged, and its read-back then refused), and
        // nothing is written; the read still says why.
        await expectRolledBack("set") { try await vault.set("a6", service: "s", account: "x") }
        await expectRolledBack("apply") {
            try await vault.apply([.set(service: "s", account: "x", secret: Array("a6".utf8), label: nil, comment: nil)])
        }
        await expectRolledBack("remove") { try await vault.remove(service: "s", account: "x") }
        await expectRolledBack("get") { _ = try await vault.string(service: "s", account: "x") }
        #expect(try stored() == "2/2", "a refused write changed the vault")

        // The operator accepts it: the older row is served, and a write supersedes it and reads back.
        vault.acceptRollback()
        #expect(try await vault.string(service: "s", account: "x") == "a2")
        try await vault.set("a6", service: "s", account: "x")
        #expect(try await vault.string(service: "s", account: "x") == "a6")
        #expect(try stored() == "3/3")

        // The counter alone put back (the row intact, as this instance read it): a write would
        // get a version not above the one read; it takes one above it (raising the counter), so
        // it reads back here and in any instance that read the row.
        let other = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        #expect(try await other.string(service: "s", account: "x") == "a6")
        try cluster.sql("UPDATE coffer_vaults SET version = 1 WHERE vault_id = '\\x\(id)'")
        try await vault.set("a7", service: "s", account: "x")
        #expect(try await vault.string(service: "s", account: "x") == "a7")
        #expect(try await other.string(service: "s", account: "x") == "a7")
        #expect(try stored() == "4/4")
        try await vault.update(service: "s", account: "x") { _ in Data("a8".utf8) }
        #expect(try await other.string(service: "s", account: "x") == "a8")
        #expect(try stored() == "5/5")
    }

    @Test("pg_dump shows no secret, service, account, label or comment")
    func dumpShowsNoPlaintext() throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("dump")
        let vault = try PostgresVault.create(name: name, unlock: .passphrase("a passphrase"), kdf: .minimum,
            configuration: configuration)
        let markers = [
            "SecretMarker-7d1f", "ServiceMarker-93ab", "AccountMarker-5c2e", "LabelMarker-0f6d", "CommentMarker-e4a9",
        ]
        try vault.set(
            markers[0], service: markers[1], account: markers[2], label: markers[3], comment: markers[4])
        try vault.update(service: markers[1], account: markers[2] + "-counter") { _ in Data(markers[0].utf8) }
        let strategy = vault.strategy(service: markers[1])
        try strategy.save(Data(markers[0].utf8), for: markers[2] + "-stored")
        let dump = try cluster.client("pg_dump", ["-d", "postgres"])
        #expect(dump.contains("coffer_vault_rows"))
        for marker in markers + ["a passphrase"] {
            #expect(!dump.contains(marker), "pg_dump shows \(marker)")
            let hex = Data(marker.utf8).map { String(format: "%02x", $0) }.joined()
            #expect(!dump.contains(hex), "pg_dump shows \(marker) in hex")
        }
        // The items are there, sealed.
        #expect(try vault.string(service: markers[1], account: markers[2]) == markers[0])
    }
}
#endif
