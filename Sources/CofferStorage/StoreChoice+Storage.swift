public import CofferCore

extension StoreChoice {
    /// A new in-memory store: values live as long as something uses this choice (or a
    /// property made from it), and are never written anywhere. The store for tests and
    /// previews; models made from the same `StoreChoice` value share its values.
    ///
    /// ```swift
    /// let store = StoreChoice.memory
    /// let first = StoredGroup<AppKeys>(store: store)
    /// first.launchCount = 3
    /// StoredGroup<AppKeys>(store: store).launchCount   // 3: one store, like a relaunch
    /// ```
    public static var memory: StoreChoice {
        let store = MemoryStrategy()
        return StoreChoice(description: "memory") { key in .strategy(store, key: key) }
    }

    /// The default suite (`standard`) of the property's ``CofferContext``: `.keyValue(key:)` per key.
    public static var keyValue: StoreChoice {
        StoreChoice(description: "keyValue(suite: standard)") { key in .keyValue(key: key) }
    }

    /// A named suite of the property's ``CofferContext``: `.keyValue(suite:key:)` per key.
    public static func keyValue(suite: String) -> StoreChoice {
        StoreChoice(description: "keyValue(suite: \(suite))") { key in .keyValue(suite: suite, key: key) }
    }

    /// An explicit key-value store.
    public static func keyValue(_ store: KeyValueFileStrategy) -> StoreChoice {
        StoreChoice(description: "keyValue(\(store.path))") { key in .keyValue(store, key: key) }
    }

    /// A file per key in the property's ``CofferContext``: `.disk(key:)` per key.
    public static var disk: StoreChoice {
        StoreChoice(description: "disk") { key in .disk(key: key) }
    }

    /// A file per key in an explicit disk store.
    public static func disk(_ store: DiskStrategy) -> StoreChoice {
        StoreChoice(description: "disk(\(store.directory))") { key in .disk(store, key: key) }
    }
}
