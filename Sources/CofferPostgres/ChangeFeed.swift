#if Postgres
import CofferCore
import Foundation
import PostgresNIO

/// Listens on one channel with a connection of its own (not a pooled one), as an async task that
/// holds no thread while it waits, and calls `catchUp` after LISTEN succeeds (so a change made
/// while it was away, or before it started, is found by version) and after notifications
/// (a burst is caught up at once: catching up reads every row newer than the last one seen), and,
/// when given a `poll` interval, that often without one. A notification whose payload is
/// `ignoring` is not a wake-up (this process's own: what it announces, this process wrote and
/// knows). A lost connection is reopened (after 50 ms, then doubling to 1 s) until the feed is
/// stopped.
final class ChangeFeed: Sendable {
    private let task: Task<Void, Never>
    private let box: Box
    /// The feed's state, shared with its task.
    private final class Box: Sendable {
        let state = Locked(State())
    }
    private struct State {
        var connection: PostgresConnection?
        var stopped = false
        /// How many times the feed has (re)connected and caught up; for tests.
        var connections = 0
    }

    init(
        link: PostgresLink, channel: String, poll: Duration? = nil, ignoring: String? = nil,
        catchUp: @escaping @Sendable () async throws -> Void
    ) {
        let box = Box()
        self.box = box
        task = Offload.start {
            await Self.run(link: link, channel: channel, poll: poll, ignoring: ignoring, box: box, catchUp: catchUp)
        }
    }

    /// How many times the feed has (re)connected and caught up.
    var connections: Int { box.state.withLock { $0.connections } }

    /// Tells every feed on `channel` that a write committed `version`, as part of the writing
    /// transaction (PostgreSQL delivers the notification at commit, never for a rollback).
    static func notify(_ channel: String, of version: Int64, on connection: PostgresConnection, link: PostgresLink)
        async throws
    {
        var binds = PostgresBindings()
        binds.append(channel)
        binds.append(String(version))
        try await link.run("SELECT pg_notify($1, $2)", binds, on: connection)
    }

    /// Stops the feed: its connection is closed and its task ends shortly after.
    func stop() {
        let connection = box.state.withLock { state -> PostgresConnection? in
            state.stopped = true
            defer { state.connection = nil }
            return state.connection
        }
        task.cancel()
        if let connection { let _: EventLoopFuture<Void> = connection.close() }
    }

    private struct Ended: Error {}

    private static func run(
        link: PostgresLink, channel: String, poll: Duration?, ignoring: String?, box: Box,
        catchUp: @escaping @Sendable () async throws -> Void
    ) async {
        let state = box
        var delay = 0.05
        while !Task.isCancelled && !state.state.withLock({ $0.stopped }) {
            do {
                let live = try await link.connectForListening()
                let stopped = state.state.withLock { state -> Bool in
                    if !state.stopped { state.connection = live }
                    return state.stopped
                }
                // Stopped while connecting: close it like any other (postgres-nio traps on a
                // connection freed unclosed).
                if stopped {
                    try? await live.close()
                    return
                }
                let (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
                let caughtUp = Guarded(false)
                do {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            // LISTEN is in place once `consume` runs: catch up first, then per wake-up.
                            try await live.listen(on: channel) { notifications in
                                wake.yield()
                                for try await notification in notifications
                                where ignoring == nil || notification.payload != ignoring {
                                    wake.yield()
                                }
                            }
                            throw Ended()
                        }
                        group.addTask {
                            for await _ in wakes {
                                try await catchUp()
                                if !caughtUp.withLock({ $0 }) {
                                    caughtUp.withLock { $0 = true }
                                    state.state.withLock { $0.connections += 1 }
                                }
                            }
                            throw Ended()
                        }
                        if let poll {
                            group.addTask {
                                while true {
                                    try await Task.sleep(for: poll)
                                    wake.yield()
                                }
                            }
                        }
                        group.addTask {
                            // A connection that dies without ending the notification sequence
                            // (a server killed, a network cut) must not leave the feed deaf.
                            while !live.isClosed { try await Task.sleep(for: .milliseconds(250)) }
                            throw Ended()
                        }
                        _ = try await group.next()
                        group.cancelAll()
                    }
                } catch {
                    // The connection closed, LISTEN or a catch-up failed: reconnect below.
                }
                wake.finish()
                if caughtUp.withLock({ $0 }) { delay = 0.05 }
                state.state.withLock { if $0.connection === live { $0.connection = nil } }
                try? await live.close()
            } catch {
                // The server is down or restarting: try again; catching up on reconnect finds
                // every change made meanwhile.
            }
            if Task.isCancelled { return }
            try? await Task.sleep(for: .seconds(delay))
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
