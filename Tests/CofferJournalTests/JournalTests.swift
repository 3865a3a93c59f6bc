@testable import CofferCore
import CofferRuntime
@testable import CofferJournal
import CofferStorage
import CofferTesting
import Foundation
import Testing

@Suite("Journal: crash recovery and damage")
struct JournalTests {
    let fs = LiveFileSystem()
    let options = JournalOptions(application: 9, durability: .immediate)

    func payload(_ i: Int) -> Data { Data("record-\(i)-".utf8) + Data(repeating: UInt8(i & 0xFF), count: i % 37) }

    /// Writes records 1…n, returning the file's bytes and each record's offset.
    func makeJournal(at path: String, count n: Int) throws -> (bytes: [UInt8], offsets: [Int64], dataEnd: Int64) {
        let (journal, records) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        #expect(records.isEmpty)
        var offsets: [Int64] = []
        for i in 1...n {
            offsets += try journal.withWriteLock { _ in try journal.append([payload(i)]) }
        }
        let end = journal.dataEnd
        try journal.close()
        return (Array(try Data(contentsOf: URL(fileURLWithPath: path))), offsets, end)
    }

    @Test func roundTripAndReopen() throws {
        let dir = try Scratch("journal")
        let path = dir.path("j")
        _ = try makeJournal(at: path, count: 20)
        let (journal, records) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        #expect(records.map(\.payload) == (1...20).map(payload))
        try journal.close()
    }

    /// Truncating the file at every byte offset inside the last record loses exactly that
    /// record, and the journal then accepts new writes that survive another reopen.
    @Test func truncationAtEveryOffsetOfTheLastRecord() throws {
        let dir = try Scratch("truncate")
        let path = dir.path("j")
        let n = 6
        let (bytes, offsets, end) = try makeJournal(at: path, count: n)
        let last = Int(offsets[n - 1])
        for cut in last..<Int(end) {
            try Data(bytes[0..<cut]).write(to: URL(fileURLWithPath: path))
            let (journal, records) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            #expect(records.map(\.payload) == (1..<n).map(payload), "cut at \(cut)")
            try journal.withWriteLock { _ in _ = try journal.append([Data("after".utf8)]) }
            try journal.close()
            let (_, again) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            #expect(again.map(\.payload) == (1..<n).map(payload) + [Data("after".utf8)], "cut at \(cut)")
        }
    }

    /// Power loss mid-append: the device persisted some sectors of the last record and not the
    /// rest, which stay zero (the space after the last record is always zero). Every
    /// sector-aligned cut inside a multi-sector last record reads as a torn tail.
    @Test func tornLastRecordInsidePreallocatedSpace() throws {
        let dir = try Scratch("torn")
        let path = dir.path("j")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.withWriteLock { _ in _ = try journal.append([payload(1), payload(2)]) }
        let big = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7 + 1) })
        let last = try journal.withWriteLock { _ in try journal.append([big]) }[0]
        let end = journal.dataEnd
        try journal.close()
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        var cuts = [Int(last)]
        var boundary = (Int(last) / Journal.sectorSize + 1) * Journal.sectorSize
        while boundary < Int(end) {
            cuts.append(boundary)
            boundary += Journal.sectorSize
        }
        #expect(cuts.count >= 6)
        for cut in cuts {
            var image = bytes
            for i in cut..<Int(end) { image[i] = 0 }
            try Data(image).write(to: URL(fileURLWithPath: path))
            let (reopened, records) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            #expect(records.map(\.payload) == [payload(1), payload(2)], "zeroed from \(cut)")
            try reopened.close()
        }
        // A flipped byte in the last record is damage, not a crash: it is reported, not dropped.
        for position in [Int(last) + 3, Int(last) + 20, Int(end) - 1] {
            var image = bytes
            image[position] ^= 0x5A
            try Data(image).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: CofferError.self) {
                _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            }
            #expect(error?.code == .corrupted, "flip at \(position)")
            #expect(error?.offset == last)
        }
    }

    /// A flipped byte inside a middle record is damage, not a torn tail: opening names the
    /// record's offset, and salvage keeps every other record.
    @Test func flippedByteInAMiddleRecord() throws {
        let dir = try Scratch("flip")
        let path = dir.path("j")
        let n = 9
        let (bytes, offsets, _) = try makeJournal(at: path, count: n)
        let victim = 4  // record 5
        let start = Int(offsets[victim])
        let stop = Int(offsets[victim + 1])
        for position in start..<stop {
            var image = bytes
            image[position] ^= 0x40
            try Data(image).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: CofferError.self) {
                _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            }
            #expect(error?.code == .corrupted)
            #expect(error?.offset == offsets[victim], "flip at \(position)")
            // Nothing was changed by the failed open.
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == image)
        }
        // Salvage: every record but the damaged one, and the damaged file is kept aside.
        var image = bytes
        image[start + 14] ^= 0x01
        try Data(image).write(to: URL(fileURLWithPath: path))
        let (journal, records) = try Journal.open(
            path: path, options: options, fileSystem: fs, create: .openExisting, recovery: .salvage)
        let expected = (1...n).filter { $0 != victim + 1 }.map(payload)
        #expect(records.map(\.payload) == expected)
        try journal.close()
        let (_, reopened) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        #expect(reopened.map(\.payload) == expected)
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".damaged-") }
        #expect(aside.count == 1)
    }

    /// A batch is one commit: a crash inside it loses all of it, never part of it.
    @Test func batchIsAllOrNothing() throws {
        let dir = try Scratch("batch")
        let path = dir.path("j")
        var (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.withWriteLock { _ in _ = try journal.append([Data("one".utf8)]) }
        let offsets = try journal.withWriteLock { _ in
            try journal.append([Data("a".utf8), Data("b".utf8), Data("c".utf8)])
        }
        let end = journal.dataEnd
        try journal.close()
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        for cut in Int(offsets[0] + 1)..<Int(end) {
            try Data(bytes[0..<cut]).write(to: URL(fileURLWithPath: path))
            let records: JournalRecords
            (journal, records) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
            #expect(records.map(\.payload) == [Data("one".utf8)], "cut at \(cut)")
            try journal.close()
        }
    }

    @Test func headerDamageAndVersionAreReported() throws {
        let dir = try Scratch("header")
        let path = dir.path("j")
        let (bytes, _, _) = try makeJournal(at: path, count: 2)
        var image = bytes
        image[3] ^= 1
        try Data(image).write(to: URL(fileURLWithPath: path))
        expectError(.corrupted) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        }
        // A newer version, with a valid header checksum, is "unsupported", not "corrupted".
        image = bytes
        image[8] = 2
        let crc = CRC32C.checksum(Array(image[0..<28]))
        withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { image[28 + i] = $0[i] } }
        try Data(image).write(to: URL(fileURLWithPath: path))
        expectError(.unsupportedVersion) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        }
        // Too short to be a store at all.
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: path))
        expectError(.corrupted) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        }
    }

    @Test func absurdLengthsAreRejectedWithoutAllocating() throws {
        let dir = try Scratch("absurd")
        let path = dir.path("j")
        let (bytes, offsets, _) = try makeJournal(at: path, count: 3)
        // Claim a 2 GiB payload in the middle record, with a valid header check.
        var image = bytes
        let o = Int(offsets[1])
        let word: UInt32 = 0x7FFF_FFFF
        withUnsafeBytes(of: word.littleEndian) { for i in 0..<4 { image[o + i] = $0[i] } }
        let check = CRC32C.checksum(Array(image[o..<(o + 8)]))
        withUnsafeBytes(of: check.littleEndian) { for i in 0..<4 { image[o + 8 + i] = $0[i] } }
        try Data(image).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: CofferError.self) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        }
        #expect(error?.code == .corrupted)
        #expect(error?.offset == offsets[1])
    }

    @Test func createNewRefusesToOverwriteAndOpenExistingRequiresAFile() throws {
        let dir = try Scratch("modes")
        let path = dir.path("j")
        expectError(.notFound) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        }
        _ = try makeJournal(at: path, count: 1)
        expectError(.alreadyExists) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        }
    }

    /// Another instance (standing in for another process) sees appends and compactions on its
    /// next refresh, without reopening.
    @Test func refreshSeesOtherWritersAndCompaction() throws {
        let dir = try Scratch("refresh")
        let path = dir.path("j")
        let (writer, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        let (reader, initial) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        #expect(initial.isEmpty)
        try writer.withWriteLock { _ in _ = try writer.append([payload(1), payload(2)]) }
        let changes = try reader.refresh()
        #expect(!changes.reset)
        #expect(changes.records.map(\.payload) == [payload(1), payload(2)])
        #expect(try reader.refresh().isEmpty)
        try writer.withWriteLock { _ in try writer.rewrite(payloads: [payload(7)]) }
        let after = try reader.refresh()
        #expect(after.reset)
        #expect(after.records.map(\.payload) == [payload(7)])
        // The reader, writing next, appends to the new file.
        try reader.withWriteLock { _ in _ = try reader.append([payload(8)]) }
        let (_, all) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        #expect(all.map(\.payload) == [payload(7), payload(8)])
    }

    /// Bytes after the last commit that are neither a torn write nor zeros are damage: a writer
    /// that judges the tail reports their offset and says what follows them.
    @Test func damageAfterTheLastCommitSaysWhatFollowsIt() throws {
        let dir = try Scratch("judge")
        let path = dir.path("j")
        var checking = options
        checking.identityCheckInterval = .zero  // every write checks the path and judges the tail
        let (journal, _) = try Journal.open(path: path, options: checking, fileSystem: fs, create: .createNew)
        try journal.withWriteLock { _ in _ = try journal.append([payload(1)]) }
        let end = journal.dataEnd
        func write(_ bytes: [UInt8], at offset: Int64) throws {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seek(toOffset: UInt64(offset))
            try handle.write(contentsOf: Data(bytes))
            try handle.close()
        }
        // 20 bytes that are not a frame, with no all-zero sector inside: not a torn write.
        try write([UInt8](repeating: 0xA5, count: 20), at: end)
        let alone = #expect(throws: CofferError.self) { try journal.withWriteLock { _ in } }
        #expect(alone?.code == .corrupted)
        #expect(alone?.offset == end)
        #expect(alone?.message.contains("it is not a torn write") == true, "\(String(describing: alone))")
        // An intact commit after the damage.
        var frame: [UInt8] = []
        payload(2).withUnsafeBytes { Journal.appendFrame($0, continued: false, continues: false, to: &frame) }
        try write(frame, at: end + 20)
        let followed = #expect(throws: CofferError.self) { try journal.withWriteLock { _ in } }
        #expect(followed?.code == .corrupted)
        #expect(followed?.offset == end)
        #expect(followed?.message.contains("1 intact record(s) follow it") == true, "\(String(describing: followed))")
        try journal.close()
    }

    @Test func scannerNeverCrashesOnRandomBytes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let length = Int.random(in: 0..<512, using: &generator)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let scan = bytes.withUnsafeBytes { Journal.scanFrames($0, from: 0, maxPayload: 1 << 20, salvage: true) }
            #expect(scan.end <= length)
        }
    }
}
