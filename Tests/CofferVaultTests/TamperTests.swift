import CofferCore
import CofferRuntime
import CofferJournal
import CofferCrypto
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// Tampering: a changed vault file opens to exactly the original data or fails with an
/// authentication/corruption error. Never different data, never a crash.
@Suite("Vault tamper detection")
struct TamperTests {
    static func makeSmallVault(at url: URL) throws -> Snapshot {
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("first-secret", service: "svc", account: "one", label: "One")
        try vault.set(Data([0, 1, 2, 3]), service: "svc", account: "two")
        return try Snapshot(of: vault)
    }

    /// Flip each byte of a small two-item vault (every offset, two different flips).
    ///
    /// In memory and with a raw key, so 16,000 opens take seconds: the header copies and key
    /// slots are bytes like any other here (the passphrase path is covered by VaultTests).
    @Test func everyByteFlipIsDetectedOrHarmless() throws {
        let url = URL(fileURLWithPath: "/v/vault")
        let key = try SecureBytes.random(count: 32)
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/v")
        let vault = try Vault.create(at: url, unlock: .key(key), fileSystem: fs)
        try vault.set("first-secret", service: "svc", account: "one", label: "One")
        try vault.set(Data([0, 1, 2, 3]), service: "svc", account: "two")
        let original = try Snapshot(of: vault)
        let bytes = [UInt8](try #require(fs.contents(atPath: url.path)))
        var detected = 0
        var harmless = 0
        for offset in 0..<bytes.count {
            for mask: UInt8 in [0x01, 0xFF] {
                var image = bytes
                image[offset] ^= mask
                let tampered = InMemoryFileSystem()
                try tampered.createDirectory(atPath: "/v")
                try tampered.createFile(atPath: url.path, contents: Data(image))
                do {
                    let opened = try Vault.open(at: url, unlock: .key(key), fileSystem: tampered)
                    let seen = try Snapshot(of: opened)
                    #expect(seen == original, "flip \(mask) at \(offset) gave different data")
                    harmless += 1
                } catch let error as CofferError {
                    #expect(error.code == .corrupted, "flip at \(offset): \(error.code) — \(error.message)")
                    detected += 1
                }
            }
        }
        // Flips in the records are detected; flips in one header copy or in the zero tail are harmless.
        #expect(detected > 300 && harmless > 300, "detected \(detected), harmless \(harmless)")
    }

    /// Offsets of the records of a vault file (parsed from the journal's frames).
    static func recordRanges(_ bytes: [UInt8]) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        var offset = 32 + VaultHeader.areaSize
        while offset + 12 <= bytes.count {
            let word = UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
                | UInt32(bytes[offset + 3]) << 24
            let length = Int(word & 0x3FFF_FFFF)  // bits 30 and 31 are the K and M flags
            if length == 0 { break }
            ranges.append(offset..<(offset + 12 + length))
            offset += 12 + length
        }
        return ranges
    }

    @Test func swappedRecordsAreDetected() throws {
        let dir = try Scratch("swap")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        for i in 0..<3 { try vault.set(String(repeating: "s", count: 10), service: "svc", account: "a\(i)") }
        let bytes = try readBytes(url)
        let ranges = Self.recordRanges(bytes)
        #expect(ranges.count == 3)
        // Records of equal length, so the swap keeps the framing valid.
        var image = bytes
        image.replaceSubrange(ranges[0], with: bytes[ranges[1]])
        image.replaceSubrange(ranges[1], with: bytes[ranges[0]])
        try writeBytes(image, to: url)
        expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        // Dropping a middle record is detected too.
        image = bytes
        image.removeSubrange(ranges[1])
        try writeBytes(image, to: url)
        expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
    }

    @Test func replayingARecordFromAnOlderCopyIsDetected() throws {
        let dir = try Scratch("replay")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("old-secret", service: "svc", account: "a")
        let older = try readBytes(url)
        let oldRecord = older[Self.recordRanges(older)[0]]
        try vault.set("new-secret", service: "svc", account: "a")
        // Append the old "put" again after the new one, as if replayed.
        var image = try readBytes(url)
        let end = Self.recordRanges(image).last!.upperBound
        image.replaceSubrange(end..<(end + oldRecord.count), with: oldRecord)
        try writeBytes(image, to: url)
        expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
    }

    @Test func movingARecordBetweenVaultsIsDetected() throws {
        let dir = try Scratch("transplant")
        let a = dir.url("a")
        let b = dir.url("b")
        // Same passphrase, same item: only the vault differs.
        for url in [a, b] {
            let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
            try vault.set("secret-x", service: "svc", account: "acct")
        }
        let bytesA = try readBytes(a)
        var bytesB = try readBytes(b)
        let rangeA = Self.recordRanges(bytesA)[0]
        let rangeB = Self.recordRanges(bytesB)[0]
        #expect(rangeA.count == rangeB.count)
        bytesB.replaceSubrange(rangeB, with: bytesA[rangeA])
        try writeBytes(bytesB, to: b)
        expectError(.corrupted) { _ = try Vault.open(at: b, unlock: .passphrase("pw")) }
        // The header (with its key slots) of one vault over another's records: detected.
        var mixed = try readBytes(a)
        let headerEnd = 32 + VaultHeader.areaSize
        mixed.replaceSubrange(0..<headerEnd, with: try readBytes(b)[0..<headerEnd])
        try writeBytes(mixed, to: a)
        expectError(.corrupted) { _ = try Vault.open(at: a, unlock: .passphrase("pw")) }
    }

    @Test func damagedHeaderReadsAsDamageNotAsWrongPassphrase() throws {
        let dir = try Scratch("header")
        let url = dir.url("v")
        _ = try Self.makeSmallVault(at: url)
        var bytes = try readBytes(url)
        // Damage both copies' slot bytes (a random disk error): checksums no longer match.
        for copy in 0..<2 { bytes[32 + copy * VaultHeader.copySize + VaultHeader.slotsOffset + 70] ^= 0x10 }
        try writeBytes(bytes, to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect(error?.message.contains("header") == true)
    }

    /// An attacker who rewrites a header copy with a valid checksum (here: sequence bumped so it
    /// wins) is caught by the header MAC once the master key is known.
    @Test func forgedHeaderWithValidChecksumFailsItsMAC() throws {
        let dir = try Scratch("forge")
        let url = dir.url("v")
        _ = try Self.makeSmallVault(at: url)
        var bytes = try readBytes(url)
        let base = 32
        bytes[base + 8] &+= 5  // sequence
        let crc = CRC32C.checksum(Array(bytes[base..<(base + VaultHeader.crcOffset)]))
        withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { bytes[base + VaultHeader.crcOffset + i] = $0[i] } }
        try writeBytes(bytes, to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect(error?.message.contains("authentication") == true)
    }
}

@Suite("Vault salvage")
struct VaultSalvageTests {
    /// Makes a three-item vault and returns its bytes and the ranges of its records.
    static func make(_ url: URL) throws -> ([UInt8], [Range<Int>]) {
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        for i in 0..<3 { try vault.set("secret-\(i)", service: "svc", account: "a\(i)") }
        let bytes = try readBytes(url)
        return (bytes, TamperTests.recordRanges(bytes))
    }

    @Test func aTamperedRecordIsSkippedAndTheRestKept() throws {
        let dir = try Scratch("salvage")
        let url = dir.url("v")
        let (bytes, ranges) = try Self.make(url)
        // Alter the middle record's ciphertext and fix its CRCs: only authentication can tell.
        var image = bytes
        let frame = ranges[1]
        image[frame.lowerBound + 12 + 30] ^= 0x20
        let crc = CRC32C.checksum(Array(image[(frame.lowerBound + 12)..<frame.upperBound]))
        withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { image[frame.lowerBound + 4 + i] = $0[i] } }
        let check = CRC32C.checksum(Array(image[frame.lowerBound..<(frame.lowerBound + 8)]))
        withUnsafeBytes(of: check.littleEndian) { for i in 0..<4 { image[frame.lowerBound + 8 + i] = $0[i] } }
        try writeBytes(image, to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect(error?.offset == Int64(frame.lowerBound))
        #expect(error?.message.contains("salvage") == true)
        // A wrong passphrase changes nothing, even with salvage.
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase("nope"), recovery: .salvage) }
        #expect(try readBytes(url) == image)
        let vault = try Vault.open(at: url, unlock: .passphrase("pw"), recovery: .salvage)
        #expect(try vault.items().map(\.account) == ["a0", "a2"])
        #expect(try vault.string(service: "svc", account: "a2") == "secret-2")
        // Rewritten: a strict open now succeeds, and the damaged file was kept aside.
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).items().count == 2)
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".damaged-") }
        #expect(!aside.isEmpty)
    }

    /// Alters one byte of a record's ciphertext and fixes the frame's CRCs: only authentication can tell.
    static func tamper(_ image: inout [UInt8], frame: Range<Int>) {
        image[frame.lowerBound + 12 + 30] ^= 0x20
        let crc = CRC32C.checksum(Array(image[(frame.lowerBound + 12)..<frame.upperBound]))
        withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { image[frame.lowerBound + 4 + i] = $0[i] } }
        let check = CRC32C.checksum(Array(image[frame.lowerBound..<(frame.lowerBound + 8)]))
        withUnsafeBytes(of: check.littleEndian) { for i in 0..<4 { image[frame.lowerBound + 8 + i] = $0[i] } }
    }

    /// A batch large enough to be opened on two threads: later records still win over earlier
    /// ones, and failures are reported (strict) or skipped (salvage) in record order, in both halves.
    @Test func aLargeVaultOpensInOrderAndSalvagesInBothHalves() throws {
        let dir = try Scratch("salvage-large")
        let url = dir.url("v")
        let count = Session.parallelOpenThreshold + 200
        do {
            let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF, durability: .coalesced)
            try vault.apply(
                (0..<count).map { .set(service: "svc", account: "a\($0)", secret: Array("s\($0)".utf8), label: nil, comment: nil) })
            try vault.apply([
                .set(service: "svc", account: "a1", secret: Array("new".utf8), label: "L", comment: nil),
                .remove(service: "svc", account: "a2"),
            ])
            try vault.flush()
        }
        do {
            let vault = try Vault.open(at: url, unlock: .passphrase("pw"))
            #expect(try vault.items().count == count - 1)
            #expect(try vault.string(service: "svc", account: "a1") == "new")
            #expect(try vault.item(service: "svc", account: "a1")?.label == "L")
            #expect(try vault.item(service: "svc", account: "a2") == nil)
            #expect(try vault.string(service: "svc", account: "a\(count - 1)") == "s\(count - 1)")
            #expect(try vault.verify().records == count + 2)
            vault.lock()
        }
        let bytes = try readBytes(url)
        let ranges = TamperTests.recordRanges(bytes)
        #expect(ranges.count == count + 2)
        var image = bytes
        Self.tamper(&image, frame: ranges[count - 10])  // in the second half
        Self.tamper(&image, frame: ranges[10])  // in the first half: reported first
        try writeBytes(image, to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect(error?.offset == Int64(ranges[10].lowerBound))
        let vault = try Vault.open(at: url, unlock: .passphrase("pw"), recovery: .salvage)
        #expect(try vault.items().count == count - 3)
        #expect(try vault.item(service: "svc", account: "a10") == nil)
        #expect(try vault.item(service: "svc", account: "a\(count - 10)") == nil)
        #expect(try vault.string(service: "svc", account: "a11") == "s11")
        #expect(try vault.string(service: "svc", account: "a1") == "new")
        #expect(try vault.string(service: "svc", account: "a\(count - 1)") == "s\(count - 1)")
    }

    /// A record too short to hold a tag, deep in a batch opened on two threads (so the chain
    /// stops there while the other thread opens): strict open names it, and nothing after it
    /// is opened or applied.
    @Test(arguments: [0, 1, Session.pipelineBlock - 1, Session.pipelineBlock + 5])
    func aShortRecordInALargeBatchIsReportedAtItsOffset(after extra: Int) throws {
        let dir = try Scratch("short-large")
        let url = dir.url("v")
        let count = Session.parallelOpenThreshold + 3 * Session.pipelineBlock + extra
        do {
            let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF, durability: .coalesced)
            try vault.apply(
                (0..<count).map { .set(service: "svc", account: "a\($0)", secret: [1], label: nil, comment: nil) })
            vault.lock()
        }
        // Behind the vault's back: a 3-byte record, then 300 records of noise.
        let options = JournalOptions(
            application: Vault.application, headerAreaSize: VaultHeader.areaSize, durability: .immediate, lockTimeout: .seconds(10))
        let (journal, _) = try Journal.open(
            path: url.path, options: options, fileSystem: LiveFileSystem(), create: .openExisting)
        let offsets = try journal.withWriteLock { _ in
            try journal.append([[1, 2, 3]] + (0..<300).map { _ in SecureRandom.bytes(count: 100) })
        }
        try journal.close()
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect(error?.offset == offsets[0])
        #expect(error?.message.contains("too short") == true)
    }

    /// Salvage past a record too short to hold a tag (its frame intact, so only the vault can
    /// tell): the chain ends there, so salvage keeps every item before it and drops it with
    /// everything after. It used to throw the strict open's error, and so kept nothing (an
    /// outside attack found it). One thread (10 items) and two (a large batch).
    @Test(arguments: [10, Session.parallelOpenThreshold + 3 * Session.pipelineBlock + 1])
    func salvageKeepsEveryItemBeforeAShortRecord(count: Int) throws {
        let dir = try Scratch("short-salvage")
        let url = dir.url("v")
        do {
            let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF, durability: .coalesced)
            try vault.apply(
                (0..<count).map { .set(service: "svc", account: "a\($0)", secret: [UInt8($0 % 251)], label: nil, comment: nil) })
            vault.lock()
        }
        let options = JournalOptions(
            application: Vault.application, headerAreaSize: VaultHeader.areaSize, durability: .immediate, lockTimeout: .seconds(10))
        let (journal, _) = try Journal.open(
            path: url.path, options: options, fileSystem: LiveFileSystem(), create: .openExisting)
        _ = try journal.withWriteLock { _ in
            try journal.append([[1, 2, 3]] + (0..<20).map { _ in SecureRandom.bytes(count: 100) })
        }
        try journal.close()
        expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        let vault = try Vault.open(at: url, unlock: .passphrase("pw"), recovery: .salvage)
        #expect(try vault.items().count == count)
        #expect(try vault.data(service: "svc", account: "a0") == Data([0]))
        #expect(try vault.data(service: "svc", account: "a\(count - 1)") == Data([UInt8((count - 1) % 251)]))
        // Rewritten: a strict open now succeeds, and a write after it lands.
        try vault.set("after", service: "svc", account: "after")
        vault.lock()
        let reopened = try Vault.open(at: url, unlock: .passphrase("pw"))
        #expect(try reopened.items().count == count + 1)
        #expect(try reopened.string(service: "svc", account: "after") == "after")
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".damaged-") }
        #expect(!aside.isEmpty)
    }

    /// Counts around the two-thread pipeline's block of 64, the last block of one record
    /// among them (64k + 1: its record's index reads the chain value after it, which the chain's
    /// owner writes last; the indexer once read it before it was written, a race a review found
    /// by delaying that write). Every open ends on the same chain value as a walk of the
    /// records on one thread, and a write after it opens again. Two vaults are opened in turn:
    /// a value read too early would be the other vault's (the allocator hands the same block
    /// back), never by chance the right one.
    @Test(arguments: [
        Session.parallelOpenThreshold, Session.parallelOpenThreshold + 1, Session.parallelOpenThreshold + 63,
        Session.parallelOpenThreshold + Session.pipelineBlock + 1,
    ])
    func everyOpenOfALargeBatchEndsOnTheChainOfItsLastRecord(count: Int) throws {
        let dir = try Scratch("chain-end")
        let key = try SecureBytes.random(count: 32)
        let urls = [dir.url("v1"), dir.url("v2")]
        var expected: [ChainValue] = []
        for url in urls {
            let vault = try Vault.create(at: url, unlock: .key(key), durability: .coalesced)
            try vault.apply(
                (0..<count).map { .set(service: "svc", account: "a\($0)", secret: [UInt8($0 % 251)], label: nil, comment: nil) })
            // The expected end: the chain walked over every record's tag on this thread.
            let (keys, start) = try vault.withSession { session in
                (session.keys, try session.keys.genesis(vaultID: session.header.vaultID, epoch: session.header.epoch))
            }
            vault.lock()
            let options = JournalOptions(
                application: Vault.application, headerAreaSize: VaultHeader.areaSize, durability: .immediate,
                lockTimeout: .seconds(10))
            let (journal, records) = try Journal.open(
                path: url.path, options: options, fileSystem: LiveFileSystem(), create: .openExisting)
            var chain = start
            for record in records { chain = try keys.advance(chain, over: [UInt8](record.payload)) }
            try journal.close()
            expected.append(chain)
        }
        #expect(expected[0] != expected[1])
        for _ in 0..<25 {
            for (url, chain) in zip(urls, expected) {
                let vault = try Vault.open(at: url, unlock: .key(key))
                #expect(try vault.withSession { $0.chain } == chain)
                vault.lock()
            }
        }
        let vault = try Vault.open(at: urls[0], unlock: .key(key))
        try vault.set("after", service: "svc", account: "after")
        vault.lock()
        let reopened = try Vault.open(at: urls[0], unlock: .key(key))
        #expect(try reopened.string(service: "svc", account: "after") == "after")
        #expect(try reopened.data(service: "svc", account: "a\(count - 1)") == Data([UInt8((count - 1) % 251)]))
        #expect(try reopened.items().count == count + 1)
    }

    @Test func aDamagedFrameKeepsEveryEarlierRecord() throws {
        let dir = try Scratch("salvage-frame")
        let url = dir.url("v")
        let (bytes, ranges) = try Self.make(url)
        var image = bytes
        image[ranges[1].lowerBound + 40] ^= 0x01  // the frame's CRC now fails: journal-level damage
        try writeBytes(image, to: url)
        expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        let vault = try Vault.open(at: url, unlock: .passphrase("pw"), recovery: .salvage)
        // The chain went through the lost record, so what follows it cannot be verified: kept are
        // the records before the damage, never a record that fails authentication.
        #expect(try vault.items().map(\.account) == ["a0"])
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).verify().items == 1)
    }
}
