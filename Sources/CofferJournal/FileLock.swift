// The flock on a store's separate lock file, and the shared page mapped from it.
package import CofferCore
import CofferRuntime
import Foundation
import Synchronization

/// An exclusive or shared `flock` on a separate, stable lock file (`<file>.lock`).
///
/// The lock is on its own file because a lock on a data file that compaction replaces by rename
/// would stop protecting it, and a POSIX `fcntl` lock is dropped when *any* descriptor to the
/// file is closed. `flock` locks belong to the open file description, so two descriptors in one
/// process exclude each other just as two processes do.
package final class FileLock: Sendable {
    package let path: String
    /// The lock file's descriptor, or -1 when there is no lock file and none could be created.
    private let fd: Int32
    private let fileSystem: any FileSystem
    /// Why this lock cannot serialise writers (`nil`: it can). Set when the lock file could not
    /// be opened for writing: a read-only mount or directory, a full disk, a `0400` lock file.
    /// Such a lock is still taken shared when the file exists, so readers wait out a writer's
    /// open, and is a no-op when it does not; the store using it must not write.
    package let readOnlyReason: CofferError?
    /// Threads sharing this instance share its descriptor, and a second `flock` on the same open
    /// file description succeeds at once: a flag serialises them first, with the same timeout.
    /// An atomic, not a mutex: taking and leaving the gate is one compare-and-swap and one store
    /// (the mutex's lock and unlock around each, twice per write, were 5 % of a shared write).
    private let inUse = Atomic<Bool>(false)
    /// The device and inode of the lock file opened for writing (`nil`: opened read-only, or
    /// no file): each exclusive lock checks that `path` still names it (``checkStillNamed()``).
    package let identity: (device: UInt64, inode: UInt64)?
    /// When `path` was last found to name the file locked here (see ``checkStillNamed()``).
    /// Touched only holding the lock and the thread gate, so by one thread at a time.
    /// (``CoarseClock`` nanoseconds; `Int64.min`: never.)
    private let pathCheckedAt = Atomic<Int64>(.min)
    /// How many write locks checked the lock file's link count with an `fstat` (for tests: a
    /// journal's caught-up writer skips it while its file shows no new lock file).
    let linkChecks = Atomic<Int>(0)
    /// How long a lock trusts that its file, still linked, is still the one at `path`.
    static let pathCheckInterval = Duration.seconds(1)
    private static let pathCheckNanoseconds = pathCheckInterval.coarseNanoseconds

    /// Opens (creating `0600` if needed) the lock file at `path`.
    ///
    /// A symlink at `path` is never followed, and a file there that is not a regular file owned
    /// by this user with one name is refused (see ``FileSystem/open(_:create:exclusive:mode:)``).
    /// When the file cannot be created or opened for writing (`EACCES`, `EROFS`, `ENOSPC`,
    /// `EDQUOT`), the lock is opened read-only when the file exists, or goes without a file,
    /// and ``readOnlyReason`` says why.
    package init(path: String, fileSystem: any FileSystem) throws {
        self.path = path
        self.fileSystem = fileSystem
        do {
            let fd = try fileSystem.open(path, create: true, exclusive: false, mode: DurableIO.fileMode)
            do {
                let status = try fileSystem.fstat(fd)
                self.identity = (status.device, status.inode)
            } catch {
                fileSystem.close(fd)
                throw error
            }
            self.fd = fd
            self.readOnlyReason = nil
        } catch let error as CofferError where FileLock.allowsReadOnly(error) {
            self.readOnlyReason = error
            self.identity = nil
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
    package func mapShared(length: Int) throws -> (any SharedMapping)? {
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
    package func acquire(exclusive: Bool = true, timeout: Duration) throws {
        let deadline = Self.deadline(after: timeout)
        try enterThreadGate(deadline: deadline, timeout: timeout)
        guard fd >= 0 else { return }
        do {
            try fileSystem.lock(
                fd, exclusive: exclusive && readOnlyReason == nil,
                timeout: max(.zero, deadline - ContinuousClock.now), path: path)
            if exclusive {
                do {
                    try checkStillNamed()
                } catch {
                    fileSystem.unlock(fd)
                    throw error
                }
            }
        } catch {
            leaveThreadGate()
            throw error
        }
    }

    /// Releases a lock taken with ``acquire(exclusive:timeout:)``.
    package func release() {
        if fd >= 0 { fileSystem.unlock(fd) }
        leaveThreadGate()
    }

    /// Takes the lock shared and keeps it until ``releaseShared()``, without the thread gate: a
    /// journal that serialises its writes with the control page's mutex holds it for as long as
    /// it is open, so that nobody takes the lock exclusively meanwhile (an exclusive opener, a
    /// process of a version before the mutex, an opener setting the page up), since they could
    /// not see the mutex. Call while no other thread uses this instance (at open).
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` on timeout.
    package func acquireShared(timeout: Duration) throws {
        guard fd >= 0 else { return }
        try fileSystem.lock(fd, exclusive: false, timeout: min(max(.zero, timeout), Self.maximumTimeout), path: path)
    }

    /// Turns a lock taken with ``acquire(exclusive:timeout:)`` into one held as
    /// ``acquireShared(timeout:)`` holds it (and lets other threads in). On Linux the kernel
    /// downgrades without letting an exclusive waiter in between (nobody else holds the lock,
    /// so the shared one is granted at once); on failure nothing is held.
    package func downgrade(timeout: Duration) throws {
        defer { leaveThreadGate() }
        guard fd >= 0 else { return }
        do {
            try fileSystem.lock(fd, exclusive: false, timeout: timeout, path: path)
        } catch {
            fileSystem.unlock(fd)
            throw error
        }
    }

    /// Releases a lock taken with ``acquireShared(timeout:)``.
    package func releaseShared() {
        if fd >= 0 { fileSystem.unlock(fd) }
    }

    /// Runs `body` holding the lock; waits at most `timeout` seconds for it.
    ///
    /// With `mutex` (the control page's, for a journal that holds this lock shared), the mutex
    /// is locked instead of the `flock`, and everything else is as without it; `ownerDied` is
    /// called, holding it, when its last holder died holding it.
    ///
    /// `unlinkHarmless`, asked once the lock is held, may vouch that no other lock file can be
    /// in use for the store (a journal asks its file: see `Journal.noOtherLockFileMade`); then
    /// the `fstat` that checks this lock file still has a name is skipped (the periodic check of
    /// the path is not).
    /// - Throws: ``CofferError`` with code ``CofferError/Code/busy`` on timeout, or what `body` throws.
    package func withLock<T>(
        exclusive: Bool = true, timeout: Duration, mutex: UnsafeMutableRawPointer? = nil, ownerDied: () -> Void = {},
        unlinkHarmless: () -> Bool = { false }, _ body: () throws -> T
    ) throws -> T {
        // The usual case, no other thread here, needs no deadline: the whole timeout is left.
        var remaining = min(max(.zero, timeout), Self.maximumTimeout)
        if !tryEnterThreadGate() {
            let deadline = Self.deadline(after: timeout)
            try enterThreadGate(deadline: deadline, timeout: timeout)
            remaining = max(.zero, deadline - ContinuousClock.now)
        }
        defer { leaveThreadGate() }
        if let mutex {
            if try fileSystem.lockMutex(mutex, timeout: remaining, path: path) { ownerDied() }
            defer { fileSystem.unlockMutex(mutex) }
            try checkStillNamed(unlinkHarmless: unlinkHarmless)
            return try body()
        }
        guard fd >= 0 else { return try body() }
        // A read-only descriptor takes the lock shared: enough to wait out a writer, and what
        // file systems that emulate flock with fcntl locks allow on it.
        try fileSystem.lock(fd, exclusive: exclusive && readOnlyReason == nil, timeout: remaining, path: path)
        defer { fileSystem.unlock(fd) }
        if exclusive { try checkStillNamed(unlinkHarmless: unlinkHarmless) }
        return try body()
    }

    /// Throws unless `path` still names the file locked here. A lock file removed or replaced
    /// while a store is open (by hand, or by a clean-up that took it for stale) leaves this
    /// process locking a file no process opening the store from now on locks: their writes and
    /// this one's would no longer exclude each other, and one would append over the other's
    /// commit. So this lock refuses to serve a write until the store is opened again.
    ///
    /// Removing the file, or renaming another over it, leaves the one locked here with no name:
    /// an `fstat` of the descriptor (no path to walk) sees that at every write lock. The rarer
    /// move that keeps the file linked elsewhere (its directory renamed and another put in its
    /// place) is seen by a `stat` of the path, at most ``pathCheckInterval`` after the last one
    /// (as the journal checks its own file's path). The journal file itself is not touched.
    ///
    /// A removed lock file harms nothing until another opener makes a new one, and a journal's
    /// opener that does so first marks the journal file (FORMAT.md, "Writing"): while the caller's
    /// `unlinkHarmless` sees no such mark, the `fstat` is skipped (0.44 µs of a 3 µs write).
    private func checkStillNamed(unlinkHarmless: () -> Bool = { false }) throws {
        guard let identity else { return }
        let now = CoarseClock.nanoseconds
        let checkedAt = pathCheckedAt.load(ordering: .relaxed)
        if checkedAt != .min, now &- checkedAt < Self.pathCheckNanoseconds {
            if !unlinkHarmless() { try checkLinked() }
            return
        }
        let current = try fileSystem.stat(path)
        guard let current, current.device == identity.device, current.inode == identity.inode else {
            throw replacedError(current == nil ? "removed" : "replaced")
        }
        pathCheckedAt.store(now, ordering: .relaxed)
    }

    /// Throws unless the lock file still has a name (an `fstat`): at each write lock unless the
    /// caller vouches, and for a journal that skipped that and then moves to another file in the
    /// same hold. Call holding the lock.
    package func checkLinked() throws {
        guard identity != nil else { return }
        linkChecks.add(1, ordering: .relaxed)
        if try fileSystem.fstat(fd).linkCount == 0 { throw replacedError("removed or replaced") }
    }

    private func replacedError(_ how: String) -> CofferError {
        CofferError(
            .io,
            "the store's lock file was \(how) while the store was open, so "
                + "this process's lock no longer excludes writers that opened the store since; nothing was "
                + "written: open the store again (and leave its lock file alone while it is in use)",
            path: path)
    }

    /// Holds this instance for this thread if no other thread does; returns whether it did.
    private func tryEnterThreadGate() -> Bool {
        // Acquiring: what the last holder did under the lock happens before what this one does.
        inUse.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
    }

    /// Lets the next thread in (releasing what this one did under the gate to it).
    private func leaveThreadGate() {
        inUse.store(false, ordering: .releasing)
    }

    /// Waits (until `deadline`) for no other thread of this process to hold this instance.
    private func enterThreadGate(deadline: ContinuousClock.Instant, timeout: Duration) throws {
        var pause = Duration.microseconds(20)
        while !tryEnterThreadGate() {
            if ContinuousClock.now >= deadline {
                throw CofferError(
                    .busy, "another thread of this process holds the lock on this store (waited \(timeout.inSeconds.secondsText) s)",
                    path: path)
            }
            Thread.sleep(forTimeInterval: pause.inSeconds)
            pause = min(pause * 2, .milliseconds(5))
        }
    }

    /// Now plus `timeout`: a negative one means now, and waits are capped at ``maximumTimeout``
    /// (an absurd timeout is forever, never an overflow that kills the process).
    static func deadline(after timeout: Duration) -> ContinuousClock.Instant {
        ContinuousClock.now + min(max(.zero, timeout), maximumTimeout)
    }

    /// The longest wait for a lock: 1e9 seconds (about 31 years), i.e. forever.
    package static let maximumTimeout = Duration.seconds(1_000_000_000)
}
