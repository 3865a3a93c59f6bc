package import CofferCore
import Foundation

/// Tells stores that files in a directory changed, so they can catch up with writes made by
/// other processes (or other instances in this one) and tell their observers.
///
/// One thread per process, started with the first watch and ended (waited for) when the last one is
/// cancelled: no thread, descriptor or timer is left behind. On Linux it waits on one inotify
/// descriptor that watches each directory once (the directory, not the file: a compaction that
/// renames a new file into place is then seen without re-arming anything); on Darwin it waits on
/// a kqueue and also polls (see ``DirectoryEvents``: a directory's vnode does not report appends).
/// Where the kernel cannot watch (the per-user watch limit reached, a network or FUSE file system whose changes made on
/// another host it would never see, a platform without inotify), the watch falls back to polling
/// every `pollInterval`, and says so once through ``CofferWarning``; a journal's poll reads its
/// control page, which costs no system call.
///
/// Handlers run on the watcher thread, with no lock of the watcher held, one at a time. A burst
/// of events is delivered as one call (the names seen since the last call); a handler must catch
/// up with everything that happened, so coalescing never drops the last change.
package final class FileWatcher: Sendable {
    package static let shared = FileWatcher()

    /// The names that changed in the directory, or `nil` when anything may have (an overflow of
    /// the kernel's queue, a poll, the directory itself moved or removed).
    package typealias Handler = @Sendable (_ names: Set<String>?) -> Void

    private struct Watch {
        let directory: String
        let handler: Handler
        /// The watch descriptor (``DirectoryEvents``), or `nil` when this watch polls.
        var descriptor: Int32?
        let pollInterval: Duration
        var nextPoll: ContinuousClock.Instant
        /// Names seen and not yet delivered; `nil` inside means "anything".
        var pending: Set<String>? = []
        /// Whether the directory was removed or moved away: each poll tries to watch the
        /// directory at the path again (one made there, or a copy moved into place).
        var rearm = false
        /// Device and inode of the directory the kernel watches (`nil`: none, or unknown).
        var identity: (device: UInt64, inode: UInt64)?
        /// When the path is next checked against ``identity``.
        var nextCheck: ContinuousClock.Instant
        var hasPending = false

        /// Whether this watch polls: it has no descriptor, or the kernel's events miss writes
        /// into existing files (Darwin).
        var polls: Bool { descriptor == nil || !DirectoryEvents.reportsWritesInPlace }
    }

    private struct State {
        var watches: [UInt64: Watch] = [:]
        var byDescriptor: [Int32: Set<UInt64>] = [:]
        var nextID: UInt64 = 0
        /// The kernel's queue of directory changes, while the thread runs.
        var events: DirectoryEvents?
        var wakeRead: Int32 = -1
        var wakeWrite: Int32 = -1
        var running = false
        /// Signalled by the thread when it has exited.
        var exited: DispatchSemaphore?
        var threadID: ThreadIdentity?
        /// Bumped by every start: a thread whose generation is not current ends.
        var generation: UInt64 = 0
        /// Told from the watcher thread, never from the caller of `watch` (which may hold a
        /// property's lock that the application's warning handler would want).
        var pendingWarnings: [CofferWarning] = []
    }

    private let state = Locked(State())

    private init() {}

    /// Whether the watcher thread is running.
    package var isRunning: Bool { state.withLock { $0.running } }

    /// Starts watching `directory`; `handler` is called after files in it change. Cancel the
    /// returned token (or release it) to stop.
    package func watch(directory: String, pollInterval: Duration = .milliseconds(250), _ handler: @escaping Handler)
        -> FileWatch
    {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            let id = s.nextID
            startIfNeeded(&s)
            var watch = Watch(
                directory: directory, handler: handler, descriptor: nil, pollInterval: pollInterval,
                nextPoll: .now + pollInterval, nextCheck: .now + Self.identityCheckInterval)
            watch.identity = Self.identity(of: directory)
            watch.descriptor = addDescriptor(for: directory, in: &s)
            if let wd = watch.descriptor { s.byDescriptor[wd, default: []].insert(id) }
            s.watches[id] = watch
            return id
        }
        wake()
        return FileWatch(id: id, watcher: self)
    }

    /// Asks for `watch`'s handler to be called soon (with no names) on the watcher thread: a
    /// store that caught up during another call delivers what it found from there, never from
    /// inside that call (an observer may call back into the store).
    package func schedule(_ watch: FileWatch) {
        let found = state.withLock { s -> Bool in
            guard s.watches[watch.id] != nil else { return false }
            s.watches[watch.id]!.hasPending = true
            return true
        }
        if found { wake() }
    }

    fileprivate func cancel(_ id: UInt64) {
        let exited: DispatchSemaphore? = state.withLock { s in
            guard let watch = s.watches.removeValue(forKey: id) else { return nil }
            if let wd = watch.descriptor { Self.release(wd, of: id, in: &s) }
            guard s.watches.isEmpty, s.running else { return nil }
            s.running = false
            // Woken here, under the lock: once it is released a new watch may start a new thread
            // with a new pipe, and this thread, asleep in `poll` on the old one, would never end.
            if s.wakeWrite >= 0 { WakePipe.wake(s.wakeWrite) }
            // Cancelled from a handler: the thread ends by itself after the handler returns.
            if let thread = s.threadID, thread == .current { return nil }
            return s.exited
        }
        exited?.wait()
    }

    /// Takes watch `id` off the kernel's watch `wd`, which is removed once no watch uses it.
    private static func release(_ wd: Int32, of id: UInt64, in s: inout State) {
        s.byDescriptor[wd]?.remove(id)
        if s.byDescriptor[wd]?.isEmpty == true {
            s.byDescriptor[wd] = nil
            s.events?.remove(wd)
        }
    }

    // MARK: - The thread

    private func startIfNeeded(_ s: inout State) {
        guard !s.running else { return }
        // A thread from an earlier start may still be on its way out (cancelled from a handler):
        // it owns the old descriptors and closes them; this start makes new ones.
        s.running = true
        let pipe = WakePipe()
        s.wakeRead = pipe.readEnd
        s.wakeWrite = pipe.writeEnd
        let events = DirectoryEvents(wakeRead: s.wakeRead)
        s.events = events
        let exited = DispatchSemaphore(value: 0)
        s.exited = exited
        s.generation += 1
        let generation = s.generation
        let descriptors = (events: events, wakeRead: s.wakeRead, wakeWrite: s.wakeWrite)
        let thread = Thread { [self] in
            state.withLock { if $0.generation == generation { $0.threadID = .current } }
            run(descriptors: descriptors, generation: generation)
            state.withLock { s in
                // Nobody may write to or watch with these descriptors once they are closed.
                guard s.generation == generation else { return }
                s.wakeRead = -1
                s.wakeWrite = -1
                s.events = nil
                s.threadID = nil
            }
            WakePipe(readEnd: descriptors.wakeRead, writeEnd: descriptors.wakeWrite).close()
            descriptors.events.close()
            exited.signal()
        }
        thread.name = "Coffer file watcher"
        thread.start()
    }

    private func wake() {
        // Under the lock: the thread closes the pipe only after clearing it here.
        state.withLock { s in
            guard s.wakeWrite >= 0 else { return }
            WakePipe.wake(s.wakeWrite)
        }
    }

    /// How often the path of a watched directory is checked against the directory the kernel
    /// watches. The kernel reports a directory removed or moved away, but nothing when the path
    /// starts naming another one without the watched one moving (a symlink removed or pointed
    /// elsewhere): a stat a second finds it, and the store's handler is told to check its path.
    static let identityCheckInterval = Duration.seconds(1)

    /// Device and inode of the directory at `path` (following symlinks), or `nil`.
    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        guard let status = try? LiveFileSystem().stat(path) else { return nil }
        return (status.device, status.inode)
    }

    /// `COFFER_WATCH=poll` in the environment: poll instead of watching (an operator's way
    /// around a file system whose notifications cannot be trusted, and the tests' way to run
    /// the fallback).
    private static let forcePolling = ProcessInfo.processInfo.environment["COFFER_WATCH"] == "poll"

    /// The descriptor watching `directory`, or `nil` when it must be polled (told once).
    private func addDescriptor(for directory: String, in s: inout State) -> Int32? {
        if Self.forcePolling {
            warnPolling(directory, "COFFER_WATCH=poll is set", in: &s)
            return nil
        }
        guard let events = s.events, events.descriptor >= 0 else {
            warnPolling(directory, s.events?.unavailableReason ?? "the watcher is not running", in: &s)
            return nil
        }
        if let reason = Self.remoteFileSystem(directory) {
            warnPolling(directory, reason, in: &s)
            return nil
        }
        switch events.add(directory) {
        case .success(let descriptor):
            return descriptor
        case .failure(let refusal):
            warnPolling(directory, refusal.reason, in: &s)
            return nil
        }
    }

    private func warnPolling(_ directory: String, _ why: String, in s: inout State) {
        s.pendingWarnings.append(
            CofferWarning(
                .watchFallback,
                "changes made by other processes are found by polling (every few hundred milliseconds) because "
                    + why,
                path: directory))
    }

    /// Why a directory must be polled: a file system shared with other hosts, whose changes
    /// made there inotify never reports.
    private static func remoteFileSystem(_ directory: String) -> String? {
        guard let type = DirectoryEvents.fileSystemType(ofDirectory: directory) else { return nil }
        return LiveFileSystem.unsharedMappingFileSystems.contains(type)
            ? "it is on a network or FUSE file system, where inotify does not see other hosts' writes" : nil
    }

    private func run(descriptors: (events: DirectoryEvents, wakeRead: Int32, wakeWrite: Int32), generation: UInt64) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            // What to wait for: the wake pipe, the kernel's changes, and the earliest poll.
            let timeout: Int32? = state.withLock { s in
                guard s.running, s.generation == generation else { return nil }
                let polls = s.watches.values.filter(\.polls).map(\.nextPoll)
                let checks = s.watches.values.map(\.nextCheck)
                guard let next = (polls + checks).min() else { return -1 }
                let left = next - .now
                return left <= .zero ? 0 : Int32(min(60_000, max(1, left.components.seconds * 1000
                    + left.components.attoseconds / 1_000_000_000_000_000)))
            }
            guard let timeout else { return }
            var events: [DirectoryEvents.Event] = []
            var overflow = false
            let waited = descriptors.events.wait(
                wakeRead: descriptors.wakeRead, timeout: timeout, buffer: &buffer, into: &events, overflow: &overflow)
            if !waited { return }
            // Drain the wake pipe.
            WakePipe.drain(descriptors.wakeRead, into: &buffer)
            let warnings = state.withLock { s -> [CofferWarning] in
                defer { s.pendingWarnings = [] }
                return s.pendingWarnings
            }
            for warning in warnings { CofferWarning.warn(warning) }
            // The paths due for their identity check, stat'ed outside the lock (a hung network
            // mount must not hold every caller of `watch` and `cancel`).
            let due = state.withLock { s -> [(UInt64, String)] in
                guard s.running, s.generation == generation else { return [] }
                let now = ContinuousClock.now
                return s.watches.filter { now >= $0.value.nextCheck }.map { ($0.key, $0.value.directory) }
            }
            let checked = due.map { id, directory in (id, Self.identity(of: directory), Self.remoteFileSystem(directory)) }
            let calls = state.withLock { s -> [(Handler, Set<String>?)] in
                guard s.running, s.generation == generation else { return [] }
                let now = ContinuousClock.now
                for event in events {
                    let ids = s.byDescriptor[event.descriptor] ?? []
                    if event.gone {
                        // The directory was removed or moved away: the kernel dropped the watch.
                        // Its watches poll from now on (a store recreated there is found).
                        s.byDescriptor[event.descriptor] = nil
                        if !ids.isEmpty { s.events?.remove(event.descriptor) }
                        for id in ids {
                            s.watches[id]!.descriptor = nil
                            s.watches[id]!.rearm = true
                            s.watches[id]!.nextPoll = now + s.watches[id]!.pollInterval
                        }
                    }
                    for id in ids {
                        s.watches[id]!.hasPending = true
                        if let name = event.name {
                            s.watches[id]!.pending?.insert(name)
                        } else {
                            s.watches[id]!.pending = nil
                        }
                    }
                }
                var calls: [(Handler, Set<String>?)] = []
                for (id, identity, remote) in checked {
                    guard let watch = s.watches[id] else { continue }
                    s.watches[id]!.nextCheck = now + Self.identityCheckInterval
                    guard identity?.device != watch.identity?.device || identity?.inode != watch.identity?.inode else {
                        continue
                    }
                    // The path names another directory, or none: the watch moves to what it names.
                    s.watches[id]!.identity = identity
                    s.watches[id]!.hasPending = true
                    s.watches[id]!.pending = nil
                    if let wd = watch.descriptor {
                        Self.release(wd, of: id, in: &s)
                        s.watches[id]!.descriptor = nil
                    }
                    if identity != nil, remote == nil, !Self.forcePolling, let events = s.events,
                        case .success(let wd) = events.add(watch.directory)
                    {
                        s.watches[id]!.descriptor = wd
                        s.byDescriptor[wd, default: []].insert(id)
                        s.watches[id]!.rearm = false
                    } else {
                        // Polled from now on; a directory on a network file system stays polled.
                        s.watches[id]!.rearm = remote == nil
                        if let remote { warnPolling(watch.directory, remote, in: &s) }
                    }
                }
                for (id, watch) in s.watches {
                    var due = watch.hasPending || overflow
                    var names = overflow ? nil : watch.pending
                    if watch.polls, now >= watch.nextPoll {
                        due = true
                        names = nil
                        s.watches[id]!.nextPoll = now + watch.pollInterval
                        if watch.rearm, Self.remoteFileSystem(watch.directory) == nil, let events = s.events,
                            case .success(let wd) = events.add(watch.directory)
                        {
                            // A directory is at the path again: watched from now on.
                            s.watches[id]!.descriptor = wd
                            s.watches[id]!.rearm = false
                            s.watches[id]!.identity = Self.identity(of: watch.directory)
                            s.byDescriptor[wd, default: []].insert(id)
                        }
                    }
                    guard due else { continue }
                    s.watches[id]!.pending = []
                    s.watches[id]!.hasPending = false
                    calls.append((watch.handler, names))
                }
                return calls
            }
            for (handler, names) in calls { handler(names) }
        }
    }

}

/// An active watch of ``FileWatcher``; cancelled when released.
package final class FileWatch: Sendable {
    let id: UInt64
    private let watcher: FileWatcher
    private let cancelled = Locked(false)

    fileprivate init(id: UInt64, watcher: FileWatcher) {
        self.id = id
        self.watcher = watcher
    }

    /// Stops the watch; the last watch of the process ends the watcher thread before returning
    /// (unless called from that thread, which then ends as soon as its handler returns).
    package func cancel() {
        let first = cancelled.withLock { done in
            defer { done = true }
            return !done
        }
        if first { watcher.cancel(id) }
    }

    deinit { cancel() }
}

/// The observers of one store and the directory watch that serves them: the first observer
/// starts the watch, the last one's observation cancels it (with no lock held — a cancel may
/// wait for the watcher thread, which may be inside a handler taking the store's locks).
/// Shared by the strategies that adopt ``ChangeObservingPersistenceStrategy``.
package final class WatchedObservers<Change: Sendable>: Sendable {
    private struct State {
        var handlers: [UInt64: @Sendable (Change) -> Void] = [:]
        var next: UInt64 = 0
        var watch: FileWatch?
        /// The `stopped` of the add that started the watch.
        var stopped: (@Sendable () -> Void)?
    }

    private let state = Locked(State())

    package init() {}

    /// The active watch, if anyone observes.
    package var watch: FileWatch? { state.withLock { $0.watch } }

    /// Adds `handler`. The first one calls `start` (with no lock held) for the watch; when the
    /// last observation goes, the watch is cancelled and `stopped` runs.
    package func add(
        _ handler: @escaping @Sendable (Change) -> Void, start: () -> FileWatch,
        stopped: @escaping @Sendable () -> Void
    ) -> StoreObservation {
        let (id, first) = state.withLock { s -> (UInt64, Bool) in
            s.next += 1
            s.handlers[s.next] = handler
            return (s.next, s.handlers.count == 1 && s.watch == nil)
        }
        if first {
            let watch = start()
            let unused = state.withLock { s -> FileWatch? in
                guard !s.handlers.isEmpty, s.watch == nil else { return watch }
                s.watch = watch
                s.stopped = stopped
                return nil
            }
            // Lost a race with the last observer leaving, or another first one. Cancelled here:
            // callers hold no Coffer lock (a cell subscribes after resolving, outside its locks).
            if let unused { unused.cancel() }
        }
        return StoreObservation { [weak self] in self?.remove(id, stopped: stopped) }
    }

    private func remove(_ id: UInt64, stopped: @Sendable () -> Void) {
        let watch = state.withLock { s -> FileWatch? in
            s.handlers[id] = nil
            guard s.handlers.isEmpty else { return nil }
            defer {
                s.watch = nil
                s.stopped = nil
            }
            return s.watch
        }
        guard let watch else { return }
        stopped()
        watch.cancel()
    }

    /// Drops every observer and cancels the watch (a graceful shutdown): observations made
    /// before stop being told, and their cancellation does nothing. A later observer starts a
    /// new watch.
    package func stopAll() {
        let (watch, stopped) = state.withLock { s -> (FileWatch?, (@Sendable () -> Void)?) in
            defer {
                s.handlers = [:]
                s.watch = nil
                s.stopped = nil
            }
            return (s.watch, s.stopped)
        }
        guard let watch else { return }
        stopped?()
        watch.cancel()
    }

    /// Tells every observer.
    package func notify(_ change: Change) {
        for handler in state.withLock({ Array($0.handlers.values) }) { handler(change) }
    }
}
