package import CofferCore
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
}

/// The cells of the process, one per (backing identity, context, value type), each kept while
/// at least one ``Stored`` uses it (a count, not weak references: a weakly referenced object
/// pays a slower reference count on every retain, and cells are on the read path).
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

    /// One key of one store: the backing's identity, and the context when it is context-relative.
    struct Group: Hashable, Sendable {
        let identity: Backing.Identity
        let context: ObjectIdentifier?
        /// Hashed once: a registry of 100k keys rehashes its neighbours when one leaves (the
        /// dictionary's probing), and an identity hashes a store id and strings.
        private let hash: Int

        init(identity: Backing.Identity, context: ObjectIdentifier?) {
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

    /// A cell of one group, with the count of properties using it.
    private struct Entry: Sendable {
        let type: ObjectIdentifier
        let cell: any RegisteredCell
        var users: Int
    }

    /// The cells of each group: nearly always one, so a small array rather than a dictionary per
    /// key. Each step below hashes the group once (an index, then work in place).
    private static let groups = Locked<[Group: [Entry]]>([:])

    /// The cell a new property bound to `backing` in `context` uses: the one already shared by
    /// properties on the same key and type, or a new one (registered when the backing has an
    /// identity). Each call must be balanced by ``release(_:)`` of the cell's key, if it has one.
    static func cell<Value>(initialValue: Value, backing: Backing, context: CofferContext) -> StoredCell<Value> {
        guard let identity = backing.identity else {
            return StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: nil)
        }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        let key = Key(group: group, type: ObjectIdentifier(Value.self))
        return groups.withLock { groups in
            if let index = groups.index(forKey: group) {
                if let member = groups.values[index].firstIndex(where: { $0.type == key.type }) {
                    groups.values[index][member].users += 1
                    // The entry of this type is always a `StoredCell<Value>`.
                    return unsafeDowncast(groups.values[index][member].cell, to: StoredCell<Value>.self)
                }
                let cell = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
                groups.values[index].append(Entry(type: key.type, cell: cell, users: 1))
                markSiblings(groups.values[index])
                return cell
            }
            let cell = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
            groups[group] = [Entry(type: key.type, cell: cell, users: 1)]
            return cell
        }
    }

    /// One property using the cell of `key` went away; the cell is dropped with the last one.
    static func release(_ key: Key) {
        let dropped: (any RegisteredCell)? = groups.withLock { groups in
            guard let index = groups.index(forKey: key.group),
                let member = groups.values[index].firstIndex(where: { $0.type == key.type })
            else { return nil }
            groups.values[index][member].users -= 1
            guard groups.values[index][member].users == 0 else { return nil }
            let cell = groups.values[index][member].cell
            if groups.values[index].count == 1 {
                groups.remove(at: index)
            } else {
                groups.values[index].remove(at: member)
                markSiblings(groups.values[index])
            }
            return cell
        }
        // Unsubscribed, then released (its deinit ends its streams) here, with no lock held.
        dropped?.detach()
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
        guard let identity = backing.identity else { return [] }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group].map { $0.map(\.cell) } ?? [] }
    }

    /// How many properties use the cell that a property of type `Value` bound to `backing` in
    /// `context` would use (0 when there is none).
    package static func users<Value>(
        of backing: Backing, context: CofferContext = .current, type: Value.Type
    ) -> Int {
        guard let identity = backing.identity else { return 0 }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group]?.first { $0.type == ObjectIdentifier(Value.self) }?.users ?? 0 }
    }
}
