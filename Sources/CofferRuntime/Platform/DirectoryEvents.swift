// The platform layer's directory notifications for FileWatcher: inotify on Linux, kqueue on
// Darwin (written but not compiled: CI is Linux only), none elsewhere (FileWatcher polls), and
// the pipe that wakes the watcher thread.
import CofferCore
import CSharedWord

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The kernel's queue of changes in watched directories, read by ``FileWatcher``'s thread
/// together with its wake pipe.
///
/// - Linux: one inotify descriptor; each directory is watched once (the directory, not its
///   files, so a compaction renaming a new file into place is seen without re-arming), and
///   every event names the file.
/// - Darwin: one kqueue; each directory is an `EVFILT_VNODE` watch on a descriptor opened with
///   `O_EVTONLY`. A directory's vnode reports entries added, removed or renamed (a compaction,
///   a key file replaced) and the directory itself going away, but not a write into a file
///   already there (a journal's append), and it names nothing. So Darwin watches also poll
///   (``reportsWritesInPlace`` is `false`): the kqueue makes renames and removals prompt, the
///   poll finds appends.
struct DirectoryEvents {
    /// One change: the watch it belongs to, the file's name when the kernel gave one, and
    /// whether the watch itself ended (the directory was removed or moved).
    typealias Event = (descriptor: Int32, name: String?, gone: Bool)

    /// The inotify or kqueue descriptor; -1 when there is none (see ``unavailableReason``).
    let descriptor: Int32
    /// Why there is no descriptor, for the warning that says the watches poll.
    let unavailableReason: String?

    #if os(Linux)
    /// Whether an event is reported for a write into an existing file.
    static let reportsWritesInPlace = true
    #else
    static let reportsWritesInPlace = false
    #endif

    /// Opens the kernel's queue. On Darwin the wake pipe's read end joins the queue, so one
    /// `kevent` waits for both.
    init(wakeRead: Int32) {
        #if os(Linux)
        // Never 0, 1 or 2 (see aboveStandardStreams): a stray write to a closed stream must fail.
        descriptor = aboveStandardStreams(inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)))
        unavailableReason = descriptor >= 0 ? nil : "inotify is not available (\(CofferError.errnoText(errno)))"
        #elseif canImport(Darwin)
        let queue = kqueue()
        if queue >= 0 {
            _ = fcntl(queue, F_SETFD, FD_CLOEXEC)
            var change = kevent(
                ident: UInt(wakeRead), filter: Int16(EVFILT_READ), flags: UInt16(EV_ADD), fflags: 0, data: 0,
                udata: nil)
            if kevent(queue, &change, 1, nil, 0, nil) != 0 {
                _ = closeDescriptor(queue)
                descriptor = -1
                unavailableReason = "kqueue cannot wait for the wake pipe (\(CofferError.errnoText(errno)))"
                return
            }
        }
        descriptor = queue
        unavailableReason = queue >= 0 ? nil : "kqueue is not available (\(CofferError.errnoText(errno)))"
        #else
        descriptor = -1
        unavailableReason = "file watching is not implemented on this platform yet"
        #endif
    }

    /// Starts watching `directory`: its watch descriptor, or why it cannot be watched.
    func add(_ directory: String) -> Result<Int32, WatchRefusal> {
        #if os(Linux)
        let mask =
            IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB
            | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
        let wd = inotify_add_watch(descriptor, directory, UInt32(mask))
        if wd < 0 {
            return .failure(
                WatchRefusal(
                    errno == ENOSPC
                        ? "the inotify watch limit is reached (raise fs.inotify.max_user_watches)"
                        : "inotify cannot watch it (\(CofferError.errnoText(errno)))"))
        }
        return .success(wd)
        #elseif canImport(Darwin)
        let fd = open(directory, O_EVTONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(WatchRefusal("it cannot be opened (\(CofferError.errnoText(errno)))")) }
        let notes = NOTE_WRITE | NOTE_EXTEND | NOTE_ATTRIB | NOTE_LINK | NOTE_DELETE | NOTE_RENAME | NOTE_REVOKE
        var change = kevent(
            ident: UInt(fd), filter: Int16(EVFILT_VNODE), flags: UInt16(EV_ADD | EV_CLEAR), fflags: UInt32(notes),
            data: 0, udata: nil)
        if kevent(descriptor, &change, 1, nil, 0, nil) != 0 {
            let reason = CofferError.errnoText(errno)
            _ = closeDescriptor(fd)
            return .failure(WatchRefusal("kqueue cannot watch it (\(reason))"))
        }
        return .success(fd)
        #else
        return .failure(WatchRefusal(unavailableReason ?? "file watching is not implemented on this platform yet"))
        #endif
    }

    /// Stops the watch `watchDescriptor` (also after the kernel reported it gone).
    func remove(_ watchDescriptor: Int32) {
        #if os(Linux)
        _ = inotify_rm_watch(descriptor, watchDescriptor)
        #elseif canImport(Darwin)
        _ = closeDescriptor(watchDescriptor)  // closing the descriptor removes its kevent
        #endif
    }

    /// Waits up to `timeout` milliseconds (-1: no limit) for the wake pipe or a change, then
    /// appends the changes that are ready to `events`. `false` when waiting failed for good.
    func wait(
        wakeRead: Int32, timeout: Int32, buffer: inout [UInt8], into events: inout [Event], overflow: inout Bool
    ) -> Bool {
        #if canImport(Darwin)
        if descriptor >= 0 {
            var ready = [kevent](repeating: kevent(), count: 64)
            var limit = timespec(tv_sec: Int(timeout / 1000), tv_nsec: Int(timeout % 1000) * 1_000_000)
            let count = timeout < 0
                ? kevent(descriptor, nil, 0, &ready, Int32(ready.count), nil)
                : kevent(descriptor, nil, 0, &ready, Int32(ready.count), &limit)
            if count < 0 { return errno == EINTR }
            for event in ready.prefix(Int(count)) where event.filter == Int16(EVFILT_VNODE) {
                let gone = event.fflags & UInt32(NOTE_DELETE | NOTE_RENAME | NOTE_REVOKE) != 0
                events.append((Int32(event.ident), nil, gone))
            }
            return true
        }
        #endif
        var fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        if descriptor >= 0 { fds.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)) }
        if poll(&fds, nfds_t(fds.count), timeout) < 0 && errno != EINTR { return false }
        #if os(Linux)
        if descriptor >= 0 {
            while true {
                let n = read(descriptor, &buffer, buffer.count)
                if n <= 0 { break }
                Self.parseEvents(buffer[0..<n], into: &events, overflow: &overflow)
            }
        }
        #endif
        return true
    }

    /// Closes the queue (its watches go with it).
    func close() {
        if descriptor >= 0 { _ = closeDescriptor(descriptor) }
    }

    #if os(Linux)
    /// `struct inotify_event { int wd; uint32_t mask, cookie, len; char name[len]; }`, packed.
    private static func parseEvents(_ bytes: ArraySlice<UInt8>, into events: inout [Event], overflow: inout Bool) {
        var offset = bytes.startIndex
        while offset + 16 <= bytes.endIndex {
            func word(_ at: Int) -> UInt32 {
                UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
            }
            let wd = Int32(bitPattern: word(offset))
            let mask = word(offset + 4)
            let length = Int(word(offset + 12))
            let nameStart = offset + 16
            guard nameStart + length <= bytes.endIndex else { break }
            if mask & UInt32(IN_Q_OVERFLOW) != 0 { overflow = true }
            let nameBytes = bytes[nameStart..<(nameStart + length)].prefix { $0 != 0 }
            let whole = mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) != 0
            let name: String? = whole || nameBytes.isEmpty ? nil : String(decoding: nameBytes, as: UTF8.self)
            // Moved away counts as gone: the kernel's watch follows the directory to its new
            // name, while the store lives at the old path (a copy put there is another directory).
            events.append((wd, name, mask & UInt32(IN_IGNORED | IN_MOVE_SELF) != 0))
            offset = nameStart + length
        }
    }
    #endif
}

extension DirectoryEvents {
    /// `statfs.f_type` of the file system `directory` is on (Linux), or `nil` when it cannot be
    /// told (elsewhere, or the directory cannot be opened).
    static func fileSystemType(ofDirectory directory: String) -> UInt64? {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { _ = closeDescriptor(fd) }
        var type: UInt64 = 0
        guard coffer_file_system_type(fd, &type) == 0 else { return nil }
        return type
    }
}

/// The pipe that wakes ``FileWatcher``'s thread: both ends non-blocking and close-on-exec.
struct WakePipe {
    /// -1 when the pipe could not be made (the thread then wakes only for polls).
    let readEnd: Int32
    let writeEnd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            // Never 0, 1 or 2 (see aboveStandardStreams): `print` with standard output closed
            // would feed the wake pipe, and a read of standard input would drain it.
            fds = fds.map(aboveStandardStreams)
            if fds.contains(-1) {
                for fd in fds where fd >= 0 { _ = closeDescriptor(fd) }
                fds = [-1, -1]
            }
            for fd in fds where fd >= 0 {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    init(readEnd: Int32, writeEnd: Int32) {
        self.readEnd = readEnd
        self.writeEnd = writeEnd
    }

    /// Writes one byte; a full pipe is already a pending wake-up.
    static func wake(_ writeEnd: Int32) {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Reads everything pending.
    static func drain(_ readEnd: Int32, into buffer: inout [UInt8]) {
        while read(readEnd, &buffer, buffer.count) > 0 {}
    }

    func close() {
        _ = closeDescriptor(readEnd)
        _ = closeDescriptor(writeEnd)
    }
}

/// Why a directory cannot be watched (it is polled instead).
struct WatchRefusal: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// `close(2)` under a name that the method ``DirectoryEvents/close()`` does not shadow.
private func closeDescriptor(_ fd: Int32) -> Int32 { close(fd) }
