// Writing: a setter's write (memory, observers, then the store), `save(_:)`, and persisting the
// newest value to a local store under the cell's persist lock.
import CofferCore
import Foundation

extension StoredCell {
    /// A setter: the value in memory now, observers told, then persisted — to a local store
    /// before returning, to a remote one by the background writer. Inside a ``batch(_:)``, the
    /// batch notifies and persists when it ends. A write equal to the value does nothing.
    func write(_ newValue: Value, persist shouldPersist: Bool = true) {
        loadIfNeeded()
        let changed = mutate { s in
            if let isEqual, isEqual(s.value, newValue) { return false }
            s.value = newValue
            s.version += 1
            s.writes += 1
            return true
        }
        guard changed else { return }
        if let scope = BatchScope.current {
            Graph.bumpEpoch()
            scope.add(self)
            return
        }
        valueDidChange()
        if shouldPersist { persistAfterWrite() }
    }

    /// Persists a write: at once on a local store; on a remote one, by the background writer,
    /// so the setter returns without waiting on the network.
    private func persistAfterWrite() {
        let resolved = binding()
        if case .success(let binding?) = resolved, let remote = binding.remote {
            scheduleWrite(remote, key: binding.key)
        } else {
            persist(force: false, resolved: resolved)
        }
    }

    /// Sets the value and writes it to the strategy before returning, even inside a ``batch(_:)``.
    ///
    /// Unlike the setter, this writes even when `value` equals the current one, so it also
    /// retries a save that failed earlier.
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored; the value stays in
    ///   memory and ``error`` holds the failure.
    func save(_ value: Value) throws {
        let resolved = binding()
        if case .success(let binding?) = resolved, binding.remote != nil {
            // A synchronous caller of a remote store: the async save, on Coffer's threads.
            return try Offload.wait { try await self.saveRemote(value) }
        }
        write(value, persist: false)
        if let error = persist(force: true, resolved: resolved) { throw error }
    }

    /// Writes a value not stored yet (a batch's, say) to a local store now.
    func persistPending() -> CofferError? { persist(force: false, resolved: binding()) }

    /// Writes the newest value to the strategy unless it is there already, and records the
    /// outcome in ``error``. Returns the failure, if any.
    @discardableResult
    func persist(force: Bool, resolved: Result<StoreBinding?, CofferError>) -> CofferError? {
        let outcome: CofferError?? = persistLock.withLock { _ in
            let binding: StoreBinding
            switch resolved {
            case .failure(let error): return .some(error)
            case .success(nil): return .none
            case .success(let resolved?): binding = resolved
            }
            let (value, version, persisted) = state.withLock { ($0.value, $0.version, $0.persistedVersion) }
            guard force || version != persisted else { return .none }
            do {
                if let isNil, isNil(value) {
                    try binding.strategy.remove(binding.key)
                } else {
                    try binding.strategy.save(encodeValue(value, as: binding.encoding), for: binding.key)
                }
                state.withLock { $0.persistedVersion = max($0.persistedVersion, version) }
                return .some(nil)
            } catch {
                return .some(.wrapping(error, "saving \(backing)"))
            }
        }
        guard let result = outcome else { return nil }
        setSaveError(result)
        if result == nil { notifySiblings() }
        return result
    }

    /// Encodes the value for the strategy.
    func encodeValue(_ value: Value, as encoding: ValueEncoding) throws -> Data {
        guard let coding else { throw notCodable() }
        return try coding.encode(value, as: encoding)
    }
}
