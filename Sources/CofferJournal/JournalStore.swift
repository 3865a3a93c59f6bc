// The journal-store engine the key-value file and the vault share: one lock over a store's index,
// catching up with other writers, the write lock, the compaction rule, and the file watch that
// tells observers which keys other writers changed.
//
// The read and write paths are `@inlinable` on `@usableFromInline` types, so each store's calls
// are specialised for its index in its own module, as when each store had its own copy: the
// body of an `@inlinable` member of a plain `package` type is not emitted into clients, and the
// unspecialised generic path made a key-value read a quarter slower. `public import` because
// those bodies use CofferCore's types; nothing here is public.
public import CofferCore
public import Synchronization
import CofferRuntime

/// What a store kept in a ``Journal`` holds in memory: the open journal and an index of its
/// live records.
///
/// A store says what its records mean: how they change its index (``apply(records:)``,
/// ``forgetAll()``), how the file is rewritten with only the live records (``rewriteLive()``),
/// and what its observers are told (``change(_:)``). The rest is the engine's, the same for
/// every store: catching up with other writers (``apply(_:)``, ``catchUp(checkingPath:)``), the
/// write lock (``withWriteLock(_:)``), the compaction rule (``compactionIsWorthIt``), the
/// collection of the keys other writers changed (``outside``), and, in ``JournalStore``, the
/// lock over the index and the file watch. The key-value file (`KeyValueFileStrategy`) and the
/// vault (`Vault`, whose index is its `Session`) are built on it.
///
/// Rule: an index is changed only inside its ``JournalStore``'s lock (or, before it is handed
/// to one, by the thread that opened it), like the ``Journal`` it holds.
@usableFromInline package protocol JournalIndex: Sendable {
    /// What names one value of the store: a key, a service and account.
    associatedtype Key: Hashable & Sendable
    /// What observers are told when other writers changed values.
    associatedtype Change: Sendable

    /// The open journal.
    var journal: Journal { get }
    /// The bytes of the file that the live records take, frame headers included: what a
    /// compaction keeps. Everything else between the file's header and its end is superseded.
    var liveBytes: Int { get }
    /// The keys other writers changed since observers were last told. ``apply(records:)`` calls
    /// `outside.note(_:)` for each key a record sets or removes; the engine decides when that
    /// counts.
    var outside: OutsideChanges<Key> { get set }
    /// Set when what other writers did could not be applied and the store must stop: every
    /// read, write and compaction through ``JournalStore/withIndex(_:)`` then throws it. `nil`
    /// by default: a store that goes on.
    var failure: CofferError? { get }

    /// The file was replaced (compacted by another writer): forgets every record, so that those
    /// of the new file, which follow, can be applied from the start.
    mutating func forgetAll() throws
    /// Applies records in order, noting each key they touch through `outside.note(_:)`.
    mutating func apply(records: JournalRecords) throws
    /// Rewrites the file with only the live records. Called holding the journal's write lock,
    /// caught up with the other writers.
    mutating func rewriteLive() throws
    /// What observers are told about `keys` (`nil`: any key may have changed).
    static func change(_ keys: Set<Key>?) -> Change
    /// Catching up with the other writers failed with `error`: returns what to throw (and may
    /// set ``failure``). By default `error` itself.
    mutating func catchUpFailed(_ error: CofferError) -> CofferError
}

extension JournalIndex {
    @inlinable
    package var failure: CofferError? { nil }

    @inlinable
    package mutating func catchUpFailed(_ error: CofferError) -> CofferError { error }
}

/// The compaction rule every journal store follows.
@usableFromInline package enum JournalCompaction: Sendable {
    /// A file is compacted only once more than this many bytes of it are superseded records.
    /// 256 KiB (it was 64 KiB): a value rewritten in a loop compacted its file every ~2,000
    /// writes, each a rewrite with two fsyncs, which was a third of an exclusive coalesced
    /// write's time (BENCHMARKS.md). An open applies at most that much more: ~9,000 small
    /// superseded records, about 2 ms at `keyvalue.open.10k`'s 0.2 µs a record.
    @usableFromInline package static let minimumGarbage = 256 * 1024
}

extension JournalIndex {
    // MARK: - Catching up

    /// Applies what other writers did since this process last looked (``Journal/refresh()``,
    /// or what ``Journal/withWriteLock(_:)`` hands over): after a replaced file, everything is
    /// forgotten first and observers will be told that anything may have changed; otherwise the
    /// keys the records touch are noted for them (while anyone observes).
    @inlinable
    package mutating func apply(_ changes: JournalChanges) throws {
        do {
            if changes.reset {
                try forgetAll()
                outside.noteAll()
            }
            outside.collecting = outside.tracking && !outside.all
            defer { outside.collecting = false }
            try apply(records: changes.records)
        } catch let error as CofferError {
            throw catchUpFailed(error)
        }
    }

    /// Reads and applies what other writers appended since this process last looked, without
    /// taking the write lock; with `checkingPath`, also checks that the path still names the file
    /// open here (see ``Journal/refresh(checkingPath:)``).
    @inlinable @inline(__always)
    package mutating func catchUp(checkingPath: Bool = false) throws {
        let changes = try journal.refresh(checkingPath: checkingPath)
        if !changes.isEmpty { try apply(changes) }
    }

    // MARK: - Writing

    /// Runs `body` holding the journal's write lock, caught up with every other writer: what
    /// `body` reads of the index is what the file holds, and what it appends lands after it.
    @inlinable @inline(__always)
    package mutating func withWriteLock<T>(_ body: (inout Self) throws -> T) throws -> T {
        try journal.withWriteLock { changes in
            if !changes.isEmpty { try apply(changes) }
            return try body(&self)
        }
    }

    // MARK: - Compaction

    /// The compaction rule: more than ``JournalCompaction/minimumGarbage`` bytes of the file are
    /// superseded records, and more than the live records take (so a compaction at least halves
    /// the file, and a store rewrites itself at most once per its own size written).
    @inlinable
    package var compactionIsWorthIt: Bool {
        let garbage = Int(journal.dataEnd - journal.dataStart) - liveBytes
        return garbage > JournalCompaction.minimumGarbage && garbage > liveBytes
    }

    /// Rewrites the file with only the live records now, under the write lock.
    @usableFromInline package mutating func compactNow() throws {
        try withWriteLock { try $0.rewriteLive() }
    }

    /// Compacts when ``compactionIsWorthIt``.
    @inlinable
    package mutating func compactIfWorthIt() throws {
        if compactionIsWorthIt { try compactNow() }
    }

    /// ``compactIfWorthIt()`` after a write that has already landed: a failure (a full disk, say)
    /// must not make the caller believe the write failed, so it is returned as a warning to tell
    /// through ``CofferWarning`` once the store's lock is released, and the file is left as it
    /// was (the next write tries again).
    @inlinable
    package mutating func compactAfterWrite() -> CofferWarning? {
        do {
            try compactIfWorthIt()
            return nil
        } catch {
            let kept = journal.options.durability == .immediate ? "durable" : "kept"
            return CofferWarning(
                .compactionFailed, "compacting after a write failed; the write itself is \(kept): \(error)",
                path: journal.path)
        }
    }
}

/// The keys other writers changed, collected for a store's observers while anyone observes.
@usableFromInline package struct OutsideChanges<Key: Hashable & Sendable>: Sendable {
    /// Whether anyone observes (else nothing is collected).
    @usableFromInline package var tracking: Bool
    /// Set while records of other writers are applied: only then does ``note(_:)`` count (a
    /// store's own writes are not news to its observers).
    @usableFromInline package var collecting = false
    /// The keys noted since observers were last told.
    @usableFromInline package var keys: Set<Key> = []
    /// Anything may have changed: the file was replaced, or the store was reopened.
    @usableFromInline package var all = false

    /// Nothing collected; `tracking` says whether anyone observes.
    package init(tracking: Bool = false) {
        self.tracking = tracking
    }

    /// Notes that a record of another writer set or removed `key`.
    @inlinable
    package mutating func note(_ key: Key) {
        if collecting { keys.insert(key) }
    }

    /// Notes that anything may have changed (while anyone observes).
    @inlinable
    package mutating func noteAll() {
        if tracking { all = true }
    }

    /// What to tell observers, emptied: `.none` for nothing, `.some(nil)` for anything.
    package mutating func take() -> Set<Key>?? {
        guard all || !keys.isEmpty else { return .none }
        defer {
            keys = []
            all = false
        }
        return .some(all ? nil : keys)
    }
}

/// A store kept in a ``Journal``: its index under one lock, and the watch that tells its
/// observers which keys other writers changed.
///
/// The path of a write: ``write(_:)`` takes the lock, then the journal's write lock (catching up
/// with other writers), runs the store's body (which appends one commit and indexes it), applies
/// the compaction rule, releases both, and tells a failed compaction as a warning. A read
/// (``read(_:)``) takes the lock and catches up first, without the write lock.
///
/// The path of an outside change: the first ``observeChanges(_:)`` starts collecting changed
/// keys in the index (``OutsideChanges``) and watches the file's directory (`FileWatcher`:
/// inotify, else polling). When the watcher thread reports the file's name (or anything), the
/// store catches up under its lock — the records other writers appended note their keys, a
/// replaced file notes "anything" — and tells every observer what was collected, from the
/// watcher thread with no lock held. The last observation's end stops the watch and the
/// collecting.
///
/// The index is `nil` while the store is closed (``close()``: a locked vault); calls then throw
/// the owner's error, and observers are told "anything" on each event (readers say why).
@usableFromInline package final class JournalStore<Index: JournalIndex>: Sendable {
    /// The index; `nil` while the store is closed.
    @usableFromInline package let state: Locked<Index?>
    /// The observers, and the directory watch that serves them.
    private let observers = WatchedObservers<Index.Change>()
    /// The file as its owner names it: where the watch looks while the store is closed.
    private let path: String
    private let fileSystem: any FileSystem
    /// What a call on the closed store throws.
    @usableFromInline let closedError: CofferError
    /// The thread running a body under ``state``'s lock (``currentThreadIdentity()``), 0 when
    /// none. Only the holder writes it, and a thread compares it only with itself, so relaxed
    /// loads suffice: a value equal to the caller's identity was written by the caller.
    @usableFromInline let holder = Atomic<UInt>(0)

    /// A store over `index`, which holds the journal at `path` opened and caught up.
    /// - Parameter closedError: what calls throw while the store is closed.
    package init(_ index: Index, path: String, fileSystem: any FileSystem, closedError: CofferError) {
        self.state = Locked(index)
        self.path = path
        self.fileSystem = fileSystem
        self.closedError = closedError
    }

    deinit {
        // Best effort: the data is already in the kernel; this only hastens it to the disk.
        state.withLock { index in try? index?.journal.close() }
    }

    // MARK: - Access

    /// Runs `body` on the index in place, under the lock (never on a copy: that would copy the
    /// index, making every call cost O(keys)).
    /// - Throws: the owner's closed error, the index's ``JournalIndex/failure``, or what `body` throws.
    @inlinable @inline(__always)
    package func withIndex<T>(_ body: (inout Index) throws -> T) throws -> T {
        let me = currentThreadIdentity()
        if holder.load(ordering: .relaxed) == me { throw heldHereError() }
        return try withState(holding: me) { index in
            guard index != nil else { throw closedError }
            if let failure = index!.failure { throw failure }
            return try body(&index!)
        }
    }

    /// Runs `body` on the index, if the store is open, under the lock; `nil` when it is closed.
    @inlinable @inline(__always)
    package func ifOpen<T, E: Error>(_ body: (inout Index) throws(E) -> T) throws(E) -> T? {
        try withState { (index: inout Index?) throws(E) -> T? in
            guard index != nil else { return nil }
            return try body(&index!)
        }
    }

    /// Runs `body` on the state under the lock, noting this thread as its holder. Every use of
    /// the lock goes through here. Called from inside such a body (a store's own `update`
    /// transform, say), it stops the program with a message saying so; the calls that can
    /// throw check ``checkNotHeldHere()`` first and throw instead.
    @inlinable @inline(__always)
    package func withState<T, E: Error>(_ body: (inout Index?) throws(E) -> T) throws(E) -> T {
        let me = currentThreadIdentity()
        precondition(holder.load(ordering: .relaxed) != me, Self.heldHereMessage)
        return try withState(holding: me) { (index: inout Index?) throws(E) -> T in try body(&index) }
    }

    /// ``withState(_:)`` once the caller has checked that `me`, the calling thread, is not the holder.
    @inlinable @inline(__always)
    func withState<T, E: Error>(holding me: UInt, _ body: (inout Index?) throws(E) -> T) throws(E) -> T {
        try state.withLock { (index: inout Index?) throws(E) -> T in
            holder.store(me, ordering: .relaxed)
            defer { holder.store(0, ordering: .relaxed) }
            return try body(&index)
        }
    }

    /// Throws ``CofferError/Code/invalidArgument`` when the calling thread is already inside
    /// this store's lock: a store's methods called from a closure it runs under its lock (the
    /// transform of `update`, a value's `Codable` conformance) would wait on themselves.
    @inlinable @inline(__always)
    package func checkNotHeldHere() throws {
        if holder.load(ordering: .relaxed) == currentThreadIdentity() {
            throw heldHereError()
        }
    }

    @usableFromInline func heldHereError() -> CofferError {
        CofferError(.invalidArgument, Self.heldHereMessage, path: path)
    }

    @usableFromInline static var heldHereMessage: String {
        "this store was called from inside a closure it runs under its own lock (an update's transform, or a "
            + "value's Codable conformance): the store is already in use by this call. Work out the value in the "
            + "closure and let update store it, or make the other call after update returns"
    }

    /// Runs `body` on the index caught up with every other writer (a read).
    @inlinable @inline(__always)
    package func read<T>(_ body: (inout Index) throws -> T) throws -> T {
        try withIndex { index in
            try index.catchUp()
            return try body(&index)
        }
    }

    /// ``read(_:)`` if no one holds the index (a write waiting for `<file>.lock` or in its
    /// fsync does): `nil`, at once, when someone does. For a caller that must not wait, such as
    /// an async read on a thread of the cooperative pool (it then waits elsewhere).
    @inlinable
    package func readIfAvailable<T>(_ body: (inout Index) throws -> T) throws -> T? {
        try checkNotHeldHere()
        let me = currentThreadIdentity()
        let outcome: Result<T, any Error>? = state.withLockIfAvailable { index in
            holder.store(me, ordering: .relaxed)
            defer { holder.store(0, ordering: .relaxed) }
            do {
                guard index != nil else { throw closedError }
                if let failure = index!.failure { throw failure }
                try index!.catchUp()
                return .success(try body(&index!))
            } catch {
                return .failure(error)
            }
        }
        return try outcome?.get()
    }

    /// Runs `body` holding the journal's write lock, caught up with every other writer, then
    /// compacts when the rule says so (a failure there is told through ``CofferWarning``, after
    /// the lock: the write itself stands). `body` appends one commit and indexes it.
    @inlinable @inline(__always)
    package func write<T>(_ body: (inout Index) throws -> T) throws -> T {
        let (result, warning) = try withIndex { index in
            let result = try index.withWriteLock(body)
            return (result, index.compactAfterWrite())
        }
        if let warning { CofferWarning.warn(warning) }
        return result
    }

    /// Rewrites the file with only the live records, whatever the rule says.
    package func compact() throws {
        try withIndex { try $0.compactNow() }
    }

    // MARK: - Opening and closing

    /// Whether the store is closed.
    package var isClosed: Bool { withState { $0 == nil } }

    /// Opens the store again with `index` (a vault unlocked): while anyone observes, observers
    /// are told that anything may have changed (from the watcher thread, never from this call).
    package func open(_ index: Index) {
        var index = index
        let watch = observers.watch
        if watch != nil {
            index.outside = OutsideChanges(tracking: true)
            index.outside.noteAll()
            index.journal.watch(true)
        }
        withState { $0 = index }
        if let watch { FileWatcher.shared.schedule(watch) }
    }

    /// Closes the store (a vault locked) and returns its index, for the owner to close the
    /// journal outside the lock.
    package func close() -> Index? {
        withState { index in
            defer { index = nil }
            return index
        }
    }

    // MARK: - Changes from elsewhere

    /// Starts telling `handler` what other writers (other processes, other instances on this
    /// file) change. The file's directory is watched while at least one observation is alive.
    package func observeChanges(_ handler: @escaping @Sendable (Index.Change) -> Void) -> StoreObservation {
        observers.add(handler) {
            let open = withState { index -> String? in
                index?.outside = OutsideChanges(tracking: true)
                index?.journal.watch(true)
                return index?.journal.path
            }
            let file = open ?? (try? fileSystem.resolve(path)) ?? path
            let name = DurableIO.lastComponent(of: file)
            return FileWatcher.shared.watch(directory: DurableIO.parentDirectory(of: file)) { [weak self] names in
                // Other files of the directory (other stores, temporary files) are not this one's.
                if let names, !names.isEmpty, !names.contains(name) { return }
                self?.deliverOutsideChanges(checkingPath: names.map { !$0.isEmpty } ?? true)
            }
        } stopped: { [weak self] in
            self?.withState { index in
                index?.outside = OutsideChanges()
                index?.journal.watch(false)
            }
        }
    }

    /// Drops every observer and stops the watch (a graceful shutdown).
    package func stopWatching() { observers.stopAll() }

    /// Catches up with the file and tells the observers what other writers changed.
    private func deliverOutsideChanges(checkingPath: Bool) {
        let change: Index.Change?
        do {
            change = try withState { index -> Index.Change? in
                // Closed: nothing can be read, and every reader will say so.
                guard index != nil else { return Index.change(nil) }
                try index!.catchUp(checkingPath: checkingPath)
                return index!.outside.take().map { Index.change($0) }
            }
        } catch {
            // The file was removed or damaged: every observer rereads, and reports the error.
            change = Index.change(nil)
        }
        if let change { observers.notify(change) }
    }
}
