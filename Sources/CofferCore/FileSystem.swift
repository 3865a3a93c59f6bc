/// The system calls Coffer's file I/O is built from, as a protocol so tests can inject faults.
///
/// ``LiveFileSystem`` calls the kernel. `CofferTesting.InMemoryFileSystem` keeps files in memory
/// and can fail any call (ENOSPC, EIO, a short write) or simulate a power loss. Every method
/// throws ``CofferError`` with code ``CofferError/Code/io`` carrying the path and the errno.
///
/// Paths are absolute POSIX paths. Descriptors are plain integers owned by the caller, who must
/// ``close(_:)`` them.
package protocol FileSystem: Sendable {
    /// Opens (and with `create`, creates with `mode`) a file for reading and writing.
    /// With `exclusive`, fails with `EEXIST` when the file exists.
    ///
    /// A file Coffer writes must be safe to write: the live file system never follows a
    /// symbolic link at `path` (`O_NOFOLLOW`) and refuses, before anything is written, a file
    /// that is not a regular file, is owned by another user, or has more than one name (a hard
    /// link). Directories above `path` are followed; stores resolve them first
    /// (``resolve(_:)``).
    func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32
    /// Opens a file read-only. The live file system never follows a symbolic link at `path`,
    /// never blocks on a FIFO, and refuses anything but a regular file owned by this user (a
    /// store's files are read as the user's own data).
    func openReadOnly(_ path: String) throws -> Int32
    /// Closes a descriptor. Errors from `close` are ignored (Linux's close always releases it).
    func close(_ fd: Int32)
    /// Reads up to `buffer.count` bytes at `offset`; returns how many were read (0 at end of file).
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int
    /// Writes up to `bytes.count` bytes at `offset`; returns how many were written (may be fewer).
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int
    /// Flushes the file's data and metadata to stable storage.
    func fsync(_ fd: Int32) throws
    /// Flushes the file's data (and the metadata needed to read it back) to stable storage.
    func fdatasync(_ fd: Int32) throws
    /// Sets the file's size.
    func ftruncate(_ fd: Int32, size: Int64) throws
    /// The file's size and identity.
    func fstat(_ fd: Int32) throws -> FileStatus
    /// The size and identity of the file at `path`, or `nil` when there is none.
    func stat(_ path: String) throws -> FileStatus?
    /// Renames `from` to `to`, replacing `to` atomically.
    func rename(_ from: String, _ to: String) throws
    /// Removes a file. A missing file is not an error.
    func unlink(_ path: String) throws
    /// Creates one directory with `mode`. An existing directory is not an error.
    func mkdir(_ path: String, mode: UInt32) throws
    /// The names in a directory (without `.` and `..`).
    func contentsOfDirectory(_ path: String) throws -> [String]
    /// Flushes a directory's entries (creations, renames, removals) to stable storage.
    func fsyncDirectory(_ path: String) throws
    /// Takes an `flock` on `fd`, waiting at most `timeout`.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` when the wait times out.
    func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws
    /// Releases an `flock`.
    func unlock(_ fd: Int32)
    /// Locks the process-shared, robust mutex at `mutex` (inside a ``SharedMapping``), waiting
    /// at most `timeout`. The live file system locks a robust, process-shared `pthread` mutex;
    /// the in-memory one models it (its simulated processes share one real process, and a
    /// simulated power loss clears memory a real mutex would be linked into); a wrapper
    /// forwards to what it wraps.
    /// - Returns: whether the mutex's last holder died holding it (it is the caller's now).
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` when the wait times out.
    func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool
    /// Unlocks a mutex locked with ``lockMutex(_:timeout:path:)`` by this thread.
    func unlockMutex(_ mutex: UnsafeMutableRawPointer)
    /// Maps the first `length` bytes of the file open as `fd` into memory shared with every
    /// other process that maps it (`mmap` with `MAP_SHARED`); the file must be at least that long.
    /// The mapping stays valid after `fd` is closed and ends when the returned object is released.
    ///
    /// The journal keeps a small control page in its lock file this way (see
    /// CofferJournal's `Journal` and docs/FORMAT.md). Every process that opens the same files must use a file
    /// system that maps them: a file system that cannot returns `nil`, and then never may.
    func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)?
    /// Maps the first `length` bytes of the file open as `fd` (which may be shorter: the caller
    /// stores only below its end, into blocks already written, and the pages past the end become
    /// the file's as it grows) for a journal to append into with plain stores instead of a
    /// `pwrite` each, or
    /// `nil` where that is not safe: where a store into a written block could still need a
    /// new one (copy-on-write file systems: btrfs, XFS with reflinks, ZFS, bcachefs; overlayfs),
    /// a full disk would fault the store (`SIGBUS`) instead of failing a call with `ENOSPC`.
    /// `nil` by default, and where Coffer's `SIGBUS` handler is not (or no longer) the
    /// process's; see CofferJournal's `Journal` for who uses it.
    func mapForAppends(_ fd: Int32, length: Int, path: String) -> (any SharedMapping)?
    /// The path with every symbolic link resolved (`realpath`); for a path that does not exist
    /// yet, its directory resolved and its last component kept. Two paths to one file resolve
    /// alike, so a store names its lock and temporary files after the file itself, not after
    /// the way it was reached.
    func resolve(_ path: String) throws -> String
    /// Whether the file at `path` is itself the root of a mount: a single file bind-mounted
    /// over another name (`docker run -v ~/v.coffer:/data/v.coffer`). Such a file has a second
    /// name in another directory, with a lock file of its own there, and no rename can replace
    /// it, so a store refuses it (its directory can be mounted instead).
    func isMountRoot(_ path: String) -> Bool
}

extension FileSystem {
    /// A file system without symbolic links (the default): paths are already resolved.
    package func resolve(_ path: String) throws -> String { path }
    /// A file system without mounts (the default): no file is a mount's root.
    package func isMountRoot(_ path: String) -> Bool { false }
    /// A file system whose files are never mapped for appends (the default): every append is a write.
    package func mapForAppends(_ fd: Int32, length: Int, path: String) -> (any SharedMapping)? { nil }
}

/// Memory shared between processes through a file, as returned by ``FileSystem/mapShared(_:length:path:)``.
/// Unmapped when the last reference goes.
package protocol SharedMapping: AnyObject, Sendable {
    /// The first mapped byte (page-aligned).
    var base: UnsafeMutableRawPointer { get }
    /// How many bytes are mapped.
    var length: Int { get }
}

/// What ``FileSystem/stat(_:)`` tells: enough to notice a file that grew or was replaced.
package struct FileStatus: Sendable, Equatable {
    /// Size in bytes.
    package var size: Int64
    /// Device and inode: a file replaced by rename has a different identity.
    package var device: UInt64
    package var inode: UInt64
    /// Permission bits (`0o600` …).
    package var mode: UInt32
    package var isDirectory: Bool
    /// Whether it is a regular file (not a directory, FIFO, socket or device).
    package var isRegularFile: Bool
    /// The owner's user ID, when the file system has owners.
    package var owner: UInt32?
    /// How many names (hard links) the file has.
    package var linkCount: UInt64

    package init(
        size: Int64, device: UInt64, inode: UInt64, mode: UInt32, isDirectory: Bool, isRegularFile: Bool? = nil,
        owner: UInt32? = nil, linkCount: UInt64 = 1
    ) {
        self.size = size
        self.device = device
        self.inode = inode
        self.mode = mode
        self.isDirectory = isDirectory
        self.isRegularFile = isRegularFile ?? !isDirectory
        self.owner = owner
        self.linkCount = linkCount
    }
}

extension FileSystem {
    /// Writes all of `bytes` at `offset`, looping over short writes.
    /// - Throws: the first error; a write that makes no progress is `EIO`.
    package func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = try pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), at: offset + Int64(done))
            if n <= 0 { throw CofferError.io("write", path: path, errno: EIO_) }
            done += n
        }
    }

    /// Reads exactly `buffer.count` bytes at `offset`, or fewer only at end of file; returns the count.
    package func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = try pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done))
            if n == 0 { break }
            done += n
        }
        return done
    }
}
