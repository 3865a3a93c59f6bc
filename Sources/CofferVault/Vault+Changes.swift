// Changes from elsewhere: observing the items other processes change, and catching up to tell.
public import CofferCore
import CofferRuntime
import Foundation

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
        observers.add(handler) {
            let path = (try? fs.resolve(url.path)) ?? url.path
            state.withLock { session in
                session?.outside = OutsideChanges()
                session?.outside.tracking = true
            }
            let name = DurableIO.lastComponent(of: path)
            return FileWatcher.shared.watch(directory: DurableIO.parentDirectory(of: path)) { [weak self] names in
                if let names, !names.isEmpty, !names.contains(name) { return }
                self?.deliverOutsideChanges(checkingPath: names.map { !$0.isEmpty } ?? true)
            }
        } stopped: { [weak self] in
            self?.state.withLock { $0?.outside = OutsideChanges() }
        }
    }

    /// Catches up with the file and tells the observers which items other writers changed.
    private func deliverOutsideChanges(checkingPath: Bool) {
        let change: Set<VaultItemID>??
        do {
            change = try state.withLock { session -> Set<VaultItemID>?? in
                // Locked: nothing can be read, and every reader will say so.
                guard session != nil else { return .some(nil) }
                let changes = try session!.journal.refresh(checkingPath: checkingPath)
                if !changes.isEmpty { try session!.apply(changes) }
                return session!.outside.take()
            }
        } catch {
            change = .some(nil)  // removed or damaged: every observer rereads and reports the error
        }
        guard case .some(let items) = change else { return }
        observers.notify(items)
    }
}

/// What other writers changed, collected for ``Vault/observeChanges(_:)``.
struct OutsideChanges: Sendable {
    /// Whether anyone observes (else nothing is collected).
    var tracking = false
    /// Set while records from other writers are applied.
    var collecting = false
    var items: Set<ItemKey> = []
    /// The file was replaced (compacted elsewhere): anything may have changed.
    var all = false

    /// What to tell observers, emptied; `nil` inside means "anything".
    mutating func take() -> Set<VaultItemID>?? {
        guard all || !items.isEmpty else { return .none }
        defer {
            items = []
            all = false
        }
        return .some(all ? nil : Set(items.map { VaultItemID(service: $0.service.string, account: $0.account.string) }))
    }
}

extension Vault: WatchStoppable {
    package func stopWatching() { observers.stopAll() }
}
