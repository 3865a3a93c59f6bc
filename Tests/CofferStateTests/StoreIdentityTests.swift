import CofferCore
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Testing

/// Something several strategy instances are views of, as a vault is of its services: each
/// resolve of ``viewBacking(_:key:)`` makes a new view, like the `.vault` backings do.
private final class Shelf: Sendable {
    let values = Protected<[String: Data]>([:])
    let observeStarts = Protected(0)
    let batches = Protected(0)
    let handlers = Protected<[@Sendable (StoreChange) -> Void]>([])
}

/// A view of a ``Shelf``: a new instance each time, one store by its ``id``.
private final class ShelfView: BatchPersistenceStrategy, ChangeObservingPersistenceStrategy {
    let shelf: Shelf
    init(_ shelf: Shelf) { self.shelf = shelf }

    var id: StoreID? { StoreID(shelf) }

    func load(_ key: String) throws -> Data? { shelf.values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) throws { shelf.values.withLock { $0[key] = data } }
    func remove(_ key: String) throws { _ = shelf.values.withLock { $0.removeValue(forKey: key) } }
    func keys() throws -> [String] { shelf.values.withLock { Array($0.keys) } }

    func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        shelf.batches.withLock { $0 += 1 }
        shelf.values.withLock { values in
            for change in changes { values[change.key] = change.data }
        }
    }

    func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        shelf.observeStarts.withLock { $0 += 1 }
        shelf.handlers.withLock { $0.append(handler) }
        return StoreObservation {}
    }
}

/// A backing that makes a new view of `shelf` on every resolve.
private func viewBacking(_ shelf: Shelf, key: String) -> Backing {
    Backing(description: "shelf(key: \(key))", store: StoreID(shelf), key: key) { _ in (ShelfView(shelf), key) }
}

/// A value-type strategy: it has no identity to share.
private struct ValueStrategy: PersistenceStrategy {
    func load(_ key: String) throws -> Data? { nil }
    func save(_ data: Data, for key: String) throws {}
    func remove(_ key: String) throws {}
    func keys() throws -> [String] { [] }
}

@Suite("Store identity")
struct StoreIdentityTests {
    @Test("A strategy's id: its instance for a class, none for a value type, what it names otherwise")
    func defaultIdentities() {
        let store = RecordingStrategy()
        #expect(store.id == StoreID(store))
        #expect(store.id != RecordingStrategy().id)
        #expect(ValueStrategy().id == nil)
        let shelf = Shelf()
        #expect(ShelfView(shelf).id == ShelfView(shelf).id)
        #expect(StoreID(named: ["file", "/a"]) == StoreID(named: ["file", "/a"]))
        #expect(StoreID(named: ["file", "/a"]) != StoreID(named: ["file", "/b"]))
    }

    @Test("Views with one id are one store: a batch over them is one commit, and it is observed once")
    func viewsShareCommitAndObservation() throws {
        let shelf = Shelf()
        let width = Stored(wrappedValue: 0, backed: viewBacking(shelf, key: "width"))
        let height = Stored(wrappedValue: 0, backed: viewBacking(shelf, key: "height"))
        let depth = Stored(wrappedValue: 0, backed: viewBacking(shelf, key: "depth"))
        _ = (width.wrappedValue, height.wrappedValue, depth.wrappedValue)  // each resolves its own view
        #expect(shelf.observeStarts.withLock { $0 } == 1)
        #expect(ChangeRouter.observation(of: ShelfView(shelf)) == (observations: 1, cells: 3))

        batch {
            width.wrappedValue = 1280
            height.wrappedValue = 800
            depth.wrappedValue = 3
        }
        #expect(shelf.batches.withLock { $0 } == 1)
        #expect(try ShelfView(shelf).get(Int.self, for: "height") == 800)

        // The one observation reaches every property of the store.
        try ShelfView(shelf).set(4, for: "depth")
        try ShelfView(shelf).set(1024, for: "width")
        for handler in shelf.handlers.withLock({ $0 }) { handler(StoreChange(keys: ["depth", "width"])) }
        #expect(depth.wrappedValue == 4 && width.wrappedValue == 1024 && height.wrappedValue == 800)
    }

    /// Runs `body` in a context whose default vault lives in an in-memory file system that counts
    /// the vault file's writes and syncs.
    private func withCountingVault(_ name: String, _ body: (CofferContext, Vault, _ commits: () -> Commits) throws -> Void) throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/\(name)")
        let context = CofferContext(directory: URL(fileURLWithPath: "/\(name)"), fileSystem: fs).with(testVaultConfiguration)
        try CofferContext.$current.withValue(context) {
            let vault = try context.defaultVault()
            let path = vault.url.path
            try body(context, vault) {
                defer { fs.resetCalls() }
                return Commits(
                    appends: fs.callCount(.pwrite, where: { $0 == path }), syncs: fs.callCount(.fdatasync, where: { $0 == path }))
            }
        }
    }

    private struct Commits: Equatable {
        var appends: Int
        var syncs: Int
    }

    @Test("A batch over several vault properties of one service is one commit: one append, one fdatasync")
    func vaultBatchOneService() throws {
        try withCountingVault("one-service") { _, vault, commits throws in
            let user = Stored<String?>(backed: .vault(service: "api.example.com", account: "user"))
            let token = Stored<String?>(backed: .vault(service: "api.example.com", account: "token"))
            let refresh = Stored<String?>(backed: .vault(service: "api.example.com", account: "refresh"))
            _ = (user.wrappedValue, token.wrappedValue, refresh.wrappedValue)
            _ = commits()
            user.wrappedValue = "first"  // what one commit costs
            let one = commits()
            #expect(one.syncs >= 1)

            batch {
                user.wrappedValue = "octocat"
                token.wrappedValue = "t0ken"
                refresh.wrappedValue = "r3fresh"
            }
            #expect(commits() == one)
            #expect(user.error == nil && token.error == nil && refresh.error == nil)
            #expect(try vault.string(service: "api.example.com", account: "user") == "octocat")
            #expect(try vault.string(service: "api.example.com", account: "token") == "t0ken")
            #expect(try vault.string(service: "api.example.com", account: "refresh") == "r3fresh")

            // Properties of one service follow it through one observation.
            let strategy = VaultStrategy(vault: vault, service: "api.example.com")
            #expect(ChangeRouter.observation(of: strategy) == (observations: 1, cells: 3))
        }
    }

    @Test("A batch over vault properties of several services of one vault is one commit too")
    func vaultBatchSeveralServices() throws {
        try withCountingVault("services") { _, vault, commits throws in
            let api = Stored<String?>(backed: .vault(service: "api.example.com", account: "me"))
            let database = Stored<String?>(backed: .vault(service: "db.example.com", account: "me"))
            let explicit = Stored<String?>(backed: .vault(vault, service: "mail.example.com", account: "me"))
            _ = (api.wrappedValue, database.wrappedValue, explicit.wrappedValue)
            _ = commits()
            api.wrappedValue = "first"
            let one = commits()

            batch {
                api.wrappedValue = "a"
                database.wrappedValue = "d"
                explicit.wrappedValue = "m"
            }
            #expect(commits() == one)
            #expect(try vault.string(service: "api.example.com", account: "me") == "a")
            #expect(try vault.string(service: "db.example.com", account: "me") == "d")
            #expect(try vault.string(service: "mail.example.com", account: "me") == "m")
            #expect(api.error == nil && database.error == nil && explicit.error == nil)
        }
    }

    @Test("The two spellings of one vault item share one value")
    func vaultSpellingsShareAValue() throws {
        try withTemporaryContext(vault: true) { context in
            let vault = try context.defaultVault()
            let explicit = Stored<String?>(backed: .vault(vault, service: "s", account: "a"))
            let strategy = Stored<String?>(backed: .strategy(VaultStrategy(vault: vault, service: "s"), key: "a"))
            explicit.wrappedValue = "one"
            #expect(strategy.wrappedValue == "one")
        }
    }

    @Test("Migrating a vault item onto itself through another strategy instance keeps it")
    func migrationOntoTheSameStore() throws {
        try withTemporaryContext(vault: true) { context in
            let vault = try context.defaultVault()
            try vault.set("keep me", service: "s", account: "a")
            let item = Stored<String?>(backed: .vault(vault, service: "s", account: "a"))
            let outcome = try item.migrate(from: .strategy(VaultStrategy(vault: vault, service: "s"), key: "a"))
            #expect(outcome == .nothingToMigrate)
            #expect(try vault.string(service: "s", account: "a") == "keep me")
        }
    }
    @Test("Two properties naming one stored value in a batch: the one written last wins, in either order")
    func batchCommitsInWriteOrder() throws {
        let shelf = Shelf()
        // Two backings with identities of their own (two cells) on one stored key of one store.
        let first = Stored(wrappedValue: 0, backed: viewBacking(shelf, key: "k"))
        let second = Stored(
            wrappedValue: 0,
            backed: Backing(description: "alias(k)", store: StoreID(shelf, ["alias"]), key: "k") { _ in (ShelfView(shelf), "k") })
        func stored() throws -> Int? {
            try shelf.values.withLock { $0["k"] }.map { try ValueCodec.decode(Int.self, from: $0, as: .tagged) }
        }
        for round in 1...4 {
            // The cells' addresses fix any order but the write order: both orders are tried.
            batch {
                if round.isMultiple(of: 2) {
                    first.wrappedValue = round * 10
                    second.wrappedValue = round * 10 + 1
                } else {
                    second.wrappedValue = round * 10
                    first.wrappedValue = round * 10 + 1
                }
            }
            #expect(try stored() == round * 10 + 1)
        }
        #expect(shelf.batches.withLock { $0 } == 4)
    }
    @Test("Migrating from a second instance on the same file keeps the value (key-value suite and vault)")
    func migrationFromAnotherInstanceOnTheSameFile() throws {
        try withTemporaryContext(vault: true) { context in
            let setting = Stored<String?>(backed: .keyValue(key: "token"))
            setting.wrappedValue = "keep me"
            let sameSuite = try KeyValueFileStrategy(directory: context.directory)
            #expect(try setting.migrate(from: .keyValue(sameSuite, key: "token")) == .nothingToMigrate)
            #expect(try sameSuite.get(String.self, for: "token") == "keep me")

            let secret = Stored<String?>(backed: .vault(service: "s", account: "a"))
            secret.wrappedValue = "keep me too"
            let vault = try context.defaultVault()
            let sameVault = try Vault.open(at: vault.url, unlock: testVaultConfiguration.unlock)
            let outcome = try secret.migrate(from: .vault(sameVault, service: "s", account: "a"))
            #expect(outcome == .nothingToMigrate)
            #expect(try vault.string(service: "s", account: "a") == "keep me too")
        }
    }
}
