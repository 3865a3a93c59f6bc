/// One store chosen once for a group of properties: each property is a key in it.
///
/// A settings model names its keys; where they live is decided in one place, so one line
/// moves the whole model — to `.memory` in a test, to another suite in production:
///
/// ```swift
/// struct AppKeys: StoredKeyGroup {
///     let launchCount = StoredKey("launchCount", default: 0)
///     let lastLaunch = StoredKey<Date?>("lastLaunch")
/// }
/// let settings = StoredGroup<AppKeys>(store: .keyValue(suite: "app"))  // a test: .memory
/// settings.launchCount += 1
/// ```
///
/// Spelled at the use site as `.keyValue`, `.keyValue(suite:)`, `.disk`, `.vault(service:)`,
/// `.memory` (each declared by the module that owns the strategy) or ``strategy(_:)`` for a
/// store of your own.
///
/// A store choice names a store, not a key; ``backing(key:)`` adds the key and gives the
/// ``Backing`` of one `@Stored` property (a store and a key in it).
public struct StoreChoice: Sendable, CustomStringConvertible {
    /// A readable name of the store, such as `keyValue(suite: app)`.
    public let description: String
    private let make: @Sendable (_ key: String) -> Backing

    /// A store whose key `key` persists through `backing(key)`.
    public init(description: String, backing: @escaping @Sendable (_ key: String) -> Backing) {
        self.description = description
        self.make = backing
    }

    /// Where the value of `key` persists.
    ///
    /// ```swift
    /// init(store: StoreChoice = .keyValue(suite: "editor")) {
    ///     _fontSize = Stored(wrappedValue: 13, backed: store.backing(key: "fontSize"))
    /// }
    /// ```
    public func backing(key: String) -> Backing { make(key) }

    /// Every key in one store instance: properties on the same instance and key share one value.
    public static func strategy(_ strategy: any PersistenceStrategy) -> StoreChoice {
        StoreChoice(description: "\(type(of: strategy))") { key in .strategy(strategy, key: key) }
    }
}
