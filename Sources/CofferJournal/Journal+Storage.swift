// Journal: the file underneath — space, zeros, syncs, rewriting (compaction), the control page.
import CofferCore
import CofferRuntime
import CSharedWord
import Foundation

extension Journal {
    /// Closes the descriptor without syncing (a failed open gives it up).
    func discard() {
        if !closed {
            tail = nil
            watch(false)
            fs.close(fd)
            if options.exclusive { lock.release() }
            if usesMutex { lock.releaseShared() }
        }
        closed = true
    }

    /// The mutex this journal's writes lock (``usesMutex``), or `nil` when they take the `flock`.
    /// - Throws: when the page lost its set-up while this journal had the store open (the lock
    ///   file overwritten): its mutex can no longer be trusted, and setting it up again could
    ///   reset it under a holder.
    func storeMutex() throws -> UnsafeMutableRawPointer? {
        guard usesMutex else { return nil }
        if let mutex = control?.mutex { return mutex }
        throw CofferError(
            .io,
            "the store's lock file was overwritten while the store was open (its control page is no longer set up), "
                + "so this process can no longer lock the store safely; nothing was written: close the store in every "
                + "process and open it again",
            path: lock.path)
    }

    func checkOpen() throws {
        if closed { throw CofferError(.closed, "the store was closed", path: path) }
    }

    func checkWritable() throws {
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

    func syncData(metadata: Bool) throws {
        if let syncFailure { throw syncFailure }
        if tail != nil { try checkMappedFile() }
        do {
            // Inside: a read of the header that fails stops the journal like a failed sync
            // (an immediate append is already in the file, so its write is never taken back).
            // The mapped path checked the size above.
            if tail == nil { try checkNotCutShort() }
            try checkHeaderStillThere()
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

    /// Before a sync of appends stored through the mapping: the file is not shorter than Coffer
    /// made it (a store past the end of a file another program cut short, inside its last page,
    /// is dropped without a fault), and Coffer's `SIGBUS` handler is still the process's (a handler the
    /// host installed since would let a truncation kill the process). Otherwise the mapping is
    /// given up; a file cut short fails with `.corrupted`, and nothing more is written.
    func checkMappedFile() throws {
        if coffer_install_bus_guard() != 0 {
            tail = nil
            tailUnavailable = true
        }
        try checkNotCutShort()
    }

    /// The file is not shorter than this journal made it (one `fstat`, before every sync).
    /// Coffer never shrinks a file it has open, so a shorter one was cut by another program; an
    /// append by `pwrite` past such a cut, inside the space already allocated, is acknowledged
    /// and lengthens the file again, leaving zeros where records were, which the next open
    /// takes for a torn tail and drops with every record after it. Stopping at the sync limits
    /// what a cut loses to the window's writes, and to nothing for a durable write (it fails).
    func checkNotCutShort() throws {
        let size = try fs.fstat(fd).size
        if size < allocatedSize { throw stopAfterTruncation(size: size, offset: size) }
    }

    /// The file still begins with a journal's magic (one `pread` of 8 bytes, before every sync
    /// and after every growth). Coffer never writes anything else there, but a file another
    /// program cut to nothing and this journal then wrote past the cut (a growth's zeros, an
    /// append) is a sparse file as long as this journal made it, whose first bytes read as
    /// zeros: no size check tells it, and every write after the cut would be acknowledged into
    /// a file no open accepts.
    func checkHeaderStillThere() throws {
        var first: UInt64 = 0
        let count = try withUnsafeMutableBytes(of: &first) { try fs.readFully(fd, into: $0, at: 0) }
        if count != MemoryLayout<UInt64>.size || first != Journal.magicWord {
            throw stopAfterTruncation(size: nil, offset: 0)
        }
    }

    /// Another program cut the file short under this journal: the mapping is given up and every
    /// later write and flush fails with the returned error (the file is left for a person to
    /// look at; writing on, or compacting from the index, would hide what was lost).
    func stopAfterTruncation(size: Int64?, offset: Int64) -> CofferError {
        tail = nil
        tailUnavailable = true
        let holds = size.map { " (it holds \($0) bytes, \(allocatedSize) were written)" } ?? ""
        let error = CofferError(
            .corrupted,
            "the store file was truncated by another program while this store had it open\(holds); nothing more is "
                + "written to it: open it again to see what it holds",
            path: path, offset: offset)
        syncFailure = error
        return error
    }

    /// Sets the coalesced-writers flag in the file header (once in a file's life), durably.
    func markCoalescedWriters() throws {
        guard try setHeaderFlags(Journal.coalescedWritersFlag) else {
            throw CofferError(.corrupted, "the file header changed while it was being read", path: path, offset: 0)
        }
        try fs.fdatasync(fd)
        coalescedWriters = true
    }

    /// Rewrites the 32-byte file header in place with `flags` added to byte 16 and its CRC
    /// updated (one write inside the first sector), from the header as the file holds it now.
    /// A header this open would refuse (magic, CRC, version, application, header area size) is
    /// left alone, and `false` returned: the open reports it. Bit 1, "lock file made again"
    /// (FORMAT.md, "Writing"), is not synced: it speaks to processes running now, which read it
    /// through the page cache.
    private func setHeaderFlags(_ flags: UInt8) throws -> Bool {
        try Journal.setHeaderFlags(flags, fd: fd, fs: fs, path: path, options: options)
    }

    @discardableResult
    static func setHeaderFlags(
        _ flags: UInt8, fd: Int32, fs: any FileSystem, path: String, options: JournalOptions
    ) throws -> Bool {
        var header = [UInt8](repeating: 0, count: Journal.fileHeaderSize)
        let n = try header.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: 0) }
        guard n == header.count, (try? checkFileHeader(header, options: options, path: path)) != nil else { return false }
        guard header[16] & flags != flags else { return true }
        header[16] |= flags
        let crc = CRC32C.checksum(Array(header[0..<28]))
        withUnsafeBytes(of: crc.littleEndian) { header.replaceSubrange(28..<32, with: $0) }
        try header.withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: path) }
        return true
    }

    /// Whether the write lock may skip its `fstat` of the lock file: a removed lock file harms
    /// nothing until another opener makes a new one, and that opener sets header flag bit 1 of
    /// the file current then, before it reads it. So the skip needs: a real check passed since
    /// this journal last switched files (``lockCheckedForFile``: a file it moved to may be one
    /// another lock file's process made, unmarked); the mapping is of the file open here; the
    /// control page vouches that no process of this lock file replaced it since; and the bit,
    /// read through the mapping, is clear. The load is guarded: a file cut short by another
    /// program faults here as in the copy, and then the `fstat` runs.
    var noOtherLockFileMade: Bool {
        guard lockCheckedForFile, let place = tailPlace, !tailUnavailable, place.device == identity.device,
            place.inode == identity.inode, let control, let known = knownGeneration, control.isCurrent(generation: known, file: identity)
        else { return false }
        var word: UInt64 = 0
        guard coffer_guarded_load(place.base + 16, &word) == 0 else { return false }
        return UInt8(truncatingIfNeeded: UInt64(littleEndian: word)) & Journal.lockFileMadeAgainFlag == 0
    }

    /// Grows the file with written zeros so appends land in allocated blocks and fdatasync need
    /// not update metadata. Returns whether the size changed.
    func ensureCapacity(_ needed: Int64) throws -> Bool {
        if needed <= allocatedSize { return false }
        let current = try fs.fstat(fd).size
        if current < allocatedSize {
            // Coffer never shrinks a journal it has open (a compaction makes a new file): another
            // program cut it short. Growing it again would put zeros where acknowledged records
            // were, and a store into a mapping past the cut inside its last page is dropped
            // without a fault, so nothing more is written.
            throw stopAfterTruncation(size: current, offset: current)
        }
        if current >= needed {
            allocatedSize = current
            return false
        }
        let growth = max(Int64(4096), min(current / 4, Int64(8 << 20)))
        let target = ((max(needed, current + growth) + 4095) / 4096) * 4096
        let zeros = [UInt8](repeating: 0, count: Int(min(target - current, 64 * 1024)))
        var offset = current
        while offset < target {
            let chunk = Int(min(Int64(zeros.count), target - offset))
            try zeros.withUnsafeBytes { try fs.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<chunk]), at: offset, path: path) }
            offset += Int64(chunk)
        }
        // A cut between the size read above and these writes leaves zeros where the records
        // were, and a file as long as the target: only its first bytes tell.
        try checkHeaderStillThere()
        allocatedSize = target
        return true
    }

    func zero(from start: Int64, to end: Int64) throws {
        let zeros = [UInt8](repeating: 0, count: Int(min(end - start, 64 * 1024)))
        var offset = start
        while offset < end {
            let chunk = Int(min(Int64(zeros.count), end - offset))
            try zeros.withUnsafeBytes { try fs.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<chunk]), at: offset, path: path) }
            offset += Int64(chunk)
        }
    }

    func rewriteLocked(payloads: [Data], headerArea newArea: [UInt8]?) throws {
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
        tail = nil
        fs.close(fd)
        fd = newFD
        identity = try fs.fstat(fd)
        lockCheckedForFile = false
        headerArea = area
        allocatedSize = Int64(image.count)
        dataEnd = Int64(Journal.fileHeaderSize + area.count) + payloads.reduce(0) {
            $0 + Int64($1.count + Journal.frameHeaderSize)
        }
        hasUnsyncedWrites = false
        identityCheckedAt = CoarseClock.nanoseconds
        settleControl()
    }

    /// After catching up under the lock: a shared journal settles the control page and
    /// remembers its generation; an exclusive one distrusts it for as long as it holds the lock.
    func settleControl() {
        if options.exclusive {
            control?.distrust()
        } else {
            knownGeneration = control?.settle(dataEnd: dataEnd, file: identity)
        }
    }

    /// The control page when it vouches for the file open here as of the generation this process
    /// remembers, and the path was checked recently: then the path need not be checked again.
    var currentControl: JournalControl? {
        guard let control, let known = knownGeneration, control.isCurrent(generation: known, file: identity),
            identityIsFresh
        else { return nil }
        return control
    }

    /// Whether the path was checked recently enough to skip checking it now.
    var identityIsFresh: Bool {
        identityCheckedAt != .min && CoarseClock.nanoseconds &- identityCheckedAt < identityCheckNanoseconds
    }

    /// The whole file, read into one buffer (shorter than `size` if the file shrank meanwhile).
    /// An array, not `Data`: a vault's index keeps slices of it as its records (``JournalRecords``),
    /// so an open copies no payload. Not zero-filled first: the read writes every byte kept.
    static func readImage(_ fd: Int32, size: Int64, fs: any FileSystem, path: String) throws -> [UInt8] {
        let capacity = Int(try DurableIO.checkSize(size, path: path))
        return try [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            initialized = try fs.readFully(fd, into: UnsafeMutableRawBufferPointer(buffer), at: 0)
        }
    }

    static func removeStaleTemporaryFiles(of path: String, fs: any FileSystem) throws {
        let directory = DurableIO.parentDirectory(of: path)
        let prefix = "." + DurableIO.lastComponent(of: path) + "."
        guard (try fs.stat(directory)) != nil else { return }
        let now = Int(Date().timeIntervalSince1970)
        for name in try fs.contentsOfDirectory(directory) where isTemporaryFile(name, prefix: prefix) {
            // A damaged copy is set aside without the store's lock (a salvage writes it before
            // it takes the lock to rewrite the store): one named in the last hour may be another
            // process's salvage in progress, whose rename this unlink would make fail.
            if let named = damagedCopySeconds(name, prefix: prefix), abs(now - named) < recentDamagedCopySeconds {
                continue
            }
            try fs.unlink(directory + "/" + name)
        }
    }

    /// How long the temporary file of a damaged copy is left to the salvage that may be writing it.
    static let recentDamagedCopySeconds = 3600

    /// The time in the name of a damaged copy's temporary file
    /// (`<prefix>damaged-<seconds>…`, ``isTemporaryFile(_:prefix:)``), or `nil` for another name.
    static func damagedCopySeconds(_ name: String, prefix: String) -> Int? {
        let rest = name.dropFirst(prefix.count)
        guard name.hasPrefix(prefix), rest.hasPrefix("damaged-") else { return nil }
        return Int(rest.dropFirst("damaged-".count).prefix { $0.isASCII && $0.isNumber })
    }

    /// Whether `name` is `<prefix><random>.tmp` as DurableIO names this store's temporary files,
    /// the random part in base 36 (no dot). Any name that merely starts with the prefix would
    /// also match another store's: opening `a.coffer` removed `.a.coffer.old.coffer.<random>.tmp`,
    /// the file a compaction of `a.coffer.old.coffer` was about to rename into place.
    ///
    /// Also `<prefix>damaged-<seconds>[-records][-<n>].<random>.tmp`: the temporary file of a
    /// damaged copy being set aside (``DurableIO/damagedCopyPath(for:suffix:fileSystem:)``), a
    /// full copy of the store that a crash during salvage would otherwise leave behind.
    static func isTemporaryFile(_ name: String, prefix: String) -> Bool {
        guard name.hasPrefix(prefix), name.hasSuffix(".tmp") else { return false }
        /// Whether `part` is non-empty ASCII digits (and, with `letters`, lowercase letters).
        func made(of part: Substring, letters: Bool) -> Bool {
            !part.isEmpty
                && part.utf8.allSatisfy { (0x30...0x39).contains($0) || (letters && (0x61...0x7A).contains($0)) }
        }
        var rest = Substring(name.dropFirst(prefix.count).dropLast(4))
        if rest.hasPrefix("damaged-"), let dot = rest.lastIndex(of: ".") {
            // Never empty: splitting keeps empty pieces, so "damaged-." gives [""].
            let aside = rest[..<dot].dropFirst("damaged-".count).split(separator: "-", omittingEmptySubsequences: false)
            guard aside.count <= 3, made(of: aside[0], letters: false),
                aside.dropFirst().allSatisfy({ $0 == "records" || made(of: $0, letters: false) })
            else { return false }
            rest = rest[rest.index(after: dot)...]
        }
        return made(of: rest, letters: true)
    }
}
