import CofferCore
import CofferJournal
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The journal engine under the key-value file, attacked from outside through the public API:
/// records another writer appends that pass their checksums but mean nothing, a lock file
/// removed or replaced under open stores, a garbled control page, files swapped for symlinks,
/// stores that are empty or cut short, a full disk during writes and compactions, and writers
/// racing compactors (another process among them). What must hold: a clear CofferError, nothing
/// already stored lost, no silent partial view.
@Suite("Key-value engine under outside attack")
struct EngineAttackTests {
    let fs = LiveFileSystem()

    private func suite(_ directory: String, _ name: String = "s", lockTimeout: Duration = .seconds(5)) throws
        -> KeyValueFileStrategy
    {
        try KeyValueFileStrategy(
            directory: URL(fileURLWithPath: directory), suite: name, durability: .immediate, lockTimeout: lockTimeout)
    }

    /// A key-value record payload as docs/FORMAT.md lays it out: op 1 (set), the key's length
    /// (LEB128, one byte here), the key, the value.
    private func setRecord(_ key: String, _ value: String) -> Data {
        Data([1, UInt8(key.utf8.count)] + Array(key.utf8) + Array(value.utf8))
    }

    /// Another writer on the suite's file, as another process would be: a journal of its own.
    private func otherWriter(_ path: String) throws -> Journal {
        try Journal.open(
            path: path, options: JournalOptions(application: 1), fileSystem: fs, create: .openExisting
        ).journal
    }

    // MARK: - Crafted records from another writer

    @Test func aRecordThatPassesItsChecksumsButIsNoRecordStopsTheSuiteInsteadOfDroppingWhatFollows() throws {
        let dir = try Scratch("kv-garbage-record")
        let store = try suite(dir.path)
        try store.set("kept", for: "before")
        let writer = try otherWriter(store.path)
        try writer.withWriteLock { _ in
            try writer.append([Data([0xFF, 0xEE, 0xDD])])  // op 0xFF: not a key-value record
            try writer.append([setRecord("after", "written after it")])
        }
        try writer.close()

        let first = #expect(throws: CofferError.self) { _ = try store.load("before") }
        #expect(first?.code == .corrupted)
        // It used to answer every later call from an index missing "after" (the catch-up had
        // moved past it), and its compaction rewrote the file without "after".
        let again = #expect(throws: CofferError.self) { _ = try store.load("after") }
        #expect(again?.code == .corrupted)
        #expect(again?.message.contains("open it again") == true)
        #expect(throws: CofferError.self) { try store.compact() }
        #expect(throws: CofferError.self) { try store.set("late", for: "late") }
        #expect(first.map { "\($0)".contains("written after it") } == false)

        // The file still holds every record, the one after the bad one included.
        let (journal, records) = try Journal.open(
            path: store.path, options: JournalOptions(application: 1), fileSystem: fs, create: .openExisting)
        try journal.close()
        #expect(records.map(\.payload).contains(setRecord("after", "written after it")))
    }

    @Test func aCompactedFileHoldingARecordThatIsNoRecordStopsTheSuite() throws {
        let dir = try Scratch("kv-garbage-compacted")
        let store = try suite(dir.path)
        try store.set("kept", for: "before")
        let writer = try otherWriter(store.path)
        // Another writer replaces the file (as its compaction does) with one whose first record
        // is no key-value record.
        try writer.withWriteLock { _ in
            try writer.rewrite(payloads: [Data([0x07, 0x00]), setRecord("before", "kept"), setRecord("x", "y")])
        }
        try writer.close()
        let first = #expect(throws: CofferError.self) { _ = try store.load("before") }
        #expect(first?.code == .corrupted)
        // Not an empty suite, nor a partial one, from here on.
        let again = #expect(throws: CofferError.self) { _ = try store.keys() }
        #expect(again?.code == .corrupted)
        #expect(throws: CofferError.self) { try store.compact() }
    }

    // MARK: - The lock file

    @Test(arguments: ["removed", "replaced"])
    func aLockFileRemovedOrReplacedUnderAnOpenStoreNeverLetsTwoWritersOverwriteEachOther(_ how: String) throws {
        let dir = try Scratch("kv-lock-\(how)")
        let first = try suite(dir.path)
        try first.set("one", for: "before")
        let lock = first.path + ".lock"
        if how == "removed" {
            #expect(unlink(lock) == 0)
        } else {
            let planted = dir.path(".planted")
            try Data(count: 4096).write(to: URL(fileURLWithPath: planted))
            #expect(chmod(planted, 0o600) == 0)
            #expect(rename(planted, lock) == 0)
        }
        // Opened after: it locks the file now at the lock's path, with its own control page.
        let second = try suite(dir.path)

        var landed: [String] = []
        for (store, key) in [(first, "first-1"), (second, "secnd-1"), (first, "first-2"), (second, "secnd-2")] {
            do {
                try store.set(key, for: key)
                landed.append(key)
            } catch let error as CofferError {
                #expect(error.message.contains("lock file"), "\(error)")
            }
        }
        // The store opened after the change works; what either said it wrote is there.
        #expect(landed.contains("secnd-1") && landed.contains("secnd-2"))
        let reopened = try suite(dir.path)
        #expect(try reopened.get(String.self, for: "before") == "one")
        for key in landed { #expect(try reopened.get(String.self, for: key) == key, "\(key) was acknowledged") }
    }

    @Test func aGarbledControlPageIsNeverTrustedOverTheFile() throws {
        let dir = try Scratch("kv-page")
        // The two stores close at the end of this block (a store closes when released).
        do {
            let first = try suite(dir.path)
            let second = try suite(dir.path)
            try first.set("a", for: "a")
            #expect(try second.get(String.self, for: "a") == "a")
            let lock = dir.path("s.cofferkv.lock")
            let page = try Data(contentsOf: URL(fileURLWithPath: lock))
            // Word 2 (generation) huge and odd, word 3 (data end) past any file, word 4 (an append
            // under way) set, words 5/6 (device, inode) wrong; then the same with a valid-looking
            // generation kept and only the data end absurd.
            func garble(_ words: [(Int, UInt64)]) throws {
                var bytes = page
                for (word, value) in words {
                    withUnsafeBytes(of: value) { bytes.replaceSubrange((word * 8)..<(word * 8 + 8), with: $0) }
                }
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: lock))
                try handle.write(contentsOf: bytes.prefix(64))
                try handle.close()
            }
            for words in [
                [(2, UInt64.max), (3, UInt64(Int64.max)), (4, 1), (5, 7), (6, 7)],
                [(3, UInt64.max - 4095), (4, 0)],
            ] as [[(Int, UInt64)]] {
                try garble(words)
                try first.set("b\(words.count)", for: "b")
                try second.set("c\(words.count)", for: "c")
                #expect(try first.get(String.self, for: "c") == "c\(words.count)")
                #expect(try second.get(String.self, for: "b") == "b\(words.count)")
            }
            // The magic gone: the page no longer vouches for the mutex in it, which cannot be set up
            // again under open stores. They refuse to write, saying why; nothing is lost.
            try garble([(0, 0)])
            for store in [first, second] {
                #expect {
                    try store.set("lost", for: "b")
                } throws: { error in
                    (error as? CofferError)?.message.contains("lock file was overwritten") == true
                }
                #expect(try store.get(String.self, for: "b") == "b2")
            }
        }
        let reopened = try suite(dir.path)
        #expect(Set(try reopened.keys()) == ["a", "b", "c"])
        #expect(try reopened.get(String.self, for: "b") == "b2")
        try reopened.set("after", for: "b")
        #expect(try suite(dir.path).get(String.self, for: "b") == "after")
    }

    @Test func aDirectoryOrAFIFOAtTheLockPathIsRefusedAndTheStoreIsUntouched() throws {
        for kind in ["directory", "fifo"] {
            let dir = try Scratch("kv-lock-\(kind)")
            try suite(dir.path).set("v", for: "k")
            let lock = dir.path("s.cofferkv.lock")
            #expect(unlink(lock) == 0)
            #expect(kind == "directory" ? mkdir(lock, 0o700) == 0 : mkfifo(lock, 0o600) == 0)
            let before = try Data(contentsOf: URL(fileURLWithPath: dir.path("s.cofferkv")))
            let error = #expect(throws: CofferError.self) { try suite(dir.path, lockTimeout: .seconds(1)) }  // never hangs on the FIFO
            #expect(error?.code == .io || error?.code == .invalidArgument, "\(kind): \(String(describing: error))")
            #expect(try Data(contentsOf: URL(fileURLWithPath: dir.path("s.cofferkv"))) == before)
        }
    }

    // MARK: - Store files empty, cut short, swapped

    @Test func anEmptyOrCutShortStoreFileIsRefusedNeverTakenForAnEmptyStore() throws {
        let dir = try Scratch("kv-short")
        let store = try suite(dir.path)
        try store.set("v", for: "k")
        let path = store.path
        let whole = try Data(contentsOf: URL(fileURLWithPath: path))
        // Zero bytes, inside the file header, and a header whose checksum fails.
        var badHeader = whole
        badHeader[12] ^= 0x01
        for image in [Data(), whole.prefix(5), whole.prefix(31), badHeader] {
            try image.write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: CofferError.self) { try suite(dir.path) }
            #expect(error?.code == .corrupted, "\(image.count) bytes: \(String(describing: error))")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == image, "the file was changed")
        }
    }

    @Test func aFrameWhoseLengthPointsPastTheEndBeforeIntactRecordsIsDamageInAnImmediateStore() throws {
        let dir = try Scratch("kv-past-eof")
        let store = try suite(dir.path)
        for i in 0..<4 { try store.set("value \(i)", for: "k\(i)") }
        let url = URL(fileURLWithPath: store.path)
        var bytes = Array(try Data(contentsOf: url))
        // The second record's header claims 0x3FFF_FFFF bytes, with a header check that passes.
        let firstLength = Int(bytes[32]) | Int(bytes[33]) << 8  // records here are far below 64 KiB
        let first = 32 + 12 + firstLength
        let word: UInt32 = 0x3FFF_FFFF
        withUnsafeBytes(of: word.littleEndian) { bytes.replaceSubrange(first..<(first + 4), with: $0) }
        let check = CRC32C.checksum(Array(bytes[first..<(first + 8)]))
        withUnsafeBytes(of: check.littleEndian) { bytes.replaceSubrange((first + 8)..<(first + 12), with: $0) }
        try Data(bytes).write(to: url)
        let error = #expect(throws: CofferError.self) { try suite(dir.path) }
        #expect(error?.code == .corrupted)
        #expect(Array(try Data(contentsOf: url)) == bytes, "nothing was changed")
    }

    @Test func aStoreFileCutShortUnderAnOpenStoreIsNoticedBeforeAWriteLandsPastAHole() throws {
        let dir = try Scratch("kv-cut-short")
        // Coalesced, the default: a later open takes a hole of zeros for a torn commit and drops
        // every commit after it.
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "s", lockTimeout: .seconds(5))
        for i in 0..<10 { try store.set("value \(i)", for: "k\(i)") }
        try store.flush()
        let cut = 32 + 40  // inside the first records
        #expect(truncate(store.path, off_t(cut)) == 0)
        Thread.sleep(forTimeInterval: 1.1)  // the path is checked at least once a second
        var acknowledged = false
        do {
            try store.set("after the cut", for: "late")
            try store.flush()
            acknowledged = true
        } catch let error as CofferError {
            #expect(error.code == .corrupted)
            #expect(error.message.contains("cut short"), "\(error)")
        }
        // It used to append at its old end, past a hole, and say nothing; the next open took the
        // hole for a torn tail and zeroed the acknowledged write away.
        if acknowledged {
            #expect(try suite(dir.path).get(String.self, for: "late") == "after the cut")
        } else {
            #expect(throws: CofferError.self) { _ = try store.load("k0") }  // it keeps saying so
        }
    }

    @Test func theStoreFileSwappedForASymlinkToAnotherStoreIsNeverWrittenThrough() throws {
        let dir = try Scratch("kv-symlink-store")
        let store = try suite(dir.path)
        try store.set("mine", for: "k")
        let victim = try suite(dir.path, "victim")
        try victim.set("theirs", for: "k")
        let victimBytes = try Data(contentsOf: URL(fileURLWithPath: victim.path))
        #expect(rename(store.path, dir.path("moved.cofferkv")) == 0)
        #expect(symlink(victim.path, store.path) == 0)
        Thread.sleep(forTimeInterval: 1.1)  // a file replaced by hand is noticed within a second
        let read = #expect(throws: CofferError.self) { _ = try store.load("k") }
        #expect(read?.errno == ELOOP)
        #expect(throws: CofferError.self) { try store.set("written", for: "k") }
        #expect(throws: CofferError.self) { try store.compact() }
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim.path)) == victimBytes)
        // What it held is in the file it had open, now under the other name.
        #expect(unlink(store.path) == 0)
        #expect(rename(dir.path("moved.cofferkv"), store.path) == 0)
        #expect(try suite(dir.path).get(String.self, for: "k") == "mine")
    }

    @Test func theStoresDirectorySwappedForASymlinkNeverLetsItWriteUnderAnotherLock() throws {
        let root = try Scratch("kv-symlink-dir")
        let home = root.path("home")
        let other = root.path("other")
        let store = try suite(home)
        try store.set("mine", for: "k")
        let theirs = try suite(other)  // the same suite name, in another directory
        try theirs.set("theirs", for: "k")
        #expect(rename(home, root.path("home-moved")) == 0)
        #expect(symlink(other, home) == 0)
        Thread.sleep(forTimeInterval: 1.1)
        // The path now names the other directory's store. Whatever this store does with it, it
        // must not write there under a lock the other store's writers do not take.
        do {
            try store.set("written", for: "w")
            Issue.record("a write through the swapped directory landed, under the old directory's lock")
        } catch let error as CofferError {
            #expect(error.message.contains("lock file"), "\(error)")
        }
        try theirs.set("still theirs", for: "k2")
        #expect(try suite(other).get(String.self, for: "k2") == "still theirs")
        #expect(try suite(root.path("home-moved")).get(String.self, for: "k") == "mine")
    }

    // MARK: - A full disk

    @Test(.timeLimit(.minutes(10)))
    func aFullDiskFailsWritesAndCompactionsClearlyAndLosesNothing() throws {
        let disk = try SmallDisk("kv-full", kilobytes: 256)
        let store = try suite(disk.path)
        var acknowledged: [String: String] = [:]
        for i in 0..<20 {
            try store.set("v\(i)-" + String(repeating: "x", count: 500), for: "k\(i)")
            acknowledged["k\(i)"] = "v\(i)-" + String(repeating: "x", count: 500)
        }
        try disk.fill()
        // Writes until the disk refuses one; compactions too.
        var refused: CofferError?
        for i in 20..<2000 where refused == nil {
            let value = "w\(i)-" + String(repeating: "y", count: 2000)
            do {
                try store.set(value, for: "k\(i % 30)")
                acknowledged["k\(i % 30)"] = value
            } catch let error as CofferError {
                refused = error
            }
        }
        #expect(refused?.code == .io)
        #expect(refused?.errno == ENOSPC)
        #expect(refused.map { "\($0)".contains("yyyy") } == false)
        let compaction = #expect(throws: CofferError.self) { try store.compact() }
        #expect(compaction?.errno == ENOSPC)
        // Nothing acknowledged is lost: in this instance, and in a fresh open.
        for (key, value) in acknowledged { #expect(try store.get(String.self, for: key) == value) }
        let fresh = try suite(disk.path)
        for (key, value) in acknowledged { #expect(try fresh.get(String.self, for: key) == value) }
        // Space freed: both instances write and compact again.
        try disk.free()
        try store.set("after", for: "after")
        try store.compact()
        try fresh.set("after2", for: "after2")
        let last = try suite(disk.path)
        for (key, value) in acknowledged { #expect(try last.get(String.self, for: key) == value) }
        #expect(try last.get(String.self, for: "after2") == "after2")
        #expect(try last.get(String.self, for: "after") == "after")
    }

    @Test(.timeLimit(.minutes(10)))
    func aFullDiskAtOpenFailsClearlyAndNeverCreatesAnEmptyStore() throws {
        let disk = try SmallDisk("kv-full-open", kilobytes: 64)
        try disk.fill()
        let error = #expect(throws: CofferError.self) { try suite(disk.path, "new") }
        #expect(error?.code == .io, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: disk.path + "/new.cofferkv"))
        try disk.free()
        let store = try suite(disk.path, "new")
        try store.set("v", for: "k")
        #expect(try suite(disk.path, "new").get(String.self, for: "k") == "v")
    }

    // MARK: - Racing writers and compactors

    @Test(.timeLimit(.minutes(10)))
    func writersAndTwoCompactorsRacingLoseNothing() throws {
        let dir = try Scratch("kv-race")
        let stores = try (0..<4).map { _ in try suite(dir.path, lockTimeout: .seconds(60)) }
        let failures = Locked<[String]>([])
        let group = DispatchGroup()
        for writer in 0..<2 {
            DispatchQueue.global().async(group: group) {
                do {
                    for i in 0..<300 { try stores[writer].set(String(repeating: "v", count: 300) + "\(i)", for: "w\(writer)-\(i)") }
                } catch { failures.withLock { $0.append("writer \(writer): \(error)") } }
            }
        }
        for compactor in 2..<4 {
            DispatchQueue.global().async(group: group) {
                do {
                    for _ in 0..<40 { try stores[compactor].compact() }
                } catch { failures.withLock { $0.append("compactor \(compactor): \(error)") } }
            }
        }
        #expect(group.wait(timeout: .now() + 240) == .success)
        #expect(failures.withLock { $0 } == [])
        let reopened = try suite(dir.path)
        for writer in 0..<2 {
            for i in 0..<300 {
                #expect(try reopened.get(String.self, for: "w\(writer)-\(i)") == String(repeating: "v", count: 300) + "\(i)")
            }
        }
        #expect(try reopened.keys().count == 600)
    }

    @Test(.timeLimit(.minutes(10)))
    func anotherProcessWritingWhileThisOneCompactsLosesNothing() async throws {
        let dir = try Scratch("kv-race-process")
        let store = try suite(dir.path, "race", lockTimeout: .seconds(60))
        let child = try HelperChild(["kv-write", dir.path, "race", "400", "child-", "immediate"], standardError: .capture)
        var compactions = 0
        let deadline = ContinuousClock.now + .seconds(180)  // a hang guard, not a speed
        while try store.get(Int.self, for: "child-399") == nil, !child.lines.contains(where: { !$0.hasPrefix("ack") }),
            child.standardError.isEmpty, ContinuousClock.now < deadline
        {
            try store.compact()
            try store.set(compactions, for: "parent-\(compactions % 50)")
            compactions += 1
            // flock is not fair: a loop that takes the lock again at once can keep the child
            // waiting past its lock timeout on a busy machine. Leave it a moment each round.
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(try await child.waitForExit(seconds: 240) == 0, "\(child.transcript)")
        let reopened = try suite(dir.path, "race")
        for i in 0..<400 { #expect(try reopened.get(Int.self, for: "child-\(i)") == i) }
        #expect(compactions > 0)
    }
}
