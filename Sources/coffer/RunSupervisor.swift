import Coffer
import CofferCrypto
import Foundation

#if Postgres
    import CofferPostgres
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer run` ending with a status of its own rather than the child's: 127 (the command was
/// not found), 126 (found, but it cannot be run).
struct RunExit: Error {
    let status: Int32
    let message: String
}

/// Starts the child of `coffer run` with its secrets in its environment, passes signals on to
/// it, relays and masks its output, restarts it when a referenced item changes (`--watch`), and
/// returns the status `coffer` exits with: the child's, or 128 + n when a signal n ended it.
///
/// One thread (the caller's) does everything but the output: it waits in `poll` on a self-pipe
/// that the signal handlers write to (they do nothing else: a write is async-signal-safe) and
/// on a pipe the vault's change observer writes to. At most one child is alive at a time, and
/// coffer returns only once the last one it started has been reaped, so no signal, not even a
/// storm of them during a restart, leaves a child behind. The two output relays have threads
/// of their own, so a slow reader of coffer's output never delays a signal.
///
/// This file holds the loop; starting a child is in RunSupervisor+Spawning.swift, following
/// the items in RunSupervisor+Watching.swift, the signal handlers in RunSignals.swift, and the
/// thread children are started from in IsolatedSpawner.swift. (The output relay and its
/// masking are in OutputMasker.swift.)
final class RunSupervisor {
    /// The signals passed on to the child.
    static let forwardedSignals: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH]
    /// The forwarded signals that ask a program to end: received while the child is being
    /// restarted, no new child is started. (Not HUP, which many servers take as "reload".)
    static let terminatingSignals: Set<Int32> = [SIGINT, SIGTERM, SIGQUIT]
    /// How long a child asked to stop for a restart has before it is killed (SIGKILL).
    static let stopDeadline: Duration = .seconds(10)
    /// Changes are coalesced: the restart waits until none came for this long…
    static let quietPeriod: Duration = .milliseconds(100)
    /// …but no longer than this after the first.
    static let coalescingLimit: Duration = .milliseconds(500)

    /// What to run and how.
    struct Configuration {
        /// The program's path, found as `execvp` would.
        var executable: String
        /// Its arguments, the first being the command as given.
        var arguments: [String]
        var environment: ChildEnvironment
        var masking: Bool
        /// `--watch`: the signal that asks the child to stop before a restart; `nil` without.
        var restartSignal: Int32?
    }

    let configuration: Configuration
    let references: [SecretReference]
    /// Kept open (and unlocked) only with `--watch`.
    var store: (any Keychain)?
    /// The secrets the next child gets; kept only while needed (masking or `--watch`).
    var values: [SecretReference: SecureBytes]
    let concealed = ConcealedValues()
    /// The forwarded signals (and SIGPIPE) that were ignored when coffer started: they stay
    /// ignored, for coffer and for the child, as a shell leaves them (`nohup`, or `&` in a
    /// non-interactive shell, which ignores INT and QUIT).
    var ignoredSignals: Set<Int32> = []
    /// The thread every child is started from, in a session keyring of its own.
    let spawner = IsolatedSpawner()

    init(_ configuration: Configuration, store: (any Keychain)?, values: [SecretReference: SecureBytes]) {
        self.configuration = configuration
        self.references = configuration.environment.references.map(\.reference)
        self.store = configuration.restartSignal == nil ? nil : store
        self.values = values
    }

    /// Runs the child (and its successors) to the end; returns coffer's exit status.
    func run() throws -> Int32 {
        if configuration.masking { concealed.add(Array(values.values)) }
        // The handlers first: a signal that arrives from now on is noted, and passed on once
        // the child exists; none can kill coffer and leave a child behind.
        let (signals, ignored) = try SignalPipe.install(Self.forwardedSignals)
        ignoredSignals = ignored
        try checkKeyringIsolation()
        var changes: (read: Int32, write: Int32)?
        var observation: StoreObservation?
        defer {
            observation?.cancel()
            if let changes {
                close(changes.read)
                close(changes.write)
            }
        }
        if configuration.restartSignal != nil, let store {
            #if COFFER_TEST_HOOKS
            Self.testPauseBeforeWatching()
            #endif
            let pipe = try makePipe(nonblocking: true)
            changes = pipe
            let watched = Set(references.map { VaultItemID(service: $0.service, account: $0.account) })
            observation = Self.observe(store, items: watched, notify: pipe.write)
            // The secrets were read before the observation began: a change in between would
            // never be seen. Read once more now that every later one is (the first child gets
            // the newest values; nothing to restart yet).
            _ = reread(announce: false)
        }
        var relays: [OutputRelay] = []
        var outputs: [Int32] = []
        if configuration.masking {
            for destination in [STDOUT_FILENO, STDERR_FILENO] {
                let pipe = try makePipe(nonblocking: false)
                let relay = OutputRelay(from: pipe.read, to: destination, concealing: concealed)
                relay.start()
                relays.append(relay)
                outputs.append(pipe.write)
            }
        }
        let arguments = configuration.arguments.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }

        var child = try spawn(arguments: arguments, outputs: outputs)
        if !configuration.masking && configuration.restartSignal == nil { values = [:] }
        var restarting = false
        var stopDeadline: ContinuousClock.Instant?
        var shutdown = false
        var firstChange: ContinuousClock.Instant?
        var lastChange: ContinuousClock.Instant?
        let clock = ContinuousClock()
        var status: Int32 = 0
        running: while true {
            // Sleep until a signal, a change, or the next deadline.
            var deadlines: [ContinuousClock.Instant] = []
            if let firstChange, let lastChange {
                deadlines.append(min(firstChange + Self.coalescingLimit, lastChange + Self.quietPeriod))
            }
            if let stopDeadline { deadlines.append(stopDeadline) }
            // At most a second: the child is also reaped if its SIGCHLD went to no handler.
            var timeout: Int32 = 1000
            if let next = deadlines.min() {
                let left = clock.now.duration(to: next)
                timeout = left <= .zero ? 0 : Int32(min(left / .milliseconds(1), 1000).rounded(.up))
            }
            var fds = [
                pollfd(fd: signals, events: Int16(POLLIN), revents: 0),
                pollfd(fd: changes?.read ?? -1, events: Int16(POLLIN), revents: 0),
            ]
            _ = poll(&fds, nfds_t(fds.count), timeout)

            for (number, fromKernel) in SignalPipe.drain(signals) where number != SIGCHLD {
                if Self.terminatingSignals.contains(number), restarting { shutdown = true }
                // A signal from the kernel (Ctrl-C, a terminal's hang-up or resize) went to the
                // whole foreground process group, the child included: not sent twice.
                if !fromKernel { kill(child, number) }
            }
            if let read = changes?.read, Self.drainChanges(read) {
                let now = clock.now
                if firstChange == nil { firstChange = now }
                lastChange = now
            }
            // Reaped whether or not a SIGCHLD was seen (signals of a kind coalesce).
            var waited: Int32 = 0
            var reaped = waitpid(child, &waited, WNOHANG)
            while reaped < 0 && errno == EINTR { reaped = waitpid(child, &waited, WNOHANG) }
            if reaped == child {
                if restarting && !shutdown {
                    child = try spawn(arguments: arguments, outputs: outputs)
                    restarting = false
                    stopDeadline = nil
                    continue running
                }
                status = Self.exitStatus(waited)
                break running
            }
            if reaped < 0 {
                // ECHILD: never expected; there is no child left to wait for.
                status = 1
                break running
            }
            let now = clock.now
            if let stop = stopDeadline, now >= stop {
                writeError("coffer: the command did not stop within \(Self.stopDeadline) of a restart: killing it (SIGKILL)\n")
                kill(child, SIGKILL)
                stopDeadline = nil
            }
            if let first = firstChange, let last = lastChange,
                now >= min(first + Self.coalescingLimit, last + Self.quietPeriod)
            {
                firstChange = nil
                lastChange = nil
                if reread(), !restarting, let signal = configuration.restartSignal {
                    kill(child, signal)
                    restarting = true
                    stopDeadline = now + Self.stopDeadline
                }
            }
        }
        for output in outputs { close(output) }
        for relay in relays { relay.finish(grace: 1) }
        return status
    }

    /// The status coffer exits with for the child's wait status: its exit status, or 128 + n
    /// when signal n ended it.
    static func exitStatus(_ waited: Int32) -> Int32 {
        let signal = waited & 0x7F
        return signal == 0 ? (waited >> 8) & 0xFF : 128 + signal
    }

    /// A pipe whose ends are closed on `exec`.
    private func makePipe(nonblocking: Bool) throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard c_pipe2(&fds, O_CLOEXEC | (nonblocking ? O_NONBLOCK : 0)) == 0 else {
            throw CLIError(.failure, "cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        return (fds[0], fds[1])
    }
}
