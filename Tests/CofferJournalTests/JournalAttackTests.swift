// Attacks on the journal with crafted files: frames built to make the damage search quadratic.
@testable import CofferCore
@testable import CofferJournal
import Foundation
import Testing

/// A file damaged on purpose so that, after an invalid frame, every 12 bytes hold a frame header
/// with a valid check whose payload runs to the end of the file and fails its CRC. Before the
/// fix the search for "an intact frame after the damage" computed the CRC of each of those
/// payloads: n²/24 bytes, 46 s for 1 MiB and about 3 hours for 16 MiB (debug build), at every
/// open of such a vault or key-value file.
@Suite("Journal: crafted frames")
struct JournalAttackTests {
    let fs = LiveFileSystem()
    let options = JournalOptions(application: 9, durability: .immediate)

    /// `count` bytes of overlapping frame headers, each claiming the rest of the bytes as its
    /// payload with a wrong payload CRC, and each with a valid header check.
    static func overlappingFrames(count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        while count - bytes.count - Journal.frameHeaderSize >= 1 {
            let start = bytes.count
            appendLE(UInt32(count - start - Journal.frameHeaderSize), to: &bytes)
            appendLE(UInt32(0x1234_5678), to: &bytes)
            appendLE(CRC32C.checksum(Array(bytes[start..<(start + 8)])), to: &bytes)
        }
        bytes += [UInt8](repeating: 1, count: count - bytes.count)
        return bytes
    }

    @Test("overlapping crafted frames are judged in linear time, as damage", .timeLimit(.minutes(2)))
    func overlappingFramesAreJudgedQuickly() {
        let bytes = Self.overlappingFrames(count: 1 << 20)
        for salvage in [false, true] {
            let clock = ContinuousClock()
            var scan: Journal.Scan?
            let elapsed = clock.measure {
                scan = bytes.withUnsafeBytes {
                    Journal.scanFrames($0, from: 0, maxPayload: Int(Journal.lengthMask), salvage: salvage)
                }
            }
            // Linear: about 0.1 s here; quadratic: 46 s.
            #expect(elapsed < .seconds(15), "scanning 1 MiB of crafted frames took \(elapsed) (salvage: \(salvage))")
            #expect(scan?.records.isEmpty == true)
            #expect(scan?.end == 0)
            #expect(scan?.damage == [0], "the crafted frames are damage, not a torn tail to be wiped")
        }
    }

    @Test("opening a store whose tail holds crafted frames refuses it quickly", .timeLimit(.minutes(2)))
    func openRefusesCraftedTailQuickly() throws {
        let dir = try Scratch("crafted")
        let path = dir.file("j")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.withWriteLock { _ in _ = try journal.append([Data("kept".utf8)]) }
        let end = Int(journal.dataEnd)
        try journal.close()
        var image = Array(try Data(contentsOf: URL(fileURLWithPath: path)))[..<end]
        image += Self.overlappingFrames(count: 1 << 20)
        try Data(image).write(to: URL(fileURLWithPath: path))
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            expectError(.corrupted) { _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting) }
        }
        #expect(elapsed < .seconds(15), "opening took \(elapsed)")
        // Nothing was changed: the crafted bytes are still there for a person to look at.
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == Array(image))
    }

    @Test("opening a store removes its own leftover temporary files, never another store's")
    func openRemovesOnlyItsOwnTemporaryFiles() throws {
        let dir = try Scratch("temporaries")
        let path = dir.file("a.coffer")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.close()
        // A leftover of this store's own, as DurableIO names it (a crash mid-compaction)...
        let own = dir.file(".a.coffer.\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp")
        // ...and the file a compaction of the store `a.coffer.old.coffer` is about to rename into place.
        let other = dir.file(".a.coffer.old.coffer.\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp")
        for file in [own, other] { try Data("x".utf8).write(to: URL(fileURLWithPath: file)) }
        let (reopened, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        try reopened.close()
        #expect(!FileManager.default.fileExists(atPath: own), "this store's leftover temporary file was kept")
        #expect(FileManager.default.fileExists(atPath: other), "another store's temporary file was removed")
    }
}
