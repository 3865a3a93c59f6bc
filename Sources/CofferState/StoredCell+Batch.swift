// Taking part in `batch { }`: a write inside a batch is deferred to its end, where the batch
// notifies each cell once and persists each store's changes as one commit (Batch.swift).
import CofferCore

extension StoredCell: BatchParticipant {
    func batchDidEnd() -> any SourceNode {
        notifyOwnObservers()
        return self
    }

    func batchBinding() -> StoreBinding? {
        switch binding() {
        case .failure(let error):
            setSaveError(error)
            return nil
        case .success(nil):
            return nil
        case .success(let binding?):
            guard let remote = binding.remote else { return binding }
            // A remote store: the background writer persists it, in order with the other writes.
            scheduleWrite(remote, key: binding.key)
            return nil
        }
    }

    func withPersistLock(_ body: () -> Void) {
        persistLock.withLock { _ in body() }
    }

    func pendingChange(encoding: ValueEncoding) -> PendingChange? {
        let (value, version, persisted) = state.withLock { ($0.value, $0.version, $0.persistedVersion) }
        guard version != persisted else { return nil }
        if let isNil, isNil(value) { return PendingChange(version: version, data: .success(nil)) }
        do {
            return PendingChange(version: version, data: .success(try encodeValue(value, as: encoding)))
        } catch {
            return PendingChange(version: version, data: .failure(.wrapping(error, "encoding for \(backing)")))
        }
    }

    func markPersisted(_ version: UInt64) {
        state.withLock { $0.persistedVersion = max($0.persistedVersion, version) }
    }

    func reportPersistOutcome(_ error: CofferError?) {
        setSaveError(error)
        if error == nil { notifySiblings() }
    }
}
