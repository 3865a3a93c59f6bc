#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Logging
import Testing

/// A fleet vault's followers and readers against what a restore, a forged row and a renamed vault
/// do to the database (docs/FORMAT.md §4, SECURITY.md "The fleet store").
@Suite("Following a PostgreSQL vault")
struct VaultFollowingTests {
    /// The changes an observer heard: `nil` is "reread everything".
    final class Heard: Sendable {
        let events = Protected<[Set<VaultItemID>?]>([])
        var count: Int { events.withLock { $0.count } }
        var rereads: Int { events.withLock { $0.filter { $0 == nil }.count } }
        func heard(_ account: String) -> Bool {
            events.withLock { $0.contains { $0?.contains(VaultItemID(service: "svc", account: account)) == true } }
        }
    }

    static func observe(_ vault: PostgresVault) -> (Heard, StoreObservation) {
        let heard = Heard()
        let observation = vault.observeChanges { change in heard.events.withLock { $0.append(change) } }
        return (heard, observation)
    }

    @Test("A forged row with version 2⁶² (no key needed) is skipped and said once; the follower goes on following")
    func forgedRow() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("vforged")
        let (logger, warnings) = FollowingTests.capturingLogger()
        let writer = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let follower = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration, logger: logger)
        let (heard, observation) = Self.observe(follower)
        defer { observation.cancel() }
        #expect(await FollowingTests.until { heard.rereads >= 1 })  // the feed's first catch-up
        try await writer.set("1", service: "svc", account: "a")
        #expect(await FollowingTests.until { heard.heard("a") })

        let id = try VaultSecurityTests.vaultID(name, cluster)
        try cluster.sql(
            "INSERT INTO coffer_vault_rows (vault_id, row_key, record, version) "
                + "VALUES ('\\x\(id)', '\\xdeadbeef', '\\x00', 4611686018427387904)")
        try await writer.set("2", service: "svc", account: "b")
        #expect(await FollowingTests.until { heard.heard("b") }, "a forged row stopped the follower")
        try await writer.set("3", service: "svc", account: "c")
        #expect(await FollowingTests.until { heard.heard("c") })
        #expect(try await follower.string(service: "svc", account: "c") == "3")
        // `verify` names it; `removeDamagedRows` takes it away and nothing else.
        let report = try await follower.verify()
        #expect(report.damaged.count == 1)
        #expect(report.intact == 3)
        #expect(try await follower.removeDamagedRows(report.damaged) == 1)
        #expect(try await follower.verify().damaged.isEmpty)
        #expect(try await follower.items().map(\.account) == ["a", "b", "c"])
        // The vault's counter put back by SQL: its authentic rows above it are never "damaged".
        try cluster.sql("UPDATE coffer_vaults SET version = 1 WHERE vault_id = '\\x\(id)'")
        let behind = try await follower.verify()
        #expect(behind.damaged.isEmpty)
        #expect(behind.aheadOfCounter == 2)
        try cluster.sql("UPDATE coffer_vaults SET version = 3 WHERE vault_id = '\\x\(id)'")
        try await writer.set("4", service: "svc", account: "d")
        #expect(await FollowingTests.until { heard.heard("d") })
        let said = warnings.withLock { $0 }
        #expect(said.filter { $0.contains("beyond the vault's counter") }.count == 1, "\(said)")
        #expect(said.allSatisfy { $0.contains(name) }, "\(said)")
    }

    @Test("A server restored from a backup: every instance serves the restored values, says so once, and follows on")
    func restoredServer() async throws {
        let cluster = try PostgresTestCluster()
        defer { cluster.stop() }
        var configuration = try PostgresConfiguration(url: cluster.url)
        configuration.timeout = 2
        let (logger, warnings) = FollowingTests.capturingLogger()
        let writer = try await PostgresVault.create(
            name: "restored", unlock: .key(testKey), kdf: .interactive, configuration: configuration, logger: logger)
        let follower = try await PostgresVault.open(name: "restored", unlock: .key(testKey), configuration: configuration)
        let (heard, observation) = Self.observe(follower)
        defer { observation.cancel() }
        for n in 1...5 { try await writer.set("v\(n)", service: "svc", account: "a") }
        #expect(try await writer.string(service: "svc", account: "a") == "v5")

        try cluster.stopServer()
        try cluster.backUp(as: "backup")
        try cluster.start()
        for n in 6...30 { try await FollowingTests.retrying { try await writer.set("v\(n)", service: "svc", account: "a") } }
        #expect(try await writer.string(service: "svc", account: "a") == "v30")
        #expect(try await follower.string(service: "svc", account: "a") == "v30")

        try cluster.stopServer()
        try cluster.restore("backup")
        try cluster.start()
        let rereadsBefore = heard.rereads
        // The instance that wrote v30 reads v5 without an error: the server's own transaction
        // counter went back, which no role with write access to the tables can do.
        var restored: String?
        try await FollowingTests.retrying { restored = try await writer.string(service: "svc", account: "a") }
        #expect(restored == "v5")
        #expect(try await follower.string(service: "svc", account: "a") == "v5")
        #expect(await FollowingTests.until { heard.rereads > rereadsBefore }, "the follower was not told to reread")
        // New writes after the restore are read and followed, by the writer itself too.
        try await writer.set("v100", service: "svc", account: "a")
        #expect(try await writer.string(service: "svc", account: "a") == "v100")
        #expect(try await follower.string(service: "svc", account: "a") == "v100")
        try await writer.set("b", service: "svc", account: "b")
        #expect(await FollowingTests.until { heard.heard("b") }, "the follower stopped following after the restore")
        let said = warnings.withLock { $0 }
        #expect(said.filter { $0.contains("restored") }.count == 1, "\(said)")
    }

    @Test("A row rolled back by SQL (the server's counter not back): .rolledBack until the operator accepts it")
    func rolledBackBySQL() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let name = uniqueName("vrollback")
        let (logger, warnings) = FollowingTests.capturingLogger()
        let vault = try await PostgresVault.create(
            name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration, logger: logger)
        try await vault.set("old password", service: "db", account: "app")
        let id = try VaultSecurityTests.vaultID(name, cluster)
        try cluster.sql("CREATE TABLE saved_\(id) AS SELECT * FROM coffer_vault_rows WHERE vault_id = '\\x\(id)'")
        try await vault.set("new password", service: "db", account: "app")
        #expect(try await vault.string(service: "db", account: "app") == "new password")
        // The older row and the vault's counter put back together, as a restore would, but by SQL.
        try cluster.sql(
            "UPDATE coffer_vault_rows AS t SET record = s.record, version = s.version FROM saved_\(id) AS s "
                + "WHERE t.vault_id = s.vault_id AND t.row_key = s.row_key; "
                + "UPDATE coffer_vaults SET version = 1 WHERE vault_id = '\\x\(id)'; DROP TABLE saved_\(id)")
        do {
            let value = try await vault.string(service: "db", account: "app")
            Issue.record("a rolled-back secret was served: \(value.map { "\($0.count) bytes" } ?? "nil")")
        } catch let error as CofferError {
            #expect(error.code == .rolledBack, "\(error)")
            #expect(error.message.contains("acceptRollback"), "\(error.message)")
            #expect(!error.message.contains("password"))
        }
        // An update (whose transform would see the older secret) is refused too: checked inside
        // its own transaction, which must not read as a restore.
        do {
            try await vault.update(service: "db", account: "app") { _ in Data("from the old one".utf8) }
            Issue.record("update ran on a rolled-back secret")
        } catch let error as CofferError {
            #expect(error.code == .rolledBack, "\(error)")
        }
        #expect(!warnings.withLock { $0 }.contains { $0.contains("restored") }, "a SQL rollback was taken for a restore")
        // The operator's acceptance ends the refusals.
        vault.acceptRollback()
        #expect(try await vault.string(service: "db", account: "app") == "old password")
        try await vault.set("newest password", service: "db", account: "app")
        #expect(try await vault.string(service: "db", account: "app") == "newest password")
    }

    @Test("Two vaults of one key with their names swapped in coffer_vaults: neither serves the other's secrets")
    func swappedNames() async throws {
        let cluster = try PostgresTestCluster.shared
        let configuration = try sharedConfiguration()
        let (prod, staging) = (uniqueName("prod"), uniqueName("staging"))
        let p = try await PostgresVault.create(name: prod, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let s = try await PostgresVault.create(name: staging, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await p.set("prod password", service: "db", account: "app")
        try await s.set("staging password", service: "db", account: "app")
        try cluster.sql(
            "UPDATE coffer_vaults SET name = 'swap-tmp' WHERE name = '\(prod)'; "
                + "UPDATE coffer_vaults SET name = '\(prod)' WHERE name = '\(staging)'; "
                + "UPDATE coffer_vaults SET name = '\(staging)' WHERE name = 'swap-tmp'")
        for (name, other) in [(prod, "staging"), (staging, "prod")] {
            let vault = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
            do {
                let value = try await vault.string(service: "db", account: "app")
                Issue.record("\(name) served a secret: \(value == "\(other) password" ? "the other vault's" : "some")")
            } catch let error as CofferError {
                #expect(error.code == .corrupted, "\(error)")
            }
            await #expect(throws: CofferError.self) { try await vault.items() }
        }
    }

    @Test("lock() wipes the vault's keys: every later call is .locked, nothing is read or written")
    func lockedVault() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vlock")
        let vault = try await PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        try await vault.set("secret", service: "svc", account: "a")
        #expect(!vault.isLocked)
        vault.lock()
        #expect(vault.isLocked)
        for call in [
            { _ = try await vault.string(service: "svc", account: "a") },
            { try await vault.set("other", service: "svc", account: "a") },
            { _ = try await vault.items() },
        ] as [@Sendable () async throws -> Void] {
            do {
                try await call()
                Issue.record("a locked vault answered")
            } catch let error as CofferError {
                #expect(error.code == .locked, "\(error)")
            }
        }
        let reopened = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        #expect(try await reopened.string(service: "svc", account: "a") == "secret")
    }
}
#endif
