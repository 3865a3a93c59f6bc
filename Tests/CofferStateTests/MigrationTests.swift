import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation
import Observation
import Synchronization
import Testing

/// Release 1 kept the token in the plain key-value file…
private final class OldModel {
    @Stored(backed: .keyValue(key: "token")) var token: String? = nil
}

/// …release 2 keeps it in the vault.
private final class NewModel {
    @Stored(backed: .vault(service: "api.github.com", account: "octocat")) var token: String? = nil
}

@Suite("Migration")
struct MigrationTests {
    @Test("A token kept in the key-value file by an older release moves into the vault")
    func keyValueToVault() throws {
        try withTemporaryContext(vault: true) { context in
            OldModel().token = "ghp_old_release_token"

            let model = NewModel()
            #expect(model.token == nil)
            let outcome = try model.$token.migrate(from: .keyValue(key: "token"))
            #expect(outcome == .moved)
            #expect(model.token == "ghp_old_release_token")
            #expect(OldModel().token == nil)  // the plaintext copy is gone
            #expect(NewModel().token == "ghp_old_release_token")  // and the vault has it durably
            // Not just marked removed: no file under the context holds the plaintext any more.
            let root = context.directory.path
            for name in try FileManager.default.subpathsOfDirectory(atPath: root) {
                guard let bytes = FileManager.default.contents(atPath: root + "/" + name) else { continue }
                #expect(bytes.range(of: Data("ghp_old_release_token".utf8)) == nil, "plaintext left in \(name)")
            }
            // Running it again (the next launch) finds nothing left to move.
            let again = try NewModel().$token.migrate(from: .keyValue(key: "token"))
            #expect(again == .nothingToMigrate)
        }
    }

    @Test("A live property on the old key follows the migration: it reads nil, not the moved token")
    func liveOldPropertyFollows() throws {
        try withTemporaryContext(vault: true) { _ in
            let old = OldModel()
            old.token = "ghp_moved_while_watched"
            #expect(old.token == "ghp_moved_while_watched")
            let changes = Mutex(0)
            withObservationTracking { _ = old.token } onChange: { changes.withLock { $0 += 1 } }

            let outcome = try NewModel().$token.migrate(from: .keyValue(key: "token"))
            #expect(outcome == .moved)
            let oldStillReadsIt = old.token != nil  // a Bool: a failure never prints the token
            #expect(!oldStillReadsIt)
            #expect(changes.withLock { $0 } == 1)
        }
    }

    @Test("Copy, sync, then delete: the old copy goes only after the new one is durable")
    func crashSafeOrder() throws {
        let log = Log<String>()
        let old = RecordingStrategy(name: "old", log: log)
        let new = RecordingStrategy(name: "new", log: log)
        try old.put("s3cret", for: "password")
        let password = Stored<String?>(wrappedValue: nil, backed: .strategy(new, key: "password"))
        #expect(try password.migrate(from: .strategy(old, key: "password")) == .moved)
        #expect(log.all == ["new.save(password)", "new.flush", "old.remove(password)", "old.flush"])
        #expect(password.wrappedValue == "s3cret")
    }

    @Test("A failure before the delete leaves the old copy in place")
    func failureKeepsSource() throws {
        let old = RecordingStrategy(name: "old")
        let new = RecordingStrategy(name: "new")
        try old.put("s3cret", for: "password")
        new.failWrites(with: CofferError(.io, "no space left on device"))
        let password = Stored<String?>(wrappedValue: nil, backed: .strategy(new, key: "password"))
        #expect(throws: CofferError.self) { try password.migrate(from: .strategy(old, key: "password")) }
        #expect(try old.get(String.self, for: "password") == "s3cret")
        #expect(password.wrappedValue == nil)
    }

    @Test("When the destination already has a value it is kept and the old copy is deleted")
    func destinationWins() throws {
        let old = RecordingStrategy(name: "old")
        let new = RecordingStrategy(name: "new")
        try old.put("stale", for: "k")
        try new.put("current", for: "k")
        let value = Stored(wrappedValue: "", backed: .strategy(new, key: "k"))
        #expect(try value.migrate(from: .strategy(old, key: "k")) == .keptExisting)
        #expect(value.wrappedValue == "current")
        #expect(old.raw("k") == nil)
    }

    @Test("Old bytes that are not a Value are left alone and reported")
    func undecodableSource() throws {
        let old = RecordingStrategy(name: "old")
        let new = RecordingStrategy(name: "new")
        try old.put("not a number", for: "k")
        let value = Stored(wrappedValue: 0, backed: .strategy(new, key: "k"))
        #expect {
            try value.migrate(from: .strategy(old, key: "k"))
        } throws: { error in
            (error as? CofferError)?.code == .decoding
        }
        #expect(old.raw("k") != nil)
        #expect(new.raw("k") == nil)
    }

    @Test("Migrating into a memory-only property is refused: the old copy would be lost")
    func memoryDestinationRefused() throws {
        let old = RecordingStrategy(name: "old")
        try old.put(1, for: "k")
        let value = Stored(wrappedValue: 0)
        #expect {
            try value.migrate(from: .strategy(old, key: "k"))
        } throws: { error in
            (error as? CofferError)?.code == .invalidArgument
        }
        #expect(old.raw("k") != nil)
    }

    @Test("Migrating a property from its own location changes nothing")
    func sameLocation() throws {
        let store = RecordingStrategy()
        try store.put(3, for: "k")
        let value = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        #expect(try value.migrate(from: .strategy(store, key: "k")) == .nothingToMigrate)
        #expect(value.wrappedValue == 3)
        #expect(store.raw("k") != nil)
    }
}
