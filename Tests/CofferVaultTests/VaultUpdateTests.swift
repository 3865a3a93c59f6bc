import CofferCore
import CofferCrypto
import CofferTesting
import Foundation
import Testing

@testable import CofferVault

/// `Vault.update(service:account:_:)`: the vault's atomic read-modify-write. The
/// two-process counter is in CounterStressTests.
@Suite("Vault update")
struct VaultUpdateTests {
    /// A raw-key vault (no KDF run) and its key, to reopen it.
    static func makeVault(_ dir: Scratch, _ name: String = "v") throws -> (Vault, SecureBytes) {
        let key = try SecureBytes.random(count: 32)
        return (try Vault.create(at: dir.url(name), unlock: .key(key)), key)
    }

    static func encode(_ count: UInt64) -> Data { withUnsafeBytes(of: count.littleEndian) { Data($0) } }

    static func decode(_ data: Data?) -> UInt64? {
        guard let data, data.count >= 8 else { return nil }
        return UInt64(littleEndian: data.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
    }

    struct Refused: Error, Equatable { let reason: String }

    /// The vault's own methods called from an `update` transform (which runs under the vault's
    /// lock) throw `.invalidArgument` saying so, where they trapped in the mutex before; the
    /// vault keeps what it held and works on.
    @Test func callsFromInsideItsOwnUpdateAreRefusedNotATrap() throws {
        let dir = try Scratch("update-reentry")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set("one", service: "s", account: "a")
        let calls: [(Vault) throws -> Void] = [
            { try $0.set("two", service: "s", account: "a") }, { try $0.set("b", service: "s", account: "b") },
            { _ = try $0.string(service: "s", account: "a") }, { _ = try $0.items() },
            { try $0.remove(service: "s", account: "a") }, { _ = try $0.verify() }, { try $0.compact() },
            { try $0.update(service: "s", account: "a") { (old: String?) in old } },
            { try $0.flush() }, { try $0.unlock(.key(key)) },
        ]
        var refused: [CofferError] = []
        for call in calls {
            #expect(throws: CofferError.self) {
                try vault.update(service: "s", account: "a") { (old: String?) -> String? in
                    do { try call(vault) } catch let error as CofferError {
                        refused.append(error)
                        throw error
                    }
                    return "changed"
                }
            }
        }
        #expect(refused.count == calls.count)
        for error in refused {
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains("inside a closure it runs under its own lock"), "\(error.message)")
        }
        #expect(try vault.string(service: "s", account: "a") == "one")
        #expect(try vault.items().count == 1)
        try vault.update(service: "s", account: "a") { (old: String?) in (old ?? "") + "+" }
        #expect(try vault.string(service: "s", account: "a") == "one+")
        let reopened = try Vault.open(at: dir.url("v"), unlock: .key(key))
        #expect(try reopened.string(service: "s", account: "a") == "one+")
        #expect(try reopened.verify().items == 1)
    }

    /// Coffer zeroes its own Data of the old secret after the update, but never memory that is
    /// the caller's: a copy of the old secret the transform kept, or a returned Data that wraps
    /// the caller's own buffer.
    @Test func wipesItsOwnCopyButNotTheCallersMemory() throws {
        let dir = try Scratch("update-wipe")
        let (vault, _) = try Self.makeVault(dir)
        try vault.set(Data(repeating: 0xAB, count: 64), service: "s", account: "a")
        let callers = UnsafeMutableRawBufferPointer.allocate(byteCount: 48, alignment: 1)
        defer { callers.deallocate() }
        callers.initializeMemory(as: UInt8.self, repeating: 0xCD)
        var kept: Data?
        try vault.update(service: "s", account: "a") { (old: Data?) in
            kept = old
            return Data(bytesNoCopy: callers.baseAddress!, count: callers.count, deallocator: .none)
        }
        #expect(kept == Data(repeating: 0xAB, count: 64), "the transform's copy of the old secret was changed")
        #expect(Array(callers) == [UInt8](repeating: 0xCD, count: 48), "the caller's buffer was changed")
        #expect(try vault.data(service: "s", account: "a") == Data(repeating: 0xCD, count: 48))
    }

    @Test func createsAMissingItem() throws {
        let dir = try Scratch("update-create")
        let (vault, key) = try Self.makeVault(dir)
        var seen: [Data?] = []
        try vault.update(service: "s", account: "a") { old in
            seen.append(old)
            return Data("first".utf8)
        }
        #expect(seen == [nil])
        #expect(try vault.string(service: "s", account: "a") == "first")
        let item = try #require(try vault.item(service: "s", account: "a"))
        #expect(item.label == "" && item.comment == "")
        #expect(try Vault.open(at: vault.url, unlock: .key(key)).string(service: "s", account: "a") == "first")
    }

    @Test func transformsAnExistingItem() throws {
        let dir = try Scratch("update-transform")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set(Self.encode(41), service: "counter", account: "n")
        try vault.update(service: "counter", account: "n") { Self.encode((Self.decode($0) ?? 0) + 1) }
        #expect(Self.decode(try vault.data(service: "counter", account: "n")) == 42)
        // The String form.
        try vault.set("9", service: "counter", account: "text")
        try vault.update(service: "counter", account: "text") { (old: String?) in
            String((old.flatMap { Int($0) } ?? 0) + 1)
        }
        #expect(try vault.string(service: "counter", account: "text") == "10")
        let reopened = try Vault.open(at: vault.url, unlock: .key(key))
        #expect(Self.decode(try reopened.data(service: "counter", account: "n")) == 42)
        #expect(try reopened.string(service: "counter", account: "text") == "10")
    }

    /// The example in the doc comment, as written there.
    @Test func documentedCounterExample() throws {
        let dir = try Scratch("update-doc")
        let (vault, _) = try Self.makeVault(dir)
        for _ in 0..<3 {
            try vault.update(service: "app", account: "launches") { (old: Data?) in
                let count =
                    old.map { UInt64(littleEndian: $0.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }) } ?? 0
                return withUnsafeBytes(of: (count + 1).littleEndian) { Data($0) }
            }
            try vault.update(service: "app", account: "text") { (old: String?) in
                String((old.flatMap { Int($0) } ?? 0) + 1)
            }
        }
        #expect(Self.decode(try vault.data(service: "app", account: "launches")) == 3)
        #expect(try vault.string(service: "app", account: "text") == "3")
    }

    @Test func returningNilRemoves() throws {
        let dir = try Scratch("update-remove")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set("x", service: "s", account: "a")
        try vault.set("y", service: "s", account: "b")
        try vault.update(service: "s", account: "a") { (_: Data?) in nil }
        #expect(try vault.data(service: "s", account: "a") == nil)
        #expect(try vault.item(service: "s", account: "a") == nil)
        // nil for a missing item writes nothing.
        let records = try vault.info().recordCount
        try vault.update(service: "s", account: "missing") { (_: Data?) in nil }
        #expect(try vault.info().recordCount == records)
        let reopened = try Vault.open(at: vault.url, unlock: .key(key))
        #expect(try reopened.items().map(\.account) == ["b"])
    }

    @Test func aThrowingTransformWritesNothing() throws {
        let dir = try Scratch("update-throw")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set("before", service: "s", account: "a", label: "L")
        let bytes = try readBytes(vault.url)
        let item = try #require(try vault.item(service: "s", account: "a"))
        for account in ["a", "missing"] {
            let error = #expect(throws: Refused.self) {
                try vault.update(service: "s", account: account) { (_: Data?) -> Data? in
                    throw Refused(reason: "no")
                }
            }
            #expect(error == Refused(reason: "no"))  // unchanged, not wrapped
            let stringError = #expect(throws: Refused.self) {
                try vault.update(service: "s", account: account) { (_: String?) -> String? in
                    throw Refused(reason: "text")
                }
            }
            #expect(stringError == Refused(reason: "text"))
        }
        #expect(try readBytes(vault.url) == bytes)
        #expect(try vault.string(service: "s", account: "a") == "before")
        #expect(try vault.item(service: "s", account: "a") == item)
        let reopened = try Vault.open(at: vault.url, unlock: .key(key))
        #expect(try reopened.string(service: "s", account: "a") == "before")
        #expect(try reopened.item(service: "s", account: "a") == item)
        #expect(try reopened.item(service: "s", account: "missing") == nil)
        #expect(try reopened.info().recordCount == 1)
        // The vault still works after the failures.
        try vault.update(service: "s", account: "a") { (old: String?) in (old ?? "") + "!" }
        #expect(try vault.string(service: "s", account: "a") == "before!")
    }

    @Test func theSameBytesWriteNothing() throws {
        let dir = try Scratch("update-same")
        let (vault, _) = try Self.makeVault(dir)
        try vault.set("same", service: "s", account: "a")
        let bytes = try readBytes(vault.url)
        let item = try #require(try vault.item(service: "s", account: "a"))
        try vault.update(service: "s", account: "a") { (old: Data?) in old }
        try vault.update(service: "s", account: "a") { (_: String?) in "same" }
        #expect(try readBytes(vault.url) == bytes)
        #expect(try vault.item(service: "s", account: "a") == item)
    }

    @Test func aLockedVaultThrowsLockedAndNeverCallsTheTransform() throws {
        let dir = try Scratch("update-locked")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set("x", service: "s", account: "a")
        vault.lock()
        var calls = 0
        expectError(.locked) {
            try vault.update(service: "s", account: "a") { (old: Data?) in
                calls += 1
                return old
            }
        }
        expectError(.locked) {
            try vault.update(service: "s", account: "a") { (old: String?) in
                calls += 1
                return old
            }
        }
        #expect(calls == 0)
        try vault.unlock(.key(key))
        try vault.update(service: "s", account: "a") { (old: String?) in (old ?? "") + "y" }
        #expect(try vault.string(service: "s", account: "a") == "xy")
    }

    @Test func anEmptyServiceOrAccountIsInvalid() throws {
        let dir = try Scratch("update-empty")
        let (vault, _) = try Self.makeVault(dir)
        expectError(.invalidArgument) { try vault.update(service: "", account: "a") { (_: Data?) in Data([1]) } }
        expectError(.invalidArgument) { try vault.update(service: "s", account: "") { (_: String?) in "x" } }
        #expect(try vault.items().isEmpty)
    }

    /// The String form refuses a secret that is not UTF-8 before calling `transform`, and its
    /// error does not carry the secret.
    @Test func theStringFormRefusesABinarySecret() throws {
        let dir = try Scratch("update-binary")
        let (vault, _) = try Self.makeVault(dir)
        let secret: [UInt8] = [0xFF, 0xFE] + Array("hunter2".utf8)
        try vault.set(Data(secret), service: "s", account: "a")
        var called = false
        let error = expectError(.decoding) {
            try vault.update(service: "s", account: "a") { (old: String?) in
                called = true
                return old
            }
        }
        #expect(!called)
        #expect(error.map { !$0.description.contains("hunter2") && !$0.message.contains("hunter2") } ?? false)
        #expect(try vault.data(service: "s", account: "a") == Data(secret))
    }

    @Test func attributesSurviveAnUpdate() throws {
        let dir = try Scratch("update-attributes")
        let (vault, key) = try Self.makeVault(dir)
        try vault.set("one", service: "s", account: "a", label: "Label", comment: "Comment")
        let first = try #require(try vault.item(service: "s", account: "a"))
        Thread.sleep(forTimeInterval: 0.01)
        try vault.update(service: "s", account: "a") { (_: String?) in "two" }
        let second = try #require(try vault.item(service: "s", account: "a"))
        #expect(second.label == "Label" && second.comment == "Comment")
        #expect(second.created == first.created)
        #expect(second.modified > first.modified)
        let reopened = try Vault.open(at: vault.url, unlock: .key(key))
        #expect(try reopened.item(service: "s", account: "a") == second)
        #expect(try reopened.string(service: "s", account: "a") == "two")
    }

    /// Two `Vault` instances on one file (each with its own descriptor and lock), first taking
    /// turns, then on two threads at once; each update also sees the other instance's `set`s
    /// of other items. Secrets are padded to 1 KiB so compaction (which starts a new epoch the
    /// other instance must follow) happens several times along the way.
    @Test func twoInstancesInOneProcessLoseNothing() throws {
        let dir = try Scratch("update-two")
        let (first, key) = try Self.makeVault(dir)
        let second = try Vault.open(at: first.url, unlock: .key(key))
        let padding = Data(repeating: 0xA5, count: 1024)
        let increment: @Sendable (Data?) -> Data? = { old in Self.encode((Self.decode(old) ?? 0) + 1) + padding }
        // Taking turns: each instance must catch up with the other's last write.
        for i in 0..<50 {
            try (i % 2 == 0 ? first : second).update(service: "counter", account: "n", increment)
        }
        #expect(Self.decode(try first.data(service: "counter", account: "n")) == 50)
        #expect(Self.decode(try second.data(service: "counter", account: "n")) == 50)
        // At once.
        let perThread = 150
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            let vault = thread == 0 ? first : second
            do {
                for i in 0..<perThread {
                    try vault.update(service: "counter", account: "n", increment)
                    if i % 10 == 0 { try vault.set(padding, service: "other", account: "\(thread)-\(i)") }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        let expected = UInt64(50 + 2 * perThread)
        #expect(Self.decode(try first.data(service: "counter", account: "n")) == expected)
        #expect(Self.decode(try second.data(service: "counter", account: "n")) == expected)
        let reopened = try Vault.open(at: first.url, unlock: .key(key))
        #expect(Self.decode(try reopened.data(service: "counter", account: "n")) == expected)
        #expect(try reopened.items(service: "other").count == 2 * (perThread / 10))
        // Compaction ran: far fewer records in the file than writes made.
        let records = try reopened.info().recordCount
        #expect(records < Int(expected))
        print("RELIABILITY counter, Vault.update in one process: 2 instances, 50 in turn + 2 threads × \(perThread) = \(Self.decode(try reopened.data(service: "counter", account: "n")) ?? 0) (expected \(expected)); \(records) records after compaction")
    }
}
