// The observable status of a cell beside its value: the last load and save failures, and
// whether a background load runs.
import CofferCore
import Observation

extension StoredCell {
    /// The last load or save failure, or `nil` once a load or save succeeds. Observable.
    var error: CofferError? {
        status { $0.error }
    }

    /// The last load failure, cleared by the next successful load. Observable.
    var loadError: CofferError? { status { $0.loadError } }

    /// The last save failure, cleared by the next successful save. Observable.
    var saveError: CofferError? { status { $0.saveError } }

    /// Whether a load from a remote store runs in the background. Observable.
    var isLoading: Bool { status { $0.isLoading } }

    /// Reads one of the observable status fields (they share one key path for Observation).
    private func status<T: Sendable>(_ field: (State) -> T) -> T {
        registrar.access(self, keyPath: errorKeyPath)
        loadIfNeeded()
        return state.withLock { field($0) }
    }

    /// Tells Observation that the status (errors, loading) changed.
    func statusDidChange() {
        registrar.withMutation(of: self, keyPath: errorKeyPath) {}
    }

    /// Records the outcome of a load: ``loadError`` and ``error``, notifying Observation when
    /// either appears, changes or clears.
    func setLoadError(_ error: CofferError?) {
        let notify = state.withLock { s in
            let notify = s.error != nil || s.loadError != nil || error != nil
            s.loadError = error
            s.error = error  // the outcome of the latest load or save
            return notify
        }
        if notify { statusDidChange() }
    }

    /// Records the outcome of a save: ``saveError`` and ``error``.
    func setSaveError(_ error: CofferError?) {
        let notify = state.withLock { s in
            let notify = s.error != nil || s.saveError != nil || error != nil
            s.saveError = error
            s.error = error
            return notify
        }
        if notify { statusDidChange() }
    }
}
