// The async path of a cell: a store that waits on a network (an `AsyncPersistenceStrategy`, such
// as CofferPostgres's) is never waited on by a setter or a first read. Writes go out in order
// behind the setter, one in flight per key, the newest value each time; loads run in the
// background and adopt what they read unless a newer write was made here meanwhile.
import CofferCore
import Foundation

extension StoredCell {
    // MARK: Writes

    /// Starts the background writer unless it runs: it stores the newest value, then the next
    /// newest, until the store holds what memory holds (or a write fails).
    func scheduleWrite(_ strategy: any AsyncPersistenceStrategy, key: String) {
        let start = state.withLock { s -> Bool in
            guard !s.writerActive else { return false }
            s.writerActive = true
            return true
        }
        if start { RemoteWrites.run { await self.drainWrites(strategy, key: key) } }
    }

    private func drainWrites(_ strategy: any AsyncPersistenceStrategy, key: String) async {
        while case .wrote = await writeNext(strategy, key: key) {}
    }

    /// What one step of the writer did.
    private enum WriteStep {
        /// Memory and store agree: the writer stopped.
        case stopped
        /// The newest value was stored; the writer is still active.
        case wrote
        /// The write failed; the writer is still active only if a newer value waits.
        case failed(CofferError, goOn: Bool)
    }

    /// Stores the newest value unless the store holds it already (then the writer stops, in the
    /// same critical section as the check, so a setter that comes after sees it stopped and
    /// starts it again). Only the active writer calls this.
    private func writeNext(_ strategy: any AsyncPersistenceStrategy, key: String) async -> WriteStep {
        typealias Waiter = CheckedContinuation<Void, any Error>
        let step = state.withLock { s -> WriterStep<Value> in
            guard s.version != s.persistedVersion || s.forceSave else {
                s.writerActive = false
                defer { s.flushWaiters = [] }
                return .done(s.flushWaiters.map(\.continuation))
            }
            s.forceSave = false
            return .write(s.value, s.version)
        }
        guard case .write(let value, let version) = step else {
            if case .done(let waiters) = step { for waiter in waiters { waiter.resume() } }
            return .stopped
        }
        do {
            if isNilValue(value) {
                try await strategy.remove(key)
            } else {
                try await strategy.save(encodeValue(value, as: strategy.valueEncoding), for: key)
            }
        } catch {
            let failure = CofferError.wrapping(error, "saving \(backing)")
            setSaveError(failure)
            // The callers waiting for this version hear of its failure. A write made while it
            // was in flight is newer and not tried yet: the writer goes on with it (once per
            // newer value, so a server that stays down costs one attempt per write).
            let (failed, goOn) = state.withLock { s -> ([Waiter], Bool) in
                let newer = s.version > version
                let (failed, waiting) = s.flushWaiters.partitioned { !newer || $0.version <= version }
                s.flushWaiters = waiting
                s.writerActive = newer
                return (failed.map(\.continuation), newer)
            }
            for waiter in failed { waiter.resume(throwing: failure) }
            return .failed(failure, goOn: goOn)
        }
        let ready = state.withLock { s -> [Waiter] in
            s.persistedVersion = max(s.persistedVersion, version)
            let (done, waiting) = s.flushWaiters.partitioned { $0.version <= s.persistedVersion }
            s.flushWaiters = waiting
            return done.map(\.continuation)
        }
        setSaveError(nil)
        notifySiblings()
        for waiter in ready { waiter.resume() }
        return .wrote
    }

    /// Waits until the store holds the value memory holds now; a write that failed earlier is
    /// tried once more. On a local store, writes outstanding (inside a batch) are made, and a
    /// store that writes lazily (the key-value file's coalesced durability) is made durable —
    /// on Coffer's threads, never a cooperative one.
    func flush() async throws {
        let resolved: (strategy: any PersistenceStrategy, key: String)?
        switch target() {
        case .failure(let error): throw error
        case .success(let target): resolved = target
        }
        guard let (strategy, key) = resolved else { return }
        guard let remote = strategy as? any AsyncPersistenceStrategy else {
            try await Offload.run {
                if let error = self.persistPending() { throw error }
                if let flushable = strategy as? any FlushablePersistenceStrategy { try flushable.flush() }
            }
            return
        }
        // When no write of this key is in flight, the caller's own task makes the write (no
        // hand-off to a background task and back): the first write takes the newest value, so
        // its outcome is the caller's. A newer value set meanwhile goes to the background writer.
        let inline = state.withLock { s -> Bool in
            guard !s.writerActive, s.version != s.persistedVersion || s.forceSave else { return false }
            s.writerActive = true
            return true
        }
        if inline {
            let step = await RemoteWrites.counting { await self.writeNext(remote, key: key) }
            switch step {
            case .stopped: return
            case .wrote: break
            case .failed(let failure, let goOn):
                if goOn { RemoteWrites.run { await self.drainWrites(remote, key: key) } }
                throw failure
            }
            // Stops the writer unless a newer value waits, which the background writer takes.
            // A `flush` that came while this write was in flight waits for this writer: it is
            // resumed here, as the background writer resumes its waiters when it stops.
            let (more, waiters) = state.withLock { s -> (Bool, [CheckedContinuation<Void, any Error>]) in
                guard s.version == s.persistedVersion && !s.forceSave else { return (true, []) }
                s.writerActive = false
                defer { s.flushWaiters = [] }
                return (false, s.flushWaiters.map(\.continuation))
            }
            for waiter in waiters { waiter.resume() }
            if more { RemoteWrites.run { await self.drainWrites(remote, key: key) } }
            return
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start = state.withLock { s -> Bool? in
                guard s.version != s.persistedVersion || s.forceSave || s.writerActive else { return nil }
                s.flushWaiters.append((s.version, continuation))
                guard !s.writerActive else { return false }
                s.writerActive = true
                return true
            }
            switch start {
            case nil: continuation.resume()
            case true?: RemoteWrites.run { await self.drainWrites(remote, key: key) }
            case false?: break
            }
        }
    }

    /// ``save(_:)`` on a remote store: memory now (observers told), then the write, awaited.
    /// Writes even when the store holds the value already (it retries a failed save).
    func saveRemote(_ value: Value) async throws {
        write(value, persist: false)
        state.withLock { $0.forceSave = true }
        try await flush()
    }

    // MARK: Loads

    /// Loads in the background, and again while changes from elsewhere arrive meanwhile.
    func startBackgroundLoad(_ strategy: any AsyncPersistenceStrategy, key: String) {
        Offload.start { await self.backgroundLoad(strategy, key: key) }
    }

    /// A load that failed because the store could not be reached (the server restarting, a
    /// network cut) is tried again, every ``retryDelays`` step and then every last one, for as
    /// long as the property is in use: the change it was loading has been reported once and will
    /// not be reported again, so giving up would leave the property stale for good (with
    /// `loadError` saying why, but never catching up). `isLoading` stays true meanwhile, and
    /// `loadError` holds the last attempt's failure.
    private func backgroundLoad(_ strategy: any AsyncPersistenceStrategy, key: String) async {
        var failures = 0
        while true {
            var failure: CofferError?
            do {
                _ = try await fetchAndAdopt(strategy, key: key)
            } catch {
                failure = .wrapping(error, "loading \(backing)")
            }
            let transient = failure.map { $0.code == .io || $0.code == .busy } ?? false
            let again = state.withLock { s -> Bool in
                let again = (s.reloadPending || transient) && !s.detached
                s.reloadPending = false
                if !again { s.isLoading = false }
                return again
            }
            setLoadError(failure)
            if !again {
                statusDidChange()
                return
            }
            if transient {
                statusDidChange()
                let delays = Self.retryDelays
                try? await Task.sleep(for: delays[min(failures, delays.count - 1)])
                failures += 1
            } else {
                failures = 0
            }
        }
    }

    /// The waits between tries of a background load the store could not serve.
    static var retryDelays: [Duration] { [.milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2)] }

    /// A reload after a change elsewhere, on a remote store: in the background, coalesced with
    /// one already running. Returns false for a local store (the caller reloads at once).
    func reloadRemotely() -> Bool {
        guard case .success(let (strategy, key)?) = target(), let remote = strategy as? any AsyncPersistenceStrategy
        else { return false }
        let start = state.withLock { s -> Bool in
            guard !s.isLoading else {
                s.reloadPending = true
                return false
            }
            s.isLoading = true
            return true
        }
        if start {
            statusDidChange()
            startBackgroundLoad(remote, key: key)
        }
        return true
    }

    /// Reads the stored value and makes it the value in memory, unless a write was made here
    /// after the read began (it is newer, and on its way to the store), or — for a background
    /// reload — a write made here earlier is not stored yet. Returns the value in memory after.
    private func fetchAndAdopt(
        _ strategy: any AsyncPersistenceStrategy, key: String, replacingUnsaved: Bool = false
    ) async throws -> Value {
        // A few tries: a write of ours committed while the read was in flight makes what it read
        // stale (and our own commit is not reported back as a change), so read again.
        for attempt in 1...3 {
            let before = state.withLock { (version: $0.version, persisted: $0.persistedVersion) }
            let data = try await strategy.load(key)
            let loaded = try data.map { try decodeValue($0, as: strategy.valueEncoding) } ?? initialValue
            let (value, changed, stale) = mutate { s -> (Value, Bool, Bool) in
                s.loaded = true
                // A write made here after the read began is newer than what it read: kept.
                guard s.version == before.version else { return (s.value, false, false) }
                // One of ours was stored meanwhile: what the read saw may predate it.
                guard s.persistedVersion == before.persisted else { return (s.value, false, true) }
                guard replacingUnsaved || s.version == s.persistedVersion else { return (s.value, false, false) }
                return (loaded, adoptStored(loaded, in: &s, keepingUnsavedWrite: false) ?? false, false)
            }
            if changed { valueDidChange() }
            if !stale || attempt == 3 { return value }
        }
        return state.withLock { $0.value }
    }

    /// ``load()`` on a remote store: waits for this key's writes in flight (so it reads them
    /// back), then reads the store and replaces the value in memory, as the synchronous `load`
    /// does — a write that failed to be stored included (it stays in `saveError`).
    func loadRemote(_ strategy: any AsyncPersistenceStrategy, key: String) async throws -> Value {
        try? await flush()  // its failure is in `saveError`; the stored value is what we read
        do {
            let value = try await fetchAndAdopt(strategy, key: key, replacingUnsaved: true)
            setLoadError(nil)
            return value
        } catch {
            let failure = CofferError.wrapping(error, "loading \(backing)")
            setLoadError(failure)
            throw failure
        }
    }

    // MARK: The async API (Stored's `try await` forms)

    /// Reads the stored value now. A remote store is read without blocking a thread; a local
    /// one on Coffer's threads (its read may wait for another process's lock).
    func loadAsync() async throws -> Value {
        switch await resolvedOffPool() {
        case .failure(let error):
            setLoadError(error)
            throw error
        case .success(let (strategy, key)?):
            if let remote = strategy as? any AsyncPersistenceStrategy { return try await loadRemote(remote, key: key) }
            return try await Offload.run { try self.load(keepingUnsavedWrite: false) }
        case .success(nil):
            return try load(keepingUnsavedWrite: false)
        }
    }

    /// Sets the value and waits until the store has it.
    func saveAsync(_ value: Value) async throws {
        switch await resolvedOffPool() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let (strategy, _)?) where strategy is any AsyncPersistenceStrategy:
            try await saveRemote(value)
        case .success:
            try await Offload.run { try self.save(value) }
        }
    }

    /// Reads, transforms and writes as one step, without blocking a thread on a remote store.
    func updateAsync(_ body: (inout Value) throws -> Void) async throws -> Value {
        let resolved: (strategy: any PersistenceStrategy, key: String)?
        switch await resolvedOffPool() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let target): resolved = target
        }
        guard let (strategy, key) = resolved, let remote = strategy as? any AsyncPersistenceStrategy else {
            // Memory, or a local store: microseconds (`body` may not leave this task).
            return try update(body)
        }
        do {
            // Each attempt ends within the store's deadlines; no new one starts after the
            // context's lock timeout, so a value that keeps changing elsewhere ends in `.busy`.
            // Updates of this cell in this process wait their turn within the same budget.
            let giveUp = ContinuousClock.now + context.lockTimeout
            guard await updateTurn.enter(until: giveUp) else {
                throw CofferError(
                    .busy,
                    "\(backing): other updates of it in this process took longer than "
                        + "\(context.lockTimeout.inSeconds.secondsText) s; the update was not applied")
            }
            defer { updateTurn.leave() }
            try await flush()  // a write made here and not stored yet is newer: `body` starts from it
            while true {
                let before = state.withLock { $0.writes }
                try checkUpdateBudget(giveUp)
                let current = try await remote.load(key)
                var value = try current.map { try decodeValue($0, as: remote.valueEncoding) } ?? initialValue
                try body(&value)
                let next: Data? = isNilValue(value) ? nil : try encodeValue(value, as: remote.valueEncoding)
                let swapped: Bool
                if let swappable = remote as? any AsyncCompareAndSwapPersistenceStrategy {
                    swapped = try await swappable.compareAndSwap(key, expected: current, new: next)
                } else {
                    if let next { try await remote.save(next, for: key) } else { try await remote.remove(key) }
                    swapped = true
                }
                guard swapped else { continue }  // another writer got in between: run `body` again
                let changed = adopt(value, ifNoWriteSince: before)
                setSaveError(nil)
                if changed { valueDidChange() }
                notifySiblings()
                return value
            }
        } catch let error as CofferError {
            setSaveError(error)
            throw error
        }
    }

    /// The strategy and key; resolving (which may open a vault with Argon2id) runs on Coffer's
    /// threads when the backing is not resolved yet, never on the caller's cooperative thread.
    private func resolvedOffPool() async -> Result<(strategy: any PersistenceStrategy, key: String)?, CofferError> {
        if isResolved { return target() }
        let outcome = try? await Offload.run { ResolvedTarget(result: self.target()) }
        return outcome?.result ?? target()
    }
}

/// What the background writer does next.
private enum WriterStep<Value> {
    case write(Value, UInt64)
    /// Memory and store agree: the writer stopped, in the same critical section as the check, so
    /// a setter that comes after sees it stopped and starts it again.
    case done([CheckedContinuation<Void, any Error>])
}

/// A resolution handed back from Coffer's threads.
private struct ResolvedTarget: @unchecked Sendable {
    // @unchecked Sendable: a strategy is Sendable; the tuple of it and a key is not declared so.
    let result: Result<(strategy: any PersistenceStrategy, key: String)?, CofferError>
}

extension Array {
    /// The elements that satisfy `belongs`, and the others, each in order.
    fileprivate func partitioned(_ belongs: (Element) -> Bool) -> ([Element], [Element]) {
        var yes: [Element] = []
        var no: [Element] = []
        for element in self {
            if belongs(element) { yes.append(element) } else { no.append(element) }
        }
        return (yes, no)
    }
}
