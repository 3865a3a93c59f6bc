public import CofferCore
public import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A ``FileSystem`` kept entirely in memory, with fault injection and power-loss simulation.
///
/// It behaves like a single Linux ext4-style file system: inodes with stable numbers (a file
/// replaced by rename has a new inode), permission modes masked by ``umask``, descriptors,
/// `flock` locks owned by each open descriptor (two descriptors in one process exclude each
/// other, as with the kernel), atomic rename, `O_EXCL`, and failures as
/// ``CofferError/Code/io`` errors carrying the real errno (`ENOENT`, `EEXIST`, `ENOTDIR`,
/// `EISDIR`, `ENOTEMPTY`, `EBADF`, `ENAMETOOLONG` for a name over 255 bytes, and `EINVAL` for a
/// path containing NUL — the kernel would silently truncate such a path at the NUL).
/// Names are compared as UTF-8 bytes, like the kernel, so NFC and NFD spellings of one word
/// are different files.
///
/// ```swift
/// let fs = InMemoryFileSystem()
/// try fs.createDirectory(atPath: "/data")
/// fs.inject(.fail(.fsync, errno: 28))                  // the next fsync fails with ENOSPC
/// #expect(throws: CofferError.self) { try DurableIO.atomicReplace("/data/f", with: [1], fileSystem: fs) }
/// ```
///
/// ## Faults
/// ``inject(_:)`` installs a ``Fault``: fail the Nth matching call of an ``Operation`` (counted
/// from when the fault is installed), optionally only for paths a predicate accepts, with an
/// errno; or make a `pwrite` short (k bytes written, the next matching `pwrite` fails).
/// ``setDiskSpace(remaining:)`` makes writes that grow files fail with `ENOSPC` once a byte
/// budget is spent. ``calls`` and ``callCount(_:)`` record every call, so a test can count the
/// calls a save makes and then fail each one in turn. A descriptor's path is the path it was
/// opened with.
///
/// ## Power loss
/// The model is the strict POSIX one, with journaled-metadata ordering as an option:
/// - A file's **data** becomes durable only at `fsync`/`fdatasync` of a descriptor on it. Every
///   write or truncation since then is *unsynced*.
/// - A directory's **entries** (create, mkdir, rename, unlink) become durable only at
///   ``fsyncDirectory(_:)`` of that directory (a rename between directories needs both). Until
///   then the change is *unsynced*, even when the file's own data was fsync'd.
/// - ``simulatePowerLoss(seed:data:metadata:)`` turns the file system into a state a real
///   machine could show after losing power: unsynced data sectors (4 KiB, aligned) are kept,
///   dropped, or filled with garbage, and unsynced directory changes are kept or undone, each
///   directory change atomically (a rename is never half done). Files no longer reachable from
///   `/` disappear. Every open descriptor becomes invalid (`EBADF`) and every lock is released.
/// - ``simulateProcessCrash()`` loses nothing but the descriptors and locks: after a process
///   dies, the kernel still has all its writes.
///
/// All state sits in one `Mutex`; a lock wait sleeps outside it. Path predicates of faults run
/// while the state is locked and must not call back into the file system.
public final class InMemoryFileSystem: FileSystem {
    /// The kinds of call this file system records and can fail.
    public enum Operation: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// ``FileSystem/open(_:create:exclusive:mode:)``.
        case open
        /// ``FileSystem/openReadOnly(_:)``.
        case openReadOnly
        /// ``FileSystem/close(_:)`` (recorded, never fails).
        case close
        /// ``FileSystem/pread(_:into:at:)``.
        case pread
        /// ``FileSystem/pwrite(_:_:at:)``.
        case pwrite
        /// ``FileSystem/fsync(_:)``.
        case fsync
        /// ``FileSystem/fdatasync(_:)``.
        case fdatasync
        /// ``FileSystem/ftruncate(_:size:)``.
        case ftruncate
        /// ``FileSystem/fstat(_:)``.
        case fstat
        /// ``FileSystem/stat(_:)``.
        case stat
        /// ``FileSystem/rename(_:_:)`` (the path is the source).
        case rename
        /// ``FileSystem/unlink(_:)``.
        case unlink
        /// ``FileSystem/mkdir(_:mode:)``.
        case mkdir
        /// ``FileSystem/contentsOfDirectory(_:)``.
        case contentsOfDirectory
        /// ``FileSystem/fsyncDirectory(_:)``.
        case fsyncDirectory
        /// ``FileSystem/lock(_:exclusive:timeout:path:)``.
        case lock
        /// ``FileSystem/unlock(_:)`` (recorded, never fails).
        case unlock
        /// ``FileSystem/mapShared(_:length:path:)``.
        case mmap

        /// The operation's name.
        public var description: String { rawValue }
    }

    /// One recorded call: its operation and the path it concerned (for descriptor calls, the
    /// path the descriptor was opened with; `nil` for an unknown descriptor).
    public struct Call: Sendable, Hashable, CustomStringConvertible {
        /// What was called.
        public var operation: Operation
        /// The path involved.
        public var path: String?

        /// A recorded call.
        public init(operation: Operation, path: String?) {
            self.operation = operation
            self.path = path
        }

        /// `pwrite(/dir/file)`.
        public var description: String { "\(operation)(\(path ?? "?"))" }
    }

    /// A failure to inject into a future call; install it with ``InMemoryFileSystem/inject(_:)``.
    public struct Fault: Sendable, CustomStringConvertible {
        /// What happens when the fault fires.
        public enum Effect: Sendable, Hashable {
            /// The call fails with this errno and changes nothing.
            case fail(errno: Int32)
            /// (`pwrite` only.) The call writes at most `bytes` bytes and returns that count
            /// (`bytes == 0` fails at once); the next matching `pwrite` fails with `thenErrno`.
            case shortWrite(bytes: Int, thenErrno: Int32)
        }

        /// The operation to fail.
        public var operation: Operation
        /// Which matching call fires the fault: 1 is the next one, counted from installation.
        public var occurrence: Int
        /// What the failing call does.
        public var effect: Effect
        /// When true, every matching call from `occurrence` on fails, not only that one.
        public var persistent: Bool
        /// Only calls whose path this accepts count and fail; `nil` matches every call.
        public var matches: (@Sendable (String) -> Bool)?

        /// A fault with every property spelled out.
        public init(
            operation: Operation, occurrence: Int = 1, effect: Effect, persistent: Bool = false,
            matches: (@Sendable (String) -> Bool)? = nil
        ) {
            self.operation = operation
            self.occurrence = occurrence
            self.effect = effect
            self.persistent = persistent
            self.matches = matches
        }

        /// Fails the `occurrence`-th matching call of `operation` with `errno` (28 ENOSPC, 5 EIO, …).
        public static func fail(
            _ operation: Operation, occurrence: Int = 1, errno: Int32, persistent: Bool = false,
            where matches: (@Sendable (String) -> Bool)? = nil
        ) -> Fault {
            Fault(
                operation: operation, occurrence: occurrence, effect: .fail(errno: errno), persistent: persistent,
                matches: matches)
        }

        /// Makes the `occurrence`-th matching `pwrite` write only `bytes` bytes; the next one fails with `thenErrno`.
        public static func shortWrite(
            occurrence: Int = 1, bytes: Int, thenErrno: Int32 = 28, where matches: (@Sendable (String) -> Bool)? = nil
        ) -> Fault {
            Fault(operation: .pwrite, occurrence: occurrence, effect: .shortWrite(bytes: bytes, thenErrno: thenErrno),
                  matches: matches)
        }

        /// `fail(fsync #2, errno 28)`, without the predicate.
        public var description: String {
            switch effect {
            case .fail(let errno): return "fail(\(operation) #\(occurrence), errno \(errno)\(persistent ? ", persistent" : ""))"
            case .shortWrite(let bytes, let errno): return "shortWrite(pwrite #\(occurrence), \(bytes) bytes, then errno \(errno))"
            }
        }
    }

    /// What happens to file data written since the file's last `fsync`/`fdatasync` when power is lost.
    public enum UnsyncedData: Sendable, Hashable {
        /// Every unsynced write survives.
        case keep
        /// Every unsynced write is lost: files hold what they held at their last fsync.
        case drop
        /// Each unsynced 4 KiB sector of each write (and each truncation) survives or not, at random.
        case random
        /// Like ``random``, but a sector may also survive as garbage (random bytes).
        case randomWithGarbage
    }

    /// What happens to directory changes made since the directory's last fsync when power is lost.
    public enum UnsyncedMetadata: Sendable, Hashable {
        /// Every change survives.
        case keep
        /// Only changes made durable by ``InMemoryFileSystem/fsyncDirectory(_:)`` survive (the strict POSIX minimum).
        case drop
        /// Changes survive as an in-order prefix that includes every durable one (a metadata journal, like ext4's).
        case orderedPrefix
        /// Each unsynced change survives or not, independently, at random (each one atomically).
        case random
    }

    /// What a simulated power loss did, counted in changes, never in content.
    public struct PowerLossReport: Sendable, Hashable, CustomStringConvertible {
        /// Unsynced data sectors and truncations that survived intact.
        public var keptWrites = 0
        /// Unsynced data sectors and truncations that were lost.
        public var droppedWrites = 0
        /// Unsynced data sectors that survived as garbage.
        public var garbledWrites = 0
        /// Unsynced directory changes that survived.
        public var keptDirectoryChanges = 0
        /// Unsynced directory changes that were undone.
        public var droppedDirectoryChanges = 0

        /// True when the crash lost or damaged something.
        public var lostAnything: Bool { droppedWrites + garbledWrites + droppedDirectoryChanges > 0 }

        /// Counts only.
        public var description: String {
            "writes kept \(keptWrites), dropped \(droppedWrites), garbled \(garbledWrites); "
                + "directory changes kept \(keptDirectoryChanges), dropped \(droppedDirectoryChanges)"
        }
    }

    /// The device number every `stat` reports.
    public static let deviceNumber: UInt64 = 0xC0FF

    private let state: Locked<State>

    /// An empty file system holding only `/`, with umask `0o022`.
    public init(umask: UInt32 = 0o022) {
        state = Locked(State(umask: umask))
    }

    // MARK: - Test controls

    /// Bits removed from the mode of every file and directory created from now on.
    public var umask: UInt32 {
        get { state.withLock { $0.umask } }
        set { state.withLock { $0.umask = newValue & 0o777 } }
    }

    /// Installs a fault; it fires on a future call and, unless persistent, is then removed.
    public func inject(_ fault: Fault) {
        state.withLock { $0.faults.append(ActiveFault(fault: fault)) }
    }

    /// Removes every installed fault that has not fired yet.
    public func removeAllFaults() {
        state.withLock { $0.faults.removeAll() }
    }

    /// The number of installed faults that have not fired yet (persistent faults count until removed).
    public var pendingFaultCount: Int { state.withLock { $0.faults.count } }

    /// Makes writes that grow files fail with `ENOSPC` once `remaining` more bytes were
    /// allocated (a write that only partly fits is short). `nil` means unlimited. Space is not
    /// given back when files shrink or are removed.
    public func setDiskSpace(remaining: Int?) {
        state.withLock { $0.diskBudget = remaining.map { max(0, $0) } }
    }

    /// Every call made since creation or the last ``resetCalls()``, in order.
    public var calls: [Call] { state.withLock { $0.calls } }

    /// How many calls of `operation` were made since creation or the last ``resetCalls()``.
    public func callCount(_ operation: Operation) -> Int {
        state.withLock { $0.calls.reduce(0) { $1.operation == operation ? $0 + 1 : $0 } }
    }

    /// How many calls of `operation` on paths `matches` accepts were made since the last ``resetCalls()``.
    public func callCount(_ operation: Operation, where matches: (String) -> Bool) -> Int {
        let calls = self.calls
        return calls.reduce(0) { $1.operation == operation && $1.path.map(matches) == true ? $0 + 1 : $0 }
    }

    /// Forgets the recorded calls.
    public func resetCalls() {
        state.withLock { $0.calls.removeAll() }
    }

    /// How many descriptors are open (a test can check that a failed operation closed its own).
    public var openDescriptorCount: Int { state.withLock { $0.descriptors.count } }

    /// The current bytes of the file at `path`, or `nil` when there is no file there. Not recorded, never fails.
    public func contents(atPath path: String) -> Data? {
        state.withLock { state in
            guard let node = try? state.resolve(path), !node.isDirectory else { return nil }
            return Data(node.data)
        }
    }

    /// The permission bits of the file or directory at `path`, or `nil` when there is none.
    public func permissions(atPath path: String) -> UInt32? {
        state.withLock { state in (try? state.resolve(path))?.mode }
    }

    /// Every path in the file system except `/`, sorted; directories end with `/`.
    public func allPaths() -> [String] {
        state.withLock { state in
            var result: [String] = []
            state.walk(state.root, prefix: "") { path, node in result.append(node.isDirectory ? path + "/" : path) }
            return result.sorted()
        }
    }

    /// Creates a directory and its missing parents (mode `0o700`), durably, without recording calls.
    public func createDirectory(atPath path: String, mode: UInt32 = 0o700) throws {
        try state.withLock { (state) throws(CofferError) in
            do throws(PosixError) {
                var current = state.root
                for name in try State.components(path) {
                    if let id = current.entries[name], let next = state.nodes[id] {
                        guard next.isDirectory else { throw PosixError(ENOTDIR) }
                        current = next
                    } else {
                        current = state.link(
                            Node(id: state.allocateInode(), isDirectory: true, mode: mode & ~state.umask),
                            name: name, in: current)
                    }
                }
                state.syncAll()
            } catch {
                throw CofferError.io("mkdir", path: path, errno: error.errno)
            }
        }
    }

    /// Creates or replaces the file at `path` with `contents`, durably, without recording calls.
    /// Missing parent directories are created.
    public func createFile(atPath path: String, contents: Data, mode: UInt32 = 0o600) throws {
        try createDirectory(atPath: DurableIO.parentDirectory(of: path))
        try state.withLock { (state) throws(CofferError) in
            do throws(PosixError) {
                let (parent, name) = try state.parent(of: path)
                let node = Node(id: state.allocateInode(), isDirectory: false, mode: mode & ~state.umask)
                node.data = [UInt8](contents)
                if let old = parent.entries[name], state.nodes[old]?.isDirectory == true { throw PosixError(EISDIR) }
                state.link(node, name: name, in: parent)
                state.syncAll()
            } catch {
                throw CofferError.io("create", path: path, errno: error.errno)
            }
        }
    }

    /// Makes every change durable, as `sync(2)` does.
    public func syncAll() {
        state.withLock { $0.syncAll() }
    }

    /// True when the file or directory at `path`, as it is now, would survive any power loss:
    /// its data is synced and every directory change leading to it is durable.
    public func isDurable(_ path: String) -> Bool {
        state.withLock { state in
            guard let node = try? state.resolve(path) else { return false }
            guard node.pending.isEmpty else { return false }
            let durable = state.replay(state.metaLog.filter { $0.pendingDirectories.isEmpty }.map(\.change))
            guard let components = try? State.components(path) else { return false }
            var id = State.rootID
            for name in components {
                guard let next = durable[id]?[name] else { return false }
                id = next
            }
            return id == node.id
        }
    }

    /// Invalidates every descriptor and releases every lock, keeping all data: what a process
    /// crash (`kill -9`) leaves behind.
    public func simulateProcessCrash() {
        state.withLock { state in
            state.descriptors.removeAll()
            for node in state.nodes.values {
                node.exclusiveHolder = nil
                node.sharedHolders.removeAll()
            }
        }
    }

    /// Turns the file system into a state a machine could show after losing power now.
    ///
    /// Synced data and durable directory changes always survive; unsynced ones fare as `data`
    /// and `metadata` say, decided by a generator seeded with `seed` (the same seed on the same
    /// history gives the same result). Every descriptor becomes invalid and every lock is released.
    /// - Returns: how many unsynced changes were kept, dropped or garbled.
    @discardableResult
    public func simulatePowerLoss(
        seed: UInt64, data: UnsyncedData = .random, metadata: UnsyncedMetadata = .orderedPrefix
    ) -> PowerLossReport {
        state.withLock { $0.powerLoss(seed: seed, data: data, metadata: metadata) }
    }

    // MARK: - FileSystem

    /// Opens or creates a file (O_RDWR, with O_CREAT/O_EXCL as asked); the mode is masked by ``umask``.
    public func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        try perform(.open, "open", path: path) { (state, _) throws(PosixError) in
            let (parent, name) = try state.parent(of: path)
            let node: Node
            if let id = parent.entries[name], let existing = state.nodes[id] {
                if create && exclusive { throw PosixError(EEXIST) }
                if existing.isDirectory { throw PosixError(EISDIR) }
                node = existing
            } else {
                guard create else { throw PosixError(ENOENT) }
                node = state.link(
                    Node(id: state.allocateInode(), isDirectory: false, mode: mode & 0o7777 & ~state.umask),
                    name: name, in: parent)
            }
            return state.openDescriptor(node: node, path: path, writable: true)
        }
    }

    /// Opens a file (or directory) read-only.
    public func openReadOnly(_ path: String) throws -> Int32 {
        try perform(.openReadOnly, "open", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            return state.openDescriptor(node: node, path: path, writable: false)
        }
    }

    /// Closes a descriptor and releases its lock; an unknown descriptor is ignored.
    public func close(_ fd: Int32) {
        state.withLock { state in
            state.calls.append(Call(operation: .close, path: state.descriptors[fd]?.path))
            guard state.descriptors.removeValue(forKey: fd) != nil else { return }
            for node in state.nodes.values {
                if node.exclusiveHolder == fd { node.exclusiveHolder = nil }
                node.sharedHolders.remove(fd)
            }
            state.collectGarbage()
        }
    }

    /// Reads at `offset`; 0 at end of file.
    public func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try perform(.pread, "read", fd: fd) { (state, _) throws(PosixError) in
            let (node, _) = try state.descriptor(fd)
            if node.isDirectory { throw PosixError(EISDIR) }
            guard offset >= 0 else { throw PosixError(EINVAL) }
            guard offset < Int64(node.data.count), buffer.count > 0 else { return 0 }
            let start = Int(offset)
            let n = min(buffer.count, node.data.count - start)
            node.data.withUnsafeBytes { source in
                buffer.baseAddress?.copyMemory(from: source.baseAddress.unsafelyUnwrapped + start, byteCount: n)
            }
            return n
        }
    }

    /// Writes at `offset` (zero-filling a gap), subject to faults and the disk budget; may be short.
    public func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        try perform(.pwrite, "write", fd: fd) { (state, shortWrite) throws(PosixError) in
            let (node, writable) = try state.descriptor(fd)
            guard writable, !node.isDirectory else { throw PosixError(EBADF) }
            guard offset >= 0 else { throw PosixError(EINVAL) }
            var count = bytes.count
            if let limit = shortWrite {
                if limit <= 0 { throw PosixError(ENOSPC) }
                count = min(count, limit)
            }
            guard count > 0 else { return 0 }
            let start = Int(offset)
            if let budget = state.diskBudget {
                let growth = max(0, start + count - node.data.count)
                if growth > budget {
                    count -= growth - budget
                    if count <= 0 { throw PosixError(ENOSPC) }
                }
                state.diskBudget = budget - max(0, start + count - node.data.count)
            }
            let chunk = [UInt8](UnsafeRawBufferPointer(rebasing: bytes[0..<count]))
            node.change(.write(offset: start, bytes: chunk))
            return count
        }
    }

    /// Makes the file's data durable.
    public func fsync(_ fd: Int32) throws {
        try perform(.fsync, "fsync", fd: fd) { (state, _) throws(PosixError) in
            let (node, _) = try state.descriptor(fd)
            node.markSynced()
        }
    }

    /// Makes the file's data durable (same as ``fsync(_:)`` in this model).
    public func fdatasync(_ fd: Int32) throws {
        try perform(.fdatasync, "fdatasync", fd: fd) { (state, _) throws(PosixError) in
            let (node, _) = try state.descriptor(fd)
            node.markSynced()
        }
    }

    /// Sets the file's size; `EINVAL` on a read-only descriptor.
    public func ftruncate(_ fd: Int32, size: Int64) throws {
        try perform(.ftruncate, "ftruncate", fd: fd) { (state, _) throws(PosixError) in
            let (node, writable) = try state.descriptor(fd)
            guard writable, !node.isDirectory, size >= 0 else { throw PosixError(EINVAL) }
            node.change(.truncate(size: Int(size)))
        }
    }

    /// The descriptor's file status.
    public func fstat(_ fd: Int32) throws -> FileStatus {
        try perform(.fstat, "fstat", fd: fd) { (state, _) throws(PosixError) in
            try state.descriptor(fd).node.status
        }
    }

    /// The status at `path`, or `nil` for `ENOENT`/`ENOTDIR`.
    public func stat(_ path: String) throws -> FileStatus? {
        try perform(.stat, "stat", path: path) { (state, _) throws(PosixError) in
            do throws(PosixError) {
                return try state.resolve(path).status
            } catch where error.errno == ENOENT || error.errno == ENOTDIR {
                return nil
            }
        }
    }

    /// Renames atomically, replacing a file (or an empty directory) at `to`.
    public func rename(_ from: String, _ to: String) throws {
        try perform(.rename, "rename to \(to)", path: from) { (state, _) throws(PosixError) in
            let (sourceDir, sourceName) = try state.parent(of: from)
            guard let id = sourceDir.entries[sourceName], let node = state.nodes[id] else { throw PosixError(ENOENT) }
            let (targetDir, targetName) = try state.parent(of: to)
            if let existingID = targetDir.entries[targetName], let existing = state.nodes[existingID] {
                if existingID == id { return }
                if node.isDirectory && !existing.isDirectory { throw PosixError(ENOTDIR) }
                if !node.isDirectory && existing.isDirectory { throw PosixError(EISDIR) }
                if existing.isDirectory && !existing.entries.isEmpty { throw PosixError(ENOTEMPTY) }
            }
            if node.isDirectory, state.isAncestor(node, of: targetDir) { throw PosixError(EINVAL) }
            sourceDir.entries[sourceName] = nil
            targetDir.entries[targetName] = id
            state.log(
                .rename(fromDirectory: sourceDir.id, fromName: sourceName, toDirectory: targetDir.id, toName: targetName),
                directories: [sourceDir.id, targetDir.id])
            state.collectGarbage()
        }
    }

    /// Removes a file; a missing file is not an error, a directory is `EISDIR`.
    public func unlink(_ path: String) throws {
        try perform(.unlink, "unlink", path: path) { (state, _) throws(PosixError) in
            let parent: Node
            let name: [UInt8]
            do throws(PosixError) {
                (parent, name) = try state.parent(of: path)
            } catch where error.errno == ENOENT {
                return
            }
            guard let id = parent.entries[name], let node = state.nodes[id] else { return }
            if node.isDirectory { throw PosixError(EISDIR) }
            parent.entries[name] = nil
            state.log(.unlink(directory: parent.id, name: name), directories: [parent.id])
            state.collectGarbage()
        }
    }

    /// Creates a directory; an existing directory is not an error.
    public func mkdir(_ path: String, mode: UInt32) throws {
        try perform(.mkdir, "mkdir", path: path) { (state, _) throws(PosixError) in
            if let components = try? State.components(path), components.isEmpty { return }  // "/"
            let (parent, name) = try state.parent(of: path)
            if let id = parent.entries[name], let existing = state.nodes[id] {
                if existing.isDirectory { return }
                throw PosixError(EEXIST)
            }
            state.link(
                Node(id: state.allocateInode(), isDirectory: true, mode: mode & 0o7777 & ~state.umask),
                name: name, in: parent)
        }
    }

    /// The names in a directory.
    public func contentsOfDirectory(_ path: String) throws -> [String] {
        try perform(.contentsOfDirectory, "opendir", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            guard node.isDirectory else { throw PosixError(ENOTDIR) }
            return node.entries.keys.map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Makes the directory's entry changes durable.
    public func fsyncDirectory(_ path: String) throws {
        try perform(.fsyncDirectory, "fsync directory", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            guard node.isDirectory else { throw PosixError(ENOTDIR) }
            state.syncDirectory(node.id)
        }
    }

    /// Takes an `flock` for this descriptor, polling until `timeout`; throws ``CofferError/Code/busy`` then.
    public func lock(_ fd: Int32, exclusive: Bool, timeout: Double, path: String) throws {
        let start = ContinuousClock.now
        var pause = 0.000_05  // seconds, doubling up to 5 ms
        var first = true
        while true {
            let acquired = try perform(.lock, "flock", fd: fd, record: first, errorPath: path) {
                (state, _) throws(PosixError) -> Bool in
                let (node, _) = try state.descriptor(fd)
                return node.tryLock(fd, exclusive: exclusive)
            }
            first = false
            if acquired { return }
            if ContinuousClock.now - start >= .seconds(max(0, timeout)) {
                throw CofferError(
                    .busy,
                    "another process holds the lock on this store (waited \(timeout) s); try again when it is done",
                    path: path, errno: EWOULDBLOCK)
            }
            Thread.sleep(forTimeInterval: pause)
            pause = min(pause * 2, 0.005)
        }
    }

    /// Releases this descriptor's `flock`.
    public func unlock(_ fd: Int32) {
        state.withLock { state in
            state.calls.append(Call(operation: .unlock, path: state.descriptors[fd]?.path))
            guard let descriptor = state.descriptors[fd], let node = state.nodes[descriptor.node] else { return }
            if node.exclusiveHolder == fd { node.exclusiveHolder = nil }
            node.sharedHolders.remove(fd)
        }
    }

    /// Maps the file's first `length` bytes: one block of memory per file, shared by every
    /// descriptor (every simulated process), kept through a simulated process crash (the
    /// kernel keeps it) and cleared by a simulated power loss (the next map starts from the
    /// file's surviving bytes). It starts as a copy of
    /// the file's bytes and is not kept in step with ``pread(_:into:at:)`` and
    /// ``pwrite(_:_:at:)`` afterwards: Coffer only maps lock files, which it never reads or writes.
    public func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
        try perform(.mmap, "mmap", fd: fd, errorPath: path) { (state, _) throws(PosixError) -> (any SharedMapping)? in
            let (node, writable) = try state.descriptor(fd)
            // A real mapping past the end of the file faults on access (SIGBUS): refuse it here.
            guard writable, !node.isDirectory, length > 0, node.data.count >= length else { throw PosixError(EINVAL) }
            if let existing = node.mapping, existing.length >= length { return existing }
            let mapping = MemoryMapping(copying: node.data[0..<length])
            node.mapping = mapping
            return mapping
        }
    }

    // MARK: - Plumbing

    /// Records the call, fires a matching fault, then runs `body` (with a short-write limit, if
    /// a fault set one) and turns its errno into a ``CofferError``.
    private func perform<T: Sendable>(
        _ operation: Operation, _ name: String, path: String? = nil, fd: Int32? = nil, record: Bool = true,
        errorPath: String? = nil, _ body: (inout State, Int?) throws(PosixError) -> T
    ) throws -> T {
        try state.withLock { (state) throws(CofferError) -> T in
            let target = path ?? fd.flatMap { state.descriptors[$0]?.path }
            var shortWrite: Int?
            if record {
                state.calls.append(Call(operation: operation, path: target))
                switch state.fireFault(operation, path: target) {
                case .none: break
                case .fail(let errno): throw CofferError.io(name, path: target ?? errorPath, errno: errno)
                case .shortWrite(let bytes, _): shortWrite = bytes
                }
            }
            do throws(PosixError) {
                return try body(&state, shortWrite)
            } catch {
                throw CofferError.io(name, path: target ?? errorPath, errno: error.errno)
            }
        }
    }
}

/// Heap memory standing in for a shared mapping; freed when the last holder lets go.
final class MemoryMapping: SharedMapping, @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let length: Int

    init(copying bytes: ArraySlice<UInt8>) {
        length = bytes.count
        base = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 4096)
        bytes.withUnsafeBytes { base.copyMemory(from: $0.baseAddress!, byteCount: length) }
    }

    deinit { base.deallocate() }
}

/// An errno on its way to becoming a ``CofferError``.
struct PosixError: Error {
    var errno: Int32
    init(_ errno: Int32) { self.errno = errno }
}

/// A file or directory. Lives only inside the file system's `Mutex`.
final class Node {
    let id: UInt64
    let isDirectory: Bool
    let mode: UInt32
    /// Current bytes (files).
    var data: [UInt8] = []
    /// Writes and truncations since the last fsync, in order, each with what it replaced (files).
    /// An undo log rather than a copy of the synced bytes, so a sync costs nothing and an append
    /// after a sync does not copy the whole file.
    var pending: [(change: FileChange, undo: Undo)] = []
    /// Current entries, by name bytes (directories).
    var entries: [[UInt8]: UInt64] = [:]
    var exclusiveHolder: Int32?
    var sharedHolders: Set<Int32> = []
    /// The memory ``InMemoryFileSystem/mapShared(_:length:path:)`` handed out for this file.
    var mapping: MemoryMapping?

    init(id: UInt64, isDirectory: Bool, mode: UInt32) {
        self.id = id
        self.isDirectory = isDirectory
        self.mode = mode
    }

    var status: FileStatus {
        FileStatus(
            size: Int64(isDirectory ? 4096 : data.count), device: InMemoryFileSystem.deviceNumber, inode: id,
            mode: mode, isDirectory: isDirectory)
    }

    /// How to take back one change: set the size back to `size`, then put `bytes` back at `offset`.
    struct Undo {
        var size: Int
        var offset: Int
        var bytes: [UInt8]
    }

    /// Applies a write or truncation, remembering it (and what it replaced) until the next sync.
    func change(_ change: FileChange) {
        let undo: Undo
        switch change {
        case .write(let offset, let bytes):
            let overlap = offset < data.count ? Array(data[offset..<min(data.count, offset + bytes.count)]) : []
            undo = Undo(size: data.count, offset: offset, bytes: overlap)
        case .truncate(let size):
            undo = Undo(size: data.count, offset: size, bytes: size < data.count ? Array(data[size...]) : [])
        }
        data.apply(change)
        pending.append((change, undo))
    }

    /// The bytes as of the last fsync/fdatasync.
    var durableData: [UInt8] {
        var bytes = data
        for (_, undo) in pending.reversed() {
            bytes.apply(.truncate(size: undo.size))
            if !undo.bytes.isEmpty { bytes.apply(.write(offset: undo.offset, bytes: undo.bytes)) }
        }
        return bytes
    }

    func markSynced() {
        pending.removeAll()
    }

    /// `flock` semantics: a descriptor holding the lock may convert it; others conflict.
    func tryLock(_ fd: Int32, exclusive: Bool) -> Bool {
        if exclusive {
            if let holder = exclusiveHolder, holder != fd { return false }
            if !sharedHolders.subtracting([fd]).isEmpty { return false }
            sharedHolders.remove(fd)
            exclusiveHolder = fd
        } else {
            if let holder = exclusiveHolder, holder != fd { return false }
            if exclusiveHolder == fd { exclusiveHolder = nil }
            sharedHolders.insert(fd)
        }
        return true
    }
}

/// One unsynced change to a file's bytes.
enum FileChange {
    case write(offset: Int, bytes: [UInt8])
    case truncate(size: Int)
}

extension Array where Element == UInt8 {
    mutating func apply(_ change: FileChange) {
        switch change {
        case .write(let offset, let bytes):
            let end = offset + bytes.count
            if end > count { append(contentsOf: repeatElement(0, count: end - count)) }
            replaceSubrange(offset..<end, with: bytes)
        case .truncate(let size):
            if size < count { removeSubrange(size...) } else { append(contentsOf: repeatElement(0, count: size - count)) }
        }
    }
}

/// One change to directory entries, replayed by name when simulating a power loss.
enum DirectoryChange {
    case link(directory: UInt64, name: [UInt8], node: UInt64)
    case unlink(directory: UInt64, name: [UInt8])
    case rename(fromDirectory: UInt64, fromName: [UInt8], toDirectory: UInt64, toName: [UInt8])
}

/// A directory change not yet folded into the durable base; durable once every directory it
/// touches has been fsync'd after it.
struct LoggedChange {
    var change: DirectoryChange
    var pendingDirectories: Set<UInt64>
}

struct Descriptor {
    var node: UInt64
    var path: String
    var writable: Bool
}

struct ActiveFault {
    var fault: InMemoryFileSystem.Fault
    var seen = 0
}

struct State {
    static let rootID: UInt64 = 1
    var nodes: [UInt64: Node]
    var nextInode: UInt64 = 2
    var descriptors: [Int32: Descriptor] = [:]
    var nextDescriptor: Int32 = 3
    var umask: UInt32
    var faults: [ActiveFault] = []
    var calls: [InMemoryFileSystem.Call] = []
    var diskBudget: Int?
    /// Directory entries as of the oldest change still in `metaLog`.
    var baseEntries: [UInt64: [[UInt8]: UInt64]] = [State.rootID: [:]]
    /// Directory changes since `baseEntries`, oldest first.
    var metaLog: [LoggedChange] = []
    /// Node count at which ``collectGarbage()`` next sweeps.
    var garbageThreshold = 64

    init(umask: UInt32) {
        self.umask = umask & 0o777
        nodes = [State.rootID: Node(id: State.rootID, isDirectory: true, mode: 0o755)]
    }

    var root: Node { nodes[State.rootID] ?? Node(id: State.rootID, isDirectory: true, mode: 0o755) }

    mutating func allocateInode() -> UInt64 {
        defer { nextInode += 1 }
        return nextInode
    }

    mutating func openDescriptor(node: Node, path: String, writable: Bool) -> Int32 {
        let fd = nextDescriptor
        nextDescriptor = nextDescriptor == Int32.max ? 3 : nextDescriptor + 1
        descriptors[fd] = Descriptor(node: node.id, path: path, writable: writable)
        return fd
    }

    func descriptor(_ fd: Int32) throws(PosixError) -> (node: Node, writable: Bool) {
        guard let descriptor = descriptors[fd], let node = nodes[descriptor.node] else { throw PosixError(EBADF) }
        return (node, descriptor.writable)
    }

    // MARK: Paths

    static func components(_ path: String) throws(PosixError) -> [[UInt8]] {
        let bytes = Array(path.utf8)
        if bytes.isEmpty { throw PosixError(ENOENT) }
        if bytes.contains(0) { throw PosixError(EINVAL) }
        if bytes.count >= 4096 { throw PosixError(ENAMETOOLONG) }
        var result: [[UInt8]] = []
        for part in bytes.split(separator: UInt8(ascii: "/")) {
            if part.elementsEqual([UInt8(ascii: ".")]) { continue }
            if part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                _ = result.popLast()
                continue
            }
            if part.count > 255 { throw PosixError(ENAMETOOLONG) }
            result.append(Array(part))
        }
        return result
    }

    func lookup(_ components: some Collection<[UInt8]>) throws(PosixError) -> Node {
        var current = root
        for name in components {
            guard current.isDirectory else { throw PosixError(ENOTDIR) }
            guard let id = current.entries[name], let next = nodes[id] else { throw PosixError(ENOENT) }
            current = next
        }
        return current
    }

    func resolve(_ path: String) throws(PosixError) -> Node {
        try lookup(State.components(path))
    }

    /// The directory that holds (or would hold) `path`, and the last name.
    func parent(of path: String) throws(PosixError) -> (Node, [UInt8]) {
        let components = try State.components(path)
        guard let name = components.last else { throw PosixError(EBUSY) }  // "/" itself
        let directory = try lookup(components.dropLast())
        guard directory.isDirectory else { throw PosixError(ENOTDIR) }
        return (directory, name)
    }

    func isAncestor(_ candidate: Node, of node: Node) -> Bool {
        if candidate.id == node.id { return true }
        for child in candidate.entries.values {
            if let next = nodes[child], next.isDirectory, isAncestor(next, of: node) { return true }
        }
        return false
    }

    func walk(_ directory: Node, prefix: String, _ visit: (String, Node) -> Void) {
        for (name, id) in directory.entries {
            guard let node = nodes[id] else { continue }
            let path = prefix + "/" + String(decoding: name, as: UTF8.self)
            visit(path, node)
            if node.isDirectory { walk(node, prefix: path, visit) }
        }
    }

    // MARK: Directory changes

    @discardableResult
    mutating func link(_ node: Node, name: [UInt8], in directory: Node) -> Node {
        nodes[node.id] = node
        directory.entries[name] = node.id
        log(.link(directory: directory.id, name: name, node: node.id), directories: [directory.id])
        return node
    }

    mutating func log(_ change: DirectoryChange, directories: Set<UInt64>) {
        metaLog.append(LoggedChange(change: change, pendingDirectories: directories))
    }

    mutating func syncDirectory(_ id: UInt64) {
        for index in metaLog.indices { metaLog[index].pendingDirectories.remove(id) }
        let durablePrefix = metaLog.prefix { $0.pendingDirectories.isEmpty }.count
        if durablePrefix > 0 {
            baseEntries = State.apply(metaLog[..<durablePrefix].map(\.change), to: baseEntries)
            metaLog.removeFirst(durablePrefix)
        }
        collectGarbage()
    }

    mutating func syncAll() {
        for node in nodes.values where !node.isDirectory { node.markSynced() }
        baseEntries = State.apply(metaLog.map(\.change), to: baseEntries)
        metaLog.removeAll()
        collectGarbage()
    }

    func replay(_ changes: [DirectoryChange]) -> [UInt64: [[UInt8]: UInt64]] {
        State.apply(changes, to: baseEntries)
    }

    static func apply(_ changes: [DirectoryChange], to base: [UInt64: [[UInt8]: UInt64]]) -> [UInt64: [[UInt8]: UInt64]] {
        var entries = base
        for change in changes {
            switch change {
            case .link(let directory, let name, let node):
                entries[directory, default: [:]][name] = node
            case .unlink(let directory, let name):
                entries[directory]?[name] = nil
            case .rename(let fromDirectory, let fromName, let toDirectory, let toName):
                // A rename whose source an earlier, dropped change never created does nothing.
                guard let node = entries[fromDirectory]?[fromName] else { continue }
                entries[fromDirectory]?[fromName] = nil
                entries[toDirectory, default: [:]][toName] = node
            }
        }
        return entries
    }

    /// Drops nodes that nothing can reach any more: not the current tree, an open descriptor,
    /// the durable base, or a logged change.
    mutating func collectGarbage() {
        // Amortised: unreachable nodes are harmless, so only sweep when the table has doubled.
        guard nodes.count >= garbageThreshold else { return }
        defer { garbageThreshold = max(64, nodes.count * 2) }
        var live: Set<UInt64> = [State.rootID]
        for descriptor in descriptors.values { live.insert(descriptor.node) }
        for (directory, entries) in baseEntries {
            live.insert(directory)
            live.formUnion(entries.values)
        }
        for logged in metaLog {
            switch logged.change {
            case .link(let directory, _, let node): live.formUnion([directory, node])
            case .unlink(let directory, _): live.insert(directory)
            case .rename(let from, _, let to, _): live.formUnion([from, to])
            }
        }
        var work = Array(live)
        while let id = work.popLast() {
            guard let node = nodes[id], node.isDirectory else { continue }
            for child in node.entries.values where live.insert(child).inserted { work.append(child) }
        }
        if live.count < nodes.count { nodes = nodes.filter { live.contains($0.key) } }
    }

    // MARK: Faults

    /// Counts the call against every matching fault; the first one due fires. Non-persistent
    /// faults that come due are removed.
    mutating func fireFault(_ operation: InMemoryFileSystem.Operation, path: String?) -> InMemoryFileSystem.Fault.Effect? {
        var fired: InMemoryFileSystem.Fault?
        var remaining: [ActiveFault] = []
        for var active in faults {
            let fault = active.fault
            let matches = fault.operation == operation && (fault.matches.map { test in path.map(test) ?? false } ?? true)
            if matches {
                active.seen += 1
                let due = active.seen == fault.occurrence || (fault.persistent && active.seen > fault.occurrence)
                if due {
                    if fired == nil { fired = fault }
                    if !fault.persistent { continue }
                }
            }
            remaining.append(active)
        }
        if let fired, case .shortWrite(_, let errno) = fired.effect {
            remaining.append(ActiveFault(fault: .fail(.pwrite, errno: errno, where: fired.matches)))
        }
        faults = remaining
        return fired?.effect
    }

    // MARK: Power loss

    mutating func powerLoss(
        seed: UInt64, data dataMode: InMemoryFileSystem.UnsyncedData, metadata: InMemoryFileSystem.UnsyncedMetadata
    ) -> InMemoryFileSystem.PowerLossReport {
        var random = SplitMix64(seed: seed)
        var report = InMemoryFileSystem.PowerLossReport()

        // 1. Directory changes: which unsynced ones survive.
        var kept: [DirectoryChange] = []
        let lastDurable = metaLog.lastIndex { $0.pendingDirectories.isEmpty } ?? -1
        let cut = metaLog.count > lastDurable + 1 ? Int.random(in: (lastDurable + 1)...metaLog.count, using: &random) : metaLog.count
        for (index, logged) in metaLog.enumerated() {
            let keep: Bool
            if logged.pendingDirectories.isEmpty {
                keep = true
            } else {
                switch metadata {
                case .keep: keep = true
                case .drop: keep = false
                case .orderedPrefix: keep = index < cut
                case .random: keep = Bool.random(using: &random)
                }
                if keep { report.keptDirectoryChanges += 1 } else { report.droppedDirectoryChanges += 1 }
            }
            if keep { kept.append(logged.change) }
        }
        let entries = replay(kept)

        // 2. Which nodes are still reachable from "/".
        var reachable: Set<UInt64> = [State.rootID]
        var work: [UInt64] = [State.rootID]
        while let id = work.popLast() {
            for child in (entries[id] ?? [:]).values where nodes[child] != nil && reachable.insert(child).inserted {
                work.append(child)
            }
        }

        // 3. File data: the durable bytes plus whichever unsynced changes survive.
        for id in reachable.sorted() {
            guard let node = nodes[id] else { continue }
            if node.isDirectory {
                node.entries = (entries[id] ?? [:]).filter { reachable.contains($0.value) }
            } else {
                var bytes = node.durableData
                for (change, _) in node.pending {
                    switch change {
                    case .truncate:
                        let keep = dataMode == .keep || (dataMode != .drop && Bool.random(using: &random))
                        if keep {
                            bytes.apply(change)
                            report.keptWrites += 1
                        } else {
                            report.droppedWrites += 1
                        }
                    case .write(let offset, let written):
                        var start = 0
                        while start < written.count {
                            let sectorEnd = min(written.count, ((offset + start) / 4096 + 1) * 4096 - offset)
                            let piece = Array(written[start..<sectorEnd])
                            let fate: Int  // 0 kept, 1 dropped, 2 garbage
                            switch dataMode {
                            case .keep: fate = 0
                            case .drop: fate = 1
                            case .random: fate = Int.random(in: 0...1, using: &random)
                            case .randomWithGarbage: fate = Int.random(in: 0...2, using: &random)
                            }
                            switch fate {
                            case 0:
                                bytes.apply(.write(offset: offset + start, bytes: piece))
                                report.keptWrites += 1
                            case 1:
                                report.droppedWrites += 1
                            default:
                                let garbage = (0..<piece.count).map { _ in UInt8.random(in: 0...255, using: &random) }
                                bytes.apply(.write(offset: offset + start, bytes: garbage))
                                report.garbledWrites += 1
                            }
                            start = sectorEnd
                        }
                    }
                }
                node.data = bytes
                node.markSynced()  // what survived is durable now
            }
            node.exclusiveHolder = nil
            node.sharedHolders.removeAll()
        }

        // Shared mappings are memory: they end with the machine. The processes that held them
        // are gone; clear the memory (they may still hold it) and let the next map start anew
        // from the file's surviving bytes.
        for node in nodes.values {
            if let mapping = node.mapping {
                mapping.base.initializeMemory(as: UInt8.self, repeating: 0, count: mapping.length)
                node.mapping = nil
            }
        }

        // 4. What survived is now the durable state.
        nodes = nodes.filter { reachable.contains($0.key) }
        baseEntries = [:]
        for id in reachable { if let node = nodes[id], node.isDirectory { baseEntries[id] = node.entries } }
        metaLog.removeAll()
        descriptors.removeAll()
        return report
    }
}

/// A small, seedable generator (SplitMix64), so a power loss can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
