package import CofferCore
import Dispatch
import Synchronization

/// A ``StoredCell`` as the registry holds it, whatever its value type.
protocol RegisteredCell: AnyObject, Sendable {
    /// A property bound to the same key with another value type stored a new value: reload it
    /// from the store (decoding it as this cell's type, or reporting why not in `error`).
    func reloadAfterSiblingChange()
    /// Its last property went away: stop following outside changes.
    func detach()
    /// Whether other cells share its key with another value type (kept by the registry, so a
    /// save takes the registry's lock only when there is someone to tell).
    var hasSiblings: Atomic<Bool> { get }
    /// How many properties use it. Raised under the registry's lock (by a property that finds
    /// the cell), lowered without it (by a property going away).
    var users: Atomic<Int> { get }
    /// Where it is registered.
    var registryKey: CellRegistry.Key? { get }
    /// When its last property went away (uptime ns), while it is listed to be let go; 0 when it
    /// is not listed (``CellRegistry/release(_:)`` lists it, the release queue unlists it).
    var releasedAt: Atomic<UInt64> { get }
    /// Whether a new property of its key may take it up after its last property went away (and
    /// reread its key): no error, and it never loaded, or it is bound to a store.
    var canBeTakenUp: Bool { get }
}

/// The cells of the process, one per (backing identity, context, value type), each kept while
/// at least one ``Stored`` uses it (a count, not weak references: a weakly referenced object
/// pays a slower reference count on every retain, and cells are on the read path).
///
/// A property going away only lowers its cell's count. The cell whose count reached zero is
/// handed to a background queue, which unregisters it, stops its following of outside changes
/// and frees it, many at a time under one hold of the lock: releasing a table of 100k entries
/// (a server's shutdown, a cache dropped) costs the releasing thread a decrement and an append
/// per entry, not the registry's and the change router's bookkeeping. The queue lets each cell
/// linger about ``lingering`` first (at most ``mostLingering`` of them; beyond, the oldest go at
/// once), still registered and following its key, so that a property made again for the key
/// meanwhile takes the cell up: a property or map entry made per request costs a lookup, not a
/// new cell, a load, a resolution and a subscription (a cell whose store it cannot follow
/// rereads its key when taken up). A cell that
/// failed (an error of any kind) or holds memory only is never taken up: a new property gets a
/// new cell, loaded from the store, as before.
///
/// Two properties bound to one key with *different* value types have a cell each (a cell holds
/// a typed value). They are siblings: after one of them stores a value, the others reload it
/// from the store and decode it as their own type; a value that does not decode leaves theirs
/// unchanged and sets their `error` (``CofferError/Code/decoding``).
package enum CellRegistry {
    struct Key: Hashable, Sendable {
        let group: Group
        let type: ObjectIdentifier
    }

    /// One key of one store: the backing's stored value, and the context when its store is
    /// named relative to it.
    struct Group: Hashable, Sendable {
        let identity: Backing.ValueID
        let context: ObjectIdentifier?
        /// Hashed once: a registry of 100k keys rehashes its neighbours when one leaves (the
        /// dictionary's probing), and a value id hashes a store id and strings.
        private let hash: Int

        init(identity: Backing.ValueID, context: ObjectIdentifier?) {
            self.identity = identity
            self.context = context
            var hasher = Hasher()
            hasher.combine(identity)
            hasher.combine(context)
            self.hash = hasher.finalize()
        }

        static func == (a: Group, b: Group) -> Bool {
            a.hash == b.hash && a.context == b.context && a.identity == b.identity
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    /// A cell of one group (its count of users is the cell's own).
    private struct Entry: Sendable {
        let type: ObjectIdentifier
        let cell: any RegisteredCell
    }

    /// The cells of each group: nearly always one, so a small array rather than a dictionary per
    /// key. Each step below hashes the group once (an index, then work in place).
    private static let groups = Locked<[Group: [Entry]]>([:])

    /// The cell a new property bound to `backing` in `context` uses: the one already shared by
    /// properties on the same key and type, or a new one (registered when the backing has an
    /// identity). Each call must be balanced by ``release(_:)`` of the cell's key, if it has one.
    static func cell<Value>(initialValue: Value, backing: Backing, context: CofferContext) -> StoredCell<Value> {
        guard let identity = backing.value else {
            return StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: nil)
        }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        let key = Key(group: group, type: ObjectIdentifier(Value.self))
        let (cell, replaced, takenUp) = groups.withLock { groups -> (StoredCell<Value>, (any RegisteredCell)?, Bool) in
            if let index = groups.index(forKey: group) {
                if let member = groups.values[index].firstIndex(where: { $0.type == key.type }) {
                    // The entry of this type is always a `StoredCell<Value>`. Raised under the
                    // lock: a cell at zero users is unregistered only under it, so a cell found
                    // here is not being let go.
                    let cell = unsafeDowncast(groups.values[index][member].cell, to: StoredCell<Value>.self)
                    if cell.users.load(ordering: .acquiring) > 0 {
                        cell.users.add(1, ordering: .acquiringAndReleasing)
                        return (cell, nil, false)
                    }
                    if cell.canBeTakenUp {
                        cell.users.add(1, ordering: .acquiringAndReleasing)
                        return (cell, nil, true)
                    }
                    // Unused, and not to be taken up: let go of it, and make a new one.
                    let made = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
                    groups.values[index][member] = Entry(type: key.type, cell: made)
                    markSiblings(groups.values[index])
                    return (made, cell, false)
                }
                let cell = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
                groups.values[index].append(Entry(type: key.type, cell: cell))
                markSiblings(groups.values[index])
                return (cell, nil, false)
            }
            let cell = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
            groups[group] = [Entry(type: key.type, cell: cell)]
            return (cell, nil, false)
        }
        // Stops following outside changes on the release queue, as any cell let go (the last
        // unsubscribe of a store waits for its watcher thread).
        if let replaced { releaseQueue.async { replaced.detach() } }
        // A cell taken up that does not follow its store rereads its key, as a new one would load
        // it (a remote store in the background; a write here not yet stored is kept).
        if takenUp { cell.reloadAfterTakeUp() }
        return cell
    }

    /// How long an unused cell may stay registered, to be taken up by a new property.
    static let lingering: UInt64 = 250_000_000  // nanoseconds
    /// How many unused cells may wait at once: beyond, the oldest are let go without waiting.
    static let mostLingering = 4096

    /// Cells whose last property went away since the release queue last looked (each once: a
    /// cell is listed while its `releasedAt` is not 0).
    private static let incoming = Locked<Incoming>(Incoming())
    private static let releaseQueue = DispatchQueue(label: "coffer.cells.release", qos: .utility)
    /// The listed cells the release queue keeps for later; touched on that queue only.
    nonisolated(unsafe) private static var waiting: [any RegisteredCell] = []

    private struct Incoming: Sendable {
        var cells: [any RegisteredCell] = []
        /// A pass is scheduled for when the oldest listed cell has lingered long enough.
        var timedPass = false
        /// A pass is scheduled at once, for the cells beyond ``mostLingering``.
        var urgentPass = false
    }

    private enum Pass { case timed, urgent, all }

    /// One property using `cell` went away; the cell is let go (in the background) with the last.
    ///
    /// The releasing thread stamps the cell and, when it is not listed yet, appends it (a short
    /// hold of a lock the release queue takes only to swap the list out): releasing a table of
    /// 100k entries never waits for the queue's work.
    static func release(_ cell: any RegisteredCell) {
        guard cell.users.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        let now = max(1, DispatchTime.now().uptimeNanoseconds)
        // Listed already (taken up and let go again): the new time is all it needs.
        guard cell.releasedAt.exchange(now, ordering: .acquiringAndReleasing) == 0 else { return }
        let (timed, urgent) = incoming.withLock { incoming -> (DispatchTime?, Bool) in
            incoming.cells.append(cell)
            var timed: DispatchTime?
            var urgent = false
            if incoming.cells.count > mostLingering, !incoming.urgentPass {
                incoming.urgentPass = true
                urgent = true
            }
            if !incoming.timedPass {
                incoming.timedPass = true
                timed = DispatchTime(uptimeNanoseconds: now + lingering)
            }
            return (timed, urgent)
        }
        if urgent { releaseQueue.async { letGoOfUnusedCells(.urgent) } }
        if let timed { releaseQueue.asyncAfter(deadline: timed) { letGoOfUnusedCells(.timed) } }
    }

    /// On the release queue: lets go of the listed cells that lingered long enough (and of the
    /// oldest beyond ``mostLingering``, or of all for ``settle()``); drops from the list those
    /// taken up meanwhile, and keeps the rest for a later pass.
    ///
    /// A cell leaves the list only by a compare-and-swap of its `releasedAt` to 0 from the time
    /// the pass read: if its last property went away again meanwhile (a newer time), it stays.
    private static func letGoOfUnusedCells(_ pass: Pass) {
        dispatchPrecondition(condition: .onQueue(releaseQueue))
        let arrived = incoming.withLock { incoming -> [any RegisteredCell] in
            if pass == .timed { incoming.timedPass = false }
            if pass == .urgent { incoming.urgentPass = false }
            defer { incoming.cells = [] }
            return incoming.cells
        }
        waiting.append(contentsOf: arrived)
        let now = DispatchTime.now().uptimeNanoseconds
        var kept: [any RegisteredCell] = []
        var due: [any RegisteredCell] = []
        var earliest = UInt64.max
        // The list is in the order cells first went unused: the oldest go first when too many wait.
        var excess = waiting.count - mostLingering
        for cell in waiting {
            let since = cell.releasedAt.load(ordering: .acquiring)
            let takenUp = cell.users.load(ordering: .acquiring) > 0
            if takenUp || pass == .all || since + lingering <= now || excess > 0,
                cell.releasedAt.compareExchange(expected: since, desired: 0, ordering: .acquiringAndReleasing).exchanged
            {
                excess -= 1
                if !takenUp { due.append(cell) }
                continue
            }
            kept.append(cell)
            earliest = min(earliest, cell.releasedAt.load(ordering: .relaxed) + lingering)
        }
        waiting = kept
        // A slice at a time: a property being made waits for one slice's removals at most.
        var start = 0
        while start < due.count {
            let end = min(start + 512, due.count)
            letGo(due[start..<end])
            start = end
        }
        guard !kept.isEmpty else { return }
        let next = incoming.withLock { incoming -> DispatchTime? in
            guard !incoming.timedPass else { return nil }
            incoming.timedPass = true
            return DispatchTime(uptimeNanoseconds: max(earliest, now + 1_000_000))
        }
        if let next { releaseQueue.asyncAfter(deadline: next) { letGoOfUnusedCells(.timed) } }
    }

    /// Unregisters `cells`, then unsubscribes them (and they are freed), with no lock held for
    /// the last step. A cell taken up since it was chosen (the count is raised under the
    /// registry's lock), or let go already, is skipped.
    private static func letGo(_ cells: ArraySlice<any RegisteredCell>) {
        let dropped = groups.withLock { groups -> [any RegisteredCell] in
            var dropped: [any RegisteredCell] = []
            for cell in cells where cell.users.load(ordering: .acquiring) == 0 {
                guard let key = cell.registryKey, let index = groups.index(forKey: key.group),
                    let member = groups.values[index].firstIndex(where: { $0.cell === cell })
                else { continue }
                if groups.values[index].count == 1 {
                    groups.remove(at: index)
                } else {
                    groups.values[index].remove(at: member)
                    markSiblings(groups.values[index])
                }
                dropped.append(cell)
            }
            return dropped
        }
        for cell in dropped { cell.detach() }
    }

    /// Waits until the cells whose last property went away before the call are let go (tests,
    /// and code that counts the store's followers).
    package static func settle() {
        releaseQueue.sync { letGoOfUnusedCells(.all) }
    }

    private static func markSiblings(_ members: [Entry]) {
        for entry in members { entry.cell.hasSiblings.store(members.count > 1, ordering: .relaxed) }
    }

    /// The cells bound to the same key as `key` with another value type.
    static func siblings(of key: Key) -> [any RegisteredCell] {
        groups.withLock { groups in
            guard let members = groups[key.group], members.count > 1 else { return [] }
            return members.compactMap { $0.type == key.type ? nil : $0.cell }
        }
    }

    /// Every live cell bound to `backing` in `context`, whatever its value type: a migration
    /// that removed the backing's value tells them to reload.
    static func cells(boundTo backing: Backing, context: CofferContext) -> [any RegisteredCell] {
        guard let identity = backing.value else { return [] }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group].map { $0.map(\.cell) } ?? [] }
    }

    /// How many properties use the cell that a property of type `Value` bound to `backing` in
    /// `context` would use (0 when there is none).
    package static func users<Value>(
        of backing: Backing, context: CofferContext = .current, type: Value.Type
    ) -> Int {
        guard let identity = backing.value else { return 0 }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group]?.first { $0.type == ObjectIdentifier(Value.self) }?.cell.users.load(ordering: .acquiring) ?? 0 }
    }
}
