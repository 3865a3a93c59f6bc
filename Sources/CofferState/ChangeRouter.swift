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
    /// One store's subscribers. A class, so that a subscriber's token names it directly: leaving
    /// costs no lookup of the store, and no copy of its table of keys (one entry per live key).
    /// Every field is read and written under ``subscriptions``' lock only.
    fileprivate final class Subscription: @unchecked Sendable {
        // @unchecked Sendable: every access is under `ChangeRouter.subscriptions`' lock.
        var observation: StoreObservation?
        /// An observation is held or being started; false again after a start failed, so the
        /// next subscriber tries again (a missing directory created since, say).
        var observing = false
        /// The cells following each key: nearly always one, so a small array rather than a
        /// dictionary per key.
        var cells: [String: [(id: ObjectIdentifier, cell: any OutsideChangeReceiver)]] = [:]
        /// Listeners to every change of the store (they count in `count` too).
        var listeners: [ObjectIdentifier: any StoreChangeListener] = [:]
        var count = 0
        /// Still the store's entry in ``subscriptions`` (false once its last subscriber left).
        var isCurrent = true
    }

    private static let subscriptions = Locked<[StoreID: Subscription]>([:])

    /// The store's subscription, made when it has none; and whether the caller must start observing.
    private static func join(_ all: inout [StoreID: Subscription], _ storeID: StoreID) -> (Subscription, start: Bool) {
        let subscription: Subscription
        if let existing = all[storeID] {
            subscription = existing
        } else {
            subscription = Subscription()
            all[storeID] = subscription
        }
        subscription.count += 1
        defer { subscription.observing = true }
        return (subscription, !subscription.observing)
    }

    /// Subscribes `cell` to outside changes of `key` in `strategy`'s store; returns what
    /// unsubscribes it, or `nil` when the strategy cannot tell or has no identity (then nothing is
    /// watched). The store is observed through the first subscriber's strategy.
    static func subscribe(
        _ cell: any OutsideChangeReceiver, to strategy: any PersistenceStrategy, key: String
    ) -> Unsubscribe? {
        guard let observable = strategy as? any ChangeObservingPersistenceStrategy, let storeID = strategy.id
        else { return nil }
        let cellID = ObjectIdentifier(cell)
        let (subscription, start) = subscriptions.withLock { all in
            let joined = join(&all, storeID)
            joined.0.cells[key, default: []].append((cellID, cell))  // in place
            return joined
        }
        if start { startObserving(observable, id: storeID) }
        return Unsubscribe(store: storeID, subscription: subscription, key: key, cell: cellID)
    }

    /// Subscribes `listener` to every outside change of `strategy`'s store, keeping the store
    /// observed while it is subscribed (as a cell does); `nil` when the strategy cannot tell or
    /// has no identity. Unsubscribed by ``unsubscribe(_:)``.
    static func subscribe(listener: any StoreChangeListener, to strategy: any PersistenceStrategy) -> Unsubscribe? {
        guard let observable = strategy as? any ChangeObservingPersistenceStrategy, let storeID = strategy.id
        else { return nil }
        let listenerID = ObjectIdentifier(listener)
        let (subscription, start) = subscriptions.withLock { all in
            let joined = join(&all, storeID)
            joined.0.listeners[listenerID] = listener
            return joined
        }
        if start { startObserving(observable, id: storeID) }
        return Unsubscribe(store: storeID, subscription: subscription, key: nil, cell: listenerID)
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
            CofferWarning.warn(
                CofferWarning(
                    .watchFailed,
                    "changes made elsewhere cannot be followed for \(type(of: observable)): \(error)",
                    path: nil))
        }
        let unused = subscriptions.withLock { all -> StoreObservation? in
            guard let subscription = all[storeID], subscription.observation == nil else { return observation }
            subscription.observation = observation
            if observation == nil { subscription.observing = false }
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
        fileprivate let subscription: Subscription
        /// The key, or `nil` for a listener to every change of the store.
        let key: String?
        let cell: ObjectIdentifier
    }

    static func unsubscribe(_ token: Unsubscribe) {
        let ended = subscriptions.withLock { all -> StoreObservation? in
            let subscription = token.subscription
            // In place, as in `subscribe`: no copy of the store's table of cells.
            if let key = token.key {
                guard let index = subscription.cells.index(forKey: key),
                    let position = subscription.cells.values[index].firstIndex(where: { $0.id == token.cell })
                else { return nil }
                if subscription.cells.values[index].count == 1 {
                    subscription.cells.remove(at: index)
                } else {
                    subscription.cells.values[index].remove(at: position)
                }
            } else {
                guard subscription.listeners.removeValue(forKey: token.cell) != nil else { return nil }
            }
            subscription.count -= 1
            guard subscription.count == 0, subscription.isCurrent else { return nil }
            subscription.isCurrent = false
            all.removeValue(forKey: token.store)
            return subscription.observation
        }
        ended?.cancel()  // with no lock held (it may wait for the watcher thread)
    }

    private static func deliver(_ change: StoreChange, from store: StoreID) {
        let (cells, listeners) = subscriptions.withLock { all -> ([any OutsideChangeReceiver], [any StoreChangeListener]) in
            guard let subscription = all[store] else { return ([], []) }
            let listeners = subscription.listeners.isEmpty ? [] : Array(subscription.listeners.values)
            guard let keys = change.keys else { return (subscription.cells.values.flatMap { $0.map(\.cell) }, listeners) }
            return (keys.flatMap { subscription.cells[$0].map { $0.map(\.cell) } ?? [] }, listeners)
        }
        for cell in cells { cell.reloadAfterOutsideChange() }
        for listener in listeners { listener.storeDidChange(change) }
    }

    /// Whether the store `token` subscribed to is being observed now (its observation started and
    /// not failed): a cell holding the token hears of changes made elsewhere.
    static func isObserving(_ token: Unsubscribe) -> Bool {
        subscriptions.withLock { _ in token.subscription.isCurrent && token.subscription.observation != nil }
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
