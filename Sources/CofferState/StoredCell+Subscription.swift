// Following changes made elsewhere: the subscription a cell makes when it resolves, the reload
// a change from another process brings, and the reload of the cells that share its key with
// another value type (siblings).
import CofferCore
import Synchronization

extension StoredCell {
    /// Subscribes the cell to outside changes of its store (``ChangeRouter``: one observation per
    /// store identity, however many cells). Called once, by the thread whose resolution was
    /// stored, with no lock held.
    func subscribe(to binding: StoreBinding) {
        let token = ChangeRouter.subscribe(self, to: binding.strategy, key: binding.key)
        let unused = state.withLock { s -> ChangeRouter.Unsubscribe? in
            s.subscribing = false
            guard !s.detached else { return token }
            s.subscription = token
            return nil
        }
        if let unused { ChangeRouter.unsubscribe(unused) }
    }

    /// Tells the properties bound to this key with another value type that it was stored anew.
    func notifySiblings() {
        guard let registryKey, hasSiblings.load(ordering: .relaxed) else { return }
        for sibling in CellRegistry.siblings(of: registryKey) { sibling.reloadAfterSiblingChange() }
    }
}

extension StoredCell: RegisteredCell, OutsideChangeReceiver {
    func reloadAfterSiblingChange() {
        if reloadRemotely() { return }
        _ = try? load(keepingUnsavedWrite: true)  // a failure is recorded in `error`
    }

    /// Another process (or instance) changed the key: reload it. The value in memory is kept
    /// when that fails (a locked vault, a removed file), and `error` says why. A remote store is
    /// reloaded in the background: this runs on the store's feed, which must not wait.
    func reloadAfterOutsideChange() {
        guard state.withLock({ $0.loaded && !$0.detached }) else { return }  // nobody read it yet
        if reloadRemotely() { return }
        _ = try? load(keepingUnsavedWrite: true)
    }

    var canBeTakenUp: Bool {
        state.withLock { s in
            guard s.error == nil, s.loadError == nil, s.saveError == nil, !s.detached else { return false }
            guard s.loaded else { return s.firstLoad == nil }
            // Memory only: a new property starts from its initial value, as before. A write not
            // yet stored (a batch's, a remote one on its way) is the newest value: kept.
            guard case .store = s.resolution else { return false }
            return true
        }
    }

    /// A new property took this cell up after its last property went away. A cell that follows
    /// its store is as current as a property that stayed alive: changes made elsewhere reach it
    /// through the store's observation. One that does not follow (the store cannot tell, or its
    /// watch failed) rereads the key, as a new cell would have loaded it. A cell never loaded
    /// loads on its first read, as ever.
    func reloadAfterTakeUp() {
        let following = state.withLock { s -> ChangeRouter.Unsubscribe?? in s.loaded ? .some(s.subscription) : nil }
        guard case .some(let subscription) = following else { return }  // never loaded
        if let subscription, ChangeRouter.isObserving(subscription) { return }
        reloadAfterSiblingChange()
    }

    /// The last property using this cell went away: stop following outside changes.
    func detach() {
        let subscription = state.withLock { s -> ChangeRouter.Unsubscribe? in
            s.detached = true
            defer { s.subscription = nil }
            return s.subscription
        }
        if let subscription { ChangeRouter.unsubscribe(subscription) }
    }
}
