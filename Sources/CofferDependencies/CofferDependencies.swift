#if Dependencies
public import CofferCore
public import CofferState
import CofferCrypto
import CofferVault
public import Dependencies
import Foundation

extension DependencyValues {
    /// The ``CofferContext`` where a settings object's `.shared` instance, and every `@Stored`
    /// property created inside `withDependencies { $0.cofferContext = … }`, keep their key-value
    /// suites, files and vault.
    ///
    /// - **live**: ``CofferContext/current`` (the standard `$XDG_DATA_HOME/<app name>`
    ///   unless the app scoped another one);
    /// - **test** and **preview**: a new private temporary directory, with a default vault
    ///   unlocked by a random key that never leaves memory — each test gets its own, and never
    ///   touches the user's files.
    ///
    /// Setting it makes it the context of every property created in that scope, in a settings
    /// object or anywhere else (`MySettings()`, a `StoredGroup`, a model's `@Stored`), as
    /// `CofferContext.$current.withValue` does; a `CofferContext.$current.withValue` inside the
    /// scope wins over it, being the nearer.
    ///
    /// ```swift
    /// @Dependency(\.cofferContext) var coffer
    ///
    /// withDependencies {
    ///     $0.cofferContext = try! CofferContext.temporary()
    /// } operation: {
    ///     MySettings.shared.isSoundEnabled = true      // written in that directory
    ///     let settings = MySettings()                  // so is this one
    /// }
    /// ```
    public var cofferContext: CofferContext {
        get { self[CofferContextKey.self] }
        set {
            self[CofferContextKey.self] = newValue
            // Read back by `CofferContext.inEffect` when a property is created in the scope.
            self[ScopedCofferContextKey.self] = ScopedCofferContext(context: newValue, outer: CofferContext.current)
            _ = ScopedCofferContext.installOnce
        }
    }
}

/// A context set with `withDependencies { $0.cofferContext = … }`, and the task's
/// ``CofferContext/current`` when it was set: a `CofferContext.$current.withValue` inside the
/// scope changes `current`, and then wins.
private struct ScopedCofferContext: Sendable {
    let context: CofferContext
    let outer: CofferContext

    /// Makes the scoped context the one new properties resolve in (``CofferContext/inEffect``).
    static let installOnce: Void = CofferContext.setScopedContextProvider {
        guard let scoped = DependencyValues._current[ScopedCofferContextKey.self],
            scoped.outer === CofferContext.current
        else { return nil }
        return scoped.context
    }
}

/// The context set explicitly in this scope, if any: unlike ``DependencyValues/cofferContext``
/// it has no default, so a property created outside every override resolves as it always did.
private enum ScopedCofferContextKey: DependencyKey {
    static let liveValue: ScopedCofferContext? = nil
    static let testValue: ScopedCofferContext? = nil
    static let previewValue: ScopedCofferContext? = nil
}

private enum CofferContextKey: DependencyKey {
    static var liveValue: CofferContext { .current }
    static var testValue: CofferContext { scratch("coffer-test") }
    static var previewValue: CofferContext { scratch("coffer-preview") }

    /// A context in a new temporary directory, with a vault unlocked by a random in-memory key.
    /// Never fails: if the directory cannot be made now, the context names one that its first
    /// store creates, and that store reports the failure as a ``CofferError``.
    static func scratch(_ prefix: String) -> CofferContext {
        let context =
            (try? CofferContext.temporary(prefix: prefix))
            ?? CofferContext(
                directory: URL(fileURLWithPath: NSTemporaryDirectory())
                    .appendingPathComponent("\(prefix)-\(UUID().uuidString)"))
        guard let key = try? SecureBytes.random(count: 32) else { return context }
        return context.with(VaultConfiguration(unlock: .key(key)))
    }
}

/// A group of settings kept in one object, shared by the whole app as `.shared` — the
/// `AppStorage`-for-TCA pattern, on Coffer.
///
/// ```swift
/// struct MySettings: CofferSettings {
///     @Stored(backed: .keyValue(key: "username")) var username: String? = nil
///     @Stored(backed: .keyValue(key: "isSoundEnabled")) var isSoundEnabled = false
/// }
///
/// if MySettings.shared.isSoundEnabled { … }                       // in a reducer: a read
/// return .run { _ in await MySettings.shared.set(\.isSoundEnabled, to: true) }   // an effect
/// return .run { send in                                            // keep state in sync
///     for await (sound, name) in MySettings.shared.values(\.$isSoundEnabled, \.$username) {
///         await send(.settingsChanged(isSoundEnabled: sound, username: name))
///     }
/// }
/// ```
///
/// `.shared` is one instance per ``DependencyValues/cofferContext``: the app's in production,
/// and a fresh one in each test (or inside `withDependencies`), so tests never share values.
///
/// Declare it a `struct`: its `@Stored` and `@Computed` properties are references, so every copy
/// reads and writes the same values, and the struct is `Sendable` as declared — `.shared`, or a
/// copy of it, crosses tasks:
///
/// ```swift
/// let settings = MySettings.shared
/// Task { settings.isSoundEnabled = true }
/// ```
///
/// (A struct of your module is `Sendable` without saying so; a `public` one says `: Sendable`.)
///
/// Rule: a settings object holds only `@Stored` and `@Computed` properties (and constants).
/// Those are thread-safe. A `final class` still works, as before, but Swift does not see it as
/// `Sendable` (it checks a class's stored properties, and a property wrapper's are variables):
/// declare it `@unchecked Sendable` on that rule to send it, or make it a struct.
public protocol CofferSettings {
    /// Creates the settings; its `@Stored` properties resolve in the context in effect.
    init()
}

extension CofferSettings {
    /// The instance for the current ``DependencyValues/cofferContext``, created on first use.
    public static var shared: Self {
        @Dependency(\.cofferContext) var context
        return SettingsRegistry.instance(Self.self, in: context)
    }

    /// Sets a setting, as an effect: the write (and its persistence) happens in the calling
    /// task, so a reducer returns it rather than doing it.
    ///
    /// ```swift
    /// case .enableSoundButtonPressed:
    ///     return .run { _ in await MySettings.shared.set(\.isSoundEnabled, to: true) }
    /// ```
    ///
    /// A setter cannot throw: a failure to persist is kept in the property's `$name.error`
    /// (use ``save(_:_:)`` to have it thrown).
    public func set<Value>(_ keyPath: ReferenceWritableKeyPath<Self, Value>, to value: Value) async {
        self[keyPath: keyPath] = value
    }

    /// Stores a setting and throws when it cannot be persisted.
    ///
    /// ```swift
    /// try await MySettings.shared.save(\.$username, "blob")
    /// ```
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored.
    public func save<Value>(_ keyPath: KeyPath<Self, Stored<Value>>, _ value: Value) async throws {
        try await self[keyPath: keyPath].save(value)
    }

    /// The current values of several settings, then the values again each time one of them
    /// changes — in this process or, for a store that watches, anywhere else — until the
    /// consumer stops iterating. For one setting it is its value alone.
    ///
    /// ```swift
    /// for await (isSoundEnabled, username) in settings.values(\.$isSoundEnabled, \.$username) { … }
    /// for await isSoundEnabled in settings.values(\.$isSoundEnabled) { … }
    /// ```
    ///
    /// Changes may be delivered together (a burst as one element), and an element may repeat
    /// values already delivered; the last change is never dropped.
    public func values<each Value: Sendable>(
        _ keyPaths: repeat KeyPath<Self, Stored<each Value>>
    ) -> AsyncStream<(repeat each Value)> {
        let properties = (repeat self[keyPath: each keyPaths])
        let read: @Sendable () -> (repeat each Value) = { (repeat (each properties).wrappedValue) }
        // Each property's changes, subscribed before the first read so none falls in between.
        var changes: [@Sendable (_ tick: @escaping @Sendable () -> Void) async -> Void] = []
        for property in repeat each properties {
            let values = property.values
            changes.append { tick in
                for await _ in values.dropFirst() { tick() }
            }
        }
        let (stream, continuation) = AsyncStream<(repeat each Value)>.makeStream(
            bufferingPolicy: .bufferingNewest(1))
        // One read-and-yield at a time: two settings' ticks on two threads could otherwise yield
        // out of order, leaving an older reading as the last element.
        let gate = ReadGate()
        let tell: @Sendable () -> Void = { gate.lock.withLock { _ in _ = continuation.yield(read()) } }
        tell()
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                for change in changes {
                    group.addTask { await change(tell) }
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

/// Serializes the reads and yields of one ``CofferSettings/values(_:)`` stream.
private final class ReadGate: Sendable {
    let lock = Locked(())
}

/// The `.shared` settings objects, one per type and context.
enum SettingsRegistry {
    /// One settings object, and its context.
    // @unchecked Sendable: a settings type need not say it is `Sendable` (a class of the old
    // spelling is not), but holds only `@Stored`/`@Computed` properties, which are thread-safe
    // (the rule on ``CofferSettings``); the box itself is immutable.
    private struct Box: @unchecked Sendable {
        let settings: any CofferSettings
        let context: CofferContext  // keeps the context (and so its identifier) alive
    }

    private struct Key: Hashable {
        let type: ObjectIdentifier
        let context: ObjectIdentifier
    }

    private static let instances = Locked<[Key: Box]>([:])

    static func instance<Settings: CofferSettings>(_ type: Settings.Type, in context: CofferContext) -> Settings {
        let key = Key(type: ObjectIdentifier(type), context: ObjectIdentifier(context))  // so `as!` below cannot fail
        if let existing = instances.withLock({ $0[key] }) { return existing.settings as! Settings }
        // Created outside the lock: an `init` may read its properties, which opens stores.
        let made = CofferContext.$current.withValue(context) { Settings() }
        let box = instances.withLock { all in
            if let existing = all[key] { return existing }
            let box = Box(settings: made, context: context)
            all[key] = box
            return box
        }
        return box.settings as! Settings
    }
}
#endif
