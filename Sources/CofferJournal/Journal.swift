// The append-only storage engine: opening, reading, appending, compacting (see docs/FORMAT.md).
// (`@usableFromInline` marks what the journal-store engine's inlinable read and write paths use;
// see JournalStore.swift. Nothing here is public.)
public import CofferCore
import CofferRuntime
import CSharedWord
package import Foundation

/// One record read back from a ``Journal``.
@usableFromInline package struct JournalRecord: Sendable, Equatable {
    /// Byte offset of the record's frame in the file.
    package let offset: Int64
    /// The bytes the owner appended.
    package let payload: Data

    package init(offset: Int64, payload: Data) {
        self.offset = offset
        self.payload = payload
    }
}

/// Where one record of a ``JournalRecords`` lies.
@usableFromInline package struct JournalFrame: Sendable, Equatable {
    /// Byte offset of the record's frame in the file.
    @usableFromInline package var offset: Int64
    /// Where the payload starts in the records' ``JournalRecords/bytes`` (from their first byte).
    @usableFromInline package var start: Int
    /// The payload's length.
    @usableFromInline package var count: Int

    /// Where the payload lies in the records' ``JournalRecords/bytes``.
    @inlinable
    package var span: Range<Int> { start..<(start + count) }

    @inlinable
    package init(offset: Int64, start: Int, count: Int) {
        self.offset = offset
        self.start = start
        self.count = count
    }
}

/// Records read back from a ``Journal``, in order: their payloads inside the bytes they were
/// read into (the whole file, for an open), and where each lies.
///
/// One buffer for a batch instead of a `Data` per record: an open of 10,000 records made 10,000
/// slices of the file's image, and their retains, releases and exclusivity checks were a fifth
/// of a key-value suite's open (BENCHMARKS.md). A store reads the payloads in place
/// (``withPayloads(_:)``) and copies what it keeps, or keeps slices of ``bytes`` (a vault's
/// index); a record taken by subscript is a copy.
@usableFromInline package struct JournalRecords: RandomAccessCollection, Sendable {
    /// The bytes the payloads lie in: the file's image at open, the records read at a catch-up.
    /// An array, so that an index may keep its records as slices of it (no copy).
    package var bytes: [UInt8]
    /// Where each record lies, in order.
    package var frames: [JournalFrame]

    /// No records.
    package init() {
        bytes = []
        frames = []
    }

    /// The records `frames` places in `bytes`.
    package init(bytes: [UInt8], frames: [JournalFrame]) {
        self.bytes = bytes
        self.frames = frames
    }

    @usableFromInline package var startIndex: Int { 0 }
    @usableFromInline package var endIndex: Int { frames.count }

    /// Record `position`, its payload copied out of ``bytes`` (for tests and salvage; the stores
    /// read ``withPayloads(_:)``).
    @usableFromInline package subscript(position: Int) -> JournalRecord {
        let frame = frames[position]
        return JournalRecord(offset: frame.offset, payload: Data(bytes[frame.span]))
    }

    /// Runs `body` with the bytes and the frames, each payload at
    /// `bytes[frame.start..<(frame.start + frame.count)]`.
    package func withPayloads<R>(
        _ body: (_ bytes: UnsafeRawBufferPointer, _ frames: UnsafeBufferPointer<JournalFrame>) throws -> R
    ) rethrows -> R {
        try bytes.withUnsafeBytes { bytes in
            try frames.withUnsafeBufferPointer { try body(bytes, $0) }
        }
    }
}

/// How a ``Journal`` is set up. The same options must be used by every process on one file.
@usableFromInline package struct JournalOptions: Sendable {
    /// Identifies what the file holds (a key-value suite, a vault), so one is never opened as the other.
    package var application: UInt16
    /// Bytes reserved after the file header for the owner (the vault keeps its key slots there).
    package var headerAreaSize: Int
    /// When an append must be on stable storage.
    @usableFromInline package var durability: Durability
    /// How long a write waits for another process's lock.
    package var lockTimeout: Duration
    /// The largest payload accepted, written or read (a larger length in a file is damage).
    package var maxPayload: Int
    /// This process is the file's only user: the lock is taken at open and held until close, so
    /// a write needs no lock and no check for other writers (one system call in coalesced mode).
    /// Any other opener — another process, or another instance here — waits `lockTimeout`, then
    /// fails with ``CofferError/Code/busy``, and so does this opener while a shared journal has
    /// the file open (each holds the lock file's `flock` shared: see ``JournalControl``).
    package var exclusive: Bool = false
    /// Whether a coalesced journal may append by storing into a mapping of its file instead of a
    /// `pwrite` (see `Journal.mappedTail(covering:)` for when, and
    /// ``FileSystem/mapForAppends(_:length:path:)`` for where). On by default; tests turn it off
    /// to compare the two paths.
    package var mapsAppends = true
    /// How long a shared journal trusts the lock file's control page alone before it checks
    /// again that its path still names the file it has open. Coffer's own compactions are seen
    /// at once whatever this is (the page says so); this bounds how long a store file replaced
    /// or removed by hand — not through Coffer — goes unnoticed. Each check is a `stat`, which
    /// also makes the next durable write's flush slower (docs/FORMAT.md §1, "Writing": the control page).
    package var identityCheckInterval: Duration = .seconds(1)

    package init(
        application: UInt16, headerAreaSize: Int = 0, durability: Durability = .immediate, lockTimeout: Duration = .seconds(10),
        maxPayload: Int = (1 << 30) - 1
    ) {
        self.application = application
        self.headerAreaSize = headerAreaSize
        self.durability = durability
        self.lockTimeout = lockTimeout
        self.maxPayload = maxPayload
    }
}

/// What changed in the file since this process last looked.
@usableFromInline package struct JournalChanges: Sendable {
    /// The file was replaced (compacted by another process): forget everything and apply `records`.
    @usableFromInline package var reset: Bool
    /// Records to apply, in order.
    @usableFromInline package var records: JournalRecords
    /// Whether there is nothing to do.
    @usableFromInline package var isEmpty: Bool { !reset && records.isEmpty }
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
/// it inside a ``Locked``, which is what may cross threads).
// @unchecked Sendable, and only for that: `Mutex.withLock` hands its state over as `inout sending`,
// which a state holding a non-Sendable class cannot be (the owners would not compile). The type
// is not thread-safe; it is `package`, so only Coffer's own strategies hold one, each inside a
// lock (the Rule above).
///
/// The stored properties a write reads and sets are `@exclusivity(unchecked)`: by the Rule
/// above only one thread at a time is in a journal, each access is a plain read or assignment
/// (none is passed `inout` across a call), and the runtime's check of each, about 60
/// instructions, was a twentieth of a vault write.
@usableFromInline package final class Journal: @unchecked Sendable {
    /// Size of the fixed file header.
    package static let fileHeaderSize = 32
    /// Size of a frame's header.
    package static let frameHeaderSize = 12
    static let magic: [UInt8] = Array("COFFERJL".utf8)
    /// The magic as the first 8 bytes of the file load (native byte order).
    static let magicWord: UInt64 = magic.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
    /// The journal format version this code writes and reads.
    package static let formatVersion: UInt16 = 1
    /// Frame word bit 31: more frames of this commit follow.
    static let continuedFlag: UInt32 = 0x8000_0000
    /// Frame word bit 30: this frame continues a commit (it is not the commit's first).
    static let continuesFlag: UInt32 = 0x4000_0000
    /// Frame word bits 0–29: the payload length.
    static let lengthMask: UInt32 = 0x3FFF_FFFF
    /// File header byte 16, bit 0: coalesced writers use this file (see ``scanFrames``).
    static let coalescedWritersFlag: UInt8 = 0x01
    /// File header byte 16, bit 1: a lock file was made for this file while it existed (by an
    /// opener that found the control page not set up in its lock file), so processes that opened
    /// it before may hold a lock file no longer at the path (see ``noOtherLockFileMade``).
    static let lockFileMadeAgainFlag: UInt8 = 0x02

    /// The journal file.
    @usableFromInline package let path: String
    /// The options it was opened with.
    @usableFromInline package let options: JournalOptions
    let fs: any FileSystem
    let lock: FileLock
    /// The lock file's shared control page (`nil` on a file system that cannot map files).
    let control: JournalControl?
    /// The control page's generation when this process last caught up under it (shared mode),
    /// or `nil` when it must catch up the slow way first.
    @exclusivity(unchecked) var knownGeneration: UInt64?
    /// Whether a write lock found the lock file linked since this journal last switched files
    /// (opened, reopened after another process's compaction, or compacted here): until then the
    /// write lock never skips that check (see ``noOtherLockFileMade``).
    @exclusivity(unchecked) var lockCheckedForFile = false
    /// When the path was last checked to still name the file open here. A process that only
    /// trusts the control page still checks it every `options.identityCheckInterval` (1 s by
    /// default), so a store file replaced or removed by hand (not through Coffer) is noticed.
    /// ``CoarseClock`` nanoseconds; `Int64.min`: check at the next call.
    @exclusivity(unchecked) var identityCheckedAt: Int64
    /// `options.identityCheckInterval` in nanoseconds (read on every write).
    let identityCheckNanoseconds: Int64
    @exclusivity(unchecked) var fd: Int32
    @exclusivity(unchecked) var identity: FileStatus
    /// The owner's header area as last read or written.
    package internal(set) var headerArea: [UInt8]
    /// Offset just past the last committed frame.
    @exclusivity(unchecked) @usableFromInline package internal(set) var dataEnd: Int64
    /// The file's size including preallocated zeros.
    @exclusivity(unchecked) package internal(set) var allocatedSize: Int64
    /// Whether appends made since the last fsync are not yet durable (coalesced mode).
    @exclusivity(unchecked) package internal(set) var hasUnsyncedWrites = false
    /// Whether coalesced writers use this file (file header flag): then a power loss may persist
    /// a later unsynced commit without an earlier one, and a torn-looking commit ends the data
    /// even when intact frames follow it.
    package internal(set) var coalescedWriters: Bool
    @exclusivity(unchecked) var closed = false
    /// Why this journal was opened read-only, or `nil` when it can write: the store or its lock
    /// file could not be opened for writing (a read-only mount, a `0400` file, a full disk).
    /// Every write then throws this reason.
    @exclusivity(unchecked) package internal(set) var readOnlyReason: CofferError?
    /// Set when an fsync failed: the fate of the writes it covered is unknown, so every later
    /// write and flush fails too, until the store is reopened (and reread from the disk).
    @exclusivity(unchecked) var syncFailure: CofferError?
    /// The journal file mapped for appends (see ``mappedTail(covering:)``), and the file it maps.
    var tail: (mapping: any SharedMapping, device: UInt64, inode: UInt64)? {
        didSet {
            tailPlace = tail.map {
                MappedPlace(base: $0.mapping.base, length: $0.mapping.length, device: $0.device, inode: $0.inode)
            }
        }
    }
    /// Where ``tail`` is and which file it maps, kept beside it as plain values: the write path
    /// reads them twice per append, and reading `tail` itself retained and released its mapping
    /// each time (3 % of a shared coalesced write).
    @exclusivity(unchecked) var tailPlace: MappedPlace?

    struct MappedPlace {
        var base: UnsafeMutableRawPointer
        var length: Int
        var device: UInt64
        var inode: UInt64
    }
    /// Whether this file system never maps for appends: asked once, not at every append.
    @exclusivity(unchecked) var tailUnavailable = false
    /// How many commits were stored into the mapping rather than written (for tests).
    @exclusivity(unchecked) var mappedCommits = 0
    /// Whether this journal's store watches the file for other writers' changes, counted in the
    /// control page (``watch(_:)``).
    var watching = false
    /// Whether this journal's writes lock the control page's mutex (holding the lock file's
    /// `flock` shared until it closes) rather than taking the `flock` exclusively each time: a
    /// shared journal that can write, on a page set up with a mutex (see ``JournalControl``).
    @exclusivity(unchecked) var usesMutex = false

    /// Offset of the first frame.
    @usableFromInline package var dataStart: Int64 { Int64(Journal.fileHeaderSize + options.headerAreaSize) }

    init(
        path: String, options: JournalOptions, fs: any FileSystem, lock: FileLock, control: JournalControl?, fd: Int32,
        identity: FileStatus, headerArea: [UInt8], dataEnd: Int64, allocatedSize: Int64, coalescedWriters: Bool
    ) {
        self.coalescedWriters = coalescedWriters
        self.path = path
        self.options = options
        self.fs = fs
        self.lock = lock
        self.control = control
        self.identityCheckedAt = CoarseClock.nanoseconds
        self.identityCheckNanoseconds = options.identityCheckInterval.coarseNanoseconds
        self.fd = fd
        self.identity = identity
        self.headerArea = headerArea
        self.dataEnd = dataEnd
        self.allocatedSize = allocatedSize
    }

    deinit {
        if !closed {
            if watching { control?.removeWatcher() }
            fs.close(fd)
            if options.exclusive { lock.release() }
            if usesMutex { lock.releaseShared() }
        }
    }

    /// How ``open(path:options:fileSystem:create:initialHeaderArea:recovery:)`` treats a missing file.
    package enum CreateMode: Sendable {
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
    package static func open(
        path givenPath: String, options: JournalOptions, fileSystem fs: any FileSystem, create: CreateMode,
        initialHeaderArea: [UInt8]? = nil, recovery: JournalRecovery = .strict
    ) throws -> (journal: Journal, records: JournalRecords) {
        guard options.headerAreaSize >= 0, options.maxPayload > 0, options.maxPayload <= Int(lengthMask) else {
            throw CofferError(.invalidArgument, "journal options out of range")
        }
        guard options.lockTimeout >= .zero else {
            throw CofferError(
                .invalidArgument,
                "the lock timeout must be 0 or more (got \(options.lockTimeout.inSeconds) s); "
                    + "waits longer than \(Int(FileLock.maximumTimeout.inSeconds)) s count as forever")
        }
        // Locked by the file's identity, not by how it was reached: every path to one file (a
        // symlink to it, a symlinked directory) resolves to one name, so to one lock file, and
        // a compaction renames over the file itself rather than over a symlink to it.
        let path = try fs.resolve(givenPath)
        // Nothing is created beside a path that is not a store file (`/dev/null`, a FIFO, a
        // directory): say so before the lock file would be made.
        if let existing = try fs.stat(path) {
            try checkStoreFile(existing, path: path)
            if fs.isMountRoot(path) {
                throw CofferError(
                    .invalidArgument,
                    "the store file is mounted on its own (a bind mount of one file): it has another name elsewhere with a "
                        + "lock file of its own, so two writers could both write it, and no compaction could replace it; "
                        + "mount the directory that holds it instead (nothing was changed)",
                    path: path)
            }
        }
        warnIfDirectoryIsShared(of: path, fs: fs)
        let lock = try FileLock(path: path + ".lock", fileSystem: fs)
        let open = { (mapping: Result<(any SharedMapping)?, any Error>?) in
            try openLocked(path: path, options: options, fs: fs, lock: lock, mapping: mapping, create: create,
                           initialHeaderArea: initialHeaderArea, recovery: recovery)
        }
        guard options.exclusive else { return try openShared(lock: lock, options: options, open) }
        // Exclusive: the lock taken now is kept by the journal until it closes.
        try lock.acquire(timeout: options.lockTimeout)
        do {
            return try open(nil)
        } catch {
            lock.release()
            throw error
        }
    }

    /// Opens a journal in shared mode (see ``JournalControl``, "the store's mutex"): holding the
    /// lock file's `flock` shared from now until it closes, under the control page's mutex when
    /// the page has one; otherwise under the exclusive `flock`, which sets the page up with its
    /// mutex. A page without a mutex (none could be made, or no page) keeps to `flock` alone.
    static func openShared(
        lock: FileLock, options: JournalOptions,
        _ open: (Result<(any SharedMapping)?, any Error>?) throws -> (journal: Journal, records: JournalRecords)
    ) throws -> (journal: Journal, records: JournalRecords) {
        guard lock.readOnlyReason == nil, JournalControl.mutexSupported, let lockFile = lock.identity else {
            return try lock.withLock(timeout: options.lockTimeout) { try open(nil) }
        }
        let deadline = FileLock.deadline(after: options.lockTimeout)
        func remaining() -> Duration { max(.zero, deadline - ContinuousClock.now) }
        var pause = Duration.microseconds(50)
        while true {
            try lock.acquireShared(timeout: remaining())
            // A page that cannot be mapped (a full disk) is the open's to report, as without a mutex.
            let mapped = Result { try lock.mapShared(length: JournalControl.length) }
            do {
                if case .success(let mapping?) = mapped, let mutex = JournalControl(mapping: mapping, lockFile: lockFile).mutex {
                    let opened = try lock.withLock(timeout: remaining(), mutex: mutex) { try open(mapped) }
                    keepShared(opened.journal, lock: lock)
                    return opened
                }
            } catch {
                lock.releaseShared()
                throw error
            }
            // A page not set up with a mutex (a new lock file, an older version's or boot's,
            // garbage): set up under the exclusive lock, then held shared (a downgrade: no
            // exclusive holder can come between). Tried without waiting: while another opener
            // holds it shared (it may have just set the page up), look at the page again.
            lock.releaseShared()
            do {
                try lock.acquire(timeout: .zero)
            } catch let error as CofferError where error.code == .busy {
                if remaining() <= .zero {
                    throw CofferError(
                        .busy,
                        "another process holds the lock on this store (waited "
                            + "\(options.lockTimeout.inSeconds.secondsText) s); try again when it is done",
                        path: lock.path, errno: error.errno)
                }
                Thread.sleep(forTimeInterval: min(pause, remaining()).inSeconds)
                pause = min(pause * 2, .milliseconds(20))
                continue
            }
            let opened: (journal: Journal, records: JournalRecords)
            do {
                opened = try open(mapped)
            } catch {
                lock.release()
                throw error
            }
            guard let control = opened.journal.control else {
                lock.release()
                return opened
            }
            control.setUpHoldingExclusiveLock()
            do {
                try lock.downgrade(timeout: remaining())
            } catch {
                opened.journal.discard()
                throw error
            }
            keepShared(opened.journal, lock: lock)
            return opened
        }
    }

    /// After a shared open holding the lock file's `flock` shared: the journal keeps it and locks
    /// the page's mutex from now on (and never sets the page up again), or, on a page without one,
    /// lets it go and takes the `flock` per write.
    private static func keepShared(_ journal: Journal, lock: FileLock) {
        guard let control = journal.control, control.mutex != nil else {
            lock.releaseShared()
            return
        }
        journal.usesMutex = true
        control.mayBeSetUp = false
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

    /// Tells once (``CofferWarning``) when users other than the owner may write the store's
    /// directory: they could plant files at the lock's or a temporary file's name. Coffer
    /// refuses to follow or write such files, but cannot stop a rename there.
    static func warnIfDirectoryIsShared(of path: String, fs: any FileSystem) {
        let directory = DurableIO.parentDirectory(of: path)
        if let status = try? fs.stat(directory), status.isDirectory, status.mode & 0o022 != 0 {
            CofferWarning.warn(
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
                CofferWarning.warn(
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

    static func openLocked(
        path: String, options: JournalOptions, fs: any FileSystem, lock: FileLock,
        mapping premapped: Result<(any SharedMapping)?, any Error>?,
        create: CreateMode, initialHeaderArea: [UInt8]?, recovery: JournalRecovery
    ) throws -> (journal: Journal, records: JournalRecords) {
        do {
            // Without a writable lock file there is no control page either: such a journal only
            // reads, the slow way (a stat per refresh), and every write is refused.
            var readOnly = lock.readOnlyReason
            var control: JournalControl?
            if readOnly == nil {
                do {
                    if let lockFile = lock.identity,
                        let mapping = try (premapped ?? Result { try lock.mapShared(length: JournalControl.length) }).get()
                    {
                        control = JournalControl(mapping: mapping, lockFile: lockFile)
                    }
                } catch let error as CofferError where FileLock.allowsReadOnly(error) {
                    readOnly = error  // a full disk: the page cannot be written
                }
            }
            if readOnly == nil { try removeStaleTemporaryFiles(of: path, fs: fs) }
            let existing = try fs.stat(path)
            // A page set up now for a store that already exists may have lost watchers' counts.
            control?.createdWithStore = existing == nil
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
                CofferWarning.warn(
                    CofferWarning(
                        .readOnlyWithoutLock,
                        "opened read-only: \(readOnlyText(readOnly!, path: path)); reads work, writes are refused",
                        path: path))
            }
            var owner: Journal?  // once it exists, it owns the descriptor (and may have replaced it)
            // An existing store whose lock file's page is not set up there: the lock file may have
            // been made since others opened the store (the old one removed or replaced).
            // Or a page set up other than by the store's creator (word 8): a read-only opener may
            // have set up a new lock file's page without marking (it writes nothing).
            let lockFileIsNew = existing != nil && readOnly == nil && control.map { !$0.isSetUp || $0.isOlder } == true
            do {
                // First, before this opener reads the file: a process that opened the store under
                // another lock file sees the mark before it could append anything this opener's
                // view (its scan, its torn-tail wipe, its first append) would miss.
                if lockFileIsNew { try setHeaderFlags(lockFileMadeAgainFlag, fd: fd, fs: fs, path: path, options: options) }
                let status = try fs.fstat(fd)
                let image = try readImage(fd, size: status.size, fs: fs, path: path)
                let header = try parseFileHeader(
                    Array(image.prefix(fileHeaderSize + options.headerAreaSize)), options: options, path: path)
                let scan = image.withUnsafeBytes {
                    scanFrames(
                        $0, from: header.dataStart, maxPayload: options.maxPayload, salvage: recovery == .salvage,
                        lenientTail: header.coalescedWriters)
                }
                let records = JournalRecords(bytes: image, frames: scan.frames)
                var effective = options
                effective.headerAreaSize = header.headerArea.count
                let journal = Journal(
                    path: path, options: effective, fs: fs, lock: lock, control: control, fd: fd, identity: status,
                    headerArea: header.headerArea, dataEnd: Int64(scan.end), allocatedSize: Int64(image.count),
                    coalescedWriters: header.coalescedWriters)
                journal.readOnlyReason = readOnly
                owner = journal
                if let damaged = scan.damage.first {
                    if recovery == .strict || readOnly != nil || scan.exhausted {
                        // An exhausted scan examined only part of what follows: salvaging would
                        // drop intact records unseen, so the file is left for a person to judge.
                        let after =
                            scan.exhausted
                            ? "at least \(scan.intactAfterDamage) follow it (the file holds more damage than Coffer "
                                + "examines automatically, so it was not salvaged)"
                            : "\(scan.intactAfterDamage) follow it"
                        throw CofferError(
                            .corrupted,
                            "record at byte \(damaged) is damaged (it fails its checksum and is not a torn write); "
                                + "\(records.count) intact record(s) precede it and \(after); no record was changed",
                            path: path, offset: Int64(damaged))
                    }
                    let aside = try DurableIO.damagedCopyPath(for: path, fileSystem: fs)
                    try DurableIO.atomicReplace(aside, with: image, fileSystem: fs)
                    try journal.rewriteLocked(payloads: records.map(\.payload), headerArea: nil)
                    CofferWarning.warn(
                        CofferWarning(
                            .salvaged,
                            "salvaged a damaged store: kept \(records.count) intact record(s) and dropped the "
                                + "damaged ones (the first at byte \(damaged)); the damaged file is kept at \(aside)",
                            path: path))
                    let reread = try journal.readAllLocked()
                    journal.settleControl()
                    return (journal, reread)
                }
                if readOnly != nil {
                    // A torn tail is left as it is (the scan stopped before it); so is the flag.
                    return (journal, records)
                }
                if scan.garbageEnd > scan.end {
                    // A torn tail from a crash mid-append: wipe it so later scans stop at the end.
                    try journal.zero(from: Int64(scan.end), to: Int64(scan.garbageEnd))
                    try fs.fdatasync(fd)
                }
                if options.durability != .immediate && !header.coalescedWriters {
                    try journal.markCoalescedWriters()
                }
                journal.settleControl()
                return (journal, records)
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
    package func refresh() throws -> JournalChanges {
        try refresh(checkingPath: false)
    }

    /// ``refresh()``; with `checkingPath`, the path is checked to still name the file open here
    /// even when the control page vouches for it (a file watcher saw the file removed, replaced
    /// or renamed by something other than Coffer, which the page cannot see).
    @usableFromInline package func refresh(checkingPath: Bool) throws -> JournalChanges {
        try checkOpen()
        if options.exclusive { return JournalChanges(reset: false, records: JournalRecords()) }  // nobody else writes
        if !checkingPath, let control = currentControl {
            // The same file as when this process last looked: at most appends to read.
            if control.dataEnd == dataEnd { return JournalChanges(reset: false, records: JournalRecords()) }
            return JournalChanges(reset: false, records: try readForward(repair: false))
        }
        let before = control?.trustedGeneration
        let changes: JournalChanges
        do {
            changes = try reopenIfReplaced() ?? JournalChanges(reset: false, records: try readForward(repair: false))
        } catch {
            // The path no longer names a readable store (removed by hand, say): every later
            // call checks it again instead of trusting the control page, so it keeps saying so.
            identityCheckedAt = .min
            throw error
        }
        // Learn the generation only if no replacement began while the path was checked.
        if let before, control?.trustedGeneration == before { knownGeneration = before }
        return changes
    }

    /// Bytes of a failed append still to be zeroed (exclusive stores only: see `append`).
    @exclusivity(unchecked) var pendingWipe: Range<Int64>?

    func wipePending() throws {
        guard let range = pendingWipe else { return }
        try zero(from: range.lowerBound, to: range.upperBound)
        pendingWipe = nil
    }

    /// Runs `body` holding the exclusive write lock, after catching up with other processes.
    ///
    /// `body` receives what changed since this process last looked (apply it before deciding
    /// what to write) and may call ``append(_:)``, ``rewrite(payloads:headerArea:)`` and
    /// ``writeHeaderArea(_:)``.
    @usableFromInline package func withWriteLock<T>(_ body: (JournalChanges) throws -> T) throws -> T {
        try checkOpen()
        try checkWritable()
        if options.exclusive {
            // The lock is held since open and nobody else writes: nothing to catch up with.
            try wipePending()
            return try body(JournalChanges(reset: false, records: JournalRecords()))
        }
        var skipped = false
        return try lock.withLock(
            timeout: options.lockTimeout, mutex: storeMutex(),
            // Its holder died holding it, perhaps between two steps nothing marks (a torn tail's
            // wipe, a header rewritten in place): the slow catch-up, as after a crash.
            ownerDied: { knownGeneration = nil },
            unlinkHarmless: {
                skipped = noOtherLockFileMade
                return skipped
            }
        ) {
            // Still the page's mutex: a page that lost its set-up between the look above and
            // the lock is never set up again under it (see ``JournalControl``).
            if usesMutex { _ = try storeMutex() }
            // Not skipped: the lock file was just found linked, for the file open here.
            if !skipped { lockCheckedForFile = true }
            try wipePending()
            let changes: JournalChanges
            if let control = currentControl {
                // Still the same file. Unless someone committed or died mid-append since this
                // process last looked, there is nothing to read, stat or judge.
                if control.isSettled(at: dataEnd) {
                    return try body(JournalChanges(reset: false, records: JournalRecords()))
                }
                changes = JournalChanges(reset: false, records: try readForward(repair: true))
            } else {
                // This may move to another file, which another lock file's process may have made
                // (its opener marked the file current when it opened, perhaps not that one): the
                // skip spoke of the file open now, so check first, before anything changes here.
                if skipped { try lock.checkLinked() }
                changes = try reopenIfReplaced() ?? JournalChanges(reset: false, records: try readForward(repair: true))
                lockCheckedForFile = true  // found linked in this hold, at the lock or just above
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
    package func append(_ payloads: [Data]) throws -> [Int64] {
        try appendPayloads(payloads)
    }

    /// Appends `payloads` as one commit, as ``append(_:)-([Data])``, from byte arrays (no copy
    /// into `Data` first: the vault's sealed records are arrays).
    @discardableResult
    package func append(_ payloads: [[UInt8]]) throws -> [Int64] {
        try appendPayloads(payloads)
    }

    func appendPayloads<Payload: Collection & ContiguousBytes>(_ payloads: [Payload]) throws -> [Int64]
    where Payload.Element == UInt8 {
        var offsets: [Int64] = []
        offsets.reserveCapacity(payloads.count)
        try appendCommit(payloads) { offsets.append($0) }
        return offsets
    }

    /// Appends `payloads` as one commit, as ``append(_:)-([[UInt8]])``, without listing the
    /// offsets (one allocation fewer on a store's write path).
    package func appendCommit(_ payloads: [[UInt8]]) throws {
        try appendCommit(payloads) { _ in }
    }

    /// The frames of one commit are laid out in one buffer, on the stack when small, and written
    /// with one system call. `offset` is told each record's offset.
    private func appendCommit<Payload: Collection & ContiguousBytes>(
        _ payloads: [Payload], offset: (Int64) -> Void
    ) throws where Payload.Element == UInt8 {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard !payloads.isEmpty else { return }
        var total = 0
        for payload in payloads {
            guard !payload.isEmpty, payload.count <= options.maxPayload else {
                throw recordSizeError(payload.count)
            }
            total += payload.count + Journal.frameHeaderSize
        }
        let start = dataEnd
        try withUnsafeTemporaryAllocation(byteCount: total, alignment: 8) { buffer in
            var at = 0
            for (i, payload) in payloads.enumerated() {
                offset(start + Int64(at))
                at += payload.withUnsafeBytes { bytes in
                    Journal.writeFrame(
                        payloadCount: bytes.count, continued: i < payloads.count - 1, continues: i > 0,
                        into: UnsafeMutableRawBufferPointer(rebasing: buffer[at...])
                    ) { $0.copyMemory(from: bytes) }
                }
            }
            try writeCommit(UnsafeRawBufferPointer(buffer))
        }
    }

    /// Appends one record of `count` bytes as one commit, which `fill` writes in place into the
    /// frame (no payload is built first and then copied). Call inside ``withWriteLock(_:)``.
    /// - Returns: the size the record takes in the file, frame header included.
    @discardableResult
    package func appendRecord(count: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Void) throws -> Int {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard count > 0, count <= options.maxPayload else { throw recordSizeError(count) }
        let total = count + Journal.frameHeaderSize
        try withUnsafeTemporaryAllocation(byteCount: total, alignment: 8) { buffer in
            _ = Journal.writeFrame(payloadCount: count, continued: false, continues: false, into: buffer, fill)
            try writeCommit(UnsafeRawBufferPointer(buffer))
        }
        return total
    }

    private func recordSizeError(_ count: Int) -> CofferError {
        CofferError(
            .invalidArgument, "a record must hold 1 to \(options.maxPayload) bytes; this one holds \(count)")
    }

    /// Writes one commit's frames at the data end: the append protocol of the control page,
    /// the wipe of a failed write, and the durability the journal was opened with.
    private func writeCommit(_ frames: UnsafeRawBufferPointer) throws {
        let start = dataEnd
        let needed = start + Int64(frames.count)
        let shared = !options.exclusive
        if shared { control?.beginAppend() }  // left set if this append fails
        let grew = try ensureCapacity(needed)
        do {
            if let tail = mappedTail(covering: needed) {
                let copied = coffer_guarded_append(
                    tail + Int(start), frames.baseAddress, frames.count, tail + Int(allocatedSize))
                if copied == -2 || copied == -3 {
                    // No safe way to store a header here: written, which the mapping sees too.
                    try fs.writeAll(fd, frames, at: start, path: path)
                } else if copied != 0 {
                    // A store faulted past the new end: the blocks there are gone, and with them
                    // perhaps records acknowledged before.
                    throw stopAfterTruncation(size: nil, offset: start)
                } else {
                    mappedCommits &+= 1
                }
            } else {
                try fs.writeAll(fd, frames, at: start, path: path)
            }
        } catch let error as CofferError where error.code == .corrupted && syncFailure != nil {
            throw error
        } catch {
            // Part of the commit may have landed. Wipe it now, so it can never be read as a
            // commit nor judged as damage to the last record.
            pendingWipe = start..<needed
            do {
                try wipePending()
            } catch {
                // The wipe failed too. An exclusive store retries it before its next write
                // (nobody else writes). A shared one must not: once the lock is let go another
                // process judges that tail and may append its own commit over it, which a later
                // blind wipe would erase. Its next writer, this one included, judges the tail
                // under the lock instead (torn: zeroed; otherwise reported as damage), as after
                // a crash at this point.
                if shared { pendingWipe = nil }
            }
            throw error
        }
        dataEnd = needed
        if shared { control?.endAppend(dataEnd: needed) }
        switch options.durability {
        case .immediate:
            try syncData(metadata: grew)
        case .coalesced:
            hasUnsyncedWrites = true
        }
    }

    /// Tells the control page that this journal's store starts (or stops) watching the file for
    /// other writers' changes: while any journal but the writer's own watches, appends are
    /// written, never stored into a mapping, since a file watch sees only writes. Starting
    /// takes the lock (waiting at most the lock timeout), so no writer is between deciding to
    /// store and storing; stopping does not need it.
    package func watch(_ on: Bool) {
        guard on != watching, !closed, !options.exclusive, let control else { return }
        watching = on
        if on {
            // A lock that cannot be had (a writer stuck past the timeout, a replaced lock file)
            // still counts the watch: at worst one append in flight goes unseen by it.
            let counted: Void? = try? lock.withLock(timeout: options.lockTimeout, mutex: storeMutex()) { () throws -> Void in
                if usesMutex { _ = try storeMutex() }
                control.addWatcher()
            }
            if counted == nil {
                // Never setting up a page a mutex may live in without the exclusive lock.
                control.addWatcher(settingUp: !usesMutex)
            }
        } else {
            control.removeWatcher()
        }
    }

    /// The file mapped up to `needed` or beyond, for an append by plain stores, in coalesced mode
    /// (`fdatasync` at the flush writes the pages the stores dirtied as it writes any other),
    /// where the file system allows (``FileSystem/mapForAppends(_:length:path:)``), and, for a
    /// shared journal, while no other journal watches the file (see ``watch(_:)``; other
    /// processes read the appends through the page cache, which the mapping shares). The blocks
    /// are written zeros (``ensureCapacity(_:)``), so a store needs no new block; a file another
    /// program truncates meanwhile is caught (`SIGBUS` in the copy) and reported. A kill can stop
    /// the copy at any instruction, not only between system calls: `coffer_guarded_append`
    /// writes each frame's header last, in one store, so a stopped copy looks torn (a zero
    /// header) by the format's own rule, as a power loss does. Remapped when
    /// the file grows or is replaced (a compaction, here or by another process).
    func mappedTail(covering needed: Int64) -> UnsafeMutableRawPointer? {
        guard options.mapsAppends, options.durability != .immediate, !tailUnavailable else { return nil }
        // An exclusive journal asks too: a process that opened the store before it may still be
        // watching (its writes now wait for the lock, its watch does not).
        guard let control, control.allowsMappedAppends(watchingHere: watching) else { return nil }
        // The mapping reaches past the file's end (64 MiB, or twice what is needed), so the file
        // growing does not mean mapping it again: pages past the end are never touched (appends
        // land below `allocatedSize`, in written blocks), and become the file's as it grows.
        if let place = tailPlace, place.inode == identity.inode, place.device == identity.device,
            Int64(place.length) >= needed, needed <= allocatedSize
        {
            return place.base
        }
        tail = nil
        guard needed <= allocatedSize else { return nil }
        let reserve = (max(2 * needed, Self.mappingReserve) + 4095) / 4096 * 4096
        guard let mapping = fs.mapForAppends(fd, length: Int(reserve), path: path) else {
            tailUnavailable = true
            return nil
        }
        tail = (mapping, identity.device, identity.inode)
        return mapping.base
    }

    /// The least a journal maps for appends (address space only: pages are touched as appended).
    static let mappingReserve: Int64 = 64 << 20

    /// Makes every append durable now (fdatasync). Does nothing when nothing is pending.
    package func flush() throws {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        guard hasUnsyncedWrites else { return }
        try syncData(metadata: false)
    }

    /// Replaces the file with one holding just `payloads` (each its own commit), atomically.
    ///
    /// Call inside ``withWriteLock(_:)``. A crash at any point leaves the old file or the new one.
    /// - Parameter headerArea: a new header area, or `nil` to keep the current one.
    package func rewrite(payloads: [Data], headerArea: [UInt8]? = nil) throws {
        try checkOpen()
        if let syncFailure { throw syncFailure }
        try rewriteLocked(payloads: payloads, headerArea: headerArea)
    }

    /// Overwrites the header area in place and makes it durable. Call inside ``withWriteLock(_:)``.
    ///
    /// A crash during this write can leave the area torn: owners keep two copies with
    /// checksums and sequence numbers and write one at a time (the vault does).
    package func writeHeaderArea(_ bytes: [UInt8], at offset: Int = 0) throws {
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
    package func reloadHeaderArea() throws -> [UInt8] {
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
    package func close() throws {
        guard !closed else { return }
        defer {
            tail = nil
            watch(false)
            fs.close(fd)
            if options.exclusive { lock.release() }
            if usesMutex { lock.releaseShared() }
            closed = true
        }
        if hasUnsyncedWrites { try syncData(metadata: false) }
    }
}
