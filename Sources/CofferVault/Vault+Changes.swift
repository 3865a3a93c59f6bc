// Changes from elsewhere: observing the items other processes change (the journal-store engine's watch).
public import CofferCore
import CofferJournal

extension Vault {
    // MARK: - Changes from elsewhere

    /// Starts telling `handler` which items other processes (the `coffer` command, another
    /// `Vault` on the same file) change: their identities, or `nil` when anything may have (the
    /// file was compacted elsewhere, the vault was unlocked after being locked). The vault's
    /// directory is watched while at least one observation is alive (`FileWatcher`: inotify,
    /// else polling). Changes that arrive while the vault is locked are reported as `nil` once
    /// it can tell: a reader then gets ``CofferError/Code/locked`` until it is unlocked, and
    /// everything is reported again at ``unlock(_:kdfLimit:)``.
    public func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation {
        store.observeChanges(handler)
    }
}

extension Vault: WatchStoppable {
    package func stopWatching() { store.stopWatching() }
}
