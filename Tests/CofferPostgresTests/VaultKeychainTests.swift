#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// The file vault and the PostgreSQL vault through the one protocol they share, ``Keychain``:
/// one generic function, written against the protocol alone, run against each.
@Suite("Keychain: one protocol over the file vault and the PostgreSQL vault")
struct VaultKeychainTests {
    @Test("A file vault does everything a Keychain promises")
    func fileVault() throws {
        let directory = try TemporaryDirectory(prefix: "coffer-keychain")
        let url = directory.url.appendingPathComponent("items.coffervault")
        let vault = try Vault.create(at: url, unlock: .key(testKey), kdf: .minimum)
        try Self.exercise(vault, other: try Vault.open(at: url, unlock: .key(testKey)))
        #expect(vault.location == url.path)
    }

    @Test("A PostgreSQL vault does everything a Keychain promises")
    func postgresVault() throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vkeychain")
        let vault = try PostgresVault.create(name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let other = try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        try Self.exercise(vault, other: other)
        #expect(vault.location == "vault \(name) on \(configuration)")
    }

    @Test("Generic async code over some Keychain runs on a file vault")
    func fileVaultFromAsyncCode() async throws {
        let directory = try TemporaryDirectory(prefix: "coffer-keychain-async")
        let url = directory.url.appendingPathComponent("items.coffervault")
        let vault = try await Vault.create(at: url, unlock: .key(testKey), kdf: .minimum)
        try await Self.exerciseAsync(vault, other: try Vault.open(at: url, unlock: .key(testKey)))
    }

    @Test("Generic async code over some Keychain runs on a PostgreSQL vault")
    func postgresVaultFromAsyncCode() async throws {
        let configuration = try sharedConfiguration()
        let name = uniqueName("vkeychainasync")
        let vault = try await PostgresVault.create(
            name: name, unlock: .key(testKey), kdf: .interactive, configuration: configuration)
        let other = try await PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
        try await Self.exerciseAsync(vault, other: other)
    }

    /// The item calls of ``Keychain`` from async code, through the protocol alone: each resolves
    /// to its `async` form (written with `await`), on either vault. `keychain` and `other` are
    /// two instances of one new, empty vault.
    static func exerciseAsync<K: Keychain>(_ keychain: K, other: K) async throws {
        try await keychain.set(Data([0, 1, 2]), service: "svc", account: "bytes", label: "Bytes", comment: "three")
        try await keychain.set("text", service: "svc", account: "text")
        try await keychain.set(try SecureBytes(copying: Array("guarded".utf8)), service: "other", account: "guarded")
        let bytesRead = try await keychain.data(service: "svc", account: "bytes") == Data([0, 1, 2])
        let textRead = try await other.string(service: "svc", account: "text") == "text"
        let guarded = try await other.secret(service: "other", account: "guarded")
        let guardedRead = guarded?.withUnsafeBytes { Array($0) } == Array("guarded".utf8)
        #expect(bytesRead && textRead && guardedRead)
        #expect(try await keychain.data(service: "svc", account: "absent") == nil)
        #expect(try await keychain.items().map { "\($0.service)/\($0.account)" } == ["other/guarded", "svc/bytes", "svc/text"])
        #expect(try await other.items(service: "svc").map(\.account) == ["bytes", "text"])
        let item = try #require(try await other.item(service: "svc", account: "bytes"))
        #expect(item.label == "Bytes" && item.comment == "three")

        #expect(try await keychain.remove(service: "svc", account: "text"))
        #expect(try await !other.remove(service: "svc", account: "text"))
        try await keychain.apply([
            .set(service: "svc", account: "a", secret: Array("1".utf8), label: nil, comment: nil),
            .remove(service: "svc", account: "bytes"),
        ])
        #expect(try await other.items(service: "svc").map(\.account) == ["a"])
        // add: only what does not exist yet, decided under the write lock.
        let added = [VaultChange.set(service: "svc", account: "b", secret: Array("2".utf8), label: nil, comment: nil)]
        #expect(try await keychain.add(added).isEmpty)
        #expect(try await other.add(added) == [VaultItemID(service: "svc", account: "b")])

        // update from either instance; the transform is @Sendable (it runs on Coffer's threads).
        let increment: @Sendable (Data?) throws -> Data? = { old in
            Data(String((old.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0) + 1).utf8)
        }
        try await keychain.update(service: "svc", account: "count", increment)
        try await other.update(service: "svc", account: "count", increment)
        try await keychain.update(service: "svc", account: "count", increment)
        #expect(try await other.string(service: "svc", account: "count") == "3")
        try await other.update(service: "svc", account: "count") { _ in nil }
        #expect(try await keychain.item(service: "svc", account: "count") == nil)

        try await keychain.flush()
        keychain.lock()
        await #expect(throws: CofferError.self) { try await keychain.data(service: "svc", account: "a") }
        #expect(try await other.string(service: "svc", account: "a") == "1")
    }

    /// Everything ``Keychain`` promises, through the protocol alone. `keychain` and `other` are
    /// two instances of one new, empty vault. Secrets are compared into Booleans: a failed
    /// `#expect` prints its operands.
    static func exercise<K: Keychain>(_ keychain: K, other: K) throws {
        #expect(!keychain.location.isEmpty)
        let heard = Protected<[Set<VaultItemID>?]>([])
        let observation = keychain.observeChanges { change in heard.withLock { $0.append(change) } }
        defer { observation.cancel() }

        // Each kind of secret, with and without attributes.
        try keychain.set(Data([0, 1, 2]), service: "svc", account: "bytes", label: "Bytes", comment: "three")
        try keychain.set("text", service: "svc", account: "text")
        try keychain.set(try SecureBytes(copying: Array("guarded".utf8)), service: "other", account: "guarded")
        let bytesRead = try keychain.data(service: "svc", account: "bytes") == Data([0, 1, 2])
        let textRead = try keychain.string(service: "svc", account: "text") == "text"
        let guardedRead = try keychain.secret(service: "other", account: "guarded")?.withUnsafeBytes { Array($0) } == Array("guarded".utf8)
        let textAsGuarded = try keychain.secret(service: "svc", account: "text")?.withUnsafeBytes { Array($0) } == Array("text".utf8)
        #expect(bytesRead && textRead && guardedRead && textAsGuarded)
        #expect(try keychain.data(service: "svc", account: "absent") == nil)
        #expect(try keychain.secret(service: "svc", account: "absent") == nil)
        #expect(try keychain.items().map { "\($0.service)/\($0.account)" } == ["other/guarded", "svc/bytes", "svc/text"])
        #expect(try keychain.items(service: "svc").map(\.account) == ["bytes", "text"])
        // A nil label or comment keeps the item's own.
        try keychain.set(Data([3]), service: "svc", account: "bytes")
        let item = try #require(try keychain.item(service: "svc", account: "bytes"))
        #expect(item.label == "Bytes" && item.comment == "three")
        #expect(try keychain.item(service: "svc", account: "absent") == nil)

        #expect(try keychain.remove(service: "svc", account: "text"))
        #expect(try !keychain.remove(service: "svc", account: "text"))

        // A batch is one commit: all of it, or (one change refused) none of it.
        try keychain.apply([
            .set(service: "svc", account: "a", secret: Array("1".utf8), label: nil, comment: nil),
            .remove(service: "svc", account: "bytes"),
        ])
        #expect(try keychain.items(service: "svc").map(\.account) == ["a"])
        #expect(throws: CofferError.self) {
            try keychain.apply([
                .set(service: "svc", account: "b", secret: Array("2".utf8), label: nil, comment: nil),
                .set(service: "svc", account: "", secret: Array("3".utf8), label: nil, comment: nil),
            ])
        }
        #expect(try keychain.items(service: "svc").map(\.account) == ["a"])

        // Read-modify-write, from either instance, on the same item; nil removes it.
        let increment: (Data?) throws -> Data? = { old in
            Data(String((old.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0) + 1).utf8)
        }
        try keychain.update(service: "svc", account: "count", increment)
        try other.update(service: "svc", account: "count", increment)
        try keychain.update(service: "svc", account: "count", increment)
        #expect(try other.string(service: "svc", account: "count") == "3")
        try keychain.update(service: "svc", account: "count") { _ in nil }
        #expect(try other.item(service: "svc", account: "count") == nil)

        // Outside changes: what `other` writes, `keychain` is told by name. (The first write
        // may be folded into a "reread everything" of a feed that was still starting.)
        try other.set("1", service: "svc", account: "warm-up")
        #expect(eventually { heard.withLock { !$0.isEmpty } })
        try other.set("2", service: "svc", account: "elsewhere")
        let elsewhere = VaultItemID(service: "svc", account: "elsewhere")
        #expect(eventually { heard.withLock { $0.contains { $0?.contains(elsewhere) == true } } })
        let seenElsewhere = try keychain.string(service: "svc", account: "elsewhere") == "2"
        #expect(seenElsewhere)

        // Durable now, then locked: the keys are gone and every call says so.
        try keychain.flush()
        #expect(!keychain.isLocked)
        keychain.lock()
        #expect(keychain.isLocked)
        do {
            _ = try keychain.data(service: "svc", account: "a")
            Issue.record("a locked keychain read an item")
        } catch let error as CofferError {
            #expect(error.code == .locked)
        }
        #expect(!other.isLocked)  // other instances keep their keys
        let otherStillReads = try other.string(service: "svc", account: "a") == "1"
        #expect(otherStillReads)
    }
}
#endif
