@testable import CofferCore
import CofferRuntime
@testable import CofferJournal
import CofferTesting
import Foundation
import Synchronization
import Testing

/// A caught-up writer that appends through a mapping skips the `fstat` of its lock file at each
/// write lock: a removed lock file harms nothing until another opener makes a new one, and that
/// opener first marks the journal file (header byte 16, bit 1), which the writer reads through
/// its mapping. These tests remove, replace and copy the lock file under a writer and check that
/// no acknowledged commit of either writer is lost, and that the check is skipped only while the
/// mark is absent.
@Suite("Journal: a lock file made again is seen without an fstat per write")
struct LockFileMarkTests {
    func shared() -> JournalOptions {
        var options = JournalOptions(application: 9, durability: .coalesced)
        options.mapsAppends = true
        return options
    }

    func open(_ path: String) throws -> Journal {
        try Journal.open(path: path, options: shared(), fileSystem: LiveFileSystem(), create: .openOrCreate).journal
    }

    /// Appends `text` as one commit; returns whether it was acknowledged (a refusal must name the
    /// lock file).
    func append(_ journal: Journal, _ text: String) -> Bool {
        do {
            _ = try journal.withWriteLock { _ in try journal.append([Data(text.utf8)]) }
            return true
        } catch let error as CofferError {
            #expect(error.message.contains("lock file"), "\(error)")
            return false
        } catch {
            Issue.record("unexpected \(error)")
            return false
        }
    }

    func headerFlags(_ path: String) throws -> UInt8 {
        try Data(contentsOf: URL(fileURLWithPath: path))[16]
    }

    func payloads(_ path: String) throws -> Set<String> {
        let reader = try Journal.open(
            path: path, options: shared(), fileSystem: LiveFileSystem(), create: .openExisting)
        defer { try? reader.journal.close() }
        return Set(reader.records.map { String(decoding: $0.payload, as: UTF8.self) })
    }

    @Test func aCaughtUpMappedWriterSkipsTheCheckAndANewLockFileStopsIt() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        #expect(append(first, "a0"))
        #expect(append(first, "a1"))
        let checksBefore = first.lock.linkChecks.load(ordering: .relaxed)
        for i in 2..<20 { #expect(append(first, "a\(i)")) }
        #expect(first.mappedCommits >= 18, "the writer did not append through the mapping")
        #expect(
            first.lock.linkChecks.load(ordering: .relaxed) == checksBefore,
            "a caught-up mapped writer checked its lock file's link count")
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag == 0)

        // Removed: harmless while nobody makes another. Then an opener makes one and marks the file.
        #expect(unlink(path + ".lock") == 0)
        // Harmless, so written (unless the periodic check of the path came due meanwhile).
        let afterUnlink = append(first, "a-after-unlink")
        let second = try open(path)
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag != 0, "the new lock file's opener did not mark")
        #expect(try headerFlags(path) & Journal.coalescedWritersFlag != 0, "the mark lost the coalesced flag")
        var acknowledged: Set<String> = Set((0..<20).map { "a\($0)" } + (afterUnlink ? ["a-after-unlink"] : []))
        for (journal, text) in [(first, "a-late"), (second, "b1"), (first, "a-later"), (second, "b2")] {
            if append(journal, text) { acknowledged.insert(text) }
        }
        #expect(!acknowledged.contains("a-late") && !acknowledged.contains("a-later"), "wrote under a removed lock file")
        #expect(acknowledged.isSuperset(of: ["b1", "b2"]))
        try first.close()
        try second.close()
        #expect(try payloads(path) == acknowledged)
    }

    @Test func aRemovedLockFileIsStillRefusedAtThePeriodicCheck() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        #expect(append(first, "a0"))
        #expect(append(first, "a1"))
        #expect(unlink(path + ".lock") == 0)
        Thread.sleep(forTimeInterval: 1.1)
        #expect(!append(first, "a2"), "a lock file gone for over a second went unseen")
        try first.close()
        #expect(try payloads(path) == ["a0", "a1"])
    }

    /// A copy of the lock file (a restored backup, `cp` then `mv` over the path) carries a page
    /// that looks set up: it names the lock file it was set up in, so the new opener still marks.
    @Test func aCopiedLockFileIsANewLockFile() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        #expect(append(first, "a0"))
        #expect(append(first, "a1"))
        let copy = shm.path + "/copy"
        try Data(contentsOf: URL(fileURLWithPath: path + ".lock")).write(to: URL(fileURLWithPath: copy))
        #expect(chmod(copy, 0o600) == 0)
        #expect(rename(copy, path + ".lock") == 0)
        let second = try open(path)
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag != 0)
        var acknowledged: Set<String> = ["a0", "a1"]
        for (journal, text) in [(first, "a2"), (second, "b1"), (first, "a3"), (second, "b2")] {
            if append(journal, text) { acknowledged.insert(text) }
        }
        #expect(!acknowledged.contains("a2") && !acknowledged.contains("a3"))
        // The page copied from another lock file is not trusted for mapping either.
        #expect(second.mappedCommits == 0)
        try first.close()
        try second.close()
        #expect(try payloads(path) == acknowledged)
    }

    /// The mark is read through the mapping of the journal; a file cut to nothing by another
    /// program faults there, which is caught: the write fails with an error, the process lives.
    @Test func aFileCutToNothingUnderTheMappingFailsTheWriteNotTheProcess() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        #expect(append(first, "a0"))
        #expect(append(first, "a1"))
        #expect(first.mappedCommits > 0, "the writer does not have the file mapped: nothing under test")
        #expect(truncate(path, 0) == 0)
        #expect(throws: CofferError.self) { _ = try first.withWriteLock { _ in try first.append([Data("a2".utf8)]) } }
        try? first.close()
    }

    /// Compaction writes a new file without the mark: the mark speaks only of the file that was
    /// current when the new lock file was made.
    @Test func compactionStartsAFileWithoutTheMark() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        #expect(append(first, "a0"))
        try first.close()
        #expect(unlink(path + ".lock") == 0)
        let second = try open(path)
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag != 0)
        try second.withWriteLock { _ in try second.rewrite(payloads: [Data("a0".utf8)]) }
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag == 0)
        #expect(append(second, "b1"))
        try second.close()
        #expect(try payloads(path) == ["a0", "b1"])
    }

    /// After the journal moves to another file (its own compaction, or another process's),
    /// the next write lock checks the lock file for real: the new file may be one another lock
    /// file's process made, which nobody marked.
    @Test func aFileSwitchMakesTheNextWriteCheckTheLockFile() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        let other = try open(path)
        for i in 0..<3 { #expect(append(first, "a\(i)")) }
        func checks() -> Int { first.lock.linkChecks.load(ordering: .relaxed) }
        // Its own compaction.
        try first.withWriteLock { _ in try first.rewrite(payloads: [Data("a0".utf8)]) }
        var before = checks()
        #expect(append(first, "a3"))
        #expect(checks() == before + 1, "the first write after a compaction here skipped the check")
        before = checks()
        #expect(append(first, "a4"))
        #expect(append(first, "a5"))
        #expect(checks() == before, "checked again though nothing changed")
        // Another process's compaction: this journal reopens inside its next write lock.
        try other.withWriteLock { _ in try other.rewrite(payloads: [Data("b0".utf8)]) }
        before = checks()
        #expect(append(first, "a6"))
        #expect(checks() >= before + 1, "the write that moved to the other's file skipped the check")
        try first.close()
        try other.close()
    }

    /// A page set up other than by its store's creator (word 8) may be a new lock file's set up
    /// by an opener that writes nothing (read-only): a writable opener marks then too.
    @Test func aPageSetUpByAnotherOpenerIsMarkedByTheNextWriter() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        try open(path).close()
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag == 0)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + ".lock"))
        try handle.seek(toOffset: 8 * 8)
        try handle.write(contentsOf: withUnsafeBytes(of: UInt64(1)) { Data($0) })
        try handle.close()
        let next = try open(path)
        #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag != 0)
        try next.close()
    }

    /// The mark comes before the opener reads the file: a store it then refuses (damaged, strict)
    /// is marked all the same, and its records are as they were.
    @Test func theNewLockFilesOpenerMarksBeforeItReads() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        for i in 0..<4 { #expect(append(first, "record \(i)")) }
        try first.close()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let damaged = 32 + 12 + 2  // a payload byte of the first record: intact ones follow
        bytes[damaged] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: path))
        #expect(unlink(path + ".lock") == 0)
        var strict = shared()
        strict.exclusive = false
        #expect(throws: CofferError.self) {
            try Journal.open(path: path, options: strict, fileSystem: LiveFileSystem(), create: .openExisting)
        }
        let after = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(after[16] & Journal.lockFileMadeAgainFlag != 0)
        #expect(after[32...] == bytes[32...], "the refused store's records changed")
    }

    /// A store file and its lock file replaced by hand (a directory restored by `mv`): a write
    /// lock that skipped its check and then finds another file at the path checks the lock file
    /// before it moves there, so a refused write leaves the journal on the file it knew (moving
    /// first and then refusing left the store's index without the new file's reset).
    @Test func aSkippedCheckIsMadeBeforeMovingToAnotherFile() throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        var options = shared()
        options.identityCheckInterval = .milliseconds(20)
        let first = try Journal.open(path: path, options: options, fileSystem: LiveFileSystem(), create: .openOrCreate).journal
        #expect(append(first, "a0"))
        #expect(append(first, "a1"))
        let before = first.identity
        let copy = shm.path + "/restored"
        try Data(contentsOf: URL(fileURLWithPath: path)).write(to: URL(fileURLWithPath: copy))
        #expect(chmod(copy, 0o600) == 0)
        #expect(rename(copy, path) == 0)
        #expect(unlink(path + ".lock") == 0)
        Thread.sleep(forTimeInterval: 0.05)  // past the identity check's interval, not the lock's
        #expect(!append(first, "a2"), "wrote after its lock file was removed")
        #expect(first.identity.inode == before.inode, "moved to the restored file, then refused")
        try? first.close()
    }

    /// Every kind of opener that can write marks: one that salvages a damaged store (before it
    /// reads, so the copy it sets aside holds the mark), an exclusive one, and one that finds a
    /// page of an earlier version.
    @Test(arguments: ["salvage", "exclusive", "earlier page"])
    func everyWritingOpenerMarks(_ how: String) throws {
        let shm = try TemporaryDirectory(prefix: "coffer-lockmark", in: "/dev/shm")
        let path = shm.path + "/j"
        let first = try open(path)
        for i in 0..<4 { #expect(append(first, "record \(i)")) }
        try first.close()
        var options = shared()
        var recovery = JournalRecovery.strict
        switch how {
        case "salvage":
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            bytes[32 + 12 + 2] ^= 0xFF  // a payload byte of the first record: intact ones follow
            try bytes.write(to: URL(fileURLWithPath: path))
            #expect(unlink(path + ".lock") == 0)
            recovery = .salvage
        case "exclusive":
            #expect(unlink(path + ".lock") == 0)
            options.exclusive = true
        default:
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + ".lock"))
            try handle.seek(toOffset: 8)
            try handle.write(contentsOf: withUnsafeBytes(of: UInt64(2)) { Data($0) })  // word 1: version 2
            try handle.close()
        }
        let opened = try Journal.open(
            path: path, options: options, fileSystem: LiveFileSystem(), create: .openExisting, recovery: recovery)
        if how == "salvage" {
            let aside = try FileManager.default.contentsOfDirectory(atPath: shm.path).filter { $0.contains(".damaged-") }
            #expect(aside.count == 1)
            let copy = try Data(contentsOf: URL(fileURLWithPath: shm.path + "/" + (aside.first ?? "")))
            #expect(copy[16] & Journal.lockFileMadeAgainFlag != 0, "salvage read the file before marking it")
            #expect(opened.records.count == 3)
        } else {
            #expect(try headerFlags(path) & Journal.lockFileMadeAgainFlag != 0)
        }
        try opened.journal.close()
    }
}
