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
        while true {
            let next = state.withLock { s -> (value: Value, version: UInt64)? in
                guard s.version != s.persistedVersion || s.forceSave else { return nil }
                s.forceSave = false
                return (s.value, s.version)
            }
            guard let (value, version) = next else {
                finishWriter(nil)
                return
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
                finishWriter(failure)
                return
            }
            let ready = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
                s.persistedVersion = max(s.persistedVersion, version)
                let (done, waiting) = s.flushWaiters.partitioned { $0.version <= s.persistedVersion }
                s.flushWaiters = waiting
                return done.map(\.continuation)
            }
            setSaveError(nil)
            notifySiblings()
            for waiter in ready { waiter.resume() }
        }
    }

    /// The writer stops: with `failure`, every waiting `flush` throws it; else they all return
    /// (memory and store agree). A write that slipped in after the last check starts it again.
    private func finishWriter(_ failure: CofferError?) {
        let (waiters, restart) = state.withLock { s -> ([CheckedContinuation<Void, any Error>], Bool) in
            let waiters = s.flushWaiters.map(\.continuation)
            s.flushWaiters = []
            // Checked and cleared under the lock, so a setter that found the writer active
            // either was seen by the last check or sees it stopped and starts it again.
            let pending = failure == nil && (s.version != s.persistedVersion || s.forceSave)
            s.writerActive = pending
            return (waiters, pending)
        }
        for waiter in waiters {
            if let failure { waiter.resume(throwing: failure) } else { waiter.resume() }
        }
        if restart, case .success(let (strategy, key)?) = target(),
            let remote = strategy as? any AsyncPersistenceStrategy
        {
            RemoteWrites.run { await self.drainWrites(remote, key: key) }
        }
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

    private func backgroundLoad(_ strategy: any AsyncPersistenceStrategy, key: String) async {
        while true {
            var failure: CofferError?
            do {
                _ = try await fetchAndAdopt(strategy, key: key)
            } catch {
                failure = .wrapping(error, "loading \(backing)")
            }
            let again = state.withLock { s -> Bool in
                let again = s.reloadPending && !s.detached
                s.reloadPending = false
                if !again { s.isLoading = false }
                return again
            }
            setLoadError(failure)
            if !again {
                statusDidChange()
                return
            }
        }
    }

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
        let before = state.withLock { $0.version }
        let data = try await strategy.load(key)
        let loaded = try data.map { try decodeValue($0, as: strategy.valueEncoding) } ?? initialValue
        let (value, changed) = mutate { s -> (Value, Bool) in
            s.loaded = true
            guard s.version == before, replacingUnsaved || s.version == s.persistedVersion else {
                return (s.value, false)
            }
            return (loaded, adoptStored(loaded, in: &s, keepingUnsavedWrite: false) ?? false)
        }
        if changed { valueDidChange() }
        return value
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
            try await flush()  // a write made here and not stored yet is newer: `body` starts from it
            // Each attempt ends within the store's deadlines; no new one starts after the
            // context's lock timeout, so a value that keeps changing elsewhere ends in `.busy`.
            let giveUp = ContinuousClock.now + context.lockTimeout
            while true {
                if ContinuousClock.now >= giveUp {
                    throw CofferError(
                        .busy,
                        "\(backing) kept changing elsewhere for \(context.lockTimeout.inSeconds.secondsText) s; "
                            + "the update was not applied")
                }
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
                let changed = adopt(value)
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
