// The remote path's writes: a store that waits on a network (an `AsyncPersistenceStrategy`, such
// as CofferPostgres's) is never waited on by a setter. Writes go out in order behind the setter,
// one in flight per key, the newest value each time; `flush()` waits for them.
import CofferCore
import Foundation

extension StoredCell {

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
        let resolved: StoreBinding?
        switch binding() {
        case .failure(let error): throw error
        case .success(let binding): resolved = binding
        }
        guard let binding = resolved else { return }
        let key = binding.key
        guard let remote = binding.remote else {
            let strategy = binding.strategy
            try await Offload.run {
                if let error = self.persistPending() { throw error }
                try strategy.flush()
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
}

/// What the background writer does next.
private enum WriterStep<Value> {
    case write(Value, UInt64)
    /// Memory and store agree: the writer stopped, in the same critical section as the check, so
    /// a setter that comes after sees it stopped and starts it again.
    case done([CheckedContinuation<Void, any Error>])
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
