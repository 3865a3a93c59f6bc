// A session catching up: records authenticated and applied in chain order, a large batch opened on two threads.
import CofferCore
import CofferJournal
import CofferCrypto
import Foundation
import Synchronization

extension Session: JournalIndex {
    /// The file was replaced (another process compacted or rotated it): its header is adopted
    /// (a rotation followed with what opened this session's slot), and the chain starts again
    /// from the new epoch.
    mutating func forgetAll() throws {
        let (header, copy) = try Vault.selectHeader(journal.headerArea, path: journal.path)
        do {
            try Vault.verifyMAC(journal.headerArea, copy: copy, keys: keys, path: journal.path)
            adopt(header)
        } catch let error as CofferError where error.code == .corrupted && header.vaultID == self.header.vaultID {
            try followRotation(to: header, copy: copy, macFailure: error)
        }
        chain = try keys.genesis(vaultID: header.vaultID, epoch: header.epoch)
        entries.removeAll()
        recordCount = 0
        liveBytes = 0
    }

    mutating func apply(records: JournalRecords) throws {
        try apply(records)
    }

    static func change(_ keys: Set<ItemKey>?) -> Set<VaultItemID>? {
        keys.map { Set($0.map { VaultItemID(service: $0.service.string, account: $0.account.string) }) }
    }

    /// What other writers did could not be applied: this session no longer describes the file,
    /// so it stops (``failure``) until the vault is locked and unlocked, or opened again.
    mutating func catchUpFailed(_ error: CofferError) -> CofferError {
        var error = error
        error.message += " — this vault stops here: lock and unlock it, or open it again, to read the file anew"
        failure = error
        return error
    }
}

extension Session {
    /// The file was rewritten with a header this session's keys do not authenticate: the same
    /// vault, so another process rotated its master key (``Vault/rotate(removing:removingRecipients:keeping:)``),
    /// or the header was altered. What opened this session's slot opens the new header's copy of
    /// it when the slot was kept: the keys change and the session goes on. When it was removed,
    /// `.wrongKey`: this instance was revoked. When a slot opens but the MAC still fails, the
    /// header was altered: `macFailure`.
    ///
    /// Only forward: a header whose sequence is not above this session's is an older one put
    /// back (an old copy of the file, restored or planted): its keys may be the ones a rotation
    /// took away from a revoked party, so it is refused as altered, never followed.
    private mutating func followRotation(to header: VaultHeader, copy: Int, macFailure: CofferError) throws {
        guard let opener else { throw macFailure }
        guard header.sequence > self.header.sequence else {
            throw CofferError(
                .corrupted,
                "the vault file was replaced by one with an older header (sequence \(header.sequence), after "
                    + "\(self.header.sequence) was read) under keys this vault no longer has: an old copy put back, "
                    + "which would bring back keys a rotation removed; refusing it",
                path: journal.path)
        }
        guard let (master, slot) = try opener.unwrap(header) else {
            throw CofferError(
                .wrongKey,
                "the vault's master key was rotated by another process, and no key slot that this instance's key "
                    + "opens remains (it was removed, or the header was altered): this instance was revoked",
                path: journal.path)
        }
        let rotated = try VaultKeys(master: master)
        try Vault.verifyMAC(journal.headerArea, copy: copy, keys: rotated, path: journal.path)
        keys = rotated
        self.header = header
        unlockedSlot = slot
    }

    /// Authenticates and applies records in order, advancing the chain. With
    /// `skippingFailures` (salvage) a record that fails is skipped — the chain still advances
    /// over its tag — and the count of skipped records is returned; a record too short to hold
    /// a tag ends the chain, so it and every record after it are skipped.
    ///
    /// In three steps, with the same outcome as opening and indexing one record at a time:
    /// 1. the payloads stay in the buffer the journal read them into (the whole file, at an
    ///    open): the index's entries keep slices of it, so an open copies no payload and
    ///    allocates nothing per record. That buffer also holds frame headers and superseded
    ///    records, as long as any of its records is live (a compaction drops them).
    /// 2. the chain value before every record, and every record opened (AEAD) and parsed
    ///    against its chain value. The chain advances over the records' tags, which need no
    ///    decryption, so a record can be opened as soon as the chain has reached it: for a large
    ///    batch one thread computes the chain while the other opens the records it has reached,
    ///    then both open the rest (``chainAndOpen(_:frames:from:keys:vaultID:chains:into:index:)``).
    ///    A record too short to hold a tag ends the chain: no later record can be
    ///    authenticated, and step 3 throws there. The plaintexts are decrypted into a scratch
    ///    buffer per thread, wiped as soon as the record is parsed; the secret is never copied
    ///    out (the index keeps the sealed payload).
    /// 3. in order: the index updated, and the first failure thrown (or skipped, when salvaging)
    ///    with its offset, so what is applied before a failure is exactly what was before. For a
    ///    large batch this runs beside step 2, on the thread that does not compute the chain, a
    ///    block of records at a time once they are opened (it opens blocks itself while the next
    ///    one is not ready). The index's inserts are the costliest step after the opens, and
    ///    the chain must be complete before its owner can take any other work: the two long
    ///    serial tasks are on different threads.
    @discardableResult
    mutating func apply(_ records: JournalRecords, skippingFailures: Bool = false) throws -> Int {
        if records.isEmpty { return 0 }
        let count = records.count
        // 1. The payloads where they were read, record i at frames[i]: the index's entries keep
        // slices of that buffer.
        let (arena, frames) = (records.bytes, records.frames)
        // 2. The chain (chains[i]: before record i) and the opens of records 0..<reached.
        let chains = UnsafeMutablePointer<ChainValue>.allocate(capacity: count + 1)
        defer { chains.deallocate() }  // ChainValue is trivial: nothing to deinitialise
        let opened = UnsafeMutablePointer<Opened>.allocate(capacity: count)
        // Outcomes are moved out one by one (no copy, no retain); the rest are destroyed here.
        let progress = IndexProgress()
        var reached = 0
        defer {
            (opened + progress.next).deinitialize(count: reached - progress.next)
            opened.deallocate()
        }
        // At most one new item per record: grow the table once.
        entries.reserveCapacity(entries.count + count)
        let (start, keys, vaultID, path) = (chain, keys, header.vaultID, journal.path)
        let chainFailure: (any Error)?
        (reached, chainFailure) = withUnsafeMutablePointer(to: &self) { session in
            let target = IndexTarget(session: session, opened: opened, chains: chains)
            // 3. Record i indexed (all before it are): false once a failure is kept to throw.
            let index: @Sendable (Int) -> Bool = { i in
                let outcome = (target.opened + i).move()
                progress.next = i + 1
                let payload = arena[frames[i].span]
                switch consume outcome {
                case .body(let body):
                    target.session.pointee.index(
                        body, payload: payload, chainBefore: target.chains[i], chainAfter: target.chains[i + 1])
                    return true
                case .invalid(let why):
                    // Sealed by someone holding the key, but not a body Coffer accepts (a name
                    // that is not UTF-8, say): salvage drops it like a record that fails to
                    // authenticate.
                    if skippingFailures {
                        target.session.pointee.chain = target.chains[i + 1]
                        progress.skipped += 1
                        return true
                    }
                    progress.failure = CofferError(
                        .corrupted, "a vault record authenticated but \(why)", path: path,
                        offset: records.frames[i].offset)
                    return false
                case .failed(let failure):
                    guard var error = failure as? CofferError else {
                        progress.failure = failure
                        return false
                    }
                    if skippingFailures && payload.count >= XChaCha20Poly1305.tagLength {
                        target.session.pointee.chain = target.chains[i + 1]
                        progress.skipped += 1
                        return true
                    }
                    if skippingFailures {
                        // Too short to hold a tag: the chain ends here, so no later record can
                        // be authenticated. Salvage keeps every record before it and drops it
                        // with everything after (it used to throw, and so kept nothing).
                        progress.skipped += frames.count - i
                        return false
                    }
                    error.path = path
                    error.offset = records.frames[i].offset
                    progress.failure = error
                    return false
                }
            }
            return arena.withUnsafeBytes { arena in
                Self.chainAndOpen(
                    arena, frames: frames, from: start, keys: keys, vaultID: vaultID, chains: chains, into: opened,
                    index: index)
            }
        }
        if let chainFailure { throw chainFailure }
        if let failure = progress.failure { throw failure }
        return progress.skipped
    }

    /// What opening one record gave.
    fileprivate enum Opened {
        case body(IndexedBody)
        /// Authenticated, but refused by the body parser: why (``VaultRecordBody/invalidity(_:)``).
        case invalid(String)
        case failed(any Error)
    }

    /// Batches at least this large are opened on two threads, where there are two to use.
    static let parallelOpenThreshold = 512
    /// With one processor (or a CPU quota of one) the second thread would only wait for the
    /// first, spinning on `sched_yield`: open on one thread there.
    static let hasTwoProcessors = ProcessInfo.processInfo.activeProcessorCount >= 2
    /// Records per unit of work on two threads: the chain is published, and opens are claimed,
    /// this many at a time.
    static let pipelineBlock = 64

    /// Steps 2 and 3 of `apply` for the records `frames` places in `arena`: sets
    /// `chains[0]` to `start` and `chains[i + 1]` to the chain value after record `i`,
    /// initialises `results[i]` with record `i` opened and parsed against `chains[i]`, for every
    /// record up to and including the first too short to hold a tag (whose open fails; no chain
    /// value follows it), and calls `index(i)` for those records in order, on one thread at a
    /// time, until it returns false. Returns how many records were opened: every one of them
    /// is, whatever `index` returns. Writes only `chains` and `results`; `index` does the rest.
    ///
    /// A large batch runs on two threads with shared counters and no lock. The first thread to
    /// start owns the chain: it extends it a block at a time, publishing how far it has got,
    /// then opens the blocks nobody has claimed. The other indexes: it claims blocks of records
    /// to open in order, waiting (yielding) only until the chain has reached its block — the
    /// chain is about twice as fast as the opens, so it waits only for the first block — and
    /// marks each block done; whenever the next block to index is done (by either thread) it
    /// indexes it, and when every block is claimed it waits for the one the chain's owner is
    /// opening. The owner never waits for the indexer, so if Dispatch runs both iterations on
    /// one thread one after the other, the first (the owner) computes the chain and opens
    /// everything, and the second indexes it all.
    ///
    /// Returns how many records were opened, and what advancing the chain threw: the records
    /// before the failure may have been indexed by then, as before any failing record (the
    /// caller throws it and discards this session's catch-up either way).
    private static func chainAndOpen(
        _ arena: UnsafeRawBufferPointer, frames: [JournalFrame], from start: ChainValue, keys: VaultKeys, vaultID: [UInt8],
        chains: UnsafeMutablePointer<ChainValue>, into results: UnsafeMutablePointer<Opened>,
        index: @Sendable (Int) -> Bool
    ) -> (reached: Int, failure: (any Error)?) {
        let count = frames.count
        chains.initialize(to: start)
        let shared = PipelineBuffers(arena: arena, chains: chains, results: results)
        /// Advances the chain over `range`; returns the first record too short to hold a tag, or nil.
        @Sendable func extend(_ range: Range<Int>) throws -> Int? {
            for i in range {
                let sealed = UnsafeRawBufferPointer(rebasing: shared.arena[frames[i].span])
                guard sealed.count >= XChaCha20Poly1305.tagLength else { return i }
                (shared.chains + i + 1).initialize(to: try keys.advance(shared.chains[i], tag: RecordCipher.tag(of: sealed)))
            }
            return nil
        }
        @Sendable func open(_ range: Range<Int>, _ opener: inout RecordOpener) {
            for i in range {
                let sealed = UnsafeRawBufferPointer(rebasing: shared.arena[frames[i].span])
                let outcome: Opened
                do {
                    outcome = try opener.open(sealed, chain: shared.chains[i]) { plaintext in
                        VaultRecordBody.indexed(plaintext).map { .body($0) }
                            ?? .invalid(VaultRecordBody.invalidity(plaintext))
                    }
                } catch {
                    outcome = .failed(error)
                }
                (shared.results + i).initialize(to: outcome)
            }
        }
        if count < parallelOpenThreshold || !hasTwoProcessors {
            let reached: Int
            do {
                reached = try extend(0..<count).map { $0 + 1 } ?? count
            } catch {
                return (0, error)
            }
            var opener = RecordOpener(keys: keys, vaultID: vaultID)
            open(0..<reached, &opener)
            for i in 0..<reached where !index(i) { break }
            return (reached, nil)
        }
        let pipeline = Pipeline(blocks: (count + pipelineBlock - 1) / pipelineBlock)
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            var opener = RecordOpener(keys: keys, vaultID: vaultID)
            /// Claims the next block, opens it once the chain has reached it, and marks it done;
            /// false when no block is left.
            func openNextBlock() -> Bool {
                let first = pipeline.claim.wrappingAdd(pipelineBlock, ordering: .relaxed).oldValue
                guard first < count else { return false }
                var end = min(count, first + pipelineBlock)
                // chains[0...end] needed: the opens read chains[first..<end], and the index of
                // the block's last record reads the value after it, chains[end]. Waiting for
                // only chains[0..<end] let a last block of one record be opened, marked done and
                // indexed with chains[count] not yet written (count = 64k + 1).
                while pipeline.ready.load(ordering: .acquiring) <= end {
                    if pipeline.finished.load(ordering: .acquiring) {
                        end = min(end, pipeline.ready.load(ordering: .acquiring))
                        break
                    }
                    yieldProcessor()
                }
                guard first < end else { return false }
                open(first..<end, &opener)
                pipeline.done[first / pipelineBlock].store(true, ordering: .releasing)
                return true
            }
            if pipeline.owner.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
                // The chain, a block at a time, published after each block.
                var done = 0
                while done < count {
                    let end = min(count, done + pipelineBlock)
                    do {
                        if let short = try extend(done..<end) {
                            pipeline.ready.store(short + 1, ordering: .releasing)  // chains[0...short]
                            break
                        }
                    } catch {
                        pipeline.failure.withLock { $0 = error }
                        pipeline.ready.store(done + 1, ordering: .releasing)
                        break
                    }
                    done = end
                    pipeline.ready.store(done + 1, ordering: .releasing)
                }
                pipeline.finished.store(true, ordering: .releasing)
            } else {
                // The index, in order, a done block at a time, opening the next unclaimed block
                // whenever the next one to index is not done yet.
                var indexed = 0
                indexing: while true {
                    let block = indexed / pipelineBlock
                    // `done` first. A done block's chain values, the one after its last record
                    // included, were published before it was opened, unless the chain stopped
                    // inside it or at its end (a record too short for a tag, or a failure): then
                    // it was marked done only after the chain finished, so `finished` is seen
                    // set below, and `reached` or the failure stops the index at the right place.
                    let isDone = block < pipeline.blocks && pipeline.done[block].load(ordering: .acquiring)
                    let finished = pipeline.finished.load(ordering: .acquiring)
                    // Every record the chain reached once it is done: chains[0..<ready].
                    let reached = finished ? min(count, pipeline.ready.load(ordering: .acquiring)) : count
                    if indexed >= reached || (finished && pipeline.failure.withLock({ $0 != nil })) { break }
                    guard isDone else {
                        if !openNextBlock() { yieldProcessor() }  // the chain's owner has it
                        continue
                    }
                    let end = min(reached, (block + 1) * pipelineBlock)
                    while indexed < end {
                        guard index(indexed) else { break indexing }
                        indexed += 1
                    }
                }
            }
            // The opens left, a claimed block at a time, each once the chain has reached it.
            while openNextBlock() {}
        }
        // Every record the chain reached was opened: 0..<reached.
        return (min(count, pipeline.ready.load(ordering: .acquiring)), pipeline.failure.withLock { $0 })
    }
}

/// The buffers handed to the threads of `Session.chainAndOpen`. Both read the payloads; only the
/// chain's owner writes `chains`, and the other reads only the values published before it
/// (`Pipeline.ready`); each writes only the results of the blocks it claimed.
private struct PipelineBuffers<T>: @unchecked Sendable {
    let arena: UnsafeRawBufferPointer
    let chains: UnsafeMutablePointer<ChainValue>
    let results: UnsafeMutablePointer<T>
}

/// What `Session.apply`'s index step works on, for the thread that indexes (one at a time:
/// see `Session.chainAndOpen`): the session, which `apply` holds `inout` meanwhile, the
/// outcomes it moves out, and the chain values (those around a done block's records are
/// published before the block is opened: see `openNextBlock`).
private struct IndexTarget: @unchecked Sendable {
    let session: UnsafeMutablePointer<Session>
    let opened: UnsafeMutablePointer<Session.Opened>
    let chains: UnsafeMutablePointer<ChainValue>
}

/// How far `Session.apply`'s index has got, written by the one thread that indexes (and read
/// after both threads are done).
private final class IndexProgress: @unchecked Sendable {
    /// The first record whose outcome has not been moved out.
    var next = 0
    /// Records skipped (salvage).
    var skipped = 0
    /// The first failure, to throw once the threads are done.
    var failure: (any Error)?
}

/// The counters the two threads of `Session.chainAndOpen` share. `@unchecked`: `done` points to
/// atomics, allocated for the pipeline's life.
private final class Pipeline: @unchecked Sendable {
    /// Whether a thread has taken the chain.
    let owner = Atomic<Bool>(false)
    /// How many chain values are published: `chains[0..<ready]` (release/acquire).
    let ready = Atomic<Int>(1)
    /// Set once the chain is complete, stopped at a short record, or failed: `ready` is final.
    let finished = Atomic<Bool>(false)
    /// The first record of the next block to open.
    let claim = Atomic<Int>(0)
    /// What advancing the chain threw.
    let failure = Locked<(any Error)?>(nil)
    /// Whether block `b` (records `b * pipelineBlock` on) is opened (release/acquire).
    let done: UnsafeMutablePointer<Atomic<Bool>>
    let blocks: Int

    init(blocks: Int) {
        self.blocks = blocks
        done = .allocate(capacity: blocks)
        for b in 0..<blocks { (done + b).initialize(to: Atomic(false)) }
    }

    deinit {
        done.deinitialize(count: blocks)
        done.deallocate()
    }
}
