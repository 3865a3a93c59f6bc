public import CofferCore
import CofferRuntime
import CofferJournal
public import Foundation

/// Many keys in one file per suite: the UserDefaults of Coffer, built on the crash-safe journal.
///
/// Each suite is a journal file `<directory>/<suite>.cofferkv`. A write appends one record, so
/// its cost grows with the size of the value, not of the suite; reads are served from an
/// in-memory index. When more than half of the file is superseded records the suite is
/// compacted (rewritten and renamed into place).
///
/// Durability (see ``Durability``): `.coalesced` (the default) — when `save` returns, the write
/// is in the kernel and survives a crash of the process; it reaches the disk within the window
/// or at ``flush()``. `.immediate` — when `save` returns it survives power loss.
///
/// Rule: open one instance per suite per process and share it (it is thread-safe). Several
/// processes may use one suite: writes are serialised by a lock file, and each process sees the
/// others' writes on its next call.
///
/// ```swift
/// let prefs = try KeyValueFileStrategy(directory: dir, suite: "preferences")
/// try prefs.set("dark", for: "theme")
/// ```
public final class KeyValueFileStrategy: BatchPersistenceStrategy, CompareAndSwapPersistenceStrategy,
    ChangeObservingPersistenceStrategy
{
    /// The suite's file.
    public let path: String
    /// The durability of each write.
    public let durability: Durability
    /// The journal's application number for key-value suites.
    static let application: UInt16 = 1

    /// The suite in memory: the journal and the index of its live values (see ``JournalIndex``,
    /// the engine the vault shares).
    struct Suite: JournalIndex {
        var journal: Journal
        /// The live values: where each lies in the records read or written (``SuiteIndex``).
        var index = SuiteIndex()
        var liveBytes = 0
        var flushScheduled = false
        var outside = OutsideChanges<ExactKey>()
        /// Set when what other writers did could not be applied (a record that passes its
        /// checksums but is no key-value record): the catch-up had moved past the records after
        /// it, so the index no longer describes the file, and the suite stops rather than answer
        /// from it (or compact the file down to it).
        var failure: CofferError?

        init(journal: Journal) {
            self.journal = journal
        }

        mutating func catchUpFailed(_ error: CofferError) -> CofferError {
            var error = error
            error.message += " — this suite stops here: open it again to read the file anew"
            failure = error
            return error
        }

        mutating func forgetAll() {
            index.removeAll()
            liveBytes = 0
        }

        mutating func apply(records: JournalRecords) throws {
            guard !records.isEmpty else { return }
            // At most one new key per record: grow the table once, not by doubling along the way.
            index.reserveCapacity(index.count + records.count)
            try records.withPayloads { bytes, frames in
                // The records are copied once, from the first payload to the end of the last, into
                // a segment of the index: names and values stay where they are in it.
                let first = frames[0].start
                let last = frames[frames.count - 1]
                let segment = index.addSegment(
                    copying: UnsafeRawBufferPointer(rebasing: bytes[first..<(last.start + last.count)]))
                defer {
                    index.releaseIfUnused(segment)
                    index.compactSegmentsIfWorthIt()
                }
                let base = UnsafeRawPointer(index.base(of: segment))
                for frame in frames {
                    let offset = frame.start - first
                    let payload = UnsafeRawBufferPointer(start: base + offset, count: frame.count)
                    guard let record = KeyValueFileStrategy.parse(payload) else { throw invalidLayout(at: frame.offset) }
                    let name = UnsafeRawBufferPointer(rebasing: payload[record.name])
                    if outside.collecting { outside.note(ExactKey(String(decoding: name, as: UTF8.self))) }
                    if record.isSet {
                        let valueCount = payload.count - record.name.upperBound
                        let old = index.set(
                            segment: segment, offset: offset + record.name.lowerBound, nameCount: name.count,
                            valueCount: valueCount)
                        countLive(keyCount: name.count, valueCount: valueCount, replacing: old)
                    } else {
                        countLive(keyCount: name.count, valueCount: nil, replacing: index.remove(name))
                    }
                }
            }
        }

        private func invalidLayout(at offset: Int64) -> CofferError {
            CofferError(.corrupted, "a record has a valid checksum but an invalid layout", path: journal.path, offset: offset)
        }

        mutating func rewriteLive() throws {
            var payloads: [Data] = []
            payloads.reserveCapacity(index.count)
            index.forEach { name, value in
                var payload = Data(count: KeyValueFileStrategy.recordSize(keyCount: name.count, valueCount: value.count))
                payload.withUnsafeMutableBytes {
                    KeyValueFileStrategy.encode(key: name.assumingMemoryBound(to: UInt8.self), value: Optional(value), into: $0)
                }
                payloads.append(payload)
            }
            try journal.rewrite(payloads: payloads)
        }

        static func change(_ keys: Set<ExactKey>?) -> StoreChange {
            StoreChange(keys: keys.map { Set($0.map(\.string)) })
        }

        /// Whether a write just made should schedule the flush of a coalesced window (the first
        /// unsynced write since the last flush does; the flag is then set).
        mutating func needsFlushScheduled(_ durability: Durability) -> Bool {
            guard case .coalesced = durability, journal.hasUnsyncedWrites, !flushScheduled else { return false }
            flushScheduled = true
            return true
        }

        /// Records a set (`value`) or a remove (`nil`) of `key`. ``liveBytes`` counts each live
        /// record at the size Coffer writes it (what a compaction keeps; a record read from the
        /// file is that size unless something else wrote its name's length in more bytes).
        mutating func indexRecord(key: String, value: Data?) {
            // One hash and probe per record (set and remove return the size of what was there).
            let old = if let value { index.set(key, value) } else { index.remove(key) }
            countLive(keyCount: key.utf8.count, valueCount: value?.count, replacing: old)
            index.compactSegmentsIfWorthIt()
        }

        /// Counts in ``liveBytes`` a record of `key` setting a value of `valueCount` bytes (`nil`:
        /// a remove) that replaced one of `old` bytes (`nil`: none).
        private mutating func countLive(keyCount: Int, valueCount: Int?, replacing old: Int?) {
            if let valueCount { liveBytes += Self.frameSize(keyCount: keyCount, valueCount: valueCount) }
            if let old { liveBytes -= Self.frameSize(keyCount: keyCount, valueCount: old) }
        }

        /// The bytes `key`'s live record takes in the file, frame header included, as Coffer
        /// writes it; `nil` when `key` has no value.
        func recordSize(of key: ExactKey) -> Int? {
            index.valueCount(for: key.string).map { Self.frameSize(keyCount: key.string.utf8.count, valueCount: $0) }
        }

        private static func frameSize(keyCount: Int, valueCount: Int) -> Int {
            Journal.frameHeaderSize + KeyValueFileStrategy.recordSize(keyCount: keyCount, valueCount: valueCount)
        }
    }

    /// The suite under its lock, with its observers: the journal-store engine.
    let store: JournalStore<Suite>

    /// Opens (creating it, and its directory `0700`, if needed) the suite `suite` in `directory`.
    ///
    /// - Parameters:
    ///   - exclusive: this process is the suite's only user, as long as the instance lives: the
    ///     lock is held from open to deinit, so a write is one system call in coalesced mode
    ///     (MMKV's single-process mode). Any other opener waits `lockTimeout`, then fails with
    ///     ``CofferError/Code/busy``; so does this one while another instance or process has the
    ///     suite open. Off by default: several processes may share a suite.
    ///   - recovery: `.strict` (the default) refuses to open a damaged file and says where the
    ///     damage is; `.salvage` keeps every intact record and sets the damaged file aside.
    /// - Throws: ``CofferError`` — ``CofferError/Code/corrupted`` for damage,
    ///   ``CofferError/Code/busy`` when another process holds the lock, ``CofferError/Code/io``.
    public convenience init(
        directory: URL, suite: String = "standard", durability: Durability = .coalesced,
        lockTimeout: Duration = CofferContext.defaultLockTimeout, exclusive: Bool = false, recovery: JournalRecovery = .strict
    ) throws {
        try self.init(
            directory: directory, suite: suite, durability: durability, lockTimeout: lockTimeout, exclusive: exclusive,
            recovery: recovery, fileSystem: LiveFileSystem())
    }

    /// Opens the suite through `fileSystem` (a test's, to inject faults); see
    /// ``init(directory:suite:durability:lockTimeout:exclusive:recovery:)``.
    package init(
        directory: URL, suite: String = "standard", durability: Durability = .coalesced,
        lockTimeout: Duration = CofferContext.defaultLockTimeout, exclusive: Bool = false, recovery: JournalRecovery = .strict,
        fileSystem: any FileSystem
    ) throws {
        guard !suite.isEmpty, !suite.contains("/"), suite != ".", suite != "..", !suite.contains("\0") else {
            throw CofferError(.invalidArgument, "a suite name must be a non-empty file name without '/'")
        }
        try DurableIO.ensureDirectory(directory.path, fileSystem: fileSystem)
        self.path = directory.appendingPathComponent(suite + ".cofferkv").path
        self.durability = durability
        var options = JournalOptions(
            application: Self.application, durability: durability, lockTimeout: lockTimeout)
        options.exclusive = exclusive
        let (journal, records): (Journal, JournalRecords)
        do {
            (journal, records) = try Journal.open(
                path: path, options: options, fileSystem: fileSystem, create: .openOrCreate, recovery: recovery)
        } catch var error as CofferError where error.code == .corrupted && error.offset != nil {
            error.message += " — open with `recovery: .salvage` to keep every intact record (the damaged file is kept"
                + " aside as <file>.damaged-<time>)"
            throw error
        }
        var suite = Suite(journal: journal)
        try suite.apply(records: records)
        self.store = JournalStore(
            suite, path: path, fileSystem: fileSystem,
            closedError: CofferError(.closed, "the key-value suite is closed", path: path))
    }

    public func load(_ key: String) throws -> Data? {
        try store.read { $0.index.value(for: key) }
    }

    public func save(_ data: Data, for key: String) throws {
        try commitOne(key, data)
    }

    public func remove(_ key: String) throws {
        try commitOne(key, nil)
    }

    public func keys() throws -> [String] {
        try store.read { $0.index.keys }
    }

    /// Applies every change as one commit (one append, at most one fsync): after a crash all of
    /// them are present or none is.
    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        guard !changes.isEmpty else { return }
        try commit { _ in changes }
    }

    /// Reads, transforms and writes one value atomically with respect to every process: the
    /// store's lock is held from the read to the write, so concurrent increments are never lost.
    ///
    /// ```swift
    /// try store.update("launches") { (count: Int?) in (count ?? 0) + 1 }
    /// ```
    /// Returning `nil` removes the key. `transform` runs under the lock: a call to this store
    /// from inside it throws ``CofferError/Code/invalidArgument`` saying so (and the update, if
    /// the error is rethrown, writes nothing); `statistics`, which cannot throw, stops the
    /// process with that message.
    public func update<T: Codable>(_ key: String, _ transform: (T?) throws -> T?) throws {
        try commit { index in
            let current = try index.value(for: key).map {
                try ValueCodec.decode(T.self, from: $0, as: valueEncoding, source: "key \"\(key)\" of \(path)")
            }
            let next = try transform(current)
            return [(key, try next.map { try ValueCodec.encode($0, as: valueEncoding) })]
        }
    }

    /// Stores `new` only if `key` holds exactly `expected`, under the store's lock and after
    /// catching up with every other process.
    public func compareAndSwap(_ key: String, expected: Data?, new: Data?) throws -> Bool {
        var swapped = false
        try commit { index in
            guard index.value(for: key) == expected else { return [] }
            swapped = true
            return expected == new ? [] : [(key, new)]
        }
        return swapped
    }

    /// One set or remove: its record is encoded straight into the frame the journal writes, and
    /// the index keeps the caller's value (the write path of a property's setter).
    private func commitOne(_ key: String, _ value: Data?) throws {
        var utf8 = key
        let scheduleFlush = try utf8.withUTF8 { keyBytes in
            let count = Self.recordSize(keyCount: keyBytes.count, valueCount: value?.count)
            return try store.write { suite -> Bool in
                _ = try suite.journal.appendRecord(count: count) {
                    Self.encode(key: keyBytes, value: value, into: $0)
                }
                suite.indexRecord(key: key, value: value)
                return suite.needsFlushScheduled(durability)
            }
        }
        scheduleFlushIfNeeded(scheduleFlush)
    }

    /// Appends the changes `makeChanges` returns as one commit, under the write lock and after
    /// catching up, then applies them to the index (from the changes themselves: the records
    /// just written are not decoded again). The engine then compacts when its rule says so.
    private func commit(_ makeChanges: (SuiteIndex) throws -> [(key: String, data: Data?)]) throws {
        let scheduleFlush = try store.write { suite -> Bool in
            let changes = try makeChanges(suite.index)
            let payloads = try changes.map { try Self.encode(key: $0.key, value: $0.data) }
            try suite.journal.append(payloads)
            for change in changes {
                suite.indexRecord(key: change.key, value: change.data)
            }
            return suite.needsFlushScheduled(durability)
        }
        scheduleFlushIfNeeded(scheduleFlush)
    }

    /// After a coalesced write: the first one since the last flush schedules one, a window later.
    private func scheduleFlushIfNeeded(_ scheduleFlush: Bool) {
        if scheduleFlush, case .coalesced(let window) = durability {
            DispatchQueue.global().asyncAfter(deadline: .now() + window.inSeconds) { [weak self] in
                // A failure here is kept by the journal and thrown by the next write or flush().
                try? self?.flush()
            }
        }
    }

    /// Makes every write so far durable (fdatasync), now.
    /// - Throws: ``CofferError/Code/io`` with the errno when the disk refuses.
    public func flush() throws {
        try store.withIndex { suite in
            suite.flushScheduled = false
            try suite.journal.flush()
        }
    }

    /// Rewrites the suite with only its live values, whatever the garbage ratio.
    public func compact() throws {
        try store.compact()
    }

    /// Size facts, for `coffer info` and tests.
    public var statistics: (keys: Int, liveBytes: Int, fileBytes: Int64) {
        // A suite is never closed while its strategy lives.
        store.ifOpen { ($0.index.count, $0.liveBytes, $0.journal.dataEnd) } ?? (0, 0, 0)
    }

    // MARK: - Changes from elsewhere

    /// Starts telling `handler` which keys other processes (or other instances on this file)
    /// change. The suite's directory is watched (inotify on Linux, else polling; see
    /// `FileWatcher`) while at least one observation is alive.
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        try store.checkNotHeldHere()
        return store.observeChanges(handler)
    }

    // MARK: - Record layout

    /// The size of a record (see ``encode(key:value:)``): `valueCount` `nil` for a remove.
    static func recordSize(keyCount: Int, valueCount: Int?) -> Int {
        var lengthBytes = 1
        var length = UInt32(truncatingIfNeeded: keyCount) >> 7
        while length != 0 {
            lengthBytes += 1
            length >>= 7
        }
        return 1 + lengthBytes + keyCount + (valueCount ?? 0)
    }

    /// Writes the record of ``encode(key:value:)`` into `buffer`, exactly
    /// ``recordSize(keyCount:valueCount:)`` bytes.
    static func encode(key: UnsafeBufferPointer<UInt8>, value: Data?, into buffer: UnsafeMutableRawBufferPointer) {
        guard let value else { return encode(key: key, value: nil as UnsafeRawBufferPointer?, into: buffer) }
        value.withUnsafeBytes { encode(key: key, value: $0, into: buffer) }
    }

    /// ``encode(key:value:into:)`` of a value in place (`nil`: a remove).
    static func encode(
        key: UnsafeBufferPointer<UInt8>, value: UnsafeRawBufferPointer?, into buffer: UnsafeMutableRawBufferPointer
    ) {
        var at = 0
        buffer[at] = value == nil ? 2 : 1
        at += 1
        var length = UInt32(truncatingIfNeeded: key.count)
        repeat {
            let low = UInt8(length & 0x7F)
            length >>= 7
            buffer[at] = length == 0 ? low : low | 0x80
            at += 1
        } while length != 0
        if let base = key.baseAddress, key.count > 0 {
            (buffer.baseAddress! + at).copyMemory(from: base, byteCount: key.count)
            at += key.count
        }
        if let value, !value.isEmpty {
            (buffer.baseAddress! + at).copyMemory(from: value.baseAddress!, byteCount: value.count)
        }
    }

    static func encode(key: String, value: Data?) throws -> Data {
        var bytes = Data()
        let keyBytes = Array(key.utf8)
        bytes.reserveCapacity(1 + 5 + keyBytes.count + (value?.count ?? 0))
        bytes.append(value == nil ? 2 : 1)
        var length = UInt32(keyBytes.count)
        repeat {
            let low = UInt8(length & 0x7F)
            length >>= 7
            bytes.append(length == 0 ? low : low | 0x80)
        } while length != 0
        bytes.append(contentsOf: keyBytes)
        if let value { bytes.append(value) }
        return bytes
    }

    /// Where the name lies in the record ``encode(key:value:)`` wrote (the value follows it, to
    /// the record's end), and whether it sets or removes; `nil` when `raw` is not such a record
    /// or its name is not UTF-8.
    @inline(__always)
    static func parse(_ raw: UnsafeRawBufferPointer) -> (isSet: Bool, name: Range<Int>)? {
        guard raw.count >= 2 else { return nil }
        let op = raw[0]
        guard op == 1 || op == 2 else { return nil }
        var length = 0
        var shift = 0
        var i = 1
        while true {
            guard i < raw.count, shift <= 28 else { return nil }
            let byte = raw[i]
            length |= Int(byte & 0x7F) << shift
            i += 1
            if byte & 0x80 == 0 { break }
            shift += 7
        }
        guard length <= raw.count - i else { return nil }
        let name = UnsafeRawBufferPointer(rebasing: raw[i..<(i + length)])
        guard UTF8Text.isASCII(name) || String(validating: name.assumingMemoryBound(to: UInt8.self), as: UTF8.self) != nil
        else { return nil }
        if op == 2 && i + length != raw.count { return nil }
        return (op == 1, i..<(i + length))
    }
}

extension Backing {
    /// A key in the default suite of the current ``CofferContext``.
    ///
    /// ```swift
    /// @Stored(backed: .keyValue(key: "theme")) var theme = "light"
    /// ```
    public static func keyValue(key: String) -> Backing {
        keyValue(suite: "standard", key: key)
    }

    /// A key in a named suite (`<context directory>/<suite>.cofferkv`) of the current context.
    public static func keyValue(suite: String, key: String) -> Backing {
        Backing(
            description: "keyValue(suite: \(suite), key: \(key))", store: .inContext(["keyValue", suite]), key: key
        ) { context in
            let store = try context.sharedStore(id: .inContext(["keyValue", suite])) {
                try KeyValueFileStrategy(
                    directory: context.directory, suite: suite, durability: context.durability,
                    lockTimeout: context.lockTimeout, fileSystem: context.fileSystem)
            }
            return (store, key)
        }
    }

    /// A key in an explicit key-value store.
    public static func keyValue(_ store: KeyValueFileStrategy, key: String) -> Backing {
        Backing(description: "keyValue(\(store.path), key: \(key))", store: store.id, key: key) { _ in
            (store, key)
        }
    }
}

extension KeyValueFileStrategy: WatchStoppable {
    package func stopWatching() { store.stopWatching() }

    /// Whether coalesced writes are waiting for their fsync (a shutdown's flush clears it).
    package var hasUnsyncedWrites: Bool { store.ifOpen { $0.journal.hasUnsyncedWrites } ?? false }
}

extension KeyValueFileStrategy: FileLocatedPersistenceStrategy {
    package var fileStoreID: StoreID { StoreID(file: path) }
}
