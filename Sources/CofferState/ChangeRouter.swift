import CofferCore

/// A cell that follows changes made outside its strategy instance.
protocol OutsideChangeReceiver: AnyObject, Sendable {
    /// The key may have changed outside: reload it, and notify only if the value differs.
    func reloadAfterOutsideChange()
}

/// Routes each strategy's outside changes to the cells bound to the changed keys.
///
/// A cell subscribes when it first resolves its backing (its first read, load or write) on a
/// ``ChangeObservingPersistenceStrategy``, and unsubscribes when it is dropped (its last
/// property went away). The strategy is observed while at least one cell is subscribed to it:
/// the watching starts with the first observed or loaded property on a store and stops, thread
/// and descriptors included, with the last.
enum ChangeRouter {
    private struct Subscription: Sendable {
        var observation: StoreObservation?
        /// An observation is held or being started; false again after a start failed, so the
        /// next subscriber tries again (a missing directory created since, say).
        var observing = false
        var cells: [String: [ObjectIdentifier: any OutsideChangeReceiver]] = [:]
        var count = 0
    }

    private static let subscriptions = Locked<[ObjectIdentifier: Subscription]>([:])

    /// Subscribes `cell` to outside changes of `key` in `strategy`; returns what unsubscribes it,
    /// or `nil` when the strategy cannot tell (then nothing is watched).
    static func subscribe(
        _ cell: any OutsideChangeReceiver, to strategy: any PersistenceStrategy, key: String
    ) -> Unsubscribe? {
        guard let observable = strategy as? any ChangeObservingPersistenceStrategy,
            type(of: strategy) is AnyObject.Type
        else { return nil }
        let storeID = ObjectIdentifier(strategy as AnyObject)
        let cellID = ObjectIdentifier(cell)
        let start = subscriptions.withLock { all -> Bool in
            var subscription = all[storeID] ?? Subscription()
            subscription.cells[key, default: [:]][cellID] = cell
            subscription.count += 1
            defer { subscription.observing = true; all[storeID] = subscription }
            return !subscription.observing
        }
        if start {
            // Observed outside the lock: a handler may already be running and take it.
            let observation: StoreObservation?
            do {
                observation = try observable.observeChanges { change in deliver(change, from: storeID) }
            } catch {
                // The cells still read and write; they do not follow outside changes until a later
                // subscriber's attempt succeeds. Said once, never silently.
                observation = nil
                CofferWarnings.warn(
                    CofferWarning(
                        .watchFailed,
                        "changes made elsewhere cannot be followed for \(type(of: strategy)): \(error)",
                        path: nil))
            }
            let unused = subscriptions.withLock { all -> StoreObservation? in
                guard all[storeID] != nil, all[storeID]!.observation == nil else { return observation }
                all[storeID]!.observation = observation
                if observation == nil { all[storeID]!.observing = false }
                return nil
            }
            // Lost a race with another first subscriber. Cancelled here: a cell subscribes with
            // none of its locks held (`StoredCell.target()`), so waiting for the watcher thread,
            // which may take them, cannot deadlock.
            if let unused { unused.cancel() }
        }
        return Unsubscribe(store: storeID, key: key, cell: cellID, anchor: strategy)
    }

    /// What ``subscribe(_:to:key:)`` hands back.
    struct Unsubscribe: Sendable {
        let store: ObjectIdentifier
        let key: String
        let cell: ObjectIdentifier
        /// Keeps the strategy (so its identifier) alive while subscribed.
        let anchor: any PersistenceStrategy
    }

    static func unsubscribe(_ token: Unsubscribe) {
        let ended = subscriptions.withLock { all -> StoreObservation? in
            guard var subscription = all[token.store],
                subscription.cells[token.key]?.removeValue(forKey: token.cell) != nil
            else { return nil }
            if subscription.cells[token.key]!.isEmpty { subscription.cells[token.key] = nil }
            subscription.count -= 1
            if subscription.count == 0 {
                all[token.store] = nil
                return subscription.observation
            }
            all[token.store] = subscription
            return nil
        }
        ended?.cancel()  // with no lock held (it may wait for the watcher thread)
    }

    private static func deliver(_ change: StoreChange, from store: ObjectIdentifier) {
        let cells = subscriptions.withLock { all -> [any OutsideChangeReceiver] in
            guard let subscription = all[store] else { return [] }
            guard let keys = change.keys else { return subscription.cells.values.flatMap(\.values) }
            return keys.flatMap { subscription.cells[$0].map { Array($0.values) } ?? [] }
        }
        for cell in cells { cell.reloadAfterOutsideChange() }
    }
}
