package import CofferCore
import CofferRuntime
package import Foundation
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
package final class InMemoryFileSystem: FileSystem {
    /// The device number every `stat` reports.
    package static let deviceNumber: UInt64 = 0xC0FF

    private let state: Locked<State>

    /// An empty file system holding only `/`, with umask `0o022`.
    package init(umask: UInt32 = 0o022) {
        state = Locked(State(umask: umask))
    }

    // MARK: - Test controls

    /// Bits removed from the mode of every file and directory created from now on.
    package var umask: UInt32 {
        get { state.withLock { $0.umask } }
        set { state.withLock { $0.umask = newValue & 0o777 } }
    }

    /// Installs a fault; it fires on a future call and, unless persistent, is then removed.
    package func inject(_ fault: Fault) {
        state.withLock { $0.faults.append(ActiveFault(fault: fault)) }
    }

    /// Removes every installed fault that has not fired yet.
    package func removeAllFaults() {
        state.withLock { $0.faults.removeAll() }
    }

    /// The number of installed faults that have not fired yet (persistent faults count until removed).
    package var pendingFaultCount: Int { state.withLock { $0.faults.count } }

    /// Makes writes that grow files fail with `ENOSPC` once `remaining` more bytes were
    /// allocated (a write that only partly fits is short). `nil` means unlimited. Space is not
    /// given back when files shrink or are removed.
    package func setDiskSpace(remaining: Int?) {
        state.withLock { $0.diskBudget = remaining.map { max(0, $0) } }
    }

    /// Every call made since creation or the last ``resetCalls()``, in order.
    package var calls: [Call] { state.withLock { $0.calls } }

    /// How many calls of `operation` were made since creation or the last ``resetCalls()``.
    package func callCount(_ operation: Operation) -> Int {
        state.withLock { $0.calls.reduce(0) { $1.operation == operation ? $0 + 1 : $0 } }
    }

    /// How many calls of `operation` on paths `matches` accepts were made since the last ``resetCalls()``.
    package func callCount(_ operation: Operation, where matches: (String) -> Bool) -> Int {
        let calls = self.calls
        return calls.reduce(0) { $1.operation == operation && $1.path.map(matches) == true ? $0 + 1 : $0 }
    }

    /// Forgets the recorded calls.
    package func resetCalls() {
        state.withLock {
            $0.calls.removeAll()
            $0.largestRead = 0
        }
    }

    /// The largest buffer a `pread` was given since creation or the last ``resetCalls()``: what
    /// a reader was ready to take in one call, which shows whether it sized a buffer by a
    /// length it read from a file before the file backed it.
    package var largestReadRequest: Int { state.withLock { $0.largestRead } }

    /// How many descriptors are open (a test can check that a failed operation closed its own).
    package var openDescriptorCount: Int { state.withLock { $0.descriptors.count } }

    /// The current bytes of the file at `path`, or `nil` when there is no file there. Not recorded, never fails.
    package func contents(atPath path: String) -> Data? {
        state.withLock { state in
            guard let node = try? state.resolve(path), !node.isDirectory else { return nil }
            return Data(node.data)
        }
    }

    /// The permission bits of the file or directory at `path`, or `nil` when there is none.
    package func permissions(atPath path: String) -> UInt32? {
        state.withLock { state in (try? state.resolve(path))?.mode }
    }

    /// Every path in the file system except `/`, sorted; directories end with `/`.
    package func allPaths() -> [String] {
        state.withLock { state in
            var result: [String] = []
            state.walk(state.root, prefix: "") { path, node in result.append(node.isDirectory ? path + "/" : path) }
            return result.sorted()
        }
    }

    /// Creates a directory and its missing parents (mode `0o700`), durably, without recording calls.
    package func createDirectory(atPath path: String, mode: UInt32 = 0o700) throws {
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
    package func createFile(atPath path: String, contents: Data, mode: UInt32 = 0o600) throws {
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
    package func syncAll() {
        state.withLock { $0.syncAll() }
    }

    /// True when the file or directory at `path`, as it is now, would survive any power loss:
    /// its data is synced and every directory change leading to it is durable.
    package func isDurable(_ path: String) -> Bool {
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
    package func simulateProcessCrash() {
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
    package func simulatePowerLoss(
        seed: UInt64, data: UnsyncedData = .random, metadata: UnsyncedMetadata = .orderedPrefix
    ) -> PowerLossReport {
        state.withLock { $0.powerLoss(seed: seed, data: data, metadata: metadata) }
    }

    // MARK: - FileSystem

    /// Opens or creates a file (O_RDWR, with O_CREAT/O_EXCL as asked); the mode is masked by ``umask``.
    package func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
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
    package func openReadOnly(_ path: String) throws -> Int32 {
        try perform(.openReadOnly, "open", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            return state.openDescriptor(node: node, path: path, writable: false)
        }
    }

    /// Closes a descriptor and releases its lock; an unknown descriptor is ignored.
    package func close(_ fd: Int32) {
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
    package func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try perform(.pread, "read", fd: fd) { (state, _) throws(PosixError) in
            state.largestRead = max(state.largestRead, buffer.count)
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
    package func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
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
    package func fsync(_ fd: Int32) throws {
        try perform(.fsync, "fsync", fd: fd) { (state, _) throws(PosixError) in
            let (node, _) = try state.descriptor(fd)
            node.markSynced()
        }
    }

    /// Makes the file's data durable (same as ``fsync(_:)`` in this model).
    package func fdatasync(_ fd: Int32) throws {
        try perform(.fdatasync, "fdatasync", fd: fd) { (state, _) throws(PosixError) in
            let (node, _) = try state.descriptor(fd)
            node.markSynced()
        }
    }

    /// Sets the file's size; `EINVAL` on a read-only descriptor.
    package func ftruncate(_ fd: Int32, size: Int64) throws {
        try perform(.ftruncate, "ftruncate", fd: fd) { (state, _) throws(PosixError) in
            let (node, writable) = try state.descriptor(fd)
            guard writable, !node.isDirectory, size >= 0 else { throw PosixError(EINVAL) }
            node.change(.truncate(size: Int(size)))
        }
    }

    /// The descriptor's file status.
    package func fstat(_ fd: Int32) throws -> FileStatus {
        try perform(.fstat, "fstat", fd: fd) { (state, _) throws(PosixError) in
            let node = try state.descriptor(fd).node
            var status = node.status
            // As the kernel counts them: the names the file has now (0 once removed, or once
            // another file was renamed over its only name), though it stays open.
            if !node.isDirectory {
                status.linkCount = UInt64(
                    state.nodes.values.reduce(0) { count, directory in
                        directory.isDirectory ? count + directory.entries.values.filter { $0 == node.id }.count : count
                    })
            }
            return status
        }
    }

    /// The status at `path`, or `nil` for `ENOENT`/`ENOTDIR`.
    package func stat(_ path: String) throws -> FileStatus? {
        try perform(.stat, "stat", path: path) { (state, _) throws(PosixError) in
            do throws(PosixError) {
                return try state.resolve(path).status
            } catch where error.errno == ENOENT || error.errno == ENOTDIR {
                return nil
            }
        }
    }

    /// Renames atomically, replacing a file (or an empty directory) at `to`.
    package func rename(_ from: String, _ to: String) throws {
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
    package func unlink(_ path: String) throws {
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
    package func mkdir(_ path: String, mode: UInt32) throws {
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
    package func contentsOfDirectory(_ path: String) throws -> [String] {
        try perform(.contentsOfDirectory, "opendir", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            guard node.isDirectory else { throw PosixError(ENOTDIR) }
            return node.entries.keys.map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Makes the directory's entry changes durable.
    package func fsyncDirectory(_ path: String) throws {
        try perform(.fsyncDirectory, "fsync directory", path: path) { (state, _) throws(PosixError) in
            let node = try state.resolve(path)
            guard node.isDirectory else { throw PosixError(ENOTDIR) }
            state.syncDirectory(node.id)
        }
    }

    /// Takes an `flock` for this descriptor, polling until `timeout`; throws ``CofferError/Code/busy`` then.
    package func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws {
        var first = true
        try poll(timeout: timeout, path: path, errno: EWOULDBLOCK) {
            defer { first = false }
            return try perform(.lock, "flock", fd: fd, record: first, errorPath: path) {
                (state, _) throws(PosixError) -> Bool in
                let (node, _) = try state.descriptor(fd)
                return node.tryLock(fd, exclusive: exclusive)
            }
        }
    }

    /// Calls `attempt` until it takes the lock, pausing between tries (50 µs, doubling up to
    /// 5 ms); once `timeout` has passed, throws ``CofferError/Code/busy`` with `errno`.
    private func poll(timeout: Duration, path: String, errno: Int32, _ attempt: () throws -> Bool) throws {
        let start = ContinuousClock.now
        var pause = 0.000_05  // seconds
        while try !attempt() {
            if ContinuousClock.now - start >= max(.zero, timeout) {
                throw CofferError(
                    .busy,
                    "another process holds the lock on this store (waited \(timeout.inSeconds.secondsText) s); try again when it is done",
                    path: path, errno: errno)
            }
            Thread.sleep(forTimeInterval: pause)
            pause = min(pause * 2, 0.005)
        }
    }

    /// Releases this descriptor's `flock`.
    package func unlock(_ fd: Int32) {
        state.withLock { state in
            state.calls.append(Call(operation: .unlock, path: state.descriptors[fd]?.path))
            guard let descriptor = state.descriptors[fd], let node = state.nodes[descriptor.node] else { return }
            if node.exclusiveHolder == fd { node.exclusiveHolder = nil }
            node.sharedHolders.remove(fd)
        }
    }

    /// Locks the mutex at `mutex` in a mapping this file system handed out, as the live file
    /// system's robust, process-shared one behaves, but modelled here rather than a `pthread`
    /// mutex: a simulated power loss clears the mapping's memory (and lets go of every mutex),
    /// which under a real held mutex would corrupt the thread's robust list. Polls until
    /// `timeout`, then throws ``CofferError/Code/busy`` (a thread that holds it waits for itself).
    package func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool {
        let address = UInt(bitPattern: mutex)
        try poll(timeout: timeout, path: path, errno: ETIMEDOUT) {
            state.withLock { $0.heldMutexes.insert(address).inserted }
        }
        return false
    }

    /// Unlocks a mutex locked with ``lockMutex(_:timeout:path:)``.
    package func unlockMutex(_ mutex: UnsafeMutableRawPointer) {
        _ = state.withLock { $0.heldMutexes.remove(UInt(bitPattern: mutex)) }
    }

    /// Maps the file's first `length` bytes: one block of memory per file, shared by every
    /// descriptor (every simulated process), kept through a simulated process crash (the
    /// kernel keeps it) and cleared by a simulated power loss (the next map starts from the
    /// file's surviving bytes). It starts as a copy of
    /// the file's bytes and is not kept in step with ``pread(_:into:at:)`` and
    /// ``pwrite(_:_:at:)`` afterwards: Coffer only maps lock files, which it never reads or writes.
    package func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
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
