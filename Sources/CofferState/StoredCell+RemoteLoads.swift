// The remote path's loads: they run in the background and adopt what they read unless a newer
// write was made here meanwhile; a change from elsewhere reloads, coalesced with a load running.
import CofferCore
import Foundation

extension StoredCell {
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
        guard case .success(let binding?) = binding(), let remote = binding.remote else { return false }
        let key = binding.key
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
}
