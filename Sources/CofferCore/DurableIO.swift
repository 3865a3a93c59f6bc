public import Foundation
import Synchronization

/// Crash-safe file operations shared by every strategy that writes files.
///
/// - ``atomicReplace(_:with:fileSystem:)``: a reader sees the old bytes or the new bytes, never a
///   mix, and once it returns the new bytes survive power loss.
/// - Files Coffer creates are `0600`; directories `0700`.
public enum DurableIO {
    /// Permission bits of every file Coffer creates.
    public static let fileMode: UInt32 = 0o600
    /// Permission bits of every directory Coffer creates.
    public static let directoryMode: UInt32 = 0o700

    /// Replaces the file at `path` with `bytes`, atomically and durably.
    ///
    /// Writes a temporary file created `0600` beside it (`O_EXCL`), fsyncs it, renames it over
    /// `path`, then fsyncs the directory so the rename itself survives power loss. On any failure
    /// the temporary file is removed and the old file is untouched.
    /// - Throws: ``CofferError`` (``CofferError/Code/io`` with the errno) on failure.
    public static func atomicReplace(_ path: String, with bytes: UnsafeRawBufferPointer, fileSystem fs: any FileSystem)
        throws
    {
        let directory = parentDirectory(of: path)
        let temp = "\(directory)/.\(lastComponent(of: path)).\(randomSuffix()).tmp"
        let fd = try fs.open(temp, create: true, exclusive: true, mode: fileMode)
        do {
            try fs.writeAll(fd, bytes, at: 0, path: temp)
            try fs.fsync(fd)
            fs.close(fd)
        } catch {
            fs.close(fd)
            try? fs.unlink(temp)  // best effort: the original error is the one that matters
            throw withPath(error, temp)
        }
        do {
            try fs.rename(temp, path)
        } catch {
            try? fs.unlink(temp)
            throw error
        }
        try fs.fsyncDirectory(directory)
    }

    /// ``atomicReplace(_:with:fileSystem:)`` for `Data`.
    public static func atomicReplace(_ path: String, with data: Data, fileSystem fs: any FileSystem) throws {
        try data.withUnsafeBytes { try atomicReplace(path, with: $0, fileSystem: fs) }
    }

    /// ``atomicReplace(_:with:fileSystem:)`` for a byte array.
    public static func atomicReplace(_ path: String, with bytes: [UInt8], fileSystem fs: any FileSystem) throws {
        try bytes.withUnsafeBytes { try atomicReplace(path, with: $0, fileSystem: fs) }
    }

    /// Reads a whole file, or returns `nil` when it does not exist.
    /// - Throws: ``CofferError/Code/limitExceeded`` for a file larger than `maximumSize`
    ///   (checked before anything is allocated: a sparse file may claim any size).
    public static func readFile(
        _ path: String, maximumSize: Int64 = maximumReadSize, fileSystem fs: any FileSystem
    ) throws -> Data? {
        let fd: Int32
        do {
            fd = try fs.openReadOnly(path)
        } catch let error as CofferError where error.errno == ENOENT_ {
            return nil
        }
        defer { fs.close(fd) }
        let size = Int(try checkSize(try fs.fstat(fd).size, maximum: maximumSize, path: path))
        var data = Data(count: size)
        let n = try data.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: 0) }
        if n < size { data.removeSubrange(n...) }
        return data
    }

    /// The largest file Coffer reads whole into memory: 4 GiB (a store file at open, a salvage
    /// image, a disk strategy's value). Above it, ``CofferError/Code/limitExceeded``.
    public static let maximumReadSize: Int64 = 4 << 30

    /// `size`, or ``CofferError/Code/limitExceeded`` when it is above `maximum`.
    public static func checkSize(_ size: Int64, maximum: Int64 = maximumReadSize, path: String) throws -> Int64 {
        guard size > maximum else { return size }
        throw CofferError(
            .limitExceeded,
            "the file holds \(size) bytes, more than the \(maximum) bytes Coffer reads into memory; it is not a "
                + "store Coffer wrote (or it was padded, perhaps sparsely): nothing was read",
            path: path)
    }

    /// Removes a file durably (unlink, then fsync the directory). A missing file is not an error.
    public static func remove(_ path: String, fileSystem fs: any FileSystem) throws {
        guard try fs.stat(path) != nil else { return }
        try fs.unlink(path)
        try fs.fsyncDirectory(parentDirectory(of: path))
    }

    /// Creates `path` and any missing parents with mode `0700`; existing directories are left as they are.
    /// - Throws: ``CofferError`` when a component exists and is not a directory, or mkdir fails.
    public static func ensureDirectory(_ path: String, fileSystem fs: any FileSystem) throws {
        if let st = try fs.stat(path) {
            if st.isDirectory { return }
            throw CofferError(.io, "a file is in the way of the directory Coffer needs", path: path, errno: ENOTDIR_)
        }
        let parent = parentDirectory(of: path)
        if parent != path { try ensureDirectory(parent, fileSystem: fs) }
        try fs.mkdir(path, mode: directoryMode)
        // The new entry must survive power loss before anything saved inside it is promised to.
        try fs.fsyncDirectory(parent)
    }

    /// The directory part of a path (`/a/b` → `/a`; `/a` → `/`).
    public static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// The last component of a path.
    public static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36)
    }

    private static func withPath(_ error: any Error, _ path: String) -> any Error {
        guard var error = error as? CofferError, error.path == nil else { return error }
        error.path = path
        return error
    }
}

/// errno values, named without importing Glibc into the public surface.
let ENOENT_: Int32 = 2
let ENOTDIR_: Int32 = 20
let EIO_: Int32 = 5

/// An exclusive or shared `flock` on a separate, stable lock file (`<file>.lock`).
///
/// The lock is on its own file because a lock on a data file that compaction replaces by rename
/// would stop protecting it, and a POSIX `fcntl` lock is dropped when *any* descriptor to the
/// file is closed. `flock` locks belong to the open file description, so two descriptors in one
/// process exclude each other just as two processes do.
public final class FileLock: Sendable {
    public let path: String
    /// The lock file's descriptor, or -1 when there is no lock file and none could be created.
    private let fd: Int32
    private let fileSystem: any FileSystem
    /// Why this lock cannot serialise writers (`nil`: it can). Set when the lock file could not
    /// be opened for writing: a read-only mount or directory, a full disk, a `0400` lock file.
    /// Such a lock is still taken shared when the file exists, so readers wait out a writer's
    /// open, and is a no-op when it does not; the store using it must not write.
    public let readOnlyReason: CofferError?
    /// Threads sharing this instance share its descriptor, and a second `flock` on the same open
    /// file description succeeds at once: a flag serialises them first, with the same timeout.
    private let inUse = Locked<Bool>(false)

    /// Opens (creating `0600` if needed) the lock file at `path`.
    ///
    /// A symlink at `path` is never followed, and a file there that is not a regular file owned
    /// by this user with one name is refused (see ``FileSystem/open(_:create:exclusive:mode:)``).
    /// When the file cannot be created or opened for writing (`EACCES`, `EROFS`, `ENOSPC`,
    /// `EDQUOT`), the lock is opened read-only when the file exists, or goes without a file,
    /// and ``readOnlyReason`` says why.
    public init(path: String, fileSystem: any FileSystem) throws {
        self.path = path
        self.fileSystem = fileSystem
        do {
            self.fd = try fileSystem.open(path, create: true, exclusive: false, mode: DurableIO.fileMode)
            self.readOnlyReason = nil
        } catch let error as CofferError where FileLock.allowsReadOnly(error) {
            self.readOnlyReason = error
            do {
                self.fd = try fileSystem.openReadOnly(path)
            } catch let missing as CofferError where missing.errno == ENOENT_ {
                self.fd = -1
            }
        }
    }

    /// Whether a failure to open a file for writing still allows reading it.
    static func allowsReadOnly(_ error: CofferError) -> Bool {
        guard error.code == .io, let value = error.errno else { return false }
        // EMLINK: a hard-linked file is refused for writing, but reading it harms nothing.
        return [EACCES_, EROFS_, ENOSPC_, EDQUOT_, EMLINK_].contains(value)
    }

    deinit { if fd >= 0 { fileSystem.close(fd) } }

    /// Maps the lock file's first `length` bytes shared with every process that maps them,
    /// growing the file to `length` first (it never shrinks). Call holding the lock.
    ///
    /// The file grows by *writing* zeros, not by `ftruncate`: a hole would be allocated at the
    /// first store into the mapping, and on a full disk that store would kill the process with
    /// `SIGBUS`; a written block fails here, with `ENOSPC`.
    /// - Returns: `nil` when the file system cannot map files (see ``FileSystem/mapShared(_:length:path:)``).
    public func mapShared(length: Int) throws -> (any SharedMapping)? {
        guard readOnlyReason == nil else { return nil }
        do {
            let size = Int(try fileSystem.fstat(fd).size)
            if size < length {
                let zeros = [UInt8](repeating: 0, count: length - size)
                try zeros.withUnsafeBytes { try fileSystem.writeAll(fd, $0, at: Int64(size), path: path) }
            }
            return try fileSystem.mapShared(fd, length: length, path: path)
        } catch var error as CofferError {
            if error.path == nil { error.path = path }
            throw error
        }
    }

    /// Takes the lock and keeps it until ``release()`` (for a store opened exclusively).
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` on timeout.
    public func acquire(exclusive: Bool = true, timeout: Double) throws {
        let deadline = Self.deadline(after: timeout)
        try enterThreadGate(deadline: deadline, timeout: timeout)
        guard fd >= 0 else { return }
        do {
            try fileSystem.lock(
                fd, exclusive: exclusive && readOnlyReason == nil,
                timeout: max(0, Self.seconds(deadline - ContinuousClock.now)), path: path)
        } catch {
            inUse.withLock { $0 = false }
            throw error
        }
    }

    /// Releases a lock taken with ``acquire(exclusive:timeout:)``.
    public func release() {
        if fd >= 0 { fileSystem.unlock(fd) }
        inUse.withLock { $0 = false }
    }

    /// Runs `body` holding the lock; waits at most `timeout` seconds for it.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` on timeout, or what `body` throws.
    public func withLock<T>(exclusive: Bool = true, timeout: Double, _ body: () throws -> T) throws -> T {
        let deadline = Self.deadline(after: timeout)
        try enterThreadGate(deadline: deadline, timeout: timeout)
        defer { inUse.withLock { $0 = false } }
        guard fd >= 0 else { return try body() }
        let remaining = max(0, Self.seconds(deadline - ContinuousClock.now))
        // A read-only descriptor takes the lock shared: enough to wait out a writer, and what
        // file systems that emulate flock with fcntl locks allow on it.
        try fileSystem.lock(fd, exclusive: exclusive && readOnlyReason == nil, timeout: remaining, path: path)
        defer { fileSystem.unlock(fd) }
        return try body()
    }

    /// Waits (until `deadline`) for no other thread of this process to hold this instance.
    private func enterThreadGate(deadline: ContinuousClock.Instant, timeout: Double) throws {
        var pause = Duration.microseconds(20)
        while !inUse.withLock({ busy in
            if busy { return false }
            busy = true
            return true
        }) {
            if ContinuousClock.now >= deadline {
                throw CofferError(
                    .busy, "another thread of this process holds the lock on this store (waited \(timeout) s)",
                    path: path)
            }
            Thread.sleep(forTimeInterval: Self.seconds(pause))
            pause = min(pause * 2, .milliseconds(5))
        }
    }

    /// Now plus `timeout` seconds. Any `Double` is accepted without trapping: NaN and negative
    /// values mean now, and waits are capped at ``maximumTimeout`` (converting 1e10 seconds to
    /// nanoseconds used to overflow `Int64` and kill the process).
    static func deadline(after timeout: Double) -> ContinuousClock.Instant {
        let seconds = timeout.isNaN ? 0 : min(max(0, timeout), maximumTimeout)
        return ContinuousClock.now + .nanoseconds(Int64(seconds * 1e9))
    }

    /// The longest wait for a lock: 1e9 seconds (about 31 years), i.e. forever.
    public static let maximumTimeout: Double = 1e9

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
