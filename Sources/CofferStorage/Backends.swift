public import CofferCore

extension Backend {
    /// A new in-memory store: values live as long as something uses this backend (or a
    /// property made from it), and are never written anywhere. The backend for tests and
    /// previews; models made from the same `Backend` value share its values.
    ///
    /// ```swift
    /// let backend = Backend.memory
    /// let first = StoredGroup<AppKeys>(backend: backend)
    /// first.launchCount = 3
    /// StoredGroup<AppKeys>(backend: backend).launchCount   // 3: one store, like a relaunch
    /// ```
    public static var memory: Backend {
        let store = MemoryStrategy()
        return Backend(description: "memory") { key in .strategy(store, key: key) }
    }

    /// The default suite (`standard`) of the property's ``CofferContext``: `.keyValue(key:)` per key.
    public static var keyValue: Backend {
        Backend(description: "keyValue(suite: standard)") { key in .keyValue(key: key) }
    }

    /// A named suite of the property's ``CofferContext``: `.keyValue(suite:key:)` per key.
    public static func keyValue(suite: String) -> Backend {
        Backend(description: "keyValue(suite: \(suite))") { key in .keyValue(suite: suite, key: key) }
    }

    /// An explicit key-value store.
    public static func keyValue(_ store: KeyValueFileStrategy) -> Backend {
        Backend(description: "keyValue(\(store.path))") { key in .keyValue(store, key: key) }
    }

    /// A file per key in the property's ``CofferContext``: `.disk(key:)` per key.
    public static var disk: Backend {
        Backend(description: "disk") { key in .disk(key: key) }
    }

    /// A file per key in an explicit disk store.
    public static func disk(_ store: DiskStrategy) -> Backend {
        Backend(description: "disk(\(store.directory))") { key in .disk(store, key: key) }
    }
}
