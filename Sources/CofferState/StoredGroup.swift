public import CofferCore
import Synchronization

/// A set of typed keys that share one store: declare it as a struct of ``StoredKey`` values
/// (and nested groups), and read and write it through a ``StoredGroup``.
///
/// ```swift
/// struct AppKeys: StoredKeyGroup {
///     let launchCount = StoredKey("launchCount", default: 0)
///     let lastLaunch = StoredKey<Date?>("lastLaunch")      // optional: no default needed
///     let debug = DebugKeys()                               // a nested group, same store
/// }
/// struct DebugKeys: StoredKeyGroup {
///     let showConsole = StoredKey("debug.showConsole", default: false)
/// }
/// ```
public protocol StoredKeyGroup: Sendable {
    /// The group with its keys (a struct whose properties all have initial values has one).
    init()
}

/// A typed key of a ``StoredKeyGroup``: its name in the store and its value before anything is
/// stored.
public struct StoredKey<Value: Codable & Sendable>: Sendable {
    /// The key in the store.
    public let name: String
    /// The value until one is stored, and after the stored one is removed.
    public let defaultValue: Value

    /// A key named `name` whose value is `defaultValue` until one is stored.
    public init(_ name: String, default defaultValue: Value) {
        self.name = name
        self.defaultValue = defaultValue
    }

    /// An optional key named `name`, `nil` until a value is stored.
    public init<Wrapped: Codable & Sendable>(_ name: String) where Value == Wrapped? {
        self.init(name, default: nil)
    }
}

/// The keys of a ``StoredKeyGroup``, all persisted in one store (a ``StoreChoice``) chosen when the group is
/// made: a settings object whose store is injected once, not repeated on every property.
///
/// ```swift
/// let settings = StoredGroup<AppKeys>(store: .keyValue(suite: "app"))
/// settings.launchCount += 1                  // read and write by name
/// settings.lastLaunch = .now
/// settings.debug.showConsole = true          // a nested group shares the store
///
/// // In a test, one line switches the whole group to memory:
/// let settings = StoredGroup<AppKeys>(store: .memory)
/// ```
///
/// Each key is a ``Stored`` property underneath (``stored(_:)`` returns it), so everything a
/// `@Stored` property does holds here: the first read loads, later reads come from memory, a
/// write persists, Observation and ``Stored/values`` see every change, ``Computed`` values
/// that read a key follow it, errors are in ``Stored/error``, and every property bound to the
/// same store and key — in this group, another group or a `@Stored` — shares one value.
///
/// Reading by name costs a dictionary lookup more than a `@Stored` property; on a hot path,
/// keep the ``stored(_:)`` property and read its `wrappedValue`.
@dynamicMemberLookup
public final class StoredGroup<Keys: StoredKeyGroup>: Sendable {
    /// The keys.
    public let keys: Keys
    /// Where every key of the group persists.
    public let store: StoreChoice
    /// The context the store resolves in: ``CofferContext/inEffect`` when the group was made.
    public let context: CofferContext
    private let properties = Locked(Properties())

    /// The ``Stored`` of each key and the ``StoredGroup`` of each nested group read so far, by key path.
    private struct Properties: @unchecked Sendable {
        // @unchecked Sendable: the key paths are immutable values used only as dictionary keys
        // (`AnyKeyPath` is not declared `Sendable`), and each value is a `Sendable` `Stored`.
        var byKey: [AnyKeyPath: any Sendable] = [:]
    }

    /// A group whose keys persist in `store`, resolved in ``CofferContext/inEffect``.
    ///
    /// - Parameters:
    ///   - keys: The keys (by default `Keys()`).
    ///   - store: Where they persist: `.keyValue(suite:)`, `.disk`, `.vault(service:)`,
    ///     `.memory`, `.strategy(_:)`.
    public init(_ keys: Keys = Keys(), store: StoreChoice) {
        self.keys = keys
        self.store = store
        self.context = CofferContext.inEffect
    }

    /// The value of a key, loaded on first use; setting it persists it (`nil` removes an
    /// optional key).
    public subscript<Value>(dynamicMember key: KeyPath<Keys, StoredKey<Value>>) -> Value {
        get { stored(key).wrappedValue }
        set { stored(key).wrappedValue = newValue }
    }

    /// A nested group, persisted in the same store and context.
    ///
    /// One object per nested group, kept like the ``Stored`` of a key: a group made anew on each
    /// access would make its keys' ``Stored`` anew too, and an observer or a ``Computed`` that
    /// read one of them would not hear a write made through the next.
    public subscript<Group: StoredKeyGroup>(dynamicMember group: KeyPath<Keys, Group>) -> StoredGroup<Group> {
        if let existing = properties.withLock({ $0.byKey[group] as? StoredGroup<Group> }) { return existing }
        let made = StoredGroup<Group>(keys[keyPath: group], store: store, context: context)
        return properties.withLock { properties in
            if let existing = properties.byKey[group] as? StoredGroup<Group> { return existing }
            properties.byKey[group] = made
            return made
        }
    }

    /// The ``Stored`` property behind a key: `error`, `values`, `load()`, `save(_:)`, `update(_:)`,
    /// and a capture for a ``Computed``.
    ///
    /// ```swift
    /// for await count in settings.stored(\.launchCount).values { print(count) }
    /// try settings.stored(\.launchCount).update { $0 += 1 }    // atomic across processes
    /// ```
    public func stored<Value>(_ key: KeyPath<Keys, StoredKey<Value>>) -> Stored<Value> {
        if let existing = properties.withLock({ $0.byKey[key] as? Stored<Value> }) { return existing }
        let definition = keys[keyPath: key]
        let made = Stored(wrappedValue: definition.defaultValue, backed: store.backing(key: definition.name), in: context)
        return properties.withLock { properties in
            // Another thread may have made it meanwhile: keep the first, so both share it.
            if let existing = properties.byKey[key] as? Stored<Value> { return existing }
            properties.byKey[key] = made
            return made
        }
    }

    private init(_ keys: Keys, store: StoreChoice, context: CofferContext) {
        self.keys = keys
        self.store = store
        self.context = context
    }
}
