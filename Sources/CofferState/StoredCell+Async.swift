// The `try await` forms of `load`, `save` and `update` (Stored's async API): a remote store is
// awaited without blocking a thread; a local one runs on Coffer's threads.
import CofferCore
import Foundation

extension StoredCell {
    /// Reads the stored value now. A remote store is read without blocking a thread; a local
    /// one on Coffer's threads (its read may wait for another process's lock).
    func loadAsync() async throws -> Value {
        switch await bindingOffPool() {
        case .failure(let error):
            setLoadError(error)
            throw error
        case .success(let binding?):
            if let remote = binding.remote { return try await loadRemote(remote, key: binding.key) }
            return try await Offload.run { try self.load(keepingUnsavedWrite: false) }
        case .success(nil):
            return try load(keepingUnsavedWrite: false)
        }
    }

    /// Sets the value and waits until the store has it.
    func saveAsync(_ value: Value) async throws {
        switch await bindingOffPool() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let binding?) where binding.remote != nil:
            try await saveRemote(value)
        case .success:
            try await Offload.run { try self.save(value) }
        }
    }

    /// Reads, transforms and writes as one step, without blocking a thread on a remote store.
    func updateAsync(_ body: (inout Value) throws -> Void) async throws -> Value {
        let resolved: StoreBinding?
        switch await bindingOffPool() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let binding): resolved = binding
        }
        guard let key = resolved?.key, let remote = resolved?.remote else {
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
            let locking = remote as? any KeyLockingPersistenceStrategy
            var lost = false
            while true {
                let before = state.withLock { $0.writes }
                try checkUpdateBudget(giveUp)
                if lost, let locking {
                    // After a lost swap, one transaction with the key locked while `body` runs
                    // here: waiters are served in turn, where retried swaps can starve (see
                    // `updateLocked`).
                    let lock = try await locking.lock(key)
                    let value: Value
                    let next: Data?
                    do {
                        (value, next) = try transformed(lock.current, as: remote.valueEncoding, by: body)
                    } catch {
                        await lock.release()
                        throw error
                    }
                    try await lock.store(next)
                    updateDidSucceed(changed: adopt(value, ifNoWriteSince: before))
                    return value
                }
                let current = try await remote.load(key)
                let (value, next) = try transformed(current, as: remote.valueEncoding, by: body)
                let swapped: Bool
                if remote is any CompareAndSwapPersistenceStrategy {
                    swapped = try await remote.compareAndSwap(key, expected: current, new: next)
                } else {
                    if let next { try await remote.save(next, for: key) } else { try await remote.remove(key) }
                    swapped = true
                }
                guard swapped else {  // another writer got in between: run `body` again
                    lost = true
                    continue
                }
                updateDidSucceed(changed: adopt(value, ifNoWriteSince: before))
                return value
            }
        } catch let error as CofferError {
            setSaveError(error)
            throw error
        }
    }
}
