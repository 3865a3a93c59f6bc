public import Foundation

/// One record read back from a ``Journal``.
public struct JournalRecord: Sendable, Equatable {
    /// Byte offset of the record's frame in the file.
    public let offset: Int64
    /// The bytes the owner appended.
    public let payload: Data

    public init(offset: Int64, payload: Data) {
        self.offset = offset
        self.payload = payload
    }
}

/// How a ``Journal`` is set up. The same options must be used by every process on one file.
public struct JournalOptions: Sendable {
    /// Identifies what the file holds (a key-value suite, a vault), so one is never opened as the other.
    public var application: UInt16
    /// Bytes reserved after the file header for the owner (the vault keeps its key slots there).
    public var headerAreaSize: Int
    /// When an append must be on stable storage.
    public var durability: Durability
    /// How long a write waits for another process's lock.
    public var lockTimeout: Double
    /// The largest payload accepted, written or read (a larger length in a file is damage).
    public var maxPayload: Int
    /// This process is the file's only user: the lock is taken at open and held until close, so
    /// a write needs no lock and no check for other writers (one system call in coalesced mode).
    /// Any other opener — another process, or another instance here — waits `lockTimeout`, then
    /// fails with ``CofferError/Code/busy``.
    public var exclusive: Bool = false
    /// How long a shared journal trusts the lock file's control page alone before it checks
    /// again that its path still names the file it has open. Coffer's own compactions are seen
    /// at once whatever this is (the page says so); this bounds how long a store file replaced
    /// or removed by hand — not through Coffer — goes unnoticed. Each check is a `stat`, which
    /// also makes the next durable write's flush slower (see docs/FORMAT.md, "Control page").
    public var identityCheckInterval: Duration = .seconds(1)

    public init(
        application: UInt16, headerAreaSize: Int = 0, durability: Durability = .immediate, lockTimeout: Double = 10,
        maxPayload: Int = (1 << 30) - 1
    ) {
        self.application = application
        self.headerAreaSize = headerAreaSize
        self.durability = durability
        self.lockTimeout = lockTimeout
        self.maxPayload = maxPayload
    }
}

/// What to do with a record that fails its checksum before the end of the file.
public enum JournalRecovery: Sendable {
    /// Refuse to open: throw ``CofferError/Code/corrupted`` with the record's byte offset.
    case strict
    /// Keep every intact record: copy the damaged file aside (`<file>.damaged-<time>`), then
    /// rewrite the file with the intact records only.
    case salvage
}

/// What changed in the file since this process last looked.
public struct JournalChanges: Sendable {
    /// The file was replaced (compacted by another process): forget everything and apply `records`.
    public var reset: Bool
    /// Records to apply, in order.
    public var records: [JournalRecord]
    /// Whether there is nothing to do.
    public var isEmpty: Bool { !reset && records.isEmpty }
}

/// The append-only storage engine shared by the key-value file and the vault (see docs/FORMAT.md).
///
/// A write appends framed records (length, CRC-32C, payload); opening scans the frames, applies
/// them in order, and repairs a torn tail left by a crash. Compaction rewrites the live records
/// to a new file and renames it into place. Writers in several processes are serialised by an
/// `flock` on `<file>.lock`; a reader picks up other processes' appends on its next
/// ``refresh()`` without rereading the file.
///
/// Rule: a `Journal` is not thread-safe. Its owner serialises every call (the strategies keep
/// it inside a `Mutex`).
// @unchecked Sendable: not thread-safe by itself; every owner keeps it inside a Mutex (the Rule above).
public final class Journal: @unchecked Sendable {
    /// Size of the fixed file header.
    public static let fileHeaderSize = 32
    /// Size of a frame's header.
    public static let frameHeaderSize = 12
    static let magic: [UInt8] = Array("COFFERJL".utf8)
    /// The journal format version this code writes and reads.
    public static let formatVersion: UInt16 = 1
    /// Frame word bit 31: more frames of this commit follow.
    static let continuedFlag: UInt32 = 0x8000_0000
    /// Frame word bit 30: this frame continues a commit (it is not the commit's first).
    static let continuesFlag: UInt32 = 0x4000_0000
    /// Frame word bits 0–29: the payload length.
    static let lengthMask: UInt32 = 0x3FFF_FFFF
    /// File header byte 16, bit 0: coalesced writers use this file (see ``scanFrames``).
    static let coalescedWritersFlag: UInt8 = 0x01

    /// The journal file.
    public let path: String
    /// The options it was opened with.
    public let options: JournalOptions
    private let fs: any FileSystem
    private let lock: FileLock
    /// The lock file's shared control page (`nil` on a file system that cannot map files).
    private let control: JournalControl?
    /// The control page's generation when this process last caught up under it (shared mode),
    /// or `nil` when it must catch up the slow way first.
    private var knownGeneration: UInt64?
    /// When the path was last checked to still name the file open here. A process that only
    /// trusts the control page still checks it every `options.identityCheckInterval` (1 s by
    /// default), so a store file replaced or removed by hand (not through Coffer) is noticed.
    private var identityCheckedAt: ContinuousClock.Instant
    private var fd: Int32
    private var identity: FileStatus
    /// The owner's header area as last read or written.
    public private(set) var headerArea: [UInt8]
    /// Offset just past the last committed frame.
    public private(set) var dataEnd: Int64
    /// The file's size including preallocated zeros.
    public private(set) var allocatedSize: Int64
    /// Whether appends made since the last fsync are not yet durable (coalesced mode).
    public private(set) var hasUnsyncedWrites = false
    /// Whether coalesced writers use this file (file header flag): then a power loss may persist
    /// a later unsynced commit without an earlier one, and a torn-looking commit ends the data
    /// even when intact frames follow it.
    public private(set) var coalescedWriters: Bool
    private var closed = false
    /// Why this journal was opened read-only, or `nil` when it can write: the store or its lock
    /// file could not be opened for writing (a read-only mount, a `0400` file, a full disk).
    /// Every write then throws this reason.
    public private(set) var readOnlyReason: CofferError?
    /// Set when an fsync failed: the fate of the writes it covered is unknown, so every later
    /// write and flush fails too, until the store is reopened (and reread from the disk).
    private var syncFailure: CofferError?

    /// Offset of the first frame.
    public var dataStart: Int64 { Int64(Journal.fileHeaderSize + options.headerAreaSize) }

    private init(
        path: String, options: JournalOptions, fs: any FileSystem, lock: FileLock, control: JournalControl?, fd: Int32,
        identity: FileStatus, headerArea: [UInt8], dataEnd: Int64, allocatedSize: Int64, coalescedWriters: Bool
    ) {
        self.coalescedWriters = coalescedWriters
        self.path = path
        self.options = options
        self.fs = fs
        self.lock = lock
        self.control = control
        self.identityCheckedAt = .now
        self.fd = fd
        self.identity = identity
        self.headerArea = headerArea
        self.dataEnd = dataEnd
        self.allocatedSize = allocatedSize
    }

    deinit {
        if !closed {
            fs.close(fd)
            if options.exclusive { lock.release() }
        }
    }

    /// How ``open(path:options:fileSystem:create:initialHeaderArea:recovery:)`` treats a missing file.
    public enum CreateMode: Sendable {
        /// The file must exist.
        case openExisting
        /// Create the file when it is missing.
        case openOrCreate
        /// The file must not exist yet.
        case createNew
    }

    /// Opens (or creates) a journal and returns it with every committed record, in order.
    ///
    /// - Parameters:
    ///   - initialHeaderArea: the owner's header area for a new file (`options.headerAreaSize` bytes).
    ///   - recovery: what to do when a record before the end of the file is damaged.
    /// - Throws: ``CofferError``: ``CofferError/Code/notFound`` (missing, with `.openExisting`),
    ///   ``CofferError/Code/alreadyExists`` (with `.createNew`), ``CofferError/Code/corrupted``
    ///   (damage, with its byte offset), ``CofferError/Code/unsupportedVersion``,
    ///   ``CofferError/Code/busy``, ``CofferError/Code/io``.
    public static func open(
        path givenPath: String, options: JournalOptions, fileSystem fs: any FileSystem, create: CreateMode,
        initialHeaderArea: [UInt8]? = nil, recovery: JournalRecovery = .strict
    ) throws -> (journal: Journal, records: [JournalRecord]) {
        guard options.headerAreaSize >= 0, options.maxPayload > 0, options.maxPayload <= Int(lengthMask) else {
            throw CofferError(.invalidArgument, "journal options out of range")
        }
        guard !options.lockTimeout.isNaN, options.lockTimeout >= 0 else {
            throw CofferError(
                .invalidArgument,
                "the lock timeout must be a number of seconds, 0 or more (got \(options.lockTimeout)); "
                    + "waits longer than \(Int(FileLock.maximumTimeout)) s count as forever")
        }
        // Locked by the file's identity, not by how it was reached: every path to one file (a
        // symlink to it, a symlinked directory) resolves to one name, so to one lock file, and
        // a compaction renames over the file itself rather than over a symlink to it.
        let path = try fs.resolve(givenPath)
        // Nothing is created beside a path that is not a store file (`/dev/null`, a FIFO, a
        // directory): say so before the lock file would be made.
        if let existing = try fs.stat(path) { try checkStoreFile(existing, path: path) }
        warnIfDirectoryIsShared(of: path, fs: fs)
        let lock = try FileLock(path: path + ".lock", fileSystem: fs)
        guard options.exclusive else {
            return try lock.withLock(timeout: options.lockTimeout) {
                try openLocked(path: path, options: options, fs: fs, lock: lock, create: create,
                               initialHeaderArea: initialHeaderArea, recovery: recovery)
            }
        }
        // Exclusive: the lock taken now is kept by the journal until it closes.
        try lock.acquire(timeout: options.lockTimeout)
        do {
            return try openLocked(path: path, options: options, fs: fs, lock: lock, create: create,
                                  initialHeaderArea: initialHeaderArea, recovery: recovery)
        } catch {
            lock.release()
            throw error
        }
    }

    /// Refuses a path that names something other than a regular file of this user, before a
    /// lock file is made beside it (root reading a user's store must not leave a root-owned lock
    /// that locks the user out).
    static func checkStoreFile(_ status: FileStatus, path: String) throws {
        guard status.isRegularFile else {
            let kind = status.isDirectory ? "a directory" : "a device, FIFO or socket"
            throw CofferError(.invalidArgument, "the path names \(kind), not a Coffer store file", path: path)
        }
        if let owner = status.owner, owner != effectiveUserID() {
            throw CofferError(
                .io,
                "the store file is owned by user \(owner), not by this process's user (\(effectiveUserID())); "
                    + "Coffer uses only its own user's stores: run as its owner (nothing was created or changed)",
                path: path, errno: EPERM_)
        }
    }

    /// Tells once (``CofferWarnings``) when users other than the owner may write the store's
    /// directory: they could plant files at the lock's or a temporary file's name. Coffer
    /// refuses to follow or write such files, but cannot stop a rename there.
    static func warnIfDirectoryIsShared(of path: String, fs: any FileSystem) {
        let directory = DurableIO.parentDirectory(of: path)
        if let status = try? fs.stat(directory), status.isDirectory, status.mode & 0o022 != 0 {
            CofferWarnings.warn(
                CofferWarning(
                    .sharedDirectory,
                    "the directory holding a Coffer store is writable by other users (mode "
                        + "\(String(status.mode, radix: 8))); keep stores in a directory only you can write "
                        + "(chmod go-w)",
                    path: directory))
            return
        }
        // Above it, a directory others can write without the sticky bit lets them rename the
        // store's directory away and put a symlink in its place.
        var ancestor = DurableIO.parentDirectory(of: directory)
        while true {
            if let status = try? fs.stat(ancestor), status.isDirectory, status.mode & 0o022 != 0,
                status.mode & 0o1000 == 0
            {
                CofferWarnings.warn(
                    CofferWarning(
                        .sharedDirectory,
                        "a directory above a Coffer store is writable by other users without the sticky bit "
                            + "(mode \(String(status.mode, radix: 8))): they could swap the store's directory; "
                            + "chmod go-w or +t it",
                        path: ancestor))
                return
            }
            let next = DurableIO.parentDirectory(of: ancestor)
            if next == ancestor || ancestor == "." { return }
            ancestor = next
        }
    }

    private static func openLocked(
        path: String, options: JournalOptions, fs: any FileSystem, lock: FileLock, create: CreateMode,
        initialHeaderArea: [UInt8]?, recovery: JournalRecovery
    ) throws -> (journal: Journal, records: [JournalRecord]) {
        do {
            // Without a writable lock file there is no control page either: such a journal only
            // reads, the slow way (a stat per refresh), and every write is refused.
            var readOnly = lock.readOnlyReason
            var control: JournalControl?
            if readOnly == nil {
                do {
                    control = try lock.mapShared(length: JournalControl.length).map(JournalControl.init(mapping:))
                } catch let error as CofferError where FileLock.allowsReadOnly(error) {
                    readOnly = error  // a full disk: the page cannot be written
                }
            }
            if readOnly == nil { try removeStaleTemporaryFiles(of: path, fs: fs) }
            let existing = try fs.stat(path)
            switch (existing, create) {
            case (nil, .openExisting):
                throw CofferError(.notFound, "no store file exists here", path: path, errno: ENOENT_)
            case (.some, .createNew):
                let what = existing?.isDirectory == true ? "a directory" : "a file"
                throw CofferError(.alreadyExists, "\(what) already exists here; refusing to overwrite it", path: path)
            case (nil, _) where readOnly != nil:
                throw CofferError(
                    .io, "cannot create the store: \(readOnlyText(readOnly!, path: path))", path: path,
                    errno: readOnly!.errno)
            case (nil, _):
                var area = initialHeaderArea ?? []
                guard area.count <= options.headerAreaSize else {
                    throw CofferError(.invalidArgument, "header area larger than reserved")
                }
                area += [UInt8](repeating: 0, count: options.headerAreaSize - area.count)
                let bytes = fileImage(
                    options: options, headerArea: area, payloads: [], coalescedWriters: options.durability != .immediate)
                control?.distrust()  // a new file takes this path: no process may go on trusting the old one
                try DurableIO.atomicReplace(path, with: bytes, fileSystem: fs)
            default:
                break
            }
            if let existing { try checkStoreFile(existing, path: path) }
            let fd: Int32
            if readOnly == nil {
                do {
                    fd = try fs.open(path, create: false, exclusive: false, mode: DurableIO.fileMode)
                } catch let error as CofferError where FileLock.allowsReadOnly(error) {
                    // A `0400` store, or one on a read-only mount whose lock file could be made.
                    readOnly = error
                    fd = try fs.openReadOnly(path)
                }
            } else {
                fd = try fs.openReadOnly(path)
            }
            if readOnly != nil {
                CofferWarnings.warn(
                    CofferWarning(
                        .readOnlyWithoutLock,
                        "opened read-only: \(readOnlyText(readOnly!, path: path)); reads work, writes are refused",
                        path: path))
            }
            var owner: Journal?  // once it exists, it owns the descriptor (and may have replaced it)
            do {
                let status = try fs.fstat(fd)
                let image = try readImage(fd, size: status.size, fs: fs, path: path)
                let header = try parseFileHeader(
                    Array(image.prefix(fileHeaderSize + options.headerAreaSize)), options: options, path: path)
                let scan = image.withUnsafeBytes {
                    scanFrames(
                        $0, from: header.dataStart, maxPayload: options.maxPayload, salvage: recovery == .salvage,
                        lenientTail: header.coalescedWriters, source: image)
                }
                var effective = options
                effective.headerAreaSize = header.headerArea.count
                let journal = Journal(
                    path: path, options: effective, fs: fs, lock: lock, control: control, fd: fd, identity: status,
                    headerArea: header.headerArea, dataEnd: Int64(scan.end), allocatedSize: Int64(image.count),
                    coalescedWriters: header.coalescedWriters)
                journal.readOnlyReason = readOnly
                owner = journal
                if let damaged = scan.damage.first {
                    if recovery == .strict || readOnly != nil {
                        throw CofferError(
                            .corrupted,
                            "record at byte \(damaged) is damaged (it fails its checksum and is not a torn write); "
                                + "\(scan.records.count) intact record(s) precede it and \(scan.intactAfterDamage) "
                                + "follow it; nothing was changed",
                            path: path, offset: Int64(damaged))
                    }
                    try DurableIO.atomicReplace(
                        path + ".damaged-\(Int(Date().timeIntervalSince1970))", with: image, fileSystem: fs)
                    try journal.rewriteLocked(payloads: scan.records.map(\.payload), headerArea: nil)
                    let reread = try journal.readAllLocked()
                    journal.settleControl()
                    return (journal, reread)
                }
                if readOnly != nil {
                    // A torn tail is left as it is (the scan stopped before it); so is the flag.
                    return (journal, scan.records)
                }
                if scan.garbageEnd > scan.end {
                    // A torn tail from a crash mid-append: wipe it so later scans stop at the end.
                    try journal.zero(from: Int64(scan.end), to: Int64(scan.garbageEnd))
                    try fs.fdatasync(fd)
                }
                if options.durability != .immediate && !header.coalescedWriters {
                    try journal.markCoalescedWriters(fileHeader: Array(image.prefix(fileHeaderSize)))
                }
                journal.settleControl()
                return (journal, scan.records)
            } catch {
                if let owner { owner.discard() } else { fs.close(fd) }
                throw error
            }
        }
    }

    /// Reads what other processes appended since this process last looked, without locking.
    ///
    /// An incomplete frame at the end (another process mid-write, or a crashed one) is left for
    /// the next writer to judge; it is simply not applied yet.
    /// - Throws: ``CofferError`` on I/O failure or when the file was removed.
    public func refresh() throws -> JournalChanges {
        try refresh(checkingPath: false)
    }

    /// ``refresh()``; with `checkingPath`, the path is checked to still name the file open here
    /// even when the control page vouches for it (a file watcher saw the file removed, replaced
    /// or renamed by something other than Coffer, which the page cannot see).
    public func refresh(checkingPath: Bool) throws -> JournalChanges {
        try checkOpen()
        if options.exclusive { return JournalChanges(reset: false, records: []) }  // nobody else writes
        if !checkingPath, let control = currentControl {
            // The same file as when this process last looked: at most appends to read.
            if control.dataEnd == dataEnd { return JournalChanges(reset: false, records: []) }
            return JournalChanges(reset: false, records: try readForward(repair: false))
        }
        let before = control?.trustedGeneration
        let changes: JournalChanges
        do {
            changes = try reopenIfReplaced() ?? JournalChanges(reset: false, records: try readForward(repair: false))
        } catch {
            // The path no longer names a readable store (removed by hand, say): every later
            // call checks it again instead of trusting the control page, so it keeps saying so.
            identityCheckedAt = .now - options.identityCheckInterval - .seconds(1)
            throw error
        }
        // Learn the generation only if no replacement began while the path was checked.
        if let before, control?.trustedGeneration == before { knownGeneration = before }
        return changes
    }

    /// Bytes of a failed append still to be zeroed (exclusive stores only: see `append`).
    private var pendingWipe: Range<Int64>?

    private func wipePending() throws {
        guard let range = pendingWipe else { return }
        try zero(from: range.lowerBound, to: range.upperBound)
        pendingWipe = nil
    }

    /// Runs `body` holding the exclusive write lock, after catching up with other processes.
    ///
    /// `body` receives what changed since this process last looked (apply it before deciding
    /// what to write) and may call ``append(_:)``, ``rewrite(payloads:headerArea:)`` and
    /// ``writeHeaderArea(_:)``.
    public func withWriteLock<T>(_ body: (JournalChanges) throws -> T) throws -> T {
        try checkOpen()
        try checkWritable()
        if options.exclusive {
            // The lock is held since open and nobody else writes: nothing to catch up with.
            try wipePending()
            return try body(JournalChanges(reset: false, records: []))
        }
        return try lock.withLock(timeout: options.lockTimeout) {
            try wipePending()
            let changes: JournalChanges
            if let control = currentControl {
                // Still the same file. Unless someone committed or died mid-append since this
                // process last looked, there is nothing to read, stat or judge.
                if control.isSettled(at: dataEnd) {
                    return try body(JournalChanges(reset: false, records: []))
                }
                changes = JournalChanges(reset: false, records: try readForward(repair: true))
            } else {
                changes = try reopenIfReplaced() ?? JournalChanges(reset: false, records: try readForward(repair: true))
            }
            settleControl()
            return try body(changes)
        }
    }

    /// Appends `payloads` as one commit: after a crash all of them are present, or none is.
    ///
    /// Call inside ``withWriteLock(_:)``. Durable on return in `.immediate` mode; in the kernel
    /// (safe from a process crash) in `.coalesced` mode until the next ``flush()``.
    /// - Returns: the byte offset of each record's frame.
    @discardableResult
    public func append(_ payloads: [Data]) throws -> [Int64] {
        try appendPayloads(payloads)
    }

    /// Appends `payloads` as one commit, as ``append(_:)-([Data])``, from byte arrays (no copy
    /// into `Data` first: the vault's sealed records are arrays).
    @discardableResult
    public func append(_ payloads: [[UInt8]]) throws -> [Int64] {
        try appendPayloads(payloads)
    }

    private func appendPayloads<Payload: Collection & ContiguousBytes>(_ payloads: [Payload]) throws -> [Int64]
    where Payload.Element == UInt8 {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard !payloads.isEmpty else { return [] }
        var offsets: [Int64] = []
        var buffer: [UInt8] = []
        buffer.reserveCapacity(payloads.reduce(0) { $0 + $1.count + Journal.frameHeaderSize })
        for (i, payload) in payloads.enumerated() {
            guard !payload.isEmpty, payload.count <= options.maxPayload else {
                throw CofferError(
                    .invalidArgument,
                    "a record must hold 1 to \(options.maxPayload) bytes; this one holds \(payload.count)")
            }
            offsets.append(dataEnd + Int64(buffer.count))
            payload.withUnsafeBytes {
                Journal.appendFrame($0, continued: i < payloads.count - 1, continues: i > 0, to: &buffer)
            }
        }
        let needed = dataEnd + Int64(buffer.count)
        if !options.exclusive { control?.beginAppend() }  // left set if this append fails
        let grew = try ensureCapacity(needed)
        do {
            try buffer.withUnsafeBytes { try fs.writeAll(fd, $0, at: dataEnd, path: path) }
        } catch {
            // Part of the commit may have landed. Wipe it now, so it can never be read as a
            // commit nor judged as damage to the last record.
            pendingWipe = dataEnd..<needed
            do {
                try wipePending()
            } catch {
                // The wipe failed too. An exclusive store retries it before its next write
                // (nobody else writes). A shared one must not: once the lock is let go another
                // process judges that tail and may append its own commit over it, which a later
                // blind wipe would erase. Its next writer, this one included, judges the tail
                // under the lock instead (torn: zeroed; otherwise reported as damage), as after
                // a crash at this point.
                if !options.exclusive { pendingWipe = nil }
            }
            throw error
        }
        dataEnd = needed
        if !options.exclusive { control?.endAppend(dataEnd: needed) }
        switch options.durability {
        case .immediate:
            try syncData(metadata: grew)
        case .coalesced:
            hasUnsyncedWrites = true
        }
        return offsets
    }

    /// Makes every append durable now (fdatasync). Does nothing when nothing is pending.
    public func flush() throws {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard hasUnsyncedWrites else { return }
        try syncData(metadata: false)
    }

    /// Replaces the file with one holding just `payloads` (each its own commit), atomically.
    ///
    /// Call inside ``withWriteLock(_:)``. A crash at any point leaves the old file or the new one.
    /// - Parameter headerArea: a new header area, or `nil` to keep the current one.
    public func rewrite(payloads: [Data], headerArea: [UInt8]? = nil) throws {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        try rewriteLocked(payloads: payloads, headerArea: headerArea)
    }

    /// Overwrites the header area in place and makes it durable. Call inside ``withWriteLock(_:)``.
    ///
    /// A crash during this write can leave the area torn: owners keep two copies with
    /// checksums and sequence numbers and write one at a time (the vault does).
    public func writeHeaderArea(_ bytes: [UInt8], at offset: Int = 0) throws {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard offset >= 0, offset + bytes.count <= options.headerAreaSize else {
            throw CofferError(.invalidArgument, "header area write out of range")
        }
        try bytes.withUnsafeBytes {
            try fs.writeAll(fd, $0, at: Int64(Journal.fileHeaderSize + offset), path: path)
        }
        try syncData(metadata: false)
        headerArea.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
    }

    /// Rereads the header area from the file (another process may have rewritten it).
    public func reloadHeaderArea() throws -> [UInt8] {
        try checkOpen()
        var area = [UInt8](repeating: 0, count: options.headerAreaSize)
        let n = try area.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: Int64(Journal.fileHeaderSize)) }
        guard n == area.count else {
            throw CofferError(.corrupted, "the file ends inside its header", path: path, offset: Int64(n))
        }
        headerArea = area
        return area
    }

    /// Flushes pending writes and closes the file. Later calls throw ``CofferError/Code/closed``.
    public func close() throws {
        guard !closed else { return }
        defer {
            fs.close(fd)
            if options.exclusive { lock.release() }
            closed = true
        }
        if hasUnsyncedWrites { try syncData(metadata: false) }
    }

    // MARK: - Internals

    /// Closes the descriptor without syncing (a failed open gives it up).
    private func discard() {
        if !closed {
            fs.close(fd)
            if options.exclusive { lock.release() }
        }
        closed = true
    }

    private func checkOpen() throws {
        if closed { throw CofferError(.closed, "the store was closed", path: path) }
    }

    private func checkWritable() throws {
        guard let reason = readOnlyReason else { return }
        throw CofferError(
            .io,
            "the store is open read-only (\(Journal.readOnlyText(reason, path: path))); nothing was written: "
                + "reopen it once it can be written", path: path, errno: reason.errno ?? EROFS_)
    }

    /// "its lock file cannot be opened for writing (errno 30 (Read-only file system))".
    static func readOnlyText(_ reason: CofferError, path: String) -> String {
        let file = reason.path == path ? "the store file" : "its lock file"
        // A hard link is said in Coffer's words ("the file has 2 names …"), not as "Too many links".
        let why = reason.errno.flatMap { $0 == EMLINK_ ? nil : CofferError.errnoText($0) } ?? reason.message
        return "\(file) cannot be opened for writing: \(why)"
    }

    private func syncData(metadata: Bool) throws {
        if let syncFailure { throw syncFailure }
        do {
            if metadata { try fs.fsync(fd) } else { try fs.fdatasync(fd) }
        } catch var error as CofferError {
            // After a failed fsync the kernel may have dropped the dirty pages: the pending
            // writes' fate is unknown, so the error stands and is never retried as a success.
            error.path = path
            error.message += "; writes since the last successful sync may be lost — reopen the store to see what it holds"
            syncFailure = error
            throw error
        }
        hasUnsyncedWrites = false
    }

    /// Sets the coalesced-writers flag in the file header (once in a file's life), durably.
    private func markCoalescedWriters(fileHeader: [UInt8]) throws {
        var header = fileHeader
        header[16] |= Journal.coalescedWritersFlag
        let crc = CRC32C.checksum(Array(header[0..<28]))
        withUnsafeBytes(of: crc.littleEndian) { header.replaceSubrange(28..<32, with: $0) }
        try header.withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: path) }
        try fs.fdatasync(fd)
        coalescedWriters = true
    }

    /// Grows the file with written zeros so appends land in allocated blocks and fdatasync need
    /// not update metadata. Returns whether the size changed.
    private func ensureCapacity(_ needed: Int64) throws -> Bool {
        if needed <= allocatedSize { return false }
        let current = try fs.fstat(fd).size
        if current >= needed {
            allocatedSize = current
            return false
        }
        let growth = max(Int64(4096), min(current / 4, Int64(8 << 20)))
        let target = ((max(needed, current + growth) + 4095) / 4096) * 4096
        let zeros = [UInt8](repeating: 0, count: 64 * 1024)
        var offset = current
        while offset < target {
            let chunk = Int(min(Int64(zeros.count), target - offset))
            try zeros.withUnsafeBytes { try fs.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<chunk]), at: offset, path: path) }
            offset += Int64(chunk)
        }
        allocatedSize = target
        return true
    }

    private func zero(from start: Int64, to end: Int64) throws {
        let zeros = [UInt8](repeating: 0, count: Int(min(end - start, 64 * 1024)))
        var offset = start
        while offset < end {
            let chunk = Int(min(Int64(zeros.count), end - offset))
            try zeros.withUnsafeBytes { try fs.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<chunk]), at: offset, path: path) }
            offset += Int64(chunk)
        }
    }

    /// If another process replaced the file (compaction), switches to the new one and returns
    /// all of its records with `reset`.
    private func reopenIfReplaced() throws -> JournalChanges? {
        guard let current = try fs.stat(path) else {
            throw CofferError(.notFound, "the store file was removed while it was open", path: path, errno: ENOENT_)
        }
        if current.inode == identity.inode && current.device == identity.device {
            identityCheckedAt = .now
            return nil
        }
        let newFD =
            readOnlyReason == nil
            ? try fs.open(path, create: false, exclusive: false, mode: DurableIO.fileMode) : try fs.openReadOnly(path)
        // Switch to the new file only once it has been read whole: a failure leaves this
        // journal on the old file with its old view, to be retried by the next call.
        let saved = (fd, identity, headerArea, coalescedWriters, dataEnd, allocatedSize)
        fd = newFD
        do {
            let records = try readAllLocked()
            fs.close(saved.0)
            identityCheckedAt = .now
            return JournalChanges(reset: true, records: records)
        } catch {
            fs.close(newFD)
            (fd, identity, headerArea, coalescedWriters, dataEnd, allocatedSize) = saved
            throw error
        }
    }

    /// Rereads the whole current file: header area and every committed record.
    private func readAllLocked() throws -> [JournalRecord] {
        let status = try fs.fstat(fd)
        identity = status
        let image = try Journal.readImage(fd, size: status.size, fs: fs, path: path)
        let header = try Journal.parseFileHeader(
            Array(image.prefix(Journal.fileHeaderSize + options.headerAreaSize)), options: options, path: path)
        headerArea = header.headerArea
        coalescedWriters = header.coalescedWriters
        let scan = image.withUnsafeBytes {
            Journal.scanFrames(
                $0, from: header.dataStart, maxPayload: options.maxPayload, salvage: false,
                lenientTail: header.coalescedWriters, source: image)
        }
        if let damaged = scan.damage.first {
            throw CofferError(.corrupted, "record at byte \(damaged) fails its checksum", path: path, offset: Int64(damaged))
        }
        dataEnd = Int64(scan.end)
        allocatedSize = Int64(image.count)
        return scan.records
    }

    /// Reads committed frames from `dataEnd` on. With `repair` (write lock held) an invalid frame
    /// is judged: a torn tail is wiped; damage followed by intact records throws.
    /// `dataEnd` moves only when this returns: after a failure the commits read so far are
    /// read again by the next call (the caller never saw them).
    private func readForward(repair: Bool) throws -> [JournalRecord] {
        var records: [JournalRecord] = []
        var group: [JournalRecord] = []
        var end = dataEnd  // just past the last whole commit read
        var offset = dataEnd
        var header = [UInt8](repeating: 0, count: Journal.frameHeaderSize)
        while true {
            let n = try header.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: offset) }
            if n == 0 || (n == header.count && header.allSatisfy({ $0 == 0 }) && group.isEmpty) { break }
            // A frame whose "continues" flag contradicts its place is invalid, as in scanFrames.
            guard n == header.count, let frame = Journal.parseFrameHeader(header, maxPayload: options.maxPayload),
                frame.continues != group.isEmpty
            else {
                try judgeTail(from: end, repair: repair)
                dataEnd = end
                return records
            }
            var payload = Data(count: frame.length)
            let got = try payload.withUnsafeMutableBytes {
                try fs.readFully(fd, into: $0, at: offset + Int64(Journal.frameHeaderSize))
            }
            let crcOK = got == frame.length && payload.withUnsafeBytes { CRC32C.checksum($0) } == frame.payloadCRC
            guard crcOK else {
                try judgeTail(from: end, repair: repair)
                dataEnd = end
                return records
            }
            group.append(JournalRecord(offset: offset, payload: payload))
            offset += Int64(Journal.frameHeaderSize + frame.length)
            if !frame.continued {
                records += group
                group.removeAll()
                end = offset
            }
        }
        dataEnd = end
        return records
    }

    /// Decides what an invalid frame at `start` (the end of the commits read) is. Without the
    /// lock it may be a write in progress, so nothing is concluded. With it, the rest of the
    /// file is scanned.
    private func judgeTail(from start: Int64, repair: Bool) throws {
        guard repair else { return }
        let size = try fs.fstat(fd).size
        allocatedSize = size
        let length = Int(size - start)
        guard length > 0 else { return }
        var bytes = [UInt8](repeating: 0, count: length)
        let n = try bytes.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: start) }
        bytes.removeSubrange(n...)
        let scan = bytes.withUnsafeBytes {
            Journal.scanFrames(
                $0, from: 0, maxPayload: options.maxPayload, salvage: false, lenientTail: coalescedWriters)
        }
        if let damaged = scan.damage.first {
            let after =
                scan.intactAfterDamage > 0
                ? "\(scan.intactAfterDamage) intact record(s) follow it"
                : "it is not a torn write (no all-zero sector inside it)"
            throw CofferError(
                .corrupted, "record at byte \(start + Int64(damaged)) fails its checksum; \(after)",
                path: path, offset: start + Int64(damaged))
        }
        // No intact frame follows: a crashed writer's torn tail. Wipe it.
        if scan.garbageEnd > 0 {
            try zero(from: start, to: start + Int64(scan.garbageEnd))
            try fs.fdatasync(fd)
        }
    }

    private func rewriteLocked(payloads: [Data], headerArea newArea: [UInt8]?) throws {
        let area = newArea ?? headerArea
        guard area.count == options.headerAreaSize else {
            throw CofferError(.invalidArgument, "header area must be \(options.headerAreaSize) bytes")
        }
        for payload in payloads where payload.isEmpty || payload.count > options.maxPayload {
            throw CofferError(.invalidArgument, "a record must hold 1 to \(options.maxPayload) bytes")
        }
        let image = Journal.fileImage(
            options: options, headerArea: area, payloads: payloads, coalescedWriters: coalescedWriters)
        control?.distrust()  // until settled below: a process that dies here leaves it distrusted
        try DurableIO.atomicReplace(path, with: image, fileSystem: fs)
        let newFD = try fs.open(path, create: false, exclusive: false, mode: DurableIO.fileMode)
        fs.close(fd)
        fd = newFD
        identity = try fs.fstat(fd)
        headerArea = area
        allocatedSize = Int64(image.count)
        dataEnd = Int64(Journal.fileHeaderSize + area.count) + payloads.reduce(0) {
            $0 + Int64($1.count + Journal.frameHeaderSize)
        }
        hasUnsyncedWrites = false
        identityCheckedAt = .now
        settleControl()
    }

    /// After catching up under the lock: a shared journal settles the control page and
    /// remembers its generation; an exclusive one distrusts it for as long as it holds the lock.
    private func settleControl() {
        if options.exclusive {
            control?.distrust()
        } else {
            knownGeneration = control?.settle(dataEnd: dataEnd, file: identity)
        }
    }

    /// The control page when it vouches for the file open here as of the generation this process
    /// remembers, and the path was checked recently: then the path need not be checked again.
    private var currentControl: JournalControl? {
        guard let control, let known = knownGeneration, control.isCurrent(generation: known, file: identity),
            identityIsFresh
        else { return nil }
        return control
    }

    /// Whether the path was checked recently enough to skip checking it now.
    private var identityIsFresh: Bool {
        ContinuousClock.now - identityCheckedAt < options.identityCheckInterval
    }

    /// The whole file, read into one buffer (shorter than `size` if the file shrank meanwhile).
    private static func readImage(_ fd: Int32, size: Int64, fs: any FileSystem, path: String) throws -> Data {
        var image = Data(count: Int(try DurableIO.checkSize(size, path: path)))
        let n = try image.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: 0) }
        if n < image.count { image.count = n }
        return image
    }

    private static func removeStaleTemporaryFiles(of path: String, fs: any FileSystem) throws {
        let directory = DurableIO.parentDirectory(of: path)
        let prefix = "." + DurableIO.lastComponent(of: path) + "."
        guard (try fs.stat(directory)) != nil else { return }
        for name in try fs.contentsOfDirectory(directory) where name.hasPrefix(prefix) && name.hasSuffix(".tmp") {
            try fs.unlink(directory + "/" + name)
        }
    }

    // MARK: - Format (pure functions: bytes in, values out)

    static func fileImage(
        options: JournalOptions, headerArea: [UInt8], payloads: [Data], coalescedWriters: Bool
    ) -> [UInt8] {
        var bytes: [UInt8] = []
        let framesSize = payloads.reduce(0) { $0 + $1.count + frameHeaderSize }
        let used = fileHeaderSize + headerArea.count + framesSize
        let preallocation = max(4096 - used % 4096, min(used / 8, 8 << 20))
        bytes.reserveCapacity(used + preallocation)
        bytes += magic
        appendLE(formatVersion, to: &bytes)
        appendLE(options.application, to: &bytes)
        appendLE(UInt32(headerArea.count), to: &bytes)
        bytes.append(coalescedWriters ? coalescedWritersFlag : 0)
        bytes += [UInt8](repeating: 0, count: 11)
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        bytes += headerArea
        for payload in payloads {
            payload.withUnsafeBytes { appendFrame($0, continued: false, continues: false, to: &bytes) }
        }
        bytes += [UInt8](repeating: 0, count: preallocation)
        return bytes
    }

    struct FileHeader {
        var dataStart: Int
        var headerArea: [UInt8]
        var coalescedWriters: Bool
    }

    static func parseFileHeader(_ bytes: [UInt8], options: JournalOptions, path: String) throws -> FileHeader {
        guard bytes.count >= fileHeaderSize else {
            throw CofferError(
                .corrupted, "the file is \(bytes.count) bytes, shorter than a Coffer file header", path: path, offset: 0)
        }
        guard Array(bytes[0..<8]) == magic else {
            throw CofferError(.corrupted, "not a Coffer store file (wrong magic bytes)", path: path, offset: 0)
        }
        let crc = readLE(bytes, 28, as: UInt32.self)
        guard CRC32C.checksum(Array(bytes[0..<28])) == crc else {
            throw CofferError(.corrupted, "the file header fails its checksum", path: path, offset: 0)
        }
        let version = readLE(bytes, 8, as: UInt16.self)
        guard version == formatVersion else {
            throw CofferError(
                .unsupportedVersion,
                "the file has format version \(version); this Coffer reads version \(formatVersion)", path: path)
        }
        let application = readLE(bytes, 10, as: UInt16.self)
        guard application == options.application else {
            throw CofferError(
                .invalidArgument,
                "the file holds another kind of store (application \(application), expected \(options.application))",
                path: path)
        }
        let areaSize = Int(readLE(bytes, 12, as: UInt32.self))
        guard areaSize == options.headerAreaSize else {
            throw CofferError(
                .corrupted, "the header area is \(areaSize) bytes, expected \(options.headerAreaSize)", path: path,
                offset: 12)
        }
        guard bytes.count >= fileHeaderSize + areaSize else {
            throw CofferError(.corrupted, "the file ends inside its header area", path: path, offset: Int64(bytes.count))
        }
        return FileHeader(
            dataStart: fileHeaderSize + areaSize,
            headerArea: Array(bytes[fileHeaderSize..<(fileHeaderSize + areaSize)]),
            coalescedWriters: bytes[16] & coalescedWritersFlag != 0)
    }

    struct FrameHeader {
        var length: Int
        var continued: Bool
        var continues: Bool
        var payloadCRC: UInt32
    }

    /// A frame header, or `nil` when its check fails or its length is out of range.
    static func parseFrameHeader(_ h: UnsafeRawBufferPointer, maxPayload: Int) -> FrameHeader? {
        guard h.count >= frameHeaderSize else { return nil }
        let word = loadLE(h, 0)
        let payloadCRC = loadLE(h, 4)
        let check = loadLE(h, 8)
        guard CRC32C.checksum(UnsafeRawBufferPointer(rebasing: h[0..<8])) == check else { return nil }
        let length = Int(word & lengthMask)
        guard length >= 1, length <= maxPayload else { return nil }
        return FrameHeader(
            length: length, continued: word & continuedFlag != 0, continues: word & continuesFlag != 0,
            payloadCRC: payloadCRC)
    }

    static func parseFrameHeader(_ h: [UInt8], maxPayload: Int) -> FrameHeader? {
        h.withUnsafeBytes { parseFrameHeader($0, maxPayload: maxPayload) }
    }

    static func appendFrame(
        _ payload: UnsafeRawBufferPointer, continued: Bool, continues: Bool, to bytes: inout [UInt8]
    ) {
        let start = bytes.count
        appendLE(
            UInt32(payload.count) | (continued ? continuedFlag : 0) | (continues ? continuesFlag : 0), to: &bytes)
        appendLE(CRC32C.checksum(payload), to: &bytes)
        let check = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[start..<(start + 8)])) }
        appendLE(check, to: &bytes)
        bytes.append(contentsOf: payload)
    }

    /// The result of scanning frames in a byte image.
    package struct Scan {
        package var records: [JournalRecord] = []
        /// Offset just past the last committed frame (relative to the image).
        package var end: Int
        /// Offset just past the last non-zero byte of a torn tail (== end when clean).
        package var garbageEnd: Int
        /// Offsets of damaged frames that intact frames follow.
        package var damage: [Int] = []
        /// Intact records after the first damage (counted in strict mode, kept in salvage mode).
        package var intactAfterDamage = 0
    }

    /// Scans frames from `start`. Pure: used by open, by the tail repair and by the fuzzer.
    ///
    /// An invalid frame (bad header check, length out of range, payload CRC mismatch, a commit
    /// left unfinished or frames out of commit order) ends the data where its commit began when
    /// it *looks torn* (``looksTorn(_:frameAt:maxPayload:)``) and either nothing intact follows
    /// it or `lenientTail` is set (coalesced writers use the file, so a power loss may persist a
    /// later unsynced commit and not an earlier one). Otherwise it is damage: strict scanning
    /// stops there; salvage skips to the next intact commit.
    ///
    /// With `source` (the `Data` whose bytes `bytes` are), each record's payload is a slice of it
    /// sharing its storage, instead of a copy: one allocation for the whole file, not two per
    /// record (the owner copies what it keeps).
    package static func scanFrames(
        _ bytes: UnsafeRawBufferPointer, from start: Int, maxPayload: Int, salvage: Bool, lenientTail: Bool = false,
        source: Data? = nil
    ) -> Scan {
        var scan = Scan(end: start, garbageEnd: start)
        var offset = start
        var group: [JournalRecord] = []
        var groupStart = start
        let count = bytes.count
        while true {
            if offset >= count || (count - offset < frameHeaderSize) {
                if group.isEmpty && isZero(bytes, from: offset) { break }
            } else if let frame = intactFrame(bytes, at: offset, maxPayload: maxPayload) {
                let body = offset + frameHeaderSize
                let next = body + frame.length
                if frame.continues == group.isEmpty {
                    // Out of commit order: a continuation with no start, or a start inside a commit.
                    if judge() { break } else { continue }
                }
                let payload =
                    source.map { $0[($0.startIndex + body)..<($0.startIndex + next)] } ?? Data(bytes[body..<next])
                group.append(JournalRecord(offset: Int64(offset), payload: payload))
                offset = next
                if !frame.continued {
                    scan.records += group
                    group.removeAll()
                    groupStart = offset
                    scan.end = offset
                    scan.garbageEnd = offset
                }
                continue
            } else if group.isEmpty && isZero(bytes, from: offset) {
                break
            }
            if judge() { break }
        }
        return scan

        /// Judges the invalid frame at `offset` (its commit began at `groupStart`). Returns
        /// whether the scan ends; otherwise it resumes at the next intact frame (salvage).
        func judge() -> Bool {
            let next = nextIntactFrame(bytes, after: offset, maxPayload: maxPayload)
            let torn = looksTorn(bytes, frameAt: offset, maxPayload: maxPayload)
            if torn && (next == nil || lenientTail) {
                scan.garbageEnd = lastNonZero(bytes, from: groupStart).map { $0 + 1 } ?? groupStart
                scan.end = groupStart
                return true
            }
            scan.damage.append(groupStart)
            group.removeAll()
            guard let next else {
                // Damage in the last commit (not a torn write): salvage drops it.
                scan.end = groupStart
                scan.garbageEnd = lastNonZero(bytes, from: groupStart).map { $0 + 1 } ?? groupStart
                return true
            }
            if !salvage {
                scan.intactAfterDamage = countIntact(bytes, from: next, maxPayload: maxPayload)
                scan.end = groupStart
                scan.garbageEnd = groupStart
                return true
            }
            offset = next
            groupStart = next
            return false
        }
    }

    /// The frame at `offset` when it is intact (header check, length, payload CRC).
    private static func intactFrame(_ bytes: UnsafeRawBufferPointer, at offset: Int, maxPayload: Int) -> FrameHeader? {
        guard offset >= 0, bytes.count - offset >= frameHeaderSize,
            let frame = parseFrameHeader(
                UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + frameHeaderSize)]), maxPayload: maxPayload),
            frame.length <= bytes.count - offset - frameHeaderSize,
            CRC32C.checksum(
                UnsafeRawBufferPointer(
                    rebasing: bytes[(offset + frameHeaderSize)..<(offset + frameHeaderSize + frame.length)]))
                == frame.payloadCRC
        else { return nil }
        return frame
    }

    /// Sector size assumed by the torn-write model: a device persists whole sectors, in any
    /// order, so a write cut short by power loss leaves some of its sectors unwritten — still
    /// zero, because the space after the last commit is always zero — or the file ends inside it.
    static let sectorSize = 512

    /// Whether the invalid frame at `offset` can be an append cut short by a crash rather than
    /// damage: the file ends inside it; or its header is all zero; or a sector-aligned 512-byte
    /// block inside it (the last one possibly shorter, ending at the frame's end) is all zero.
    /// With a header that fails its check the frame's extent is unknown, so only the header's
    /// own bytes are judged.
    static func looksTorn(_ bytes: UnsafeRawBufferPointer, frameAt offset: Int, maxPayload: Int) -> Bool {
        let count = bytes.count
        if offset >= count || count - offset < frameHeaderSize { return true }
        let header = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + frameHeaderSize)])
        if isAllZero(header) { return true }
        let end: Int
        if let frame = parseFrameHeader(header, maxPayload: maxPayload) {
            if frame.length > count - offset - frameHeaderSize { return true }
            end = offset + frameHeaderSize + frame.length
        } else {
            end = offset + frameHeaderSize
        }
        var boundary = (offset / sectorSize + 1) * sectorSize
        while boundary < end {
            let blockEnd = min(boundary + sectorSize, end)
            if isAllZero(UnsafeRawBufferPointer(rebasing: bytes[boundary..<blockEnd])) { return true }
            boundary += sectorSize
        }
        return false
    }

    /// The offset of the next intact frame after `offset` that starts a commit (K = 0). Intact
    /// continuation frames are skipped: they may be the rest of the very commit being judged.
    private static func nextIntactFrame(_ bytes: UnsafeRawBufferPointer, after offset: Int, maxPayload: Int) -> Int? {
        var p = offset + 1
        while p + frameHeaderSize <= bytes.count {
            // The length must fit in what is left before any checksum is worth computing: at
            // almost every offset of damaged bytes it does not, so the search stays cheap.
            let length = Int(loadLE(bytes, p) & lengthMask)
            if length >= 1, length <= bytes.count - p - frameHeaderSize,
                let frame = intactFrame(bytes, at: p, maxPayload: maxPayload), !frame.continues
            {
                return p
            }
            p += 1
        }
        return nil
    }

    private static func countIntact(_ bytes: UnsafeRawBufferPointer, from start: Int, maxPayload: Int) -> Int {
        scanFrames(bytes, from: start, maxPayload: maxPayload, salvage: true).records.count
    }

    private static func isZero(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Bool {
        offset >= bytes.count || isAllZero(UnsafeRawBufferPointer(rebasing: bytes[max(offset, 0)...]))
    }

    /// Whether every byte is zero, eight at a time (the scans above ask this of whole tails and
    /// sectors).
    static func isAllZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let count = bytes.count
        while count - i >= 8 {
            if bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self) != 0 { return false }
            i += 8
        }
        while i < count {
            if bytes[i] != 0 { return false }
            i += 1
        }
        return true
    }

    /// The offset of the last non-zero byte at or after `offset`, searching backwards eight bytes
    /// at a time.
    private static func lastNonZero(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Int? {
        var end = bytes.count  // bytes[end...] are known zero
        let start = max(offset, 0)
        while end - start >= 8 {
            if bytes.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self) != 0 { break }
            end -= 8
        }
        var i = end - 1
        while i >= start {
            if bytes[i] != 0 { return i }
            i -= 1
        }
        return nil
    }
}

@inline(__always)
func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
}

@inline(__always)
func readLE<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as: T.Type) -> T {
    var value: T = 0
    for i in 0..<MemoryLayout<T>.size { value |= T(bytes[offset + i]) << (8 * i) }
    return value
}

@inline(__always)
func loadLE(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
    UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
        | UInt32(bytes[offset + 3]) << 24
}
