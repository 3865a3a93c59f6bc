// The control page shared through the lock file: how processes see each other's writes.
import CofferCore
import CSharedWord
import Foundation

/// The control page: the first 4 KiB of a journal's lock file, mapped shared by every process
/// that opens the journal, so that "has anyone written since I last looked?" is two loads from
/// memory instead of system calls.
///
/// Without it every shared-mode write had to `stat` the journal's path (to notice a compaction
/// by another process, which renames a new file over the old) and read past its last known
/// frame (to catch up with other processes' appends). Besides costing two system calls, the
/// `stat` makes the next write slower to flush on Linux ≥ 6.13: querying a file's ctime makes
/// its next modification take a fine-grained timestamp, so every write dirties the inode, and
/// every `fdatasync` carries it (measured in BENCHMARKS.md, `keyvalue.write.durable`).
///
/// Layout (native-endian 64-bit words; the page never leaves the machine, and a page in another
/// byte order fails the magic and is reset):
///
/// | word | meaning |
/// |---|---|
/// | 0 | magic `COFFERLK` (stored last when the page is set up) |
/// | 1 | layout version, 4 |
/// | 2 | generation: odd while the page cannot be trusted (a file is being replaced, an exclusive opener holds the store, or either died doing so); even and unchanged while the journal file stays the same file |
/// | 3 | the journal's data end after the last committed append |
/// | 4 | 1 from just before an append's first write until the data end is stored |
/// | 5, 6 | device and inode of the journal file the page was last settled for |
/// | 7 | how many open journals, in every process, watch the file for other writers' changes |
/// | 8 | nonzero once the page was set up other than with its store (a page of version 1, whose processes watch without counting; a page zeroed, garbled or lost while the store existed): counts may be missing, so nobody maps |
/// | 9, 10 | device and inode of the lock file the page was set up in: a page copied into another lock file (a restored backup, `cp` then `mv` over the path) is not set up there |
/// | 11 | 1 when bytes 128–191 hold the store's mutex, set up with the page |
/// | 12, 13 | the boot the page was set up in (`bootID`): a page of an earlier boot is not set up |
///
/// Bytes 128–191 hold the store lock of every journal open in shared mode: a robust,
/// process-shared `pthread` mutex (Linux). Locking and unlocking it are two atomic instructions
/// when nobody waits, where the two `flock` calls it replaces were two system calls and most of
/// a shared write's kernel time. It lives beside `flock`, which still does what a mutex in a
/// page cannot:
/// - A journal that locks the mutex holds the lock file's `flock` *shared* for as long as it is
///   open. Whoever takes the `flock` exclusively — an exclusive opener, a process of a Coffer
///   before the mutex (layout 3), an opener setting the page up — therefore never runs beside a
///   journal using the mutex, and none can start while one holds it: the two kinds exclude each
///   other, and each kind excludes its own. (So an exclusive opener now waits until no journal
///   has the store open in shared mode, then fails with `busy`, rather than taking the store
///   from between their writes.)
/// - The mutex is set up (initialised, word 11) only with the page, under the exclusive `flock`,
///   when no journal can hold or wait for it. A journal that locks the mutex never sets the page
///   up (``mayBeSetUp``): one that finds it not set up while it is open (it would reset a mutex
///   others may hold) says the lock file was changed under it instead, before locking and again
///   holding the mutex.
/// - A process that dies holding the mutex leaves it to the next locker (`EOWNERDEAD`), which
///   forgets the generation it remembers and catches up the slow way, as after a process died
///   holding the `flock`. A page written back while a writer held the mutex and read again after
///   a crash or power loss is of another boot (words 12, 13), so not set up.
/// - A journal without a writable lock file (a read-only mount) still takes the `flock` shared
///   to open, which no longer waits out a writer: it reads an append in progress as the torn
///   tail it would be after a crash, and leaves it.
///
/// The protocol, all under the store lock (the mutex, or the `flock` for journals without it)
/// unless noted:
/// - A writer whose remembered generation, data end and file equal words 2, 3, 5 and 6, with
///   word 4 clear, skips the catch-up: nobody committed, compacted or crashed mid-append since
///   it last looked, and nobody has found a different file at the path since.
///   When only the data end differs it reads forward (no `stat`); otherwise it catches up the
///   slow way (`stat`, read forward, judge a torn tail). Then it *settles* the page: an odd
///   generation becomes even, words 3, 5 and 6 its data end and file, word 4 clear.
/// - An append sets word 4, writes, stores the new data end in word 3 and clears word 4. A
///   failed append leaves word 4 set, so the next writer judges the tail.
/// - Replacing the file (compaction, salvage, creation) makes the generation odd first, renames,
///   then settles it (even again). A process that dies in between leaves it odd.
/// - An exclusive opener makes the generation odd and leaves it so: it writes without updating
///   the page, and every shared process must reread the file once after it.
/// - A reader without the lock trusts the page only when the generation is even and equal to
///   the one it remembers. It learns a new generation only when the generation is even and
///   unchanged across its `stat` (a seqlock), so it never pairs a generation with a file it
///   did not see under that generation.
///
/// - A journal whose store starts watching for other writers' changes (a file watch: inotify
///   reports a `write`, not a store into a mapping) adds 1 to word 7 under the lock, and
///   subtracts it when it stops or closes. A shared writer appends by storing into a mapping of
///   the file only while no journal but itself watches; otherwise it writes, so every watch
///   sees the append. A process that dies watching leaves the count raised: writers then write,
///   as before mappings, for as long as the lock file lives (slower, never wrong). A page set
///   up other than by the opener that creates the store — a page of version 1 (whose processes
///   never count their watches), one zeroed or garbled while the store is in use, a lock file
///   removed and made again, a page lost to a power loss — sets word 8, which keeps every
///   writer writing from then on: the counts may be missing.
///
/// A page whose magic or version is wrong (a new lock file, garbage, another byte order), or
/// that names another lock file (words 9 and 10: a copy), is set up again with a random even
/// generation, which no process remembers.
final class JournalControl: @unchecked Sendable {
    /// Bytes mapped: one page.
    static let length = 4096
    /// "COFFERLK" read as a little-endian word.
    static let magic: UInt64 = 0x4B4C_5245_4646_4F43
    /// 2: word 7 (watchers) added. 3: words 9 and 10 (the lock file's own identity). 4: the
    /// mutex (word 11, bytes 128–191). A page of an earlier version is set up again, so every
    /// process on a store must run one version, or its watches could miss appends; a process of
    /// version 3 and one of 4 exclude each other by `flock` (one waits, then fails with `busy`).
    static let version: UInt64 = 4
    /// Where the mutex starts in the page.
    static let mutexOffset = 128
    /// Whether this platform has robust process-shared mutexes (Linux).
    static let mutexSupported = coffer_shared_mutex_size() > 0 && bootID != nil

    /// This boot of the machine (`/proc/sys/kernel/random/boot_id`, the same in every container),
    /// kept in words 12 and 13: the page is a page of a file, which the kernel may write back
    /// while a writer holds the mutex, so after a crash or power loss it can come back from the
    /// disk locked by a thread that no longer exists (no `EOWNERDEAD`: the kernel marks only the
    /// mutexes of threads that die while it runs). A page of another boot is not set up.
    /// `nil` where it cannot be read: no mutex then.
    static let bootID: (UInt64, UInt64)? = {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let digits = text.filter(\.isHexDigit)
        guard digits.count == 32, let high = UInt64(digits.prefix(16), radix: 16),
            let low = UInt64(digits.suffix(16), radix: 16)
        else { return nil }
        return (high, low)
    }()

    /// Whether this journal may set the page up when it finds it not set up: not a journal that
    /// locks the mutex (see the type's notes), whose writes throw instead.
    var mayBeSetUp = true

    private let mapping: any SharedMapping
    /// `mapping.base`, kept: the page is read a dozen times per write, and each read through the
    /// existential was a call.
    private let base: UnsafeMutableRawPointer
    /// The lock file's device and inode (words 9 and 10 of a page set up in it).
    private let lockFile: (device: UInt64, inode: UInt64)
    /// ``bootID`` (zeros where it cannot be read), kept: the page is checked several times per
    /// write, and each read of the static was a `swift_once` call.
    private let boot: (UInt64, UInt64)

    /// Whether this page belongs to a store being created by this opener: its first set-up loses
    /// no watcher's count. Any other set-up (a page zeroed or garbled while the store is in
    /// use, a lock file removed and made again, a power loss) may have lost counts, so it sets
    /// word 8 and no writer stores into a mapping for the life of the lock file.
    var createdWithStore = false

    init(mapping: any SharedMapping, lockFile: (device: UInt64, inode: UInt64)) {
        precondition(mapping.length >= Self.length)
        self.mapping = mapping
        self.base = mapping.base
        self.lockFile = lockFile
        self.boot = Self.bootID ?? (0, 0)
    }

    private func load(_ word: Int) -> UInt64 { coffer_shared_load(base + word * 8) }
    private func store(_ word: Int, _ value: UInt64) { coffer_shared_store(base + word * 8, value) }

    /// Whether the page was set up, by this version, in this lock file. An opener of an existing
    /// store that finds it not set up marks the journal file (header flag bit 1, `Journal.lockFileMadeAgainFlag`):
    /// the lock file may be one made since other processes opened the store.
    ///
    /// A page whose word 11 says it holds a mutex must hold one as set up here (its kind, robust
    /// and process-shared): the bytes are a file's, and a lock file cut short and grown again
    /// with zeros, or crafted, would otherwise hand glibc a mutex that is not shared between
    /// processes, or one it aborts on.
    var isSetUp: Bool {
        load(0) == Self.magic && load(1) == Self.version && load(9) == lockFile.device && load(10) == lockFile.inode
            && load(12) == boot.0 && load(13) == boot.1
            && (load(11) != 1 || coffer_shared_mutex_is_valid(base + Self.mutexOffset) == 1)
    }

    /// The generation a reader may trust, or `nil` while the page is not set up or the
    /// generation is odd.
    var trustedGeneration: UInt64? {
        guard isSetUp else { return nil }
        let generation = load(2)
        return generation & 1 == 0 ? generation : nil
    }

    /// The data end the last committed append stored.
    var dataEnd: Int64 { Int64(bitPattern: load(3)) }

    /// Whether the page was last settled for `file` (the process's open journal file). A process
    /// that settles the page after finding another file at the path (replaced by hand, or it
    /// opened after that) thereby tells every process still on the old file to look.
    func describes(_ file: FileStatus) -> Bool {
        load(5) == file.device && load(6) == file.inode
    }

    /// Whether the page still vouches for `file` as of `generation`: nobody replaced the file
    /// or began to, so at most appends can be new.
    func isCurrent(generation: UInt64, file: FileStatus) -> Bool {
        trustedGeneration == generation && describes(file)
    }

    /// Whether the last append ended at `dataEnd` and none is under way: with ``isCurrent``, a
    /// writer holding the lock may skip catching up (see the type's protocol).
    func isSettled(at dataEnd: Int64) -> Bool {
        load(4) == 0 && self.dataEnd == dataEnd
    }

    /// Under the lock, after catching up with `file`: makes the page trustworthy again and
    /// returns the generation to remember.
    func settle(dataEnd: Int64, file: FileStatus) -> UInt64 {
        setUpIfNeeded()
        var generation = load(2)
        // Wrapping: a page may hold anything (garbage, a hand-edited page), and an odd
        // generation of 2⁶⁴ − 1 must become 0, not trap.
        if generation & 1 == 1 { generation &+= 1 }
        store(2, generation)
        store(3, UInt64(bitPattern: dataEnd))
        store(4, 0)
        store(5, file.device)
        store(6, file.inode)
        return generation
    }

    /// Under the lock: no process may trust the page until it is settled again (before a file
    /// is replaced, and for the life of an exclusive opener).
    func distrust() {
        setUpIfNeeded()
        let generation = load(2)
        if generation & 1 == 0 { store(2, generation + 1) }
    }

    /// A page with the wrong magic or version starts over: a random even generation (which no
    /// process remembers), the magic stored last.
    private func setUpIfNeeded() {
        guard !isSetUp, mayBeSetUp else { return }
        // Version 1's processes watch without counting (word 7 is unknown to them), and a page
        // set up again may have lost this version's counts: see `createdWithStore`.
        if !createdWithStore || (load(0) == Self.magic && load(1) < Self.version) { store(8, 1) }
        createdWithStore = false
        // Word 7 is kept: journals of this version that watch stay counted (a new lock file
        // holds zeros; a garbled page's count only keeps writers writing).
        for word in 0..<7 { store(word, 0) }
        // Only ever here under the exclusive `flock` or by a holder of the `flock` alone (a
        // journal without the mutex), never while a journal may hold or wait for the mutex: a
        // journal using it refuses to write once the page is not set up (see the type's notes).
        store(11, Self.mutexSupported && coffer_shared_mutex_init(base + Self.mutexOffset) == 0 ? 1 : 0)
        store(12, boot.0)
        store(13, boot.1)
        store(9, lockFile.device)
        store(10, lockFile.inode)
        store(1, Self.version)
        store(2, UInt64.random(in: 0...UInt64.max) & ~1)
        store(0, Self.magic)
    }

    /// The store's mutex, when the page is set up with one (word 11).
    var mutex: UnsafeMutableRawPointer? {
        isSetUp && load(11) == 1 ? base + Self.mutexOffset : nil
    }

    /// Under the exclusive `flock` (nobody can hold or wait for the mutex): sets the page up if it
    /// is not, with its mutex.
    func setUpHoldingExclusiveLock() {
        setUpIfNeeded()
    }

    /// Whether the page was ever set up other than by its store's creator (word 8).
    var isOlder: Bool { isSetUp && load(8) != 0 }
    /// How many journals watch the file (word 7); 0 on a page not set up.
    var watchers: UInt64 { isSetUp ? load(7) : 0 }

    /// Whether a shared writer may store its appends into a mapping: the page is this version's,
    /// no process of version 1 was seen on it (word 8), and no journal watches the file but
    /// (when `watchingHere`) the writer's own.
    func allowsMappedAppends(watchingHere: Bool) -> Bool {
        isSetUp && load(8) == 0 && load(7) == (watchingHere ? 1 : 0)
    }

    /// Under the lock: one more journal watches the file. Without `settingUp` (not holding the
    /// lock, where the page may hold a mutex), a page not set up is left so, and not counted in.
    func addWatcher(settingUp: Bool = true) {
        if settingUp { setUpIfNeeded() } else if !isSetUp { return }
        coffer_shared_increment(base + 7 * 8)
    }

    /// One journal fewer watches the file (never below 0: the page may have been set up again).
    func removeWatcher() {
        guard isSetUp else { return }
        coffer_shared_decrement(base + 7 * 8)
    }

    /// Under the lock, before an append's first write.
    func beginAppend() { store(4, 1) }

    /// Under the lock, after an append's last write succeeded.
    func endAppend(dataEnd: Int64) {
        store(3, UInt64(bitPattern: dataEnd))
        store(4, 0)
    }
}
