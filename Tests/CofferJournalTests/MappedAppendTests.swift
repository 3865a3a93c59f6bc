@testable import CofferCore
import CofferRuntime
@testable import CofferJournal
import CofferTesting
import Foundation
import Testing

/// An exclusive journal in coalesced mode appends by storing into a mapping of its file where
/// the file system allows (ext4, tmpfs), instead of a `pwrite` per commit. The file must be the
/// same byte for byte, and a file truncated under the mapping must fail the write, not kill the
/// process.
@Suite("Journal: appends through a mapping")
struct MappedAppendTests {
    /// A directory on tmpfs (`/dev/shm`), where mapping for appends is always allowed, so the
    /// mapped path is the one under test on any machine.
    func shmDirectory() throws -> TemporaryDirectory {
        try TemporaryDirectory(prefix: "coffer-mapped", in: "/dev/shm")
    }

    func options(mapped: Bool) -> JournalOptions {
        var options = JournalOptions(application: 9, durability: .coalesced)
        options.exclusive = true
        options.mapsAppends = mapped
        return options
    }

    /// Commits of one, two and three records, of sizes that cross pages and make the file grow
    /// (each growth maps the file again), with a compaction between (a new file, mapped anew).
    func writeHistory(_ journal: Journal) throws {
        for i in 0..<400 {
            let payloads = (0...(i % 3)).map { j in Data(repeating: UInt8(truncatingIfNeeded: i &+ j), count: 1 + (i * 37 + j * 11) % 700) }
            try journal.withWriteLock { _ in
                if payloads.count == 1 {
                    try journal.appendRecord(count: payloads[0].count) { $0.copyBytes(from: payloads[0]) }
                } else {
                    try journal.append(payloads)
                }
            }
            if i == 250 {
                try journal.withWriteLock { _ in try journal.rewrite(payloads: [Data("compacted".utf8)]) }
            }
        }
    }

    @Test func theMappedAndTheWrittenFileAreTheSameBytes() throws {
        let shm = try shmDirectory()
        var images: [Data] = []
        for mapped in [true, false] {
            let path = shm.path + "/j-\(mapped)"
            let (journal, _) = try Journal.open(
                path: path, options: options(mapped: mapped), fileSystem: LiveFileSystem(), create: .openOrCreate)
            try writeHistory(journal)
            // The mapped path was taken (or not) as asked.
            #expect((journal.tail != nil) == mapped)
            try journal.close()
            images.append(try Data(contentsOf: URL(fileURLWithPath: path)))
            // Reopened, every record reads back.
            let (again, records) = try Journal.open(
                path: path, options: options(mapped: mapped), fileSystem: LiveFileSystem(), create: .openExisting)
            #expect(records.first?.payload == Data("compacted".utf8))
            #expect(records.count == 1 + (251..<400).reduce(0) { $0 + 1 + $1 % 3 })
            try again.close()
        }
        #expect(images[0] == images[1], "the file appended through a mapping differs from the written one")
    }

    @Test func aFileTruncatedUnderTheMappingFailsTheWriteAndTheProcessLives() throws {
        let shm = try shmDirectory()
        let path = shm.path + "/j"
        let (journal, _) = try Journal.open(
            path: path, options: options(mapped: true), fileSystem: LiveFileSystem(), create: .openOrCreate)
        _ = try journal.withWriteLock { _ in try journal.append([Data("kept".utf8)]) }
        #expect(journal.tail != nil)
        // Another program cuts the file to nothing: the next store lands past its end (SIGBUS).
        #expect(truncate(path, 0) == 0)
        for _ in 0..<2 {
            let error = #expect(throws: CofferError.self) {
                _ = try journal.withWriteLock { _ in try journal.append([Data("lost".utf8)]) }
            }
            #expect(error?.code == .corrupted && error?.message.contains("truncated") == true, "\(String(describing: error))")
        }
        #expect(throws: CofferError.self) { try journal.flush() }
        // A fault elsewhere is still a fault: the handler only turns the copy's own into an error.
        _ = try? journal.close()
        // The store says what it found when opened again, and the truncation is not hidden.
        #expect(throws: CofferError.self) {
            _ = try Journal.open(path: path, options: options(mapped: true), fileSystem: LiveFileSystem(), create: .openExisting)
        }
    }

    /// Headers that cross a 4 KiB boundary, and headers in a block's first 4 bytes (the store
    /// then starts at the block, not 4 bytes before the header): the same bytes as written.
    @Test func headersAtBlockBoundariesAreTheSameBytes() throws {
        let shm = try shmDirectory()
        var images: [Data] = []
        for mapped in [true, false] {
            let path = shm.path + "/edges-\(mapped)"
            let (journal, _) = try Journal.open(
                path: path, options: options(mapped: mapped), fileSystem: LiveFileSystem(), create: .openOrCreate)
            var expected: [Data] = []
            // For each distance d of the next header from the next 4 KiB boundary, a record that
            // lands it there: d in 1...11 crosses the boundary, d = 0 and d = -1...-3 start the
            // header at or just past it.
            for (i, d) in [6, 1, 11, 0, -1, -3, 5, 8].enumerated() {
                let end = Int(journal.dataEnd)
                let boundary = (end / 4096 + 2) * 4096
                let count = boundary - d - end - Journal.frameHeaderSize
                let payload = Data(repeating: UInt8(0x30 + i), count: count)
                _ = try journal.withWriteLock { _ in try journal.append([payload]) }
                let tail = Data("after-\(i)".utf8)
                _ = try journal.withWriteLock { _ in try journal.append([tail]) }
                expected += [payload, tail]
            }
            #expect(mapped ? journal.mappedCommits == 16 : journal.mappedCommits == 0)
            try journal.close()
            images.append(try Data(contentsOf: URL(fileURLWithPath: path)))
            let (again, records) = try Journal.open(
                path: path, options: options(mapped: mapped), fileSystem: LiveFileSystem(), create: .openExisting)
            #expect(records.map(\.payload) == expected)
            try again.close()
        }
        #expect(images[0] == images[1])
    }

    /// A file cut inside its last page, past the last record: the stores past the new end raise
    /// no fault (the kernel drops them), so the flush checks the size before it syncs.
    @Test func aFileCutShortInsideItsLastPageFailsTheFlush() throws {
        let shm = try shmDirectory()
        let path = shm.path + "/cut"
        let (journal, _) = try Journal.open(
            path: path, options: options(mapped: true), fileSystem: LiveFileSystem(), create: .openOrCreate)
        _ = try journal.withWriteLock { _ in try journal.append([Data("kept".utf8)]) }
        #expect(truncate(path, off_t(journal.dataEnd + 5)) == 0)
        _ = try journal.withWriteLock { _ in try journal.append([Data(repeating: 7, count: 40)]) }
        let error = #expect(throws: CofferError.self) { try journal.flush() }
        #expect(error?.code == .corrupted && error?.message.contains("truncated") == true, "\(String(describing: error))")
        #expect(throws: CofferError.self) {
            _ = try journal.withWriteLock { _ in try journal.append([Data("more".utf8)]) }
        }
        _ = try? journal.close()
    }

    /// A cut below the data end inside the last page: stores past it are dropped without a
    /// fault, so the write that would grow the file again (zeros over acknowledged records)
    /// refuses instead, and nothing more is written.
    @Test func aFileCutBelowItsRecordsIsNeverGrownAgain() throws {
        let shm = try shmDirectory()
        let path = shm.path + "/cut-below"
        let (journal, _) = try Journal.open(
            path: path, options: options(mapped: true), fileSystem: LiveFileSystem(), create: .openOrCreate)
        for i in 0..<20 { _ = try journal.withWriteLock { _ in try journal.append([Data("record-\(i)".utf8)]) } }
        #expect(truncate(path, off_t(journal.dataEnd - 30)) == 0)
        var refused: CofferError?
        for _ in 0..<2000 where refused == nil {
            do {
                _ = try journal.withWriteLock { _ in try journal.append([Data(repeating: 7, count: 100)]) }
            } catch let error as CofferError {
                refused = error
            }
        }
        #expect(refused?.code == .corrupted && refused?.message.contains("truncated") == true, "\(String(describing: refused))")
        // The file was not grown again over the cut.
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0 < Int(journal.dataEnd))
        _ = try? journal.close()
    }

    /// A control page zeroed while a journal watches has lost its count, and so has a lock file
    /// removed and made again for a store that exists: from then on appends are written, never
    /// stored, so every watch sees them.
    @Test(arguments: ["zeroed", "removed"])
    func aPageThatMayHaveLostCountsStopsTheMapping(_ how: String) throws {
        let shm = try shmDirectory()
        var shared = options(mapped: true)
        shared.exclusive = false
        let path = shm.path + "/lost"
        let (writer, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openOrCreate)
        _ = try writer.withWriteLock { _ in try writer.append([Data("first".utf8)]) }
        #expect(writer.mappedCommits == 1)
        let (watcher, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openExisting)
        watcher.watch(true)
        if how == "zeroed" {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + ".lock"))
            try handle.write(contentsOf: Data(count: 4096))
            try handle.close()
            // The page holds the store's mutex: zeroed under open journals, it can be set up
            // again only once they close. Until then their writes are refused.
            #expect(throws: CofferError.self) {
                _ = try writer.withWriteLock { _ in try writer.append([Data("after".utf8)]) }
            }
            try writer.close()
            try watcher.close()
            let (next, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openExisting)
            _ = try next.withWriteLock { _ in try next.append([Data("after".utf8)]) }
            #expect(next.mappedCommits == 0, "stored into the mapping while a watch may be uncounted")
            try next.close()
            return
        } else {
            #expect(unlink(path + ".lock") == 0)
            try writer.close()
            let (next, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openExisting)
            _ = try next.withWriteLock { _ in try next.append([Data("after".utf8)]) }
            #expect(next.mappedCommits == 0, "stored into the mapping of a store whose lock file was made again")
            try next.close()
        }
        try watcher.close()
    }

    @Test func aDurableJournalWritesEachAppend() throws {
        let shm = try shmDirectory()
        var durable = options(mapped: true)
        durable.durability = .immediate
        let (journal, _) = try Journal.open(
            path: shm.path + "/durable", options: durable, fileSystem: LiveFileSystem(), create: .openOrCreate)
        _ = try journal.withWriteLock { _ in try journal.append([Data("one".utf8)]) }
        #expect(journal.tail == nil && journal.mappedCommits == 0)
        try journal.close()
    }

    /// Two journals on one file stand for two processes. A file watch sees writes, not stores
    /// into a mapping: while another journal watches, a shared writer writes.
    @Test func aSharedWriterStoresOnlyWhileNoOtherJournalWatches() throws {
        let shm = try shmDirectory()
        var shared = options(mapped: true)
        shared.exclusive = false
        let path = shm.path + "/shared"
        let (writer, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openOrCreate)
        let (other, _) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openExisting)
        func append(_ text: String) throws { _ = try writer.withWriteLock { _ in try writer.append([Data(text.utf8)]) } }
        try append("alone")
        #expect(writer.mappedCommits == 1)
        // The writer's own watch does not count against it: its own observers are not told of
        // its own writes through the file.
        writer.watch(true)
        try append("watched by itself")
        #expect(writer.mappedCommits == 2)
        other.watch(true)
        try append("watched by another")
        try append("watched by another, again")
        #expect(writer.mappedCommits == 2)
        // What was written and what was stored read back alike, in order, elsewhere.
        let changes = try other.refresh()
        #expect(changes.records.map { String(decoding: $0.payload, as: UTF8.self) } == [
            "alone", "watched by itself", "watched by another", "watched by another, again",
        ])
        other.watch(false)
        try append("alone again")
        #expect(writer.mappedCommits == 3)
        // A watching journal that closes stops counting.
        other.watch(true)
        try other.close()
        try append("after the other closed")
        #expect(writer.mappedCommits == 4)
        try writer.close()
        let (reader, records) = try Journal.open(path: path, options: shared, fileSystem: LiveFileSystem(), create: .openExisting)
        #expect(records.count == 6)
        try reader.close()
    }
}
