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
    }

    private struct Entry: Sendable {
        let cell: any RegisteredCell
        var users: Int
    }

    private static let groups = Locked<[Group: [ObjectIdentifier: Entry]]>([:])

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
            if var entry = groups[group]?[key.type], let cell = entry.cell as? StoredCell<Value> {
                entry.users += 1
                groups[group]![key.type] = entry
                return cell
            }
            let cell = StoredCell(initialValue: initialValue, backing: backing, context: context, registryKey: key)
            groups[group, default: [:]][key.type] = Entry(cell: cell, users: 1)
            markSiblings(groups[group]!)
            return cell
        }
    }

    /// One property using the cell of `key` went away; the cell is dropped with the last one.
    static func release(_ key: Key) {
        let dropped: (any RegisteredCell)? = groups.withLock { groups in
            guard var entry = groups[key.group]?[key.type] else { return nil }
            entry.users -= 1
            guard entry.users == 0 else {
                groups[key.group]![key.type] = entry
                return nil
            }
            groups[key.group]![key.type] = nil
            if groups[key.group]!.isEmpty { groups[key.group] = nil } else { markSiblings(groups[key.group]!) }
            return entry.cell
        }
        // Unsubscribed, then released (its deinit ends its streams) here, with no lock held.
        dropped?.detach()
    }

    private static func markSiblings(_ members: [ObjectIdentifier: Entry]) {
        for entry in members.values { entry.cell.hasSiblings.store(members.count > 1, ordering: .relaxed) }
    }

    /// The cells bound to the same key as `key` with another value type.
    static func siblings(of key: Key) -> [any RegisteredCell] {
        groups.withLock { groups in
            guard let members = groups[key.group], members.count > 1 else { return [] }
            return members.compactMap { $0.key == key.type ? nil : $0.value.cell }
        }
    }

    /// How many properties use the cell that a property of type `Value` bound to `backing` in
    /// `context` would use (0 when there is none).
    /// Every live cell bound to `backing` in `context`, whatever its value type: a migration
    /// that removed the backing's value tells them to reload.
    static func cells(boundTo backing: Backing, context: CofferContext) -> [any RegisteredCell] {
        guard let identity = backing.identity else { return [] }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group].map { $0.values.map(\.cell) } ?? [] }
    }

    package static func users<Value>(
        of backing: Backing, context: CofferContext = .current, type: Value.Type
    ) -> Int {
        guard let identity = backing.identity else { return 0 }
        let group = Group(identity: identity, context: identity.isContextual ? ObjectIdentifier(context) : nil)
        return groups.withLock { $0[group]?[ObjectIdentifier(Value.self)]?.users ?? 0 }
    }
}
