import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation
import Testing

@Suite("Errors")
struct ErrorTests {
    @Test("A failing save shows in $x.error, keeps the value in memory, and clears on success")
    func failingSave() throws {
        let store = RecordingStrategy()
        let name = Stored(wrappedValue: "", backed: .strategy(store, key: "name"))
        store.failWrites(with: CofferError(.io, "write failed: errno 28 (No space left on device)", errno: 28))
        name.wrappedValue = "Ada"
        #expect(name.wrappedValue == "Ada")
        #expect(name.error?.code == .io)
        #expect(name.error?.errno == 28)

        store.failWrites(with: nil)
        name.wrappedValue = "Grace"
        #expect(name.error == nil)
        #expect(try store.get(String.self, for: "name") == "Grace")
    }

    @Test("save(_:) throws the failure and records it; a retry succeeds")
    func throwingSave() throws {
        let store = RecordingStrategy()
        let name = Stored(wrappedValue: "", backed: .strategy(store, key: "name"))
        store.failWrites(with: CofferError(.busy, "locked by another process"))
        #expect {
            try name.save("Ada")
        } throws: { error in
            (error as? CofferError)?.code == .busy
        }
        #expect(name.error?.code == .busy)
        #expect(name.wrappedValue == "Ada")
        store.failWrites(with: nil)
        try name.save("Ada")  // same value: written anyway, so the failed save is retried
        #expect(name.error == nil)
        #expect(try store.get(String.self, for: "name") == "Ada")
    }

    @Test("A failing load keeps the initial value, and load() retries")
    func failingLoad() throws {
        let store = RecordingStrategy()
        try store.put(99, for: "score")
        store.failLoads(with: CofferError(.corrupted, "checksum mismatch"))
        let score = Stored(wrappedValue: 0, backed: .strategy(store, key: "score"))
        #expect(score.wrappedValue == 0)
        #expect(score.error?.code == .corrupted)
        store.failLoads(with: nil)
        #expect(try score.load() == 99)
        #expect(score.wrappedValue == 99)
        #expect(score.error == nil)
    }

    @Test("An error that is not a CofferError is wrapped, with the original as the cause")
    func foreignErrorWrapped() throws {
        let store = RecordingStrategy()
        let flag = Stored(wrappedValue: false, backed: .strategy(store, key: "flag"))
        store.failWrites(with: DiskOnFire())
        flag.wrappedValue = true
        let error = try #require(flag.error)
        #expect(error.code == .io)
        #expect(error.cause is DiskOnFire)
        #expect(error.description.contains("the disk is on fire"))
    }

    @Test("A backing that cannot be resolved surfaces its error and keeps working in memory")
    func unresolvableBacking() throws {
        try withTemporaryContext { _ in
            // No VaultConfiguration in this context, so the default vault cannot be opened.
            let token = Stored<String?>(wrappedValue: nil, backed: .vault(service: "svc", account: "me"))
            #expect(token.wrappedValue == nil)
            #expect(token.error?.code == .locked)
            token.wrappedValue = "in memory only"
            #expect(token.wrappedValue == "in memory only")
            #expect(token.error?.code == .locked)
            #expect(throws: CofferError.self) { try token.load() }
        }
    }

    @Test("Error messages never contain the value")
    func noValueInErrors() throws {
        let store = RecordingStrategy()
        try store.put("definitely-not-json{", for: "session")
        struct Session: Codable, Sendable { var token: String }
        let session = Stored<Session?>(wrappedValue: nil, backed: .strategy(store, key: "session"))
        _ = session.wrappedValue
        let error = try #require(session.error)
        #expect(error.code == .decoding)
        #expect(!error.description.contains("definitely-not-json"))
    }
}
