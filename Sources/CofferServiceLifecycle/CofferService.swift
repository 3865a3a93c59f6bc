#if ServiceLifecycle
public import CofferCore
public import CofferVault
import Foundation
public import Logging
public import ServiceLifecycle

/// A `Service` that puts Coffer's stores to rest when its `ServiceGroup` shuts down: it stops
/// watching for outside changes, makes coalesced writes durable (`flush()`), and locks every
/// open vault (its keys are wiped from memory).
///
/// Put it **first** in the group: a group shuts its services down in reverse order, so the
/// server stops taking requests (and writing) before Coffer flushes and locks.
///
/// ```swift
/// let coffer = CofferService(logger: logger)
/// let group = ServiceGroup(
///     services: [coffer, app],                       // app: a Hummingbird Application, say
///     gracefulShutdownSignals: [.sigterm, .sigint],
///     logger: logger)
/// try await group.run()
/// ```
///
/// It covers every store the context opened for `@Stored` properties (key-value suites, the
/// disk store, the default vault) and the stores and vaults given explicitly. A group that is
/// cancelled rather than shut down gracefully gets the same treatment. After it, the stores
/// still work (a locked vault refuses with ``CofferError/Code/locked`` until unlocked), but
/// properties no longer follow changes made elsewhere.
public struct CofferService: Service {
    private let context: CofferContext?
    private let stores: [any PersistenceStrategy]
    private let vaults: [any Keychain]
    private let logger: Logger

    /// A service for the stores of `context` and any others given.
    ///
    /// - Parameters:
    ///   - context: The context whose open stores to shut down (by default the one properties
    ///     created here resolve in, ``CofferContext/inEffect``); `nil` for only the ones listed.
    ///   - stores: More stores to flush and stop watching (the vault of a vault strategy is
    ///     locked too).
    ///   - vaults: More vaults to flush and lock: any ``Keychain``, a file `Vault` or a
    ///     `PostgresVault`.
    ///   - logger: Where the shutdown is reported (what was flushed and locked, and failures).
    public init(
        context: CofferContext? = CofferContext.inEffect, stores: [any PersistenceStrategy] = [], vaults: [any Keychain] = [],
        logger: Logger
    ) {
        self.context = context
        self.stores = stores
        self.vaults = vaults
        self.logger = logger
    }

    /// Waits for the group's graceful shutdown (or cancellation), then calls ``shutDown()``.
    /// - Throws: What ``shutDown()`` throws.
    public func run() async throws {
        // Cancellation without a graceful phase throws here: shut down all the same.
        try? await gracefulShutdown()
        // Writes of `@Stored` properties on remote stores still on their way (a setter returns
        // before the server acknowledges): each ends within its store's deadlines.
        if await !RemoteWrites.settle() {
            logger.error("coffer: \(RemoteWrites.inFlight) writes to remote stores were still unacknowledged at shutdown")
        }
        try await shutDown()
    }

    /// ``shutDown()`` from async code: the flushes (an fsync each) and the locks run on Coffer's
    /// own threads while the calling task suspends, never on a thread of the cooperative pool.
    /// - Throws: What ``shutDown()`` throws.
    public func shutDown() async throws {
        try await Offload.run { try self.shutDown() }
    }

    /// Stops watching, flushes every store and locks every vault, now. Every step is tried on
    /// every store even when one fails.
    /// - Throws: The first failure (a ``CofferError``, such as `.io` when the disk refused a
    ///   flush); each one is also logged.
    public func shutDown() throws {
        // Keychains apart (a vault, a vault strategy's vault): each is flushed and locked, once
        // however many ways it is reachable (the context's, a strategy's, a listed one).
        var keychains: [any Keychain] = []
        var others: [any Sendable] = []
        // Other stores: each once, by its identity (a suite listed and also opened by the context).
        var seenStores = Set<StoreID>()
        for object in (context?.openStores ?? []) + stores.map({ $0 as any Sendable }) {
            if let keychain = object as? any Keychain {
                keychains.append(keychain)
            } else if let strategy = object as? any KeychainItemsStrategy {
                keychains.append(strategy.keychain)
            } else if ((object as? any PersistenceStrategy)?.id).map({ seenStores.insert($0).inserted }) ?? true {
                others.append(object)
            }
        }
        var seenKeychains = Set<ObjectIdentifier>()
        keychains = (keychains + vaults).filter { seenKeychains.insert(ObjectIdentifier($0)).inserted }
        var firstError: (any Error)?
        func attempt(_ what: String, _ body: () throws -> Void) {
            do {
                try body()
            } catch {
                logger.error("coffer: \(what) failed at shutdown: \(error)")
                if firstError == nil { firstError = error }
            }
        }

        // Watches first, so nothing reloads into a vault being locked.
        for case let store as any WatchStoppable in others + keychains.map({ $0 as any Sendable }) { store.stopWatching() }
        var flushed = 0
        for case let store as any PersistenceStrategy in others {
            attempt("flushing \(type(of: store))") { try store.flush() }
            flushed += 1
        }
        for keychain in keychains {
            attempt("flushing \(keychain.location)") { try keychain.flush() }
            keychain.lock()
        }
        logger.info(
            "coffer: shut down",
            metadata: ["coffer.flushed": "\(flushed + keychains.count)", "coffer.locked": "\(keychains.count)"])
        if let firstError { throw firstError }
    }
}

extension CofferService: CustomStringConvertible {
    /// What a `ServiceGroup` logs for this service: where its context is and how many stores and
    /// vaults it was given.
    public var description: String {
        "CofferService(context: \(context?.directory.path ?? "none"), \(stores.count) stores, \(vaults.count) vaults)"
    }
}
#endif
