// Attacks on the journal with crafted files: frames built to make the damage search quadratic.
@testable import CofferCore
import CofferRuntime
@testable import CofferJournal
import CofferTesting
import Foundation
import Testing

/// A file damaged on purpose so that, after an invalid frame, every 12 bytes hold a frame header
/// with a valid check whose payload runs to the end of the file and fails its CRC. Before the
/// fix the search for "an intact frame after the damage" computed the CRC of each of those
/// payloads: n²/24 bytes, 46 s for 1 MiB and about 3 hours for 16 MiB (debug build), at every
/// open of such a vault or key-value file. Every checksum and torn-sector walk of one scan is
/// now paid from one budget (twice the file plus 64 MiB).
@Suite("Journal: crafted frames")
struct JournalAttackTests {
    let fs = LiveFileSystem()
    let options = JournalOptions(application: 9, durability: .immediate)

    /// A frame header whose own check passes, claiming every byte up to `count` as its payload
    /// with a wrong payload CRC.
    static func appendInvalidFrame(claimingUpTo count: Int, to bytes: inout [UInt8]) {
        let start = bytes.count
        appendLE(UInt32(count - start - Journal.frameHeaderSize), to: &bytes)
        appendLE(UInt32(0x1234_5678), to: &bytes)
        appendLE(CRC32C.checksum(Array(bytes[start..<(start + 8)])), to: &bytes)
    }

    /// `count` bytes of overlapping frame headers, each claiming the rest of the bytes as its
    /// payload with a wrong payload CRC, and each with a valid header check.
    static func overlappingFrames(count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        while count - bytes.count - Journal.frameHeaderSize >= 1 {
            appendInvalidFrame(claimingUpTo: count, to: &bytes)
        }
        bytes += [UInt8](repeating: 1, count: count - bytes.count)
        return bytes
    }

    // 16 MiB: the bounded scan takes about a second in a debug build, a quadratic one hours (the
    // alternating test was stopped after 5 minutes without the fix). `.timeLimit` cannot stop a
    // synchronous scan, so a regression shows as a run that does not end, never as a timed
    // assertion that a loaded machine could fail.

    /// The scan of `bytes` from 0, strict and then salvaging.
    static func scans(_ bytes: [UInt8]) -> [(salvage: Bool, scan: Journal.Scan)] {
        [false, true].map { salvage in
            (salvage, bytes.withUnsafeBytes {
                Journal.scanFrames($0, from: 0, maxPayload: Int(Journal.lengthMask), salvage: salvage)
            })
        }
    }

    @Test("overlapping crafted frames are judged in bounded time, as damage", .timeLimit(.minutes(10)))
    func overlappingFramesAreJudgedQuickly() {
        for (_, scan) in Self.scans(Self.overlappingFrames(count: 16 << 20)) {
            #expect(scan.frames.isEmpty)
            #expect(scan.end == 0)
            #expect(scan.damage == [0], "the crafted frames are damage, not a torn tail to be wiped")
            #expect(scan.exhausted, "the scan says it stopped at its bound")
        }
    }

    /// Invalid frames that claim the rest of the file, each followed by a tiny intact commit:
    /// salvage resumes after every invalid frame, and each one used to cost a checksum and a
    /// torn-sector walk over the rest of the file (n²/50 bytes of CRC: hours at 16 MiB).
    static func alternatingFrames(count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        let good: [UInt8] = [0x42]
        while count - bytes.count >= 2 * Journal.frameHeaderSize + good.count + 1 {
            appendInvalidFrame(claimingUpTo: count, to: &bytes)
            good.withUnsafeBytes { Journal.appendFrame($0, continued: false, continues: false, to: &bytes) }
        }
        bytes += [UInt8](repeating: 1, count: count - bytes.count)
        return bytes
    }

    @Test("invalid frames claiming the rest of the file between intact ones: bounded, damage", .timeLimit(.minutes(10)))
    func alternatingFramesAreBounded() {
        let bytes = Self.alternatingFrames(count: 16 << 20)
        for (salvage, scan) in Self.scans(bytes) {
            #expect(scan.damage.first == 0, "the first invalid frame is damage (salvage: \(salvage))")
            if salvage {
                // The intact commits salvage could afford to reach are kept, in order; it stops
                // once the budget is spent, and what follows is never taken for a torn tail.
                #expect(!scan.frames.isEmpty)
                #expect(scan.frames.allSatisfy { $0.count == 1 && bytes[$0.start] == 0x42 })
                #expect(scan.frames.count < 1000)
                #expect(scan.exhausted, "the scan says it stopped at its bound, so open will not salvage")
            } else {
                #expect(scan.frames.isEmpty)
                #expect(scan.end == 0)
            }
        }
    }

    /// A journal holding one intact record, followed by `tail`; its path and bytes.
    func storeWithTail(_ tail: [UInt8], in dir: Scratch) throws -> (path: String, image: [UInt8]) {
        let path = dir.path("j")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.withWriteLock { _ in _ = try journal.append([Data("kept".utf8)]) }
        let end = Int(journal.dataEnd)
        try journal.close()
        let image = Array(Array(try Data(contentsOf: URL(fileURLWithPath: path)))[..<end]) + tail
        try Data(image).write(to: URL(fileURLWithPath: path))
        return (path, image)
    }

    @Test("opening a store whose tail holds crafted frames refuses it, in bounded time", .timeLimit(.minutes(10)))
    func openRefusesCraftedTailQuickly() throws {
        let dir = try Scratch("crafted")
        let (path, image) = try storeWithTail(Self.overlappingFrames(count: 16 << 20), in: dir)
        expectError(.corrupted) { _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting) }
        // Nothing was changed: the crafted bytes are still there for a person to look at.
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == image)
    }

    @Test("salvage refuses a file it could not examine within its bound, and changes nothing", .timeLimit(.minutes(10)))
    func salvageRefusesAnExhaustedScan() throws {
        let dir = try Scratch("crafted-salvage")
        let (path, image) = try storeWithTail(Self.alternatingFrames(count: 16 << 20), in: dir)
        let error = #expect(throws: CofferError.self) {
            _ = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting, recovery: .salvage)
        }
        #expect(error?.code == .corrupted)
        #expect(error?.message.contains("more damage than Coffer examines automatically") == true)
        // Nothing was rewritten and no damaged copy was set aside: the file is as it was.
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == image)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("damaged") }.isEmpty)
    }

    @Test("opening a store removes its own leftover temporary files, never another store's")
    func openRemovesOnlyItsOwnTemporaryFiles() throws {
        let dir = try Scratch("temporaries")
        let path = dir.path("a.coffer")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.close()
        // A leftover of this store's own, as DurableIO names it (a crash mid-compaction)...
        let own = dir.path(".a.coffer.\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp")
        // ...and the file a compaction of the store `a.coffer.old.coffer` is about to rename into place.
        let other = dir.path(".a.coffer.old.coffer.\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp")
        for file in [own, other] { try Data("x".utf8).write(to: URL(fileURLWithPath: file)) }
        let (reopened, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        try reopened.close()
        #expect(!FileManager.default.fileExists(atPath: own), "this store's leftover temporary file was kept")
        #expect(FileManager.default.fileExists(atPath: other), "another store's temporary file was removed")
    }

    @Test("opening a store leaves a damaged copy's temporary file named in the last hour: a salvage may be writing it")
    func openLeavesARecentDamagedCopyBeingWritten() throws {
        let dir = try Scratch("temporaries-damaged")
        let path = dir.path("a.coffer")
        let (journal, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .createNew)
        try journal.close()
        let now = Int(Date().timeIntervalSince1970)
        let random = { String(UInt64.random(in: 0...UInt64.max), radix: 36) }
        // Another process's salvage, copying the damaged file aside outside the store's lock...
        let inProgress = dir.path(".a.coffer.damaged-\(now)-records.\(random()).tmp")
        // ...and what a salvage that crashed two hours ago left.
        let leftover = dir.path(".a.coffer.damaged-\(now - 7200).\(random()).tmp")
        for file in [inProgress, leftover] { try Data("x".utf8).write(to: URL(fileURLWithPath: file)) }
        let (reopened, _) = try Journal.open(path: path, options: options, fileSystem: fs, create: .openExisting)
        try reopened.close()
        #expect(FileManager.default.fileExists(atPath: inProgress), "a salvage's copy in progress was removed")
        #expect(!FileManager.default.fileExists(atPath: leftover), "an old leftover was kept")
    }

    @Test("the temporary file of a damaged copy being set aside is this store's to remove; look-alikes are not")
    func temporaryNames() {
        let prefix = ".a.coffer."
        for own in ["x1z", "damaged-1700000000.k3", "damaged-1700000000-records.k3", "damaged-1700000000-2.k3",
                    "damaged-1700000000-records-3.k3"] {
            #expect(Journal.isTemporaryFile(prefix + own + ".tmp", prefix: prefix), "\(own)")
        }
        for other in ["old.coffer.x1z", "damaged-.k3", "damaged-17x.k3", "damaged-1-records-2-3.k3", "", "damaged-1.",
                      "X1Z"] {
            #expect(!Journal.isTemporaryFile(prefix + other + ".tmp", prefix: prefix), "\(other)")
        }
    }
}
