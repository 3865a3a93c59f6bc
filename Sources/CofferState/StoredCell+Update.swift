// `update { }`: read, transform with no lock held, and store only if nobody wrote meanwhile —
// the compare-and-swap loop, on memory, on a local store, and (synchronously) on a remote one;
// on a remote store that can lock the key, the attempt after a lost swap holds the key locked.
import CofferCore
import Foundation

extension StoredCell {
    /// Reads, transforms and writes the value as one step (see ``Stored/update(_:)``).
    @discardableResult
    func update(_ body: (inout Value) throws -> Void) throws -> Value {
        let resolved: StoreBinding?
        switch self.binding() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let binding): resolved = binding
        }
        // `body` runs with no lock held (it may read or write this property, or others), so
        // each form is optimistic: read, transform, then apply only if nothing changed meanwhile.
        guard let binding = resolved else {
            while true {  // memory: compare the version
                let (current, version) = read()
                var value = current
                try body(&value)
                let applied: Bool? = mutate { s in
                    guard s.version == version else { return nil }
                    return adoptStored(value, in: &s, keepingUnsavedWrite: false)
                }
                if let changed = applied {
                    if changed { valueDidChange() }
                    return value
                }
            }
        }
        let (strategy, key, encoding) = (binding.strategy, binding.key, binding.encoding)
        do {
            // A write made here and not saved yet (inside a batch, or on its way to a remote
            // store) is newer than the store: saved first, so `body` starts from it.
            if binding.remote != nil {
                try Offload.wait { try await self.flush() }
            } else if let error = persist(force: false, resolved: .success(binding)) {
                throw error
            }
            // Each attempt ends by the store's own limits; no new one starts after the context's
            // lock timeout, so a value that keeps changing elsewhere ends in `.busy`.
            let giveUp = ContinuousClock.now + context.lockTimeout
            let locking = binding.remote as? any KeyLockingPersistenceStrategy
            var lost = false
            while true {
                try checkUpdateBudget(giveUp)
                if lost, let locking { return try updateLocked(locking, key: key, encoding: encoding, by: body) }
                let before = state.withLock { $0.writes }
                let current = try strategy.load(key)
                let (value, next) = try transformed(current, as: encoding, by: body)
                let swapped: Bool
                if let swappable = strategy as? any CompareAndSwapPersistenceStrategy {
                    swapped = try swappable.compareAndSwap(key, expected: current, new: next)  // across processes
                } else {
                    // Within this process only: the persist lock serialises this property's writers.
                    swapped = try persistLock.withLock { _ throws -> Bool in
                        guard try strategy.load(key) == current else { return false }
                        if let next { try strategy.save(next, for: key) } else { try strategy.remove(key) }
                        return true
                    }
                }
                guard swapped else {  // another writer got in between: run `body` again
                    lost = true
                    continue
                }
                updateDidSucceed(changed: persistLock.withLock { _ in adopt(value, ifNoWriteSince: before) })
                return value
            }
        } catch let error as CofferError {
            setSaveError(error)
            throw error
        }
    }

    /// The attempt after a lost swap, on a store that can lock the key while `body` runs here
    /// (PostgreSQL): one transaction, its waiters served in turn by the server, so no update of
    /// a contended key starves as retried swaps can (three processes × 300 increments on a
    /// loaded machine left one of them losing every swap for 10 s). Only after a lost swap:
    /// holding the lock across `body` makes other writers wait on this caller's thread or task
    /// being scheduled, a cost worth paying only under contention.
    private func updateLocked(
        _ store: any KeyLockingPersistenceStrategy, key: String, encoding: ValueEncoding,
        by body: (inout Value) throws -> Void
    ) throws -> Value {
        let before = state.withLock { $0.writes }
        let lock = try Offload.wait { try await store.lock(key) }
        let value: Value
        let next: Data?
        do {
            (value, next) = try transformed(lock.current, as: encoding, by: body)
        } catch {
            try? Offload.wait { await lock.release() }
            throw error
        }
        try Offload.wait { try await lock.store(next) }
        updateDidSucceed(changed: persistLock.withLock { _ in adopt(value, ifNoWriteSince: before) })
        return value
    }

    /// `body` applied to the value stored as `current` (the initial value when nothing is), and
    /// the bytes that store the result (`nil`: the key is removed).
    func transformed(_ current: Data?, as encoding: ValueEncoding, by body: (inout Value) throws -> Void) throws
        -> (value: Value, next: Data?)
    {
        var value = try current.map { try decodeValue($0, as: encoding) } ?? initialValue
        try body(&value)
        return (value, isNilValue(value) ? nil : try encodeValue(value, as: encoding))
    }

    /// An `update`'s write landed: no save error, observers told when memory changed, and the
    /// other cells on the key reload.
    func updateDidSucceed(changed: Bool) {
        setSaveError(nil)
        if changed { valueDidChange() }
        notifySiblings()
    }

    /// Ends an `update` that would start a new attempt after `giveUp` (the context's lock
    /// timeout after it began): the value kept changing elsewhere.
    func checkUpdateBudget(_ giveUp: ContinuousClock.Instant) throws(CofferError) {
        guard ContinuousClock.now >= giveUp else { return }
        throw CofferError(
            .busy,
            "\(backing) kept changing elsewhere for \(context.lockTimeout.inSeconds.secondsText) s; "
                + "the update was not applied")
    }
}
