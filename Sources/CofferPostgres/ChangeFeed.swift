#if Postgres
import CofferCore
import Foundation
import PostgresNIO

/// Listens on one channel with a connection of its own, on a thread of its own, and calls
/// `catchUp` with that connection after LISTEN succeeds (so a change made while it was away,
/// or before it started, is found by version) and after every notification. A lost connection
/// is reopened (after 50 ms, then doubling to 1 s) until the feed is stopped.
final class ChangeFeed: @unchecked Sendable {
    private let configuration: PostgresConfiguration
    private let channel: String
    private let catchUp: @Sendable (PostgresConnection) throws -> Void
    private let condition = NSCondition()
    /// Guarded by `condition`.
    private var stopped = false
    private var pending = false
    private var current: PostgresConnection?
    /// This connection's LISTEN is in place (`listening`), or its listener has ended (`unheard`:
    /// the connection closed, or LISTEN failed), so no notification will come on it.
    private var listening = false
    private var unheard = false
    /// Which connection's listener may change the two above (an earlier one may end late).
    private var generation = 0
    /// How many times the feed has (re)connected and caught up; for tests.
    private(set) var connections = 0

    init(
        configuration: PostgresConfiguration, channel: String,
        catchUp: @escaping @Sendable (PostgresConnection) throws -> Void
    ) {
        self.configuration = configuration
        self.channel = channel
        self.catchUp = catchUp
        let thread = Thread { [self] in run() }
        thread.name = "coffer.postgres.listen"
        thread.start()
    }

    /// Tells every feed on `channel` that a write committed `version`, as part of the writing
    /// transaction (PostgreSQL delivers the notification at commit, never for a rollback).
    static func notify(_ channel: String, of version: Int64, on connection: PostgresConnection) throws {
        var binds = PostgresBindings()
        binds.append(channel)
        binds.append(String(version))
        try PostgresLink.run("SELECT pg_notify($1, $2)", binds, on: connection)
    }

    /// Stops the feed: its connection is closed and its thread ends shortly after.
    func stop() {
        condition.lock()
        stopped = true
        let connection = current
        condition.signal()
        condition.unlock()
        connection.map(closeQuietly)
    }

    /// Starts listening on `live` (postgres-nio sends the LISTEN): `listening` once it is in
    /// place, a wake-up for each notification, `unheard` when the listener ends.
    ///
    /// Not `addListener`: when the connection closes between the connect and that call (the
    /// server stopping, or ``stop()``), its registration is dropped before reaching the
    /// connection, and postgres-nio traps on the unused listener ("Notification closure had not
    /// been used", seen once in a full test run). `listen(on:consume:)` fails the listener then.
    private func listen(on live: PostgresConnection) -> Task<Void, Never> {
        condition.lock()
        listening = false
        unheard = false
        generation += 1
        let generation = generation
        condition.unlock()
        let channel = channel
        return Task(executorPreference: BridgeExecutor.shared) { [weak self] in
            do {
                try await live.listen(on: channel) { notifications in
                    self?.update(generation) { $0.listening = true }
                    for try await _ in notifications { self?.update(generation) { $0.pending = true } }
                }
            } catch {
                // The connection closed or LISTEN failed: the feed reconnects.
            }
            self?.update(generation) { $0.unheard = true }
        }
    }

    /// Changes the guarded state, unless a later connection's listener owns it, and wakes the
    /// feed's thread.
    private func update(_ generation: Int, _ change: (ChangeFeed) -> Void) {
        condition.lock()
        if generation == self.generation { change(self) }
        condition.signal()
        condition.unlock()
    }

    private var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    private func run() {
        var delay = 0.05
        while !isStopped {
            var connection: PostgresConnection?
            do {
                let live = try PostgresLink.connect(configuration)
                connection = live
                condition.lock()
                current = live
                let stop = stopped
                condition.unlock()
                // Stopped while connecting: close it below like any other (a `break` here once
                // left it open, and postgres-nio traps on a connection freed unclosed).
                if stop { throw CancellationError() }
                let listener = listen(on: live)
                defer { listener.cancel() }
                condition.lock()
                while !listening && !unheard && !stopped && !live.isClosed { _ = condition.wait(until: Date() + 1) }
                let ready = listening && !unheard && !stopped
                if ready {
                    connections += 1
                    pending = false
                }
                condition.unlock()
                if !ready { throw CancellationError() }
                try catchUp(live)
                delay = 0.05
                while true {
                    condition.lock()
                    while !pending && !stopped && !unheard && !live.isClosed { _ = condition.wait(until: Date() + 1) }
                    let stop = stopped || unheard
                    pending = false
                    condition.unlock()
                    if stop || live.isClosed { break }
                    try catchUp(live)
                }
            } catch {
                // The server is down or restarting: try again; catching up on reconnect finds
                // every change made meanwhile.
            }
            connection.map(closeQuietly)
            condition.lock()
            current = nil
            if !stopped { _ = condition.wait(until: Date() + delay) }
            condition.unlock()
            delay = min(delay * 2, 1)
        }
    }
}

/// The observers of one store, sharing one ``ChangeFeed`` while there is at least one.
final class FeedObservers<Change: Sendable>: Sendable {
    private struct State {
        var handlers: [UInt64: @Sendable (Change) -> Void] = [:]
        var next: UInt64 = 0
        var feed: ChangeFeed?
    }

    private let state = Locked(State())

    init() {}

    /// Adds `handler`; the first one starts the feed with `start`, the last one's cancel stops it.
    func add(_ handler: @escaping @Sendable (Change) -> Void, start: () throws -> ChangeFeed) rethrows
        -> StoreObservation
    {
        let (id, first) = state.withLock { s -> (UInt64, Bool) in
            s.next += 1
            s.handlers[s.next] = handler
            return (s.next, s.handlers.count == 1 && s.feed == nil)
        }
        if first {
            let feed: ChangeFeed
            do {
                feed = try start()
            } catch {
                state.withLock { _ = $0.handlers.removeValue(forKey: id) }
                throw error
            }
            let unused = state.withLock { s -> ChangeFeed? in
                guard !s.handlers.isEmpty, s.feed == nil else { return feed }
                s.feed = feed
                return nil
            }
            unused?.stop()
        }
        return StoreObservation { [weak self] in self?.remove(id) }
    }

    private func remove(_ id: UInt64) {
        let feed = state.withLock { s -> ChangeFeed? in
            s.handlers[id] = nil
            guard s.handlers.isEmpty else { return nil }
            defer { s.feed = nil }
            return s.feed
        }
        feed?.stop()
    }

    /// Whether anyone observes.
    var isObserved: Bool { state.withLock { !$0.handlers.isEmpty } }

    /// Tells every observer.
    func notify(_ change: Change) {
        for handler in state.withLock({ Array($0.handlers.values) }) { handler(change) }
    }
}
#endif
