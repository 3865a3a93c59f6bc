import CofferCore
import CofferRuntime
import CofferCrypto
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// The write path: every way of storing a secret, a failed append, and the bytes it writes.
@Suite("Vault write path")
struct VaultWritePathTests {
    static let url = URL(fileURLWithPath: "/v/vault")

    /// Items and secrets as the vault sees them (this instance, or a fresh open).
    static func contents(_ vault: Vault) throws -> [String: [UInt8]] {
        var contents: [String: [UInt8]] = [:]
        for item in try vault.items() {
            contents["\(item.service)/\(item.account)/\(item.label)/\(item.comment)"] =
                Array(try vault.data(service: item.service, account: item.account) ?? Data())
        }
        return contents
    }

    /// A failed append (EIO, or a short write) changes nothing in memory: the same instance
    /// reads what it read before, and its next write seals against the chain the file holds,
    /// so a fresh open authenticates every record.
    @Test(arguments: [
        InMemoryFileSystem.Fault.fail(.pwrite, errno: 5, where: { $0 == "/v/vault" }),
        InMemoryFileSystem.Fault.shortWrite(occurrence: 1, bytes: 12, where: { $0 == "/v/vault" }),
    ])
    func aFailedAppendLeavesTheSessionAsItWas(fault: InMemoryFileSystem.Fault) throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/v")
        let vault = try Vault.create(
            at: Self.url, unlock: .passphrase("p"), kdf: fastKDF, durability: .coalesced, fileSystem: fs)
        try vault.set("one", service: "s", account: "a", label: "A", comment: "first")
        try vault.set("two", service: "s", account: "b")
        let before = try Self.contents(vault)
        let info = try vault.info()
        fs.inject(fault)
        #expect(throws: CofferError.self) { try vault.set("changed", service: "s", account: "a") }
        fs.removeAllFaults()
        fs.inject(fault)
        #expect(throws: CofferError.self) {
            try vault.apply([
                .set(service: "s", account: "c", secret: Array("new".utf8), label: "C", comment: nil),
                .remove(service: "s", account: "b"),
                .set(service: "s", account: "a", secret: Array("again".utf8), label: nil, comment: nil),
            ])
        }
        fs.removeAllFaults()
        fs.inject(fault)
        #expect(throws: CofferError.self) {
            try vault.update(service: "s", account: "a") { (_: Data?) in Data("updated".utf8) }
        }
        fs.removeAllFaults()
        #expect(try Self.contents(vault) == before)
        let after = try vault.info()
        #expect(after.itemCount == info.itemCount && after.recordCount == info.recordCount)
        // The next writes land and authenticate, here and in a fresh open.
        try vault.set("three", service: "s", account: "a")
        try vault.apply([.remove(service: "s", account: "b"), .set(service: "s", account: "d", secret: [1, 2], label: nil, comment: nil)])
        let expected = try Self.contents(vault)
        #expect(expected["s/a/A/first"] == Array("three".utf8))
        #expect(expected.count == 2)
        try vault.flush()
        #expect(try vault.verify().items == 2)
        let reopened = try Vault.open(at: Self.url, unlock: .passphrase("p"), fileSystem: fs)
        #expect(try Self.contents(reopened) == expected)
    }

    /// `set` from `Data`, `String` and `SecureBytes`, a batch with a removal and an overwrite,
    /// and an update all store the same bytes as the body encoding and round-trip.
    @Test func everySetFormRoundTrips() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/v")
        let vault = try Vault.create(at: Self.url, unlock: .passphrase("p"), kdf: fastKDF, fileSystem: fs)
        let large = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try vault.set(large, service: "data", account: "large", label: "L", comment: "big")
        try vault.set(Data(), service: "data", account: "empty")
        try vault.set("naïve ✓", service: "string", account: "unicode", label: "ünï", comment: "ç")
        try vault.set(try SecureBytes(copying: [9, 8, 7]), service: "secure", account: "bytes")
        try vault.apply([
            .set(service: "batch", account: "x", secret: [1], label: "first", comment: nil),
            .set(service: "batch", account: "x", secret: [2], label: nil, comment: "kept label"),
            .set(service: "batch", account: "y", secret: [3], label: nil, comment: nil),
            .remove(service: "batch", account: "y"),
            .remove(service: "batch", account: "never"),
        ])
        try vault.update(service: "data", account: "empty") { (old: Data?) in
            #expect(old == Data())
            return Data("filled".utf8)
        }
        let expected: [String: [UInt8]] = [
            "data/large/L/big": Array(large),
            "data/empty//": Array("filled".utf8),
            "string/unicode/ünï/ç": Array("naïve ✓".utf8),
            "secure/bytes//": [9, 8, 7],
            "batch/x/first/kept label": [2],
        ]
        #expect(try Self.contents(vault) == expected)
        let reopened = try Vault.open(at: Self.url, unlock: .passphrase("p"), fileSystem: fs)
        #expect(try Self.contents(reopened) == expected)
        #expect(try reopened.info().recordCount == 9)  // 4 sets, 4 of the batch (its removal of "never" writes nothing), the update
    }

    /// The exact-size body encoding gives the documented layout (docs/FORMAT.md), and decodes.
    @Test func bodyEncodingIsTheDocumentedLayout() throws {
        let item = VaultItem(
            service: "sv", account: "ac", label: "", comment: "ç", created: Date(timeIntervalSince1970: 1.5),
            modified: Date(timeIntervalSince1970: 2))
        let put = VaultRecordBody.put(item, secret: [0xAA, 0xBB])
        var expected: [UInt8] = [1]
        for field in [Array("sv".utf8), Array("ac".utf8), [], Array("ç".utf8)] {
            expected += withUnsafeBytes(of: UInt32(field.count).littleEndian, Array.init) + field
        }
        expected += withUnsafeBytes(of: Int64(1500).littleEndian, Array.init)
        expected += withUnsafeBytes(of: Int64(2000).littleEndian, Array.init)
        expected += withUnsafeBytes(of: UInt32(2).littleEndian, Array.init) + [0xAA, 0xBB]
        #expect(put.encoded() == expected)
        #expect(VaultRecordBody.decode(put.encoded()) == put)
        let delete = VaultRecordBody.delete(service: "sv", account: "")
        #expect(delete.encoded() == [2, 2, 0, 0, 0] + Array("sv".utf8) + [0, 0, 0, 0])
        #expect(VaultRecordBody.decode(delete.encoded()) == delete)
    }

    /// A vault written by this code reads the same in the independent reader (Tools/vault-reader.py,
    /// written from docs/FORMAT.md alone), when Python with PyNaCl is available.
    @Test func independentReaderReadsWhatIsWritten() throws {
        let dir = try Scratch("reader")
        let url = dir.url("v")
        let keyBytes = (0..<32).map { UInt8($0) }
        let vault = try Vault.create(at: url, unlock: .key(try SecureBytes(copying: keyBytes)), durability: .coalesced)
        try vault.set("s1", service: "svc", account: "a", label: "La")
        try vault.set(Data([0, 1, 2]), service: "svc", account: "b")
        try vault.set(try SecureBytes(copying: [7]), service: "svc", account: "c")
        try vault.apply([
            .set(service: "svc", account: "a", secret: Array("s2".utf8), label: nil, comment: "x"),
            .remove(service: "svc", account: "b"),
        ])
        try vault.flush()
        let (status, text) = try runVaultReader(
            [url.path, "--key-hex", keyBytes.map { String(format: "%02x", $0) }.joined(), "--show-secrets"])
        if status == 77 { return }
        #expect(status == 0)
        let lines = Set(text.split(separator: "\n").map(String.init))
        #expect(lines == ["svc\ta\tLa\t" + "7332", "svc\tc\t\t07"])
    }

    /// An absurd length is a clear error before anything is allocated, encoded or written: the
    /// journal takes records up to 1 GiB, and a field's length is stored in 32 bits (a secret of
    /// 4 GiB or more used to trap converting its length; this check comes first). The `Data`
    /// is never touched, so `calloc`'s pages stay unmapped.
    @Test func aSecretTooLargeForARecordIsRefusedAndChangesNothing() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/v")
        let vault = try Vault.create(at: Self.url, unlock: .passphrase("p"), kdf: fastKDF, fileSystem: fs)
        try vault.set("kept", service: "s", account: "a")
        let before = fs.contents(atPath: Self.url.path)
        expectError(.invalidArgument) {
            try vault.set(Data(count: RecordCipher.maximumBodyLength), service: "s", account: "a")
        }
        #expect(fs.contents(atPath: Self.url.path) == before)
        #expect(try vault.string(service: "s", account: "a") == "kept")
    }

    /// A set of an item that is there rewrites its entry in place, copying the new record over
    /// the old one when it is the same size. After an open every entry's record is a slice of
    /// one shared buffer: writing there must leave the other items' records alone (the entry
    /// gets a buffer of its own first), and a reader's copy of an entry must keep the record it
    /// read. Checked against this instance and a fresh open, for same-size and resized records,
    /// kept and replaced attributes.
    @Test func rewritingAnItemInPlaceLeavesEveryOtherRecordAlone() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/v")
        do {
            let vault = try Vault.create(at: Self.url, unlock: .passphrase("p"), kdf: fastKDF, fileSystem: fs)
            try vault.apply(
                (0..<20).map {
                    .set(service: "s", account: "a\($0)", secret: Array("secret-\($0 % 10)".utf8), label: "L\($0)",
                        comment: nil)
                })
        }
        let vault = try Vault.open(at: Self.url, unlock: .passphrase("p"), fileSystem: fs)
        var expected = try Self.contents(vault)
        let created = try #require(try vault.item(service: "s", account: "a3")).created
        // A reader's copy of the entry, taken before the rewrite (the record it holds is sealed
        // against the chain value beside it: it must still open).
        let readersCopy = try vault.withSession { $0.entries[ItemKey(service: "s", account: "a3")] }
        for (round, secret) in ["secret-X", "secret-Y", "a longer secret", "short", "secret-Z"].enumerated() {
            try vault.set(secret, service: "s", account: "a3", label: round == 2 ? "renamed" : nil)
            expected.removeValue(forKey: expected.keys.first { $0.hasPrefix("s/a3/") }!)
            expected["s/a3/\(round >= 2 ? "renamed" : "L3")/"] = Array(secret.utf8)
            #expect(try Self.contents(vault) == expected)
            // The rewritten entry has a buffer of its own (never the open's shared one, which it
            // would keep alive); the others still share theirs.
            let owns = try vault.withSession { session in
                (
                    session.entries[ItemKey(service: "s", account: "a3")]?.ownsBuffer,
                    session.entries[ItemKey(service: "s", account: "a4")]?.ownsBuffer
                )
            }
            #expect(owns.0 == true && owns.1 == false)
        }
        let item = try #require(try vault.item(service: "s", account: "a3"))
        #expect(item.created == created && item.modified >= created && item.label == "renamed")
        #expect(try Self.contents(Vault.open(at: Self.url, unlock: .passphrase("p"), fileSystem: fs)) == expected)
        let copy = try #require(readersCopy)
        let keys = try vault.withSession { ($0.keys, $0.header.vaultID) }
        var plaintext = try RecordCipher.open(copy.payload, keys: keys.0, vaultID: keys.1, chain: copy.chain)
        defer { SecureMemory.zero(&plaintext) }
        guard case .put(_, let secret) = VaultRecordBody.decode(plaintext) else {
            Issue.record("the reader's copy no longer holds the record it read")
            return
        }
        #expect(secret == Array("secret-3".utf8))
    }
}
