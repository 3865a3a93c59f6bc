// The platform layer's file calls: the real file system, one system call a method, for Glibc,
// Musl and Darwin. The Darwin branches are written but have not been compiled (CI is Linux only).
package import CofferCore
import CSharedWord

#if canImport(Glibc)
import Glibc
/// `struct stat` of the C library in use.
typealias SystemStat = Glibc.stat
#elseif canImport(Musl)
import Musl
typealias SystemStat = Musl.stat
#elseif canImport(Darwin)
import Darwin
typealias SystemStat = Darwin.stat
#endif

/// The real file system: each method is one system call, retried on `EINTR`, its failure
/// translated into a ``CofferError`` with the path and errno.
package struct LiveFileSystem: FileSystem {
    package init() {}

    /// C stops reading a path at its first NUL, so "a\0b" would silently name "a": refuse it.
    private func checked(_ path: String) throws -> String {
        if path.utf8.contains(0) {
            throw CofferError(.invalidArgument, "a path must not contain a NUL byte", errno: EINVAL)
        }
        return path
    }

    package func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        let path = try checked(path)
        // O_NOFOLLOW: a symlink planted at a lock or store file's name (in a directory others
        // can write) must not make Coffer write wherever it points. O_NONBLOCK: a FIFO planted
        // there must not hang the open; it is refused below like any non-regular file.
        var flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK
        if create { flags |= O_CREAT }
        if exclusive { flags |= O_EXCL }
        let opened = retrying { systemOpen(path, flags, mode_t(mode)) }
        let fd = aboveStandardStreams(opened)
        if fd < 0 {
            let code = errno
            // Created here but not kept (no descriptor above 2 was free): do not leave it behind.
            if opened >= 0 && create && exclusive { _ = systemUnlink(path) }
            throw Self.openError(path, errno: code)
        }
        do {
            let status = try fstat(fd)
            try Self.checkRegular(status, path: path)
            try Self.checkOwner(status, path: path)
            if status.linkCount > 1 {
                throw CofferError(
                    .io,
                    "the file has \(status.linkCount) names (hard links); Coffer locks a store by its name, so "
                        + "two names would let two writers in at once: remove the other links",
                    path: path, errno: EMLINK)
            }
            try clearNonBlocking(fd, path: path)
            return fd
        } catch {
            _ = systemClose(fd)
            throw error
        }
    }

    package func openReadOnly(_ path: String) throws -> Int32 {
        let path = try checked(path)
        let fd = aboveStandardStreams(retrying { systemOpen(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0) })
        if fd < 0 { throw Self.openError(path, errno: errno) }
        do {
            let status = try fstat(fd)
            try Self.checkRegular(status, path: path)
            // Read as this user's own data: a file another user planted (one they made
            // unwritable, to force a read-only open) must not be taken for it.
            try Self.checkOwner(status, path: path)
            try clearNonBlocking(fd, path: path)
            return fd
        } catch {
            _ = systemClose(fd)
            throw error
        }
    }

    /// An `open` failure; a symlink refused by `O_NOFOLLOW` is said as such.
    private static func openError(_ path: String, errno value: Int32) -> CofferError {
        if value == ELOOP {
            return CofferError(
                .io,
                "the path is a symbolic link where Coffer expects its own file; it never follows one here "
                    + "(it could point anywhere): remove the link",
                path: path, errno: value)
        }
        return CofferError.io("open", path: path, errno: value)
    }

    /// Refuses a FIFO, device, socket or directory where a store file belongs.
    static func checkRegular(_ status: FileStatus, path: String) throws {
        guard status.isRegularFile else {
            let kind = status.isDirectory ? "a directory" : "a device, FIFO or socket"
            throw CofferError(.invalidArgument, "the path names \(kind), not a Coffer file", path: path)
        }
    }

    /// Refuses a file owned by another user (see ``FileSystem/open(_:create:exclusive:mode:)``).
    static func checkOwner(_ status: FileStatus, path: String) throws {
        guard let owner = status.owner, owner != UInt32(geteuid()) else { return }
        throw CofferError(
            .io,
            "the file is owned by user \(owner), not by this process's user (\(geteuid())); Coffer uses only its "
                + "own user's files (another user could have put it there): move it aside, or run as its owner",
            path: path, errno: EPERM)
    }

    private func clearNonBlocking(_ fd: Int32, path: String) throws {
        let flags = fcntl(fd, F_GETFL)
        if flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 {
            throw CofferError.io("fcntl", path: path, errno: errno)
        }
    }

    package func resolve(_ path: String) throws -> String {
        let path = try checked(path)
        if let resolved = Self.realPath(path) { return resolved }
        guard errno == ENOENT else { throw CofferError.io("realpath", path: path, errno: errno) }
        // Not there yet: resolve its directory and keep the name. A dangling symlink at the
        // name itself is left for the open to refuse (O_NOFOLLOW).
        let directory = DurableIO.parentDirectory(of: path)
        guard let resolved = Self.realPath(directory) else {
            if errno == ENOENT { return path }  // the directory is created later, as given
            throw CofferError.io("realpath", path: directory, errno: errno)
        }
        return (resolved == "/" ? "" : resolved) + "/" + DurableIO.lastComponent(of: path)
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    package func close(_ fd: Int32) {
        _ = systemClose(fd)
    }

    package func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        let n = retrying { systemPread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
        if n < 0 { throw CofferError.io("read", path: nil, errno: errno) }
        return n
    }

    package func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        let n = retrying { systemPwrite(fd, bytes.baseAddress, bytes.count, off_t(offset)) }
        if n < 0 { throw CofferError.io("write", path: nil, errno: errno) }
        return n
    }

    package func fsync(_ fd: Int32) throws {
        // Not retried on failure other than EINTR: after a failed fsync the kernel may have
        // dropped the dirty pages, so a second fsync "succeeding" proves nothing (fsyncgate).
        if retrying({ systemFsync(fd) }) != 0 { throw CofferError.io("fsync", path: nil, errno: errno) }
    }

    package func fdatasync(_ fd: Int32) throws {
        #if os(Linux)
        if retrying({ systemFdatasync(fd) }) != 0 { throw CofferError.io("fdatasync", path: nil, errno: errno) }
        #else
        // Darwin: fsync does not reach the platter; F_FULLFSYNC does.
        if fcntl(fd, F_FULLFSYNC) != 0 { try fsync(fd) }
        #endif
    }

    package func ftruncate(_ fd: Int32, size: Int64) throws {
        if retrying({ systemFtruncate(fd, off_t(size)) }) != 0 {
            throw CofferError.io("ftruncate", path: nil, errno: errno)
        }
    }

    package func fstat(_ fd: Int32) throws -> FileStatus {
        var st = SystemStat()
        if systemFstat(fd, &st) != 0 { throw CofferError.io("fstat", path: nil, errno: errno) }
        return Self.status(st)
    }

    package func stat(_ path: String) throws -> FileStatus? {
        let path = try checked(path)
        var st = SystemStat()
        if systemStat(path, &st) != 0 {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw CofferError.io("stat", path: path, errno: errno)
        }
        return Self.status(st)
    }

    /// Whether the file at `path` is the root of a mount: it lies on another mount than its
    /// directory (the `mnt_id` the kernel reports for a descriptor of each, in
    /// `/proc/self/fdinfo`), which only a mount of the file itself makes. `false` where that
    /// cannot be read.
    package func isMountRoot(_ path: String) -> Bool {
        #if os(Linux)
            guard let path = try? checked(path), let own = Self.mountID(of: path) else { return false }
            var directory = path
            while directory.count > 1, directory.hasSuffix("/") { directory.removeLast() }
            guard let slash = directory.lastIndex(of: "/") else { return false }
            directory = slash == directory.startIndex ? "/" : String(directory[..<slash])
            guard let parent = Self.mountID(of: directory) else { return false }
            return own != parent
        #else
            return false
        #endif
    }

    #if os(Linux)
        /// The `mnt_id` of the mount `path` lies on, from `/proc/self/fdinfo` of an `O_PATH`
        /// descriptor of it (which opens nothing for reading, and follows no final symlink).
        static func mountID(of path: String) -> Int? {
            let pathOnly: Int32 = 0o10000000  // O_PATH (<bits/fcntl-linux.h>; not imported into Swift)
            let fd = systemOpen(path, pathOnly | O_CLOEXEC | O_NOFOLLOW, 0)
            guard fd >= 0 else { return nil }
            defer { _ = systemClose(fd) }
            let info = systemOpen("/proc/self/fdinfo/\(fd)", O_RDONLY | O_CLOEXEC, 0)
            guard info >= 0 else { return nil }
            defer { _ = systemClose(info) }
            var bytes = [UInt8](repeating: 0, count: 4096)
            var count = 0
            while count < bytes.count {
                let n = bytes.withUnsafeMutableBytes { read(info, $0.baseAddress! + count, $0.count - count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                count += n
            }
            for line in bytes[..<count].split(separator: UInt8(ascii: "\n")) where line.starts(with: "mnt_id:".utf8) {
                let digits = line.dropFirst("mnt_id:".utf8.count).filter { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
                return Int(String(decoding: digits, as: UTF8.self))
            }
            return nil
        }
    #endif

    package func rename(_ from: String, _ to: String) throws {
        let (from, to) = (try checked(from), try checked(to))
        if systemRename(from, to) != 0 { throw CofferError.io("rename to \(to)", path: from, errno: errno) }
    }

    package func unlink(_ path: String) throws {
        let path = try checked(path)
        if systemUnlink(path) != 0 && errno != ENOENT { throw CofferError.io("unlink", path: path, errno: errno) }
    }

    package func mkdir(_ path: String, mode: UInt32) throws {
        let path = try checked(path)
        if systemMkdir(path, mode_t(mode)) != 0 {
            let saved = errno
            if saved == EEXIST, let st = try stat(path), st.isDirectory { return }
            throw CofferError.io("mkdir", path: path, errno: saved)
        }
    }

    package func contentsOfDirectory(_ path: String) throws -> [String] {
        let path = try checked(path)
        guard let dir = opendir(path) else { throw CofferError.io("opendir", path: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    package func fsyncDirectory(_ path: String) throws {
        let path = try checked(path)
        let fd = aboveStandardStreams(retrying { systemOpen(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) })
        if fd < 0 { throw CofferError.io("open directory", path: path, errno: errno) }
        defer { _ = systemClose(fd) }
        if retrying({ systemFsync(fd) }) != 0 { throw CofferError.io("fsync directory", path: path, errno: errno) }
    }

    package func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws {
        let operation = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB
        // The usual case, a free lock, needs no clock (and no conversion of the timeout).
        if flock(fd, operation) == 0 { return }
        let timeout = timeout.inSeconds
        var clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &clock)
        let start = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9
        var pause: UInt32 = 50  // microseconds, doubling up to 20 ms
        while true {
            if flock(fd, operation) == 0 { return }
            let saved = errno
            if saved == EINTR { continue }
            guard saved == EWOULDBLOCK else { throw CofferError.io("flock", path: path, errno: saved) }
            clock_gettime(CLOCK_MONOTONIC, &clock)
            let now = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9
            if now - start >= timeout {
                throw CofferError(
                    .busy,
                    "another process holds the lock on this store (waited \(timeout.secondsText) s); try again when it is done",
                    path: path, errno: saved)
            }
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
    }

    package func unlock(_ fd: Int32) {
        _ = flock(fd, LOCK_UN)
    }

    package func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
        #if os(Linux)
        // MAP_SHARED memory is kept in step only between processes of one machine: on a network
        // or FUSE file system (NFS, SMB, 9p and virtiofs shares into VMs, …) processes on
        // different hosts would share the flock but not the page. Every process sees the same
        // file system type, so they all go without the page there.
        var type: UInt64 = 0
        if coffer_file_system_type(fd, &type) != 0 { throw CofferError.io("fstatfs", path: path, errno: errno) }
        if Self.unsharedMappingFileSystems.contains(type) { return nil }
        #endif
        let address = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        guard let address, address != UnsafeMutableRawPointer(bitPattern: -1) else {
            // A file system that cannot map files says so for every process alike, so they all
            // go without the page. Any other failure (ENOMEM, …) may hit this process only: a
            // process without the page would not keep it current for the others, so refuse.
            if errno == ENODEV { return nil }
            throw CofferError.io("mmap", path: path, errno: errno)
        }
        return LiveMapping(base: address, length: length)
    }

    package func mapForAppends(_ fd: Int32, length: Int, path: String) -> (any SharedMapping)? {
        #if os(Linux)
        var type: UInt64 = 0
        guard length > 0, coffer_guarded_append_supported() != 0, coffer_file_system_type(fd, &type) == 0,
            Self.appendMappingFileSystems.contains(type), coffer_install_bus_guard() == 0
        else { return nil }
        let address = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        guard let address, address != UnsafeMutableRawPointer(bitPattern: -1) else { return nil }
        return LiveMapping(base: address, length: length)
        #else
        return nil
        #endif
    }

    /// `statfs.f_type` of file systems where a store into a block already written needs no new
    /// one: ext2/3/4 (which share one magic number) and tmpfs. Not XFS (a copy made with
    /// `cp --reflink`, coreutils' default where it can, shares the store's blocks), nor btrfs,
    /// ZFS or bcachefs (copy on write), nor overlayfs.
    static let appendMappingFileSystems: Set<UInt64> = [0xEF53, 0x0102_1994]

    /// `statfs.f_type` of file systems whose files may be shared by several hosts: NFS, SMB/CIFS
    /// (three), 9p, FUSE (sshfs, virtiofs, …), Ceph, AFS, Coda, GFS2, OCFS2, Lustre, VirtualBox.
    static let unsharedMappingFileSystems: Set<UInt64> = [
        0x6969, 0x517B, 0xFF53_4D42, 0xFE53_4D42, 0x0102_1997, 0x6573_5546, 0x00C3_6400, 0x5346_414F,
        0x7375_7245, 0x0116_1970, 0x7461_636F, 0x0BD0_0BD0, 0x786F_4256,
    ]

    private static func status(_ st: SystemStat) -> FileStatus {
        let type = UInt32(st.st_mode) & UInt32(S_IFMT)
        return FileStatus(
            size: Int64(st.st_size), device: UInt64(st.st_dev), inode: UInt64(st.st_ino),
            mode: UInt32(st.st_mode) & 0o7777, isDirectory: type == UInt32(S_IFDIR),
            isRegularFile: type == UInt32(S_IFREG), owner: UInt32(st.st_uid), linkCount: UInt64(st.st_nlink))
    }
}

extension LiveFileSystem {
    /// Why ``openRegularFileForReading(_:)`` gave no descriptor.
    package enum RegularFileRefusal: Error {
        /// `open` failed with this errno.
        case open(Int32)
        /// `fstat` failed with this errno.
        case fstat(Int32)
        /// The path names a FIFO, socket, device or directory.
        case notRegular
        /// The path holds a NUL byte (C would read only the part before it).
        case nulInPath
    }

    /// Opens `path` for reading, following symbolic links (a key kept on another device is often
    /// reached through one), with `O_NONBLOCK` so that a FIFO never waits for a writer; keeps
    /// only a regular file, made blocking again for the read.
    package static func openRegularFileForReading(_ path: String) -> Result<Int32, RegularFileRefusal> {
        // A NUL would cut the C string short: "key\0x" must not open "key".
        if path.utf8.contains(0) { return .failure(.nulInPath) }
        var fd: Int32
        repeat { fd = systemOpen(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0) } while fd < 0 && errno == EINTR
        fd = aboveStandardStreams(fd)
        if fd < 0 { return .failure(.open(errno)) }
        var status = SystemStat()
        guard systemFstat(fd, &status) == 0 else {
            let code = errno
            _ = systemClose(fd)
            return .failure(.fstat(code))
        }
        guard (UInt32(status.st_mode) & UInt32(S_IFMT)) == UInt32(S_IFREG) else {
            _ = systemClose(fd)
            return .failure(.notRegular)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return .success(fd)
    }
}

/// `fd`, moved above 2 when the C library handed out standard input, output or error (a process
/// started with one closed: a daemon, cron, `cmd >&-`): the original is closed, so that stream
/// stays closed. Left there, every write meant for the stream (`print`, a log line, the CLI's
/// output of a secret) would land at offset 0 of a store file: `coffer list <&- >&-` wrote its
/// table over the vault's header, and `coffer get` the secret in plaintext into the file.
/// Returns -1, errno set, when `fd` is -1 or no descriptor above 2 is free.
func aboveStandardStreams(_ fd: Int32) -> Int32 {
    guard fd >= 0, fd <= 2 else { return fd }
    let moved = fcntl(fd, F_DUPFD_CLOEXEC, 3)
    let saved = errno
    _ = systemClose(fd)
    errno = saved
    return moved
}

/// The effective user ID of this process.
package func effectiveUserID() -> UInt32 { UInt32(geteuid()) }

/// A `MAP_SHARED` mapping, unmapped when released.
private final class LiveMapping: SharedMapping, @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let length: Int

    init(base: UnsafeMutableRawPointer, length: Int) {
        self.base = base
        self.length = length
    }

    deinit { munmap(base, length) }
}

@inline(__always)
private func retrying<T: BinaryInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result < 0 && errno == EINTR { continue }
        return result
    }
}

// Thin names for the C calls, so the methods above (which share their names) read clearly.
// Unqualified: each C library's module (Glibc, Musl, Darwin) declares them under the same names.
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { open(path, flags, mode) }
private func systemClose(_ fd: Int32) -> Int32 { close(fd) }
private func systemPread(_ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ n: Int, _ off: off_t) -> Int {
    pread(fd, buf, n, off)
}
private func systemPwrite(_ fd: Int32, _ buf: UnsafeRawPointer?, _ n: Int, _ off: off_t) -> Int {
    pwrite(fd, buf, n, off)
}
private func systemFsync(_ fd: Int32) -> Int32 { fsync(fd) }
#if os(Linux)
private func systemFdatasync(_ fd: Int32) -> Int32 { fdatasync(fd) }
#endif
private func systemFtruncate(_ fd: Int32, _ size: off_t) -> Int32 { ftruncate(fd, size) }
private func systemFstat(_ fd: Int32, _ st: inout SystemStat) -> Int32 { fstat(fd, &st) }
private func systemStat(_ path: String, _ st: inout SystemStat) -> Int32 { fstatat(AT_FDCWD, path, &st, 0) }
private func systemRename(_ a: String, _ b: String) -> Int32 { rename(a, b) }
private func systemUnlink(_ path: String) -> Int32 { unlink(path) }
private func systemMkdir(_ path: String, _ mode: mode_t) -> Int32 { mkdir(path, mode) }

extension LiveFileSystem {
    /// A robust, process-shared `pthread` mutex (`coffer_shared_mutex_lock`).
    package func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool {
        // A free mutex first (a timeout of 0 only tries): the timeout is converted only when
        // this has to wait, which a write that finds the store free never does.
        var result = coffer_shared_mutex_lock(mutex, 0)
        if result == ETIMEDOUT {
            result = coffer_shared_mutex_lock(mutex, min(max(.zero, timeout), .seconds(1_000_000_000)).coarseNanoseconds)
        }
        switch result {
        case 0: return false
        case 1: return true
        case ETIMEDOUT:
            throw CofferError(
                .busy,
                "another process holds the lock on this store (waited \(timeout.inSeconds.secondsText) s); try again when it is done",
                path: path, errno: result)
        case ENOTRECOVERABLE:
            throw CofferError(
                .io,
                "the store's lock was left unusable by a process that died holding it; close the store in every process "
                    + "and open it again (nothing was written)",
                path: path, errno: result)
        default:
            throw CofferError.io("pthread_mutex_lock", path: path, errno: result)
        }
    }

    package func unlockMutex(_ mutex: UnsafeMutableRawPointer) {
        _ = coffer_shared_mutex_unlock(mutex)
    }
}
