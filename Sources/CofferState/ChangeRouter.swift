package import CofferCore

/// A cell that follows changes made outside its strategy instance.
protocol OutsideChangeReceiver: AnyObject, Sendable {
    /// The key may have changed outside: reload it, and notify only if the value differs.
    func reloadAfterOutsideChange()
}

/// Told of every outside change of a store, whatever the keys (a ``StoredMap``'s `changes`,
/// while someone iterates it).
protocol StoreChangeListener: AnyObject, Sendable {
    /// The store changed outside this process's instance: `change.keys`, or any key (`nil`).
    func storeDidChange(_ change: StoreChange)
}

/// Routes each store's outside changes to the cells bound to the changed keys.
///
/// Stores are told apart by their identity (``PersistenceStrategy/id``), not by the strategy
/// instance: the `.vault` backings make a strategy for each property, and every property of one
/// vault service shares one observation of it. A cell subscribes when it first resolves its backing (its first read, load or write) on a
/// ``ChangeObservingPersistenceStrategy``, and unsubscribes when it is dropped (its last
/// property went away). The strategy is observed while at least one cell is subscribed to it:
/// the watching starts with the first observed or loaded property on a store and stops, thread
/// and descriptors included, with the last. A ``StoreChangeListener`` (a ``StoredMap``'s
/// `changes` being iterated) is told every change of its store, and keeps it observed like a cell.
package enum ChangeRouter {
    private struct Subscription: Sendable {
        var observation: StoreObservation?
        /// An observation is held or being started; false again after a start failed, so the
        /// next subscriber tries again (a missing directory created since, say).
        var observing = false
        var cells: [String: [ObjectIdentifier: any OutsideChangeReceiver]] = [:]
        /// Listeners to every change of the store (they count in `count` too).
        var listeners: [ObjectIdentifier: any StoreChangeListener] = [:]
        var count = 0
    }

    private static let subscriptions = Locked<[StoreID: Subscription]>([:])

    /// Subscribes `cell` to outside changes of `key` in `strategy`'s store; returns what
    /// unsubscribes it, or `nil` when the strategy cannot tell or has no identity (then nothing is
    /// watched). The store is observed through the first subscriber's strategy.
    static func subscribe(
        _ cell: any OutsideChangeReceiver, to strategy: any PersistenceStrategy, key: String
    ) -> Unsubscribe? {
        guard let observable = strategy as? any ChangeObservingPersistenceStrategy, let storeID = strategy.id
        else { return nil }
        let cellID = ObjectIdentifier(cell)
        // Every mutation below goes through the dictionary's in-place accessors: a copy of the
        // store's `Subscription` taken out and written back would copy its table of cells, one
        // entry per live key, on each call (the cost of a first use grew with the live keys).
        let start = subscriptions.withLock { all -> Bool in
            all[storeID, default: Subscription()].cells[key, default: [:]][cellID] = cell
            all[storeID]!.count += 1
            defer { all[storeID]!.observing = true }
            return !all[storeID]!.observing
        }
        if start { startObserving(observable, id: storeID) }
        return Unsubscribe(store: storeID, key: key, cell: cellID)
    }

    /// Subscribes `listener` to every outside change of `strategy`'s store, keeping the store
    /// observed while it is subscribed (as a cell does); `nil` when the strategy cannot tell or
    /// has no identity. Unsubscribed by ``unsubscribe(_:)``.
    static func subscribe(listener: any StoreChangeListener, to strategy: any PersistenceStrategy) -> Unsubscribe? {
        guard let observable = strategy as? any ChangeObservingPersistenceStrategy, let storeID = strategy.id
        else { return nil }
        let listenerID = ObjectIdentifier(listener)
        let start = subscriptions.withLock { all -> Bool in
            // In place, as in `subscribe(_:to:key:)`.
            all[storeID, default: Subscription()].listeners[listenerID] = listener
            all[storeID]!.count += 1
            defer { all[storeID]!.observing = true }
            return !all[storeID]!.observing
        }
        if start { startObserving(observable, id: storeID) }
        return Unsubscribe(store: storeID, key: nil, cell: listenerID)
    }

    /// Starts the one observation of a store, for its first subscriber.
    private static func startObserving(_ observable: any ChangeObservingPersistenceStrategy, id storeID: StoreID) {
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
                    "changes made elsewhere cannot be followed for \(type(of: observable)): \(error)",
                    path: nil))
        }
        let unused = subscriptions.withLock { all -> StoreObservation? in
            guard all[storeID] != nil, all[storeID]!.observation == nil else { return observation }
            all[storeID]!.observation = observation
            if observation == nil { all[storeID]!.observing = false }
            return nil
        }
        // Lost a race with another first subscriber. Cancelled here: a cell subscribes with
        // none of its locks held (`StoredCell.binding()`), so waiting for the watcher thread,
        // which may take them, cannot deadlock.
        if let unused { unused.cancel() }
    }

    /// What ``subscribe(_:to:key:)`` hands back.
    struct Unsubscribe: Sendable {
        /// The store (its id keeps the object it names alive while subscribed).
        let store: StoreID
        /// The key, or `nil` for a listener to every change of the store.
        let key: String?
        let cell: ObjectIdentifier
    }

    static func unsubscribe(_ token: Unsubscribe) {
        let ended = subscriptions.withLock { all -> StoreObservation? in
            // In place, as in `subscribe`: no copy of the store's table of cells.
            if let key = token.key {
                guard all[token.store]?.cells[key]?.removeValue(forKey: token.cell) != nil else { return nil }
                if all[token.store]!.cells[key]!.isEmpty { all[token.store]!.cells[key] = nil }
            } else {
                guard all[token.store]?.listeners.removeValue(forKey: token.cell) != nil else { return nil }
            }
            all[token.store]!.count -= 1
            guard all[token.store]!.count == 0 else { return nil }
            return all.removeValue(forKey: token.store)?.observation
        }
        ended?.cancel()  // with no lock held (it may wait for the watcher thread)
    }

    private static func deliver(_ change: StoreChange, from store: StoreID) {
        let (cells, listeners) = subscriptions.withLock { all -> ([any OutsideChangeReceiver], [any StoreChangeListener]) in
            guard let subscription = all[store] else { return ([], []) }
            let listeners = subscription.listeners.isEmpty ? [] : Array(subscription.listeners.values)
            guard let keys = change.keys else { return (subscription.cells.values.flatMap(\.values), listeners) }
            return (keys.flatMap { subscription.cells[$0].map { Array($0.values) } ?? [] }, listeners)
        }
        for cell in cells { cell.reloadAfterOutsideChange() }
        for listener in listeners { listener.storeDidChange(change) }
    }

    /// How many observations of `strategy`'s store the router holds (0 or 1), and how many cells
    /// follow it: a test checks that properties of one store share one observation.
    package static func observation(of strategy: any PersistenceStrategy) -> (observations: Int, cells: Int) {
        guard let id = strategy.id else { return (0, 0) }
        return subscriptions.withLock { all in
            guard let subscription = all[id] else { return (0, 0) }
            return (subscription.observation == nil ? 0 : 1, subscription.count)
        }
    }
}
