// What a ``StoredMap`` needs of a cell beyond a `@Stored`'s: removing the stored value (the key
// reads its default again), and telling the map's `changes` that the value in memory changed.
package import CofferCore
import Foundation
import Synchronization

extension StoredCell {
    /// Removes the key from the store, and makes the default the value in memory: a later read
    /// gives ``initialValue`` until something is stored again. Writes at once, even inside a
    /// ``batch(_:)``.
    /// - Throws: ``CofferError`` when the backing cannot be resolved or the store cannot remove
    ///   the key (also in ``error``); the value in memory is then unchanged.
    func removeStored() throws {
        let resolved: StoreBinding?
        switch binding() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let binding): resolved = binding
        }
        if resolved?.remote != nil {
            // A synchronous caller of a remote store: the async removal, on Coffer's threads.
            return try Offload.wait { try await self.removeStoredAsync() }
        }
        // Under the persist lock, as a save: a setter's write of this cell persisting meanwhile
        // lands wholly before or wholly after the removal, never half-way.
        let outcome: Result<Bool, CofferError> = persistLock.withLock { _ in
            if let binding = resolved {
                do {
                    try binding.strategy.remove(binding.key)
                } catch {
                    return .failure(.wrapping(error, "removing \(backing)"))
                }
            }
            return .success(adoptRemoval())
        }
        try endRemoval(outcome)
    }

    /// ``removeStored()`` without blocking a thread: a remote store is awaited (after the writes
    /// of this key still on their way, so none of them lands after the removal), a local one is
    /// written on Coffer's threads.
    func removeStoredAsync() async throws {
        switch await bindingOffPool() {
        case .failure(let error):
            setSaveError(error)
            throw error
        case .success(let binding?):
            guard let remote = binding.remote else { return try await Offload.run { try self.removeStored() } }
            try? await flush()  // its failure is in `saveError`; the removal comes after it either way
            let outcome: Result<Bool, CofferError>
            do {
                try await remote.remove(binding.key)
                outcome = .success(adoptRemoval())
            } catch {
                outcome = .failure(.wrapping(error, "removing \(backing)"))
            }
            try endRemoval(outcome)
        case .success(nil):
            try endRemoval(.success(adoptRemoval()))
        }
    }

    /// Makes the default the value in memory, as the store now holds no value; returns whether
    /// the value changed. Counts as a write: an `update` that began before does not put its
    /// older result back over the removal.
    private func adoptRemoval() -> Bool {
        mutate { s in
            s.writes += 1
            return adoptStored(initialValue, in: &s, keepingUnsavedWrite: false) ?? false
        }
    }

    /// Records a removal's outcome, tells observers and the key's siblings, or throws.
    private func endRemoval(_ outcome: Result<Bool, CofferError>) throws {
        switch outcome {
        case .success(let changed):
            setSaveError(nil)
            if changed { valueDidChange() }
            notifySiblings()
        case .failure(let error):
            setSaveError(error)
            throw error
        }
    }

    /// The binding, once the backing has resolved to a store; `nil` before, or for memory.
    var resolvedBinding: StoreBinding? {
        state.withLock { s in
            guard case .store(let binding) = s.resolution else { return nil }
            return binding
        }
    }

    /// Whether a write of this cell to a remote store is still on its way (made in memory, not
    /// yet acknowledged by the server).
    var hasRemoteWriteOnItsWay: Bool {
        state.withLock { s in
            guard case .store(let binding) = s.resolution, binding.remote != nil else { return false }
            return s.writerActive || s.version != s.persistedVersion
        }
    }

    /// Tells the `changes` of the maps on this cell's store that its key changed. Called only
    /// while some map's `changes` is iterated (``MapChanges/isListened``).
    func reportToMapChanges() {
        guard case .store(let binding) = state.withLock({ $0.resolution }), let store = binding.storeID else { return }
        MapChanges.tell(StoreChange(keys: [binding.key]), in: store)
    }
}

/// The `changes` streams of every ``StoredMap`` being iterated, by store: a cell whose value
/// changed in this process tells those of its store, in O(1) (one lookup, never a scan of the
/// live keys).
package enum MapChanges {
    /// How many `changes` streams are iterated in the process: while none is, a cell's change
    /// costs one atomic load more.
    private static let listened = Atomic<Int>(0)
    private static let feeds = Locked<[StoreID: [ObjectIdentifier: any StoreChangeListener]]>([:])

    static var isListened: Bool { listened.load(ordering: .relaxed) > 0 }

    static func add(_ feed: any StoreChangeListener, for store: StoreID) {
        feeds.withLock { $0[store, default: [:]][ObjectIdentifier(feed)] = feed }  // in place
        listened.add(1, ordering: .relaxed)
    }

    static func remove(_ feed: any StoreChangeListener, for store: StoreID) {
        let removed = feeds.withLock { all -> Bool in
            guard all[store]?.removeValue(forKey: ObjectIdentifier(feed)) != nil else { return false }
            if all[store]!.isEmpty { all[store] = nil }
            return true
        }
        if removed { listened.subtract(1, ordering: .relaxed) }
    }

    static func tell(_ change: StoreChange, in store: StoreID) {
        let listeners = feeds.withLock { $0[store].map { Array($0.values) } ?? [] }
        for listener in listeners { listener.storeDidChange(change) }
    }

    /// How many `changes` streams of `strategy`'s store are iterated (a test checks they are let go).
    package static func count(of strategy: any PersistenceStrategy) -> Int {
        guard let store = strategy.id else { return 0 }
        return feeds.withLock { $0[store]?.count ?? 0 }
    }
}
