// # CofferState: observable, persistent properties
//
// `@Stored` keeps a typed value in memory and persists it through a `PersistenceStrategy`
// chosen per property; `@Computed` derives a value from others and finds its inputs by
// itself. Both work in plain classes (no macro, no `@Observable` needed), with Swift's
// Observation, with `AsyncSequence`, and from any thread.
//
// ```swift
// import Coffer
//
// final class AccountModel {
//     @Stored var draft = ""                                              // memory (the default)
//     @Stored(backed: .keyValue(key: "theme")) var theme = "light"        // default suite
//     @Stored(backed: .keyValue(suite: "network", key: "timeout")) var timeout = 30.0
//     @Stored(backed: .disk(key: "session")) var session: Session? = nil  // own file, JSON
//     @Stored(backed: .vault(service: "api.github.com", account: "octocat"))
//     var token: String? = nil                                            // encrypted at rest
//
//     @Computed var isSignedIn: Bool
//
//     init() {
//         $isSignedIn = Computed { [$token] in $token.wrappedValue != nil }
//     }
// }
// ```
//
// **Default context.** `.keyValue`, `.disk` and `.vault` resolve against the context in effect
// when the property is created (`CofferContext.inEffect`: `CofferContext.current`, or the one
// CofferDependencies' `withDependencies` scoped; `$XDG_DATA_HOME/<app>` unless overridden).
// Tests create models inside `CofferContext.$current.withValue(try .temporary()) { … }`.
//
// **Reads and writes.** The first read loads from the strategy (absent → the initial value;
// a remote store loads in the background and shows the initial value meanwhile); later reads
// are served from memory. A write equal to the current value (when `Equatable`)
// does nothing; otherwise it updates memory, invalidates computed values, notifies observers
// and persists (`nil` removes the key).
//
// **Batching.** `batch { … }` groups writes: observers are told once per property, and each
// strategy gets one commit (`saveBatch` when it supports it).
//
// **Errors.** A setter cannot throw: `$x.error` holds the last load or save failure (and is
// cleared by the next success); `try $x.load()` and `try $x.save(_:)` throw.
//
// **Migration.** `try $token.migrate(from: .keyValue(key: "token"))` copies an old copy into this
// property's store, makes it durable, then deletes the old copy.
//
// See docs/STATE.md for the full guide.

public import CofferCore
import Foundation
public import Observation

/// A property whose value lives in memory and persists through a ``Backing``.
///
/// ```swift
/// final class Preferences {
///     @Stored(backed: .keyValue(key: "fontSize")) var fontSize = 13.0
/// }
/// let prefs = Preferences()
/// prefs.fontSize = 15          // memory now, persisted before the setter returns
/// prefs.$fontSize.error        // the last load/save failure, observable
/// ```
///
/// - The first read loads the value from the strategy (a missing key gives the initial value;
///   a failure keeps the initial value and sets ``error``). Later reads come from memory.
/// - On a remote store (an ``AsyncPersistenceStrategy``, such as PostgreSQL) nothing waits on the
///   network: the first read shows the initial value and loads in the background
///   (``isLoading``), and a setter returns before its write is acknowledged — the write follows
///   in order, and a failure lands in ``saveError``. `try await $x.flush()`, `save` and `load`
///   wait for the server (docs/STATE.md, "Remote stores and async code").
/// - A write equal to the current value (when `Value` is `Equatable`) does nothing. Any other
///   write updates memory, invalidates the ``Computed`` values that read this one, notifies
///   Observation and ``values``, and persists (an `Optional` set to `nil` removes the key).
/// - The backing resolves against the context in effect when the property was created
///   (``CofferContext/inEffect``: ``CofferContext/current``, or the context CofferDependencies'
///   `withDependencies { $0.cofferContext = … }` scoped).
/// - Safe to use from any thread or task. The projected value (`$name`) is the `Stored` itself, a
///   reference that closures can capture.
/// - `Value` must be `Codable` to persist. A memory-only property takes any `Sendable` value
///   (`@Stored var currentDocument: Document?`), and an `Optional` property may omit `= nil`.
@propertyWrapper
public final class Stored<Value: Sendable>: Sendable {
    /// The value this property shares with every other property bound to the same key. First,
    /// so that a read finds it in the object's first cache line (a table of 100k entries reads
    /// from memory, not from cache).
    @usableFromInline let cell: StoredCell<Value>
    /// Where the value persists.
    ///
    /// Every property bound to the same key shares one cell, which holds the backing: a
    /// property keeps no copy of its own (releasing a table of 100k entries then touches no
    /// per-key backing object per entry).
    public var backing: Backing { cell.backing }
    /// The value before anything was stored, and after the stored copy is removed.
    ///
    /// Properties bound to one key share one value: while nothing is stored, it is the initial
    /// value of the first of them that is still alive when the value is loaded. Give them the
    /// same default.
    public let initialValue: Value
    /// The context the backing resolves in: ``CofferContext/inEffect`` when this property was created.
    public let context: CofferContext

    /// A property starting at `wrappedValue`, persisted through `backing` (memory by default).
    ///
    /// Every property created with the same backing (the same store and key, in the same
    /// context for the context-relative spellings) and the same `Value` type shares one value
    /// with this one, whenever it was created: see docs/STATE.md, "One value per key".
    ///
    /// - Parameters:
    ///   - wrappedValue: The value until one is stored, and after the stored one is removed.
    ///   - backing: Where the value persists: `.memory`, `.keyValue(key:)`, `.disk(key:)`,
    ///     `.vault(service:account:)`, or `.strategy(_:key:)` for a strategy of your own.
    public convenience init(wrappedValue: Value, backed backing: Backing = .memory) where Value: Codable {
        self.init(wrappedValue: wrappedValue, backed: backing, in: .inEffect)
    }

    /// A property whose backing resolves in `context` (a ``StoredGroup``'s, made lazily).
    init(wrappedValue: Value, backed backing: Backing, in context: CofferContext) where Value: Codable {
        self.initialValue = wrappedValue
        self.context = context
        self.cell = CellRegistry.cell(initialValue: wrappedValue, backing: backing, context: context)
    }

    /// A memory-only property starting at `wrappedValue`, of any `Sendable` type.
    ///
    /// Nothing is encoded or written, so `Value` need not be `Codable`:
    ///
    /// ```swift
    /// final class Editor {
    ///     @Stored var currentDocument = Document.untitled     // a class, a closure, a file handle…
    /// }
    /// ```
    ///
    /// It observes, computes, batches and streams like any other `@Stored`. To persist it
    /// later, make `Value` `Codable` and add `backed:`.
    public init(wrappedValue: Value) {
        self.initialValue = wrappedValue
        self.context = CofferContext.inEffect
        self.cell = StoredCell(initialValue: wrappedValue, backing: .memory, context: context, registryKey: nil)
    }

    /// An optional property starting at `nil`, persisted through `backing` (memory by default):
    /// `= nil` may be left out.
    ///
    /// ```swift
    /// @Stored(backed: .vault(service: "api.github.com", account: "octocat")) var token: String?
    /// ```
    public convenience init<Wrapped: Codable & Sendable>(backed backing: Backing = .memory) where Value == Wrapped? {
        self.init(wrappedValue: nil, backed: backing)
    }

    /// A memory-only optional property starting at `nil`, of any `Sendable` type.
    ///
    /// ```swift
    /// @Stored var currentDocument: Document?      // never persisted, so Document need not be Codable
    /// ```
    public convenience init<Wrapped: Sendable>() where Value == Wrapped? {
        self.init(wrappedValue: nil)
    }

    deinit {
        if cell.isRegistered { CellRegistry.release(cell) } else { cell.detach() }
    }

    /// The value: from memory after the first read.
    public var wrappedValue: Value {
        // Inlinable: the hot path (see `StoredCell.wrappedValue`).
        @inlinable get { cell.wrappedValue }
        set { cell.write(newValue) }
    }

    /// The property itself: `$name.error`, `$name.values`, `try $name.save(…)`.
    public var projectedValue: Stored<Value> { self }

    /// The last load or save failure, or `nil` once a load or save succeeds. Observable.
    ///
    /// Shared by every property bound to the same key, like the value.
    public var error: CofferError? { cell.error }

    /// The current value, then each new one, until the consumer stops iterating.
    ///
    /// Every change is delivered (the buffer is unbounded), whichever property bound to this key
    /// made it; writes inside one ``batch(_:)`` are delivered once, as their final value.
    public var values: AsyncStream<Value> { cell.values }

    /// Reads the value from the strategy now, replacing the one in memory.
    ///
    /// A missing key gives ``initialValue``. Observers are notified when the value changes.
    /// - Returns: The loaded value.
    /// - Throws: ``CofferError`` when the backing cannot be resolved, the strategy cannot read,
    ///   or the stored bytes are not a `Value` (``CofferError/Code/decoding``). The value in
    ///   memory is then unchanged, and ``error`` holds the failure.
    @discardableResult
    public func load() throws -> Value { try cell.load() }

    /// Sets the value and writes it to the strategy before returning, even inside a ``batch(_:)``.
    ///
    /// Unlike the setter, this writes even when `value` equals the current one, so it also
    /// retries a save that failed earlier.
    /// - Throws: ``CofferError`` when the value cannot be encoded or stored; the value stays in
    ///   memory and ``error`` holds the failure.
    public func save(_ value: Value) throws { try cell.save(value) }

    /// Reads the value from the store, lets `body` change it, and writes it back as one step:
    /// no write of another property, thread or process is lost in between.
    ///
    /// ```swift
    /// @Stored(backed: .keyValue(key: "launches")) var launches = 0
    /// try $launches.update { $0 += 1 }      // exact when four processes do it at once
    /// ```
    ///
    /// On a ``CompareAndSwapPersistenceStrategy`` (the key-value file, the vault) it is atomic
    /// across processes: the newest stored value is read, `body` runs with no lock held, and the
    /// result is stored only if nobody wrote meanwhile — otherwise `body` runs again on the new
    /// value, so it must have no other effects. On the PostgreSQL stores it is atomic across
    /// machines, and after one lost swap `body` runs here while the key stays locked in one
    /// transaction, so a contended update ends in its turn (keep `body` short; docs/STATE.md,
    /// "Remote stores and async code"). On any other strategy it is atomic within this process;
    /// on memory, with respect to other updates. Observers are told once, when the value
    /// changed. Writes at once, even inside a ``batch(_:)``.
    /// - Returns: The value stored.
    /// - Throws: What `body` throws (nothing is written then), or ``CofferError`` when the
    ///   store cannot be read or written (also in ``error``).
    @discardableResult
    public func update(_ body: (inout Value) throws -> Void) throws -> Value { try cell.update(body) }

    // MARK: Remote stores and async code

    /// The last load failure (a first read, ``load()``, a reload after a change elsewhere), or
    /// `nil` once a load succeeds. Observable.
    public var loadError: CofferError? { cell.loadError }

    /// The last save failure (a setter's write, ``save(_:)``, ``update(_:)``, a batch), or `nil`
    /// once a save succeeds. Observable. On a remote store a setter returns before its write is
    /// acknowledged; a write that then fails lands here.
    public var saveError: CofferError? { cell.saveError }

    /// Whether the value is being loaded in the background from a remote store
    /// (``AsyncPersistenceStrategy``): after the first read, which shows the initial value (or the
    /// value this process last knew) at once, and while a change made elsewhere is fetched —
    /// retries included, when the store could not be reached (``loadError`` says why meanwhile).
    /// Observable. `try await $x.load()` waits for the stored value instead.
    public var isLoading: Bool { cell.isLoading }

    /// Reads the value from the store, replacing the one in memory, without blocking a thread:
    /// a remote store is awaited, a local one is read on Coffer's own threads.
    ///
    /// On a remote store, writes of this key still on their way are awaited first, so the value
    /// read includes them.
    /// - Throws: As the synchronous ``load()``; within the store's deadlines (`.busy`, `.io`).
    @discardableResult
    public func load() async throws -> Value { try await cell.loadAsync() }

    /// Sets the value and waits until the store has acknowledged it: on a remote store, until
    /// the server has committed it; on a local one, as the synchronous ``save(_:)`` (on Coffer's
    /// threads). Writes even when `value` equals the current one, so it retries a failed save.
    public func save(_ value: Value) async throws { try await cell.saveAsync(value) }

    /// ``update(_:)``, suspending instead of blocking on a remote store: its compare-and-swap
    /// (after a lost one, its transaction with the key locked) is awaited.
    @discardableResult
    public func update(_ body: (inout Value) throws -> Void) async throws -> Value { try await cell.updateAsync(body) }

    /// Waits until the store holds the value in memory now: every write made before the call has
    /// been acknowledged (a remote store), or made and made durable (a local store that writes
    /// lazily, such as the key-value file's coalesced durability). A write that failed is tried
    /// once more.
    /// - Throws: The save failure, also in ``saveError``.
    public func flush() async throws { try await cell.flush() }

    /// ``flush()`` for a caller that is not async: blocks until the store holds the value.
    public func flush() throws { try Offload.wait { try await self.cell.flush() } }
}

extension Stored: Observable {}
