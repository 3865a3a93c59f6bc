@testable import CofferCore
import CofferRuntime
@testable import CofferJournal
import CofferTesting
import Foundation
import Testing

/// The control page in a journal's lock file (`JournalControl`): a shared writer that is caught
/// up skips the `stat` and the read per write, and never misses what another process did.
/// Each `Journal` instance stands in for a process (each has its own lock descriptor).
@Suite("Journal: the shared control page")
struct JournalControlTests {
    /// Long enough that no test here sees the periodic check of the path, however slow the machine.
    var shared: JournalOptions {
        var options = JournalOptions(application: 9, durability: .coalesced)
        options.identityCheckInterval = .seconds(3600)
        return options
    }
    var exclusive: JournalOptions {
        var options = shared
        options.exclusive = true
        return options
    }

    func payload(_ i: Int) -> Data { Data("record-\(i)".utf8) }

    func memoryFS() throws -> InMemoryFileSystem {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/data")
        return fs
    }

    func open(_ path: String, _ fs: any FileSystem, _ options: JournalOptions? = nil) throws -> (Journal, [Data]) {
        let (journal, records) = try Journal.open(
            path: path, options: options ?? shared, fileSystem: fs, create: .openOrCreate)
        return (journal, records.map(\.payload))
    }

    func append(_ journal: Journal, _ i: Int) throws -> JournalChanges {
        try journal.withWriteLock { changes in
            try journal.append([payload(i)])
            return changes
        }
    }

    @Test func aCaughtUpWriterNeitherStatsNorReadsTheJournal() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (journal, _) = try open(path, fs)
        _ = try append(journal, 0)
        fs.resetCalls()
        for i in 1...100 {
            #expect(try append(journal, i).isEmpty)
            #expect(try journal.refresh().isEmpty)
        }
        let onJournal: (String) -> Bool = { $0 == path }
        #expect(fs.callCount(.stat, where: onJournal) == 0)
        #expect(fs.callCount(.fstat, where: onJournal) == 0)
        #expect(fs.callCount(.pread, where: onJournal) == 0)
        #expect(fs.callCount(.pwrite, where: onJournal) == 100)
        let (_, all) = try open(path, fs)
        #expect(all == (0...100).map(payload))
    }

    /// A frame header that claims far more than the file holds (a damaged header, a hostile
    /// edit, or a writer in the middle of a large append): another instance catching up reads
    /// what the file holds and sizes its buffer by that, never by the claim. Before, a claim of
    /// `maxPayload` (1 GiB) made every catch-up allocate and zero 1 GiB.
    @Test func aCatchUpSizesItsBufferByTheFileNotByAFramesClaim() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        _ = try append(a, 1)
        #expect(try b.refresh().records.map(\.payload) == [payload(1)])
        let at = a.dataEnd
        _ = try append(a, 2)
        // Record 2's frame header, rewritten to claim the largest payload a frame may have.
        var header = [UInt8](repeating: 0, count: Journal.frameHeaderSize)
        let claim = UInt32(shared.maxPayload)
        withUnsafeBytes(of: claim.littleEndian) { header.replaceSubrange(0..<4, with: $0) }
        let check = header.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[0..<8])) }
        withUnsafeBytes(of: check.littleEndian) { header.replaceSubrange(8..<12, with: $0) }
        let fd = try fs.open(path, create: false, exclusive: false, mode: 0o600)
        defer { fs.close(fd) }
        #expect(try header.withUnsafeBytes { try fs.pwrite(fd, $0, at: at) } == header.count)
        let fileSize = try fs.fstat(fd).size
        #expect(fileSize < 1 << 20)

        fs.resetCalls()
        // Without the lock a frame that does not check out may be a write in progress: nothing
        // is read past record 1, and nothing is concluded.
        #expect(try b.refresh().records.isEmpty)
        #expect(fs.largestReadRequest <= Journal.firstPayloadChunk)
        #expect(b.dataEnd == at)
        // With the lock the rest of the file is judged (a torn tail here, or damage): whatever
        // the verdict, nothing is read beyond what the file holds, and record 1 stays.
        do {
            _ = try b.withWriteLock { changes in changes }
        } catch let error as CofferError {
            #expect(error.code == .corrupted)
        }
        #expect(fs.largestReadRequest <= max(Int(fileSize), Journal.firstPayloadChunk))
        let (_, all) = try open(path, fs)
        #expect(all.first == payload(1))
    }

    /// A frame over 1 MiB that the file does hold is caught up whole, read once into a buffer
    /// of its size (the check against the file's size is only for lengths the file may not hold).
    @Test func aCatchUpReadsALargeFrameTheFileHolds() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        let large = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        _ = try a.withWriteLock { _ in try a.append([payload(1), large]) }
        fs.resetCalls()
        #expect(try b.refresh().records.map(\.payload) == [payload(1), large])
        #expect(fs.largestReadRequest == large.count)
    }

    /// Appends, a compaction, an exclusive opener in between and a writer that failed part-way:
    /// each is seen by the other instance's next write, with nothing lost or overwritten.
    @Test func everyKindOfChangeByAnotherProcessIsSeen() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        _ = try append(a, 1)
        // An append by A: B's next write catches up by reading, without a stat.
        fs.resetCalls()
        #expect(try append(b, 2).records.map(\.payload) == [payload(1)])
        #expect(fs.callCount(.stat, where: { $0 == path }) == 0)
        #expect(try a.refresh().records.map(\.payload) == [payload(2)])
        // A compaction by A: B's next write switches to the new file.
        try a.withWriteLock { _ in try a.rewrite(payloads: [payload(1), payload(2)]) }
        let afterCompaction = try append(b, 3)
        #expect(afterCompaction.reset)
        #expect(afterCompaction.records.map(\.payload) == [payload(1), payload(2)])
        #expect(try a.refresh().records.map(\.payload) == [payload(3)])
        // An exclusive opener cannot come between their writes: A and B hold the lock file's
        // flock shared while open (they lock the page's mutex per write), so it waits and fails.
        do {
            var impatient = exclusive
            impatient.lockTimeout = .milliseconds(50)
            #expect(throws: CofferError.self) { _ = try open(path, fs, impatient) }
        }
        _ = try append(a, 4)
        _ = try append(a, 5)
        #expect(try append(a, 6).records.isEmpty)
        #expect(try append(b, 7).records.map(\.payload) == [payload(4), payload(5), payload(6)])
        // A's append fails and so does its wipe: the page says an append was under way, so B's
        // next write reads and judges the tail instead of trusting the page.
        fs.inject(.fail(.pwrite, occurrence: 1, errno: 5, where: { $0 == path }))
        fs.inject(.fail(.pwrite, occurrence: 2, errno: 5, where: { $0 == path }))  // the wipe
        #expect(throws: CofferError.self) { _ = try append(a, 99) }
        fs.removeAllFaults()
        fs.resetCalls()
        #expect(try append(b, 8).isEmpty)
        #expect(fs.callCount(.pread, where: { $0 == path }) > 0)
        #expect(try append(a, 9).records.map(\.payload) == [payload(8)])
        let (_, all) = try open(path, fs)
        #expect(all == (1...9).map(payload))
    }

    /// A process that dies between starting a compaction and finishing it leaves the page
    /// distrusted: the others check the path until a writer settles it.
    @Test func aCompactionThatFailsLeavesThePageDistrusted() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        _ = try append(a, 1)
        _ = try append(b, 2)
        fs.inject(.fail(.rename, occurrence: 1, errno: 28, where: { $0.hasPrefix("/data/") }))
        #expect(throws: CofferError.self) { try a.withWriteLock { _ in try a.rewrite(payloads: [payload(1)]) } }
        fs.removeAllFaults()
        fs.resetCalls()
        #expect(try b.refresh().isEmpty)
        #expect(fs.callCount(.stat, where: { $0 == path }) == 1)
        #expect(try append(b, 3).isEmpty)
        #expect(try append(a, 4).records.map(\.payload) == [payload(3)])
        fs.resetCalls()
        #expect(try append(b, 5).records.map(\.payload) == [payload(4)])
        #expect(fs.callCount(.stat, where: { $0 == path }) == 0)
        let (_, all) = try open(path, fs)
        #expect(all == (1...5).map(payload))
    }

    /// Garbage in the lock file while a journal has the store open: the page, and the mutex in
    /// it, can no longer be trusted, and cannot be set up again while anyone may hold the mutex.
    /// The open journal refuses to write (saying why), a new opener waits and fails, and once
    /// the store is closed the page is set up again and nothing committed is lost.
    @Test func aGarbledControlPageIsSetUpAgainOnceTheStoreIsClosed() throws {
        let dir = try Scratch("control-page")
        let path = dir.path("j")
        let fs = LiveFileSystem()
        let (a, _) = try open(path, fs)
        _ = try append(a, 1)
        // Overwrite the mapped page through the file: a MAP_SHARED mapping sees it at once.
        let garbage = Data((0..<JournalControl.length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + ".lock"))
        try handle.write(contentsOf: garbage)
        try handle.close()
        #expect {
            _ = try append(a, 2)
        } throws: { error in
            (error as? CofferError)?.message.contains("lock file was overwritten") == true
        }
        var impatient = shared
        impatient.lockTimeout = .milliseconds(50)
        #expect(throws: CofferError.self) { _ = try open(path, fs, impatient) }
        try a.close()
        let (b, seen) = try open(path, fs)
        #expect(seen == [payload(1)])
        _ = try append(b, 2)
        let (c, _) = try open(path, fs)
        _ = try append(c, 3)
        #expect(try append(b, 4).records.map(\.payload) == [payload(3)])
        try b.close()
        try c.close()
        let (_, all) = try open(path, fs)
        #expect(all == (1...4).map(payload))
    }

    /// A store file replaced by hand (not through Coffer, so the page does not say so) is
    /// noticed once `identityCheckInterval` has passed: the next write goes to the new file.
    @Test func aFileReplacedByHandIsNoticedAfterTheCheckInterval() throws {
        let dir = try Scratch("replaced-by-hand")
        let path = dir.path("j")
        let fs = LiveFileSystem()
        var checking = shared
        checking.identityCheckInterval = .milliseconds(100)
        let (a, _) = try open(path, fs, checking)
        _ = try append(a, 1)
        let (other, _) = try open(dir.path("k"), fs)
        _ = try append(other, 7)
        try other.close()
        try fs.rename(dir.path("k"), path)
        Thread.sleep(forTimeInterval: 0.2)
        let changes = try append(a, 8)
        #expect(changes.reset)
        #expect(changes.records.map(\.payload) == [payload(7)])
        try a.close()
        let (_, all) = try open(path, fs)
        #expect(all == [payload(7), payload(8)])
    }

    /// When one process finds a file replaced by hand, a process still inside
    /// its check interval must not go on appending to the old, unlinked file. The page names
    /// the file it was settled for, so the first process to look tells the others.
    @Test func oneProcessFindingAReplacedFileTellsTheOthers() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        var eager = shared
        eager.identityCheckInterval = .zero  // checks the path on every call
        let (a, _) = try open(path, fs, eager)
        let (b, _) = try open(path, fs)  // trusts the page alone for an hour
        _ = try append(a, 1)
        _ = try append(b, 2)
        func replaceByHand(with record: Int) throws {
            let (other, _) = try open("/data/k", fs)
            _ = try append(other, record)
            try other.close()
            try fs.rename("/data/k", path)
        }
        try replaceByHand(with: 7)
        #expect(try append(a, 8).reset)
        let seenByB = try append(b, 9)
        #expect(seenByB.reset)
        #expect(seenByB.records.map(\.payload) == [payload(7), payload(8)])
        // The same when the first to see the new file is a process that opens it.
        try replaceByHand(with: 10)
        let (c, seen) = try open(path, fs)
        #expect(seen == [payload(10)])
        let seenByA = try append(a, 11)
        #expect(seenByA.reset)
        #expect(try append(b, 12).records.map(\.payload) == [payload(10), payload(11)])
        try c.close()
        let (_, all) = try open(path, fs)
        #expect(all == [10, 11, 12].map(payload))
    }

    /// Growing the lock file with `ftruncate` would leave a hole that a store into the
    /// mapping would allocate — `SIGBUS` on a full disk. It is grown by writing, so a full disk
    /// is an `ENOSPC` error from `open`.
    @Test func aFullDiskFailsTheOpenInsteadOfFaultingInThePage() throws {
        let fs = try memoryFS()
        fs.inject(.fail(.pwrite, errno: 28, where: { $0.hasSuffix(".lock") }))
        do {
            _ = try open("/data/j", fs)
            Issue.record("open succeeded without room for the lock file's page")
        } catch let error as CofferError {
            #expect(error.errno == 28)
        }
        fs.removeAllFaults()
        let (journal, _) = try open("/data/j", fs)
        _ = try append(journal, 1)
        #expect(fs.contents(atPath: "/data/j.lock")?.count == JournalControl.length)
    }

    /// A read failing part-way through catching up must not move the journal's
    /// end past commits its caller never received (the page would then hide them for good).
    @Test func aFailedCatchUpIsRetriedFromWhereItStarted() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        _ = try append(a, 1)
        _ = try append(a, 2)
        fs.inject(.fail(.pread, occurrence: 3, errno: 5, where: { $0 == path }))  // commit 2's header
        #expect(throws: CofferError.self) { _ = try append(b, 3) }
        fs.removeAllFaults()
        #expect(try append(b, 3).records.map(\.payload) == [payload(1), payload(2)])
        let (_, all) = try open(path, fs)
        #expect(all == (1...3).map(payload))
    }

    /// A failure while rereading a compacted file must leave the journal on the
    /// old file with its old view, so that the next call switches again instead of reading the
    /// new file from the old file's end.
    @Test func aFailedSwitchToACompactedFileIsRetried() throws {
        let fs = try memoryFS()
        let path = "/data/j"
        let (a, _) = try open(path, fs)
        let (b, _) = try open(path, fs)
        for i in 1...5 { _ = try append(a, i) }
        #expect(try b.refresh().records.count == 5)
        try a.withWriteLock { _ in try a.rewrite(payloads: [payload(9)]) }
        fs.inject(.fail(.pread, occurrence: 1, errno: 5, where: { $0 == path }))
        #expect(throws: CofferError.self) { _ = try append(b, 10) }
        fs.removeAllFaults()
        let changes = try append(b, 10)
        #expect(changes.reset)
        #expect(changes.records.map(\.payload) == [payload(9)])
        let (_, all) = try open(path, fs)
        #expect(all == [payload(9), payload(10)])
    }
}
