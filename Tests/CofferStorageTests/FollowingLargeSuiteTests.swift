import CofferCore
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

/// The live file system, counting the bytes `pread` returns: what an instance read of its file.
final class ReadCountingFileSystem: FileSystem {
    let inner = LiveFileSystem()
    private let read = Atomic<Int>(0)

    /// Bytes read so far.
    var bytesRead: Int { read.load(ordering: .relaxed) }

    func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        try inner.open(path, create: create, exclusive: exclusive, mode: mode)
    }
    func openReadOnly(_ path: String) throws -> Int32 { try inner.openReadOnly(path) }
    func close(_ fd: Int32) { inner.close(fd) }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        let n = try inner.pread(fd, into: buffer, at: offset)
        read.add(n, ordering: .relaxed)
        return n
    }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        try inner.pwrite(fd, bytes, at: offset)
    }
    func fsync(_ fd: Int32) throws { try inner.fsync(fd) }
    func fdatasync(_ fd: Int32) throws { try inner.fdatasync(fd) }
    func ftruncate(_ fd: Int32, size: Int64) throws { try inner.ftruncate(fd, size: size) }
    func fstat(_ fd: Int32) throws -> FileStatus { try inner.fstat(fd) }
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

/// Following a large suite: a change made elsewhere to one key reaches an observer by reading
/// what was appended, never by reading the suite again, and names that key alone (so a
/// follower reloads one key, not every key it follows).
@Suite("Following one key of a large key-value suite")
struct FollowingLargeSuiteTests {
    @Test("another instance's write of one key of 20,000: the observer reads the appended record, not the file, and is told that key")
    func followerReadsOnlyTheAppendedRecord() throws {
        let dir = try Scratch()
        let count = 20_000
        let writer = try KeyValueFileStrategy(directory: dir.url, suite: "large")
        for start in stride(from: 0, to: count, by: 5_000) {
            try writer.saveBatch(
                try (start..<(start + 5_000)).map { ("k-\($0)", try ValueCodec.encode($0, as: writer.valueEncoding)) })
        }
        let files = ReadCountingFileSystem()
        let follower = try KeyValueFileStrategy(directory: dir.url, suite: "large", fileSystem: files)
        let fileSize = follower.statistics.fileBytes
        #expect(follower.statistics.keys == count)
        #expect(files.bytesRead >= Int(fileSize), "opening reads the whole file")

        let told = Locked<[StoreChange]>([])
        let arrived = DispatchSemaphore(value: 0)
        let observation = try follower.observeChanges { change in
            told.withLock { $0.append(change) }
            arrived.signal()
        }
        defer { observation.cancel() }
        let before = files.bytesRead
        try writer.set(-7, for: "k-7")
        // A hang guard, not a performance figure.
        #expect(arrived.wait(timeout: .now() + 20) == .success, "the follower was not told of the write")
        let readToFollow = files.bytesRead - before
        #expect(told.withLock { $0 } == [StoreChange(keys: ["k-7"])])
        // One record (a frame header, about 20 bytes of payload) and the frame header after it.
        #expect(readToFollow < 1024, "following one write read \(readToFollow) bytes of a \(fileSize)-byte file")
        #expect(try follower.get(Int.self, for: "k-7") == -7)
        #expect(try follower.get(Int.self, for: "k-8") == 8)
    }

    /// The other side of the count above: what does make a follower read the suite again is the
    /// file being replaced (another instance compacting it); it then rereads it whole and is
    /// told that any key may have changed.
    @Test("another instance compacting the 20,000-key suite: the observer reads the new file whole and is told 'anything'")
    func followerRereadsAfterCompactionElsewhere() throws {
        let dir = try Scratch()
        let count = 20_000
        let writer = try KeyValueFileStrategy(directory: dir.url, suite: "large")
        for start in stride(from: 0, to: count, by: 5_000) {
            try writer.saveBatch(
                try (start..<(start + 5_000)).map { ("k-\($0)", try ValueCodec.encode($0, as: writer.valueEncoding)) })
        }
        let files = ReadCountingFileSystem()
        let follower = try KeyValueFileStrategy(directory: dir.url, suite: "large", fileSystem: files)
        let told = Locked<[StoreChange]>([])
        let arrived = DispatchSemaphore(value: 0)
        let observation = try follower.observeChanges { change in
            told.withLock { $0.append(change) }
            arrived.signal()
        }
        defer { observation.cancel() }
        let before = files.bytesRead
        try writer.compact()
        #expect(arrived.wait(timeout: .now() + 20) == .success, "the follower was not told of the compaction")
        let reread = files.bytesRead - before
        #expect(told.withLock { $0 }.first == StoreChange(keys: nil))
        #expect(reread >= Int(writer.statistics.fileBytes), "the follower read \(reread) bytes of the new file")
        #expect(try follower.get(Int.self, for: "k-7") == 7)
    }
}
