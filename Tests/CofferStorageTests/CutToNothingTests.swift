import CofferCore
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

/// The live file system (appends by `pwrite`: no mapping), which cuts the suite's file to
/// nothing right after the next `fstat` of it once armed: another program's `truncate -s 0`
/// landing between a size check and the writes that follow it.
final class CutAfterSizeCheckFileSystem: FileSystem {
    let inner = LiveFileSystem()
    /// The descriptor of the suite's file, once opened.
    private let storeFD = Atomic<Int32>(-1)
    private let armed = Atomic<Bool>(false)
    private let cuts = Atomic<Int>(0)

    /// Cuts the file at the next `fstat` of it.
    func arm() { armed.store(true, ordering: .sequentiallyConsistent) }
    /// How many times the file was cut.
    var cutCount: Int { cuts.load(ordering: .sequentiallyConsistent) }

    func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        let fd = try inner.open(path, create: create, exclusive: exclusive, mode: mode)
        if path.hasSuffix(".cofferkv") { storeFD.store(fd, ordering: .sequentiallyConsistent) }
        return fd
    }
    func openReadOnly(_ path: String) throws -> Int32 { try inner.openReadOnly(path) }
    func close(_ fd: Int32) { inner.close(fd) }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try inner.pread(fd, into: buffer, at: offset)
    }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        try inner.pwrite(fd, bytes, at: offset)
    }
    func fsync(_ fd: Int32) throws { try inner.fsync(fd) }
    func fdatasync(_ fd: Int32) throws { try inner.fdatasync(fd) }
    func ftruncate(_ fd: Int32, size: Int64) throws { try inner.ftruncate(fd, size: size) }
    func fstat(_ fd: Int32) throws -> FileStatus {
        let status = try inner.fstat(fd)
        if fd == storeFD.load(ordering: .sequentiallyConsistent),
            armed.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged
        {
            try inner.ftruncate(fd, size: 0)
            cuts.add(1, ordering: .sequentiallyConsistent)
        }
        return status
    }
    func stat(_ path: String) throws -> FileStatus? { try inner.stat(path) }
    func rename(_ from: String, _ to: String) throws { try inner.rename(from, to) }
    func unlink(_ path: String) throws { try inner.unlink(path) }
    func mkdir(_ path: String, mode: UInt32) throws { try inner.mkdir(path, mode: mode) }
    func contentsOfDirectory(_ path: String) throws -> [String] { try inner.contentsOfDirectory(path) }
    func fsyncDirectory(_ path: String) throws { try inner.fsyncDirectory(path) }
    func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws {
        try inner.lock(fd, exclusive: exclusive, timeout: timeout, path: path)
    }
    func unlock(_ fd: Int32) { inner.unlock(fd) }
    func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool {
        try inner.lockMutex(mutex, timeout: timeout, path: path)
    }
    func unlockMutex(_ mutex: UnsafeMutableRawPointer) { inner.unlockMutex(mutex) }
    func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
        try inner.mapShared(fd, length: length, path: path)
    }
    func resolve(_ path: String) throws -> String { try inner.resolve(path) }
}

/// A store file another program cuts to nothing while a writer has it open: the writer says so
/// and stops, instead of acknowledging writes into a file of zeros with no header.
@Suite("A store file cut to nothing under its writer")
struct CutToNothingTests {
    /// Writes 16 KiB values until one is refused, at most `limit`; returns how many were
    /// acknowledged and the error that stopped them.
    static func writeUntilRefused(_ store: KeyValueFileStrategy, limit: Int) -> (acknowledged: Int, error: CofferError?) {
        let value = Data(repeating: 0x42, count: 16 * 1024)
        for i in 0..<limit {
            do {
                try store.save(value, for: "v-\(i)")
            } catch let error as CofferError {
                return (i, error)
            } catch {
                Issue.record("not a CofferError: \(error)")
                return (i, nil)
            }
        }
        return (limit, nil)
    }

    @Test("cut between a growth's size check and its zeros: the write that grows fails .corrupted, and so does every later one")
    func cutBeforeTheGrowthIsTheGrowthsError() throws {
        let dir = try Scratch("kv-cut-growth")
        let files = CutAfterSizeCheckFileSystem()
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "cut", fileSystem: files)
        try store.save(Data("kept".utf8), for: "first")
        try store.flush()
        files.arm()
        // The next fstat of the file is a growth's (64 KiB of values outgrow any preallocation
        // within a few writes); the cut lands right after it.
        let (acknowledged, error) = Self.writeUntilRefused(store, limit: 4_096)
        #expect(files.cutCount == 1)
        let refusal = try #require(error, "\(acknowledged) writes after the cut were all acknowledged")
        #expect(refusal.code == .corrupted)
        #expect(refusal.message.contains("truncated by another program"), "\(refusal.message)")
        #expect(throws: CofferError.self) { try store.save(Data("later".utf8), for: "later") }
        #expect(throws: CofferError.self) { try store.flush() }
        // The file is left as the cut and the growth made it, for a person to look at: a strict
        // open refuses it, never opens it as an empty store.
        #expect(throws: CofferError.self) { _ = try KeyValueFileStrategy(directory: dir.url, suite: "cut") }
    }

    @Test(
        "cut in the middle of its records, then appends by pwrite inside the allocated space: the next flush fails, and a durable write at once",
        arguments: [false, true])
    func cutInTheMiddleIsTheNextSyncsError(durable: Bool) throws {
        let dir = try Scratch("kv-cut-middle")
        // The wrapper is never armed: it only keeps appends on `pwrite` (no mapping).
        let files = CutAfterSizeCheckFileSystem()
        let store = try KeyValueFileStrategy(
            directory: dir.url, suite: "cut", durability: durable ? .immediate : .coalesced, fileSystem: files)
        for i in 0..<200 { try store.save(Data(repeating: 7, count: 100), for: "k\(i)") }
        try store.flush()
        // Another program cuts the file in the middle of its records (header intact).
        let cut = store.statistics.fileBytes / 2
        #if canImport(Glibc)
            let fd = Glibc.open(dir.url.appendingPathComponent("cut.cofferkv").path, O_WRONLY)
            try #require(fd >= 0)
            #expect(Glibc.ftruncate(fd, off_t(cut)) == 0)
            Glibc.close(fd)
        #else
            let handle = try FileHandle(forWritingTo: dir.url.appendingPathComponent("cut.cofferkv"))
            try handle.truncate(atOffset: UInt64(cut))
            try handle.close()
        #endif
        var refused: CofferError?
        var acknowledged = 0
        do {
            try store.save(Data("after".utf8), for: "after")
            acknowledged += 1
            try store.flush()
        } catch let error as CofferError {
            refused = error
        }
        let error = try #require(refused, "a write and a flush after the cut both succeeded: the write is lost at the next open")
        #expect(error.code == .corrupted)
        #expect(error.message.contains("truncated by another program"), "\(error.message)")
        // A durable write is synced before it returns: it is the one refused.
        if durable { #expect(acknowledged == 0) }
        #expect(throws: CofferError.self) { try store.save(Data("later".utf8), for: "later") }
    }

    @Test("cut, then appends past the cut inside the preallocated space: the next flush fails .corrupted")
    func cutUnderAppendsIsTheFlushsError() throws {
        let dir = try Scratch("kv-cut-append")
        let files = CutAfterSizeCheckFileSystem()
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "cut", fileSystem: files)
        try store.save(Data("kept".utf8), for: "first")
        try store.flush()
        // Cut the file directly (no fstat involved): the next small appends land inside the
        // space already allocated, past the cut, and leave a sparse file of zeros before them.
        #if canImport(Glibc)
            let fd = Glibc.open(dir.url.appendingPathComponent("cut.cofferkv").path, O_WRONLY)
            try #require(fd >= 0)
            #expect(Glibc.ftruncate(fd, 0) == 0)
            Glibc.close(fd)
        #else
            let handle = try FileHandle(forWritingTo: dir.url.appendingPathComponent("cut.cofferkv"))
            try handle.truncate(atOffset: 0)
            try handle.close()
        #endif
        var refused: CofferError?
        do {
            try store.save(Data("after".utf8), for: "after")
            try store.flush()
        } catch let error as CofferError {
            refused = error
        }
        // The flush's check of the magic tells it, or, when a second has passed, the periodic
        // check of the file first: either way the cut is reported, and writing stops.
        let error = try #require(refused, "a write and a flush after the cut both succeeded")
        #expect(error.code == .corrupted)
        #expect(throws: CofferError.self) { try store.save(Data("later".utf8), for: "later") }
    }
}
