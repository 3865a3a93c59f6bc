import CKeyring
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

    private let configuration: Configuration
    private let references: [SecretReference]
    /// Kept open (and unlocked) only with `--watch`.
    private var store: (any Keychain)?
    /// The secrets the next child gets; kept only while needed (masking or `--watch`).
    private var values: [SecretReference: SecureBytes]
    private let concealed = ConcealedValues()
    /// The forwarded signals (and SIGPIPE) that were ignored when coffer started: they stay
    /// ignored, for coffer and for the child, as a shell leaves them (`nohup`, or `&` in a
    /// non-interactive shell, which ignores INT and QUIT).
    private var ignoredSignals: Set<Int32> = []
    /// The thread every child is started from, in a session keyring of its own.
    private let spawner = IsolatedSpawner()

    init(_ configuration: Configuration, store: (any Keychain)?, values: [SecretReference: SecureBytes]) {
        self.configuration = configuration
        self.references = configuration.environment.references.map(\.reference)
        self.store = configuration.restartSignal == nil ? nil : store
        self.values = values
    }

    // MARK: - Running

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
            Self.testPauseBeforeWatching()
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

    // MARK: - Starting a child

    /// Starts the child with the current secrets in its environment (and nowhere else): the
    /// environment block is built in memory that is wiped as soon as the child has started.
    ///
    /// As `execvp` does, a file the kernel cannot execute (ENOEXEC: a script without `#!`) is
    /// run by `/bin/sh` instead: `/bin/sh FILE ARGUMENTS…`. The child is started from
    /// ``IsolatedSpawner``'s thread, so its session keyring is a new empty one.
    private func spawn(arguments: [UnsafeMutablePointer<CChar>?], outputs: [Int32]) throws -> pid_t {
        let block = WipingBuffer(capacity: 4096)
        var offsets: [Int] = []
        for (name, entry) in configuration.environment.ordered {
            offsets.append(block.count)
            switch entry.value {
            case .plain(let bytes):
                for byte in bytes { block.append(byte) }
            case .reference(let reference):
                for byte in name { block.append(byte) }
                block.append(UInt8(ascii: "="))
                values[reference]?.withUnsafeBytes { for byte in $0 { block.append(byte) } }
            }
            block.append(0)
        }
        var pid: pid_t = 0
        var result: Int32 = 0
        block.withUnsafeBytes { raw in
            let base = UnsafeMutablePointer(mutating: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            let environment: [UnsafeMutablePointer<CChar>?] = offsets.map { base + $0 } + [nil]
            result = spawner.perform {
                startProcess(&pid, configuration.executable, arguments: arguments, environment: environment, outputs: outputs)
            }
            if result == ENOEXEC {
                let shell: [UnsafeMutablePointer<CChar>?] =
                    [strdup(Self.shell), strdup(configuration.executable)] + arguments.dropFirst()
                defer {
                    free(shell[0])
                    free(shell[1])
                }
                result = spawner.perform {
                    startProcess(&pid, Self.shell, arguments: shell, environment: environment, outputs: outputs)
                }
            }
        }
        guard result == 0 else {
            let reason = String(cString: strerror(result))
            let command = quotedName(configuration.arguments[0])
            if result == ENOENT { throw RunExit(status: 127, message: "cannot run \(command): \(reason)") }
            throw RunExit(status: 126, message: "cannot run \(command): \(reason)")
        }
        return pid
    }

    /// The shell `execvp` runs a file without `#!` with.
    static let shell = "/bin/sh"

    /// The search path `execvp` uses when PATH is unset (glibc's).
    static let defaultPath = "/bin:/usr/bin"

    /// One `posix_spawn`: `outputs` (when two) become the child's standard output and error;
    /// the child's signal mask is empty and the signals coffer handles are back to their
    /// default actions, except those ignored when coffer started, which stay ignored. Returns
    /// `posix_spawn`'s result.
    private func startProcess(
        _ pid: inout pid_t, _ path: String, arguments: [UnsafeMutablePointer<CChar>?],
        environment: [UnsafeMutablePointer<CChar>?], outputs: [Int32]
    ) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if outputs.count == 2 {
            posix_spawn_file_actions_adddup2(&actions, outputs[0], STDOUT_FILENO)
            posix_spawn_file_actions_adddup2(&actions, outputs[1], STDERR_FILENO)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The signal state a shell gives a command: nothing blocked, the signals coffer handles
        // back to their default actions, and those ignored on entry still ignored (an ignored
        // signal stays ignored across exec).
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in Self.forwardedSignals + [SIGCHLD, SIGPIPE] where !ignoredSignals.contains(number) {
            sigaddset(&defaults, number)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        // With the core size limit coffer was started with (Hardening keeps the hard limit):
        // the command may write the core files its user asked for.
        return Hardening.withOriginalCoreLimit { posix_spawn(&pid, path, &actions, &attributes, arguments, environment) }
    }

    /// Refuses to start a child that could reach the vault keys `coffer unlock` keeps: when
    /// ``IsolatedSpawner``'s thread could not join a keyring of its own (the kernel has no
    /// keyrings, or refuses them here), the child would share coffer's session keyring, which
    /// is harmless only while it holds no such key.
    private func checkKeyringIsolation() throws {
        let code = spawner.joinError
        guard code != 0 else { return }
        if let kept = try? SessionKeyring.cofferKeys(), !kept.isEmpty {
            throw CLIError(
                .failure,
                "cannot give the command a session keyring of its own (\(String(cString: strerror(code)))): it could read "
                    + "the vault keys coffer unlock keeps there; run coffer lock first")
        }
    }

    /// The program `command` names, found as `execvp` finds it: a name with a `/` is a path;
    /// otherwise the first executable regular file of that name in the directories of `path`
    /// (an empty entry is the current directory; without PATH, glibc's ``defaultPath``).
    static func resolve(_ command: String, path: [UInt8]?) throws -> String {
        func executable(_ candidate: String) -> (found: Bool, runnable: Bool) {
            var status = stat()
            guard stat(candidate, &status) == 0 else { return (false, false) }
            return (true, status.st_mode & S_IFMT == S_IFREG && access(candidate, X_OK) == 0)
        }
        let shown = quotedName(command)
        if command.contains("/") {
            let (found, runnable) = executable(command)
            guard found else { throw RunExit(status: 127, message: "cannot run \(shown): no such file") }
            guard runnable else { throw RunExit(status: 126, message: "cannot run \(shown): not an executable file") }
            return command
        }
        var sawUnrunnable = false
        if !command.isEmpty {
            let directories = String(decoding: path ?? Array(defaultPath.utf8), as: UTF8.self)
            for directory in directories.split(separator: ":", omittingEmptySubsequences: false) {
                let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + command
                let (found, runnable) = executable(candidate)
                if runnable { return candidate }
                if found { sawUnrunnable = true }
            }
        }
        if sawUnrunnable { throw RunExit(status: 126, message: "cannot run \(shown): permission denied (not an executable file)") }
        throw RunExit(status: 127, message: "\(shown): command not found (searched PATH)")
    }

    // MARK: - Changes

    /// Test-only, deliberately absent from --help: with `COFFER_TEST_RUN_PAUSE=PATH`, `--watch`
    /// creates `PATH.waiting` after reading the secrets and before watching for changes, then
    /// waits (a minute at most) until PATH exists, so a test can change an item in between
    /// (Tests/CofferCLITests/RunTests.swift). It reveals nothing and only delays this process.
    private static func testPauseBeforeWatching() {
        guard let path = getenv("COFFER_TEST_RUN_PAUSE").map({ String(cString: $0) }) else { return }
        let fd = open(path + ".waiting", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
        for _ in 0..<3000 where access(path, F_OK) != 0 { usleep(20_000) }
    }

    /// Starts telling `notify` (one byte written) when an item of `items` changes, or anything
    /// may have.
    private static func observe(_ store: any Keychain, items: Set<VaultItemID>, notify fd: Int32) -> StoreObservation {
        store.observeChanges { changed in
            if let changed, changed.isDisjoint(with: items) { return }
            var byte: UInt8 = 1
            _ = write(fd, &byte, 1)  // full pipe: a change is pending anyway
        }
    }

    /// Empties the change pipe; whether it held anything.
    private static func drainChanges(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 256)
        var any = false
        while read(fd, &buffer, buffer.count) > 0 { any = true }
        return any
    }

    /// Reads every referenced secret again; true when one differs from what the child has
    /// (the next child then gets the new values). A secret that can no longer be read keeps its
    /// old value, and coffer says so.
    private func reread(announce: Bool = true) -> Bool {
        guard let store else { return false }
        var changed: [SecretReference] = []
        var fresh = values
        for reference in references {
            do {
                guard let secret = try store.secret(service: reference.service, account: reference.account) else {
                    writeError("coffer: \(reference) was removed; the command keeps its value\n")
                    continue
                }
                if secret.withUnsafeBytes({ $0.contains(0) }) {
                    writeError("coffer: \(reference) now holds a NUL byte, which an environment variable cannot hold; the command keeps its value\n")
                    continue
                }
                if values[reference].map({ $0 != secret }) ?? true {
                    fresh[reference] = secret
                    changed.append(reference)
                }
            } catch {
                let text = (error as? CofferError).map { message(for: $0) } ?? "\(error)"
                writeError("coffer: cannot read \(reference) after a change (\(text)); the command keeps running\n")
                return false
            }
        }
        guard !changed.isEmpty else { return false }
        // The old values stay concealed too, for as long as the output is relayed: a process an
        // earlier child left behind (started in the background) may still write them.
        if configuration.masking { concealed.add(changed.compactMap { fresh[$0] }) }
        values = fresh
        guard announce else { return true }
        let names = changed.map(\.description).joined(separator: ", ")
        writeError("coffer: \(names) changed: restarting \(quotedName(configuration.arguments[0]))\n")
        return true
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

// MARK: - Signals

/// The self-pipe the signal handlers of `coffer run` write to: two bytes per signal, its
/// number and whether the kernel sent it (`SI_KERNEL`: from a terminal, to a process group).
enum SignalPipe {
    /// Installs the handlers for `signals` and SIGCHLD, and unblocks them in the calling thread
    /// (SIGPIPE is ignored: a closed output is an error to report, not a reason to die and
    /// leave the child behind). A signal of `signals` that is ignored already (`nohup`, a
    /// background job of a non-interactive shell) is left ignored: no handler. Returns the
    /// pipe's read end (non-blocking), and the signals of `signals` and SIGPIPE that were ignored.
    ///
    /// (SIGQUIT is never found ignored: ``Hardening`` installs its crash handler for it at
    /// start-up, before this runs, and does not record what it replaced.)
    static func install(_ signals: [Int32]) throws -> (fd: Int32, ignored: Set<Int32>) {
        var fds: [Int32] = [-1, -1]
        guard c_pipe2(&fds, O_CLOEXEC | O_NONBLOCK) == 0 else {
            throw CLIError(.failure, "cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        signalPipeWriteEnd = fds[1]
        let ignored = Set((signals + [SIGPIPE]).filter(isIgnored))
        for number in signals + [SIGCHLD] where !ignored.contains(number) {
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = noteSignal
            sigemptyset(&action.sa_mask)
            // SA_RESTART: other threads' calls (the vault's watcher, the relays) are not interrupted.
            action.sa_flags = SA_SIGINFO | SA_RESTART | (number == SIGCHLD ? SA_NOCLDSTOP : 0)
            sigaction(number, &action, nil)
        }
        signal(SIGPIPE, SIG_IGN)
        // A parent may have started coffer with signals blocked (a test runner's threads do,
        // and a spawned process inherits the mask): these must be delivered.
        var handled = sigset_t()
        sigemptyset(&handled)
        for number in signals + [SIGCHLD] where !ignored.contains(number) { sigaddset(&handled, number) }
        pthread_sigmask(SIG_UNBLOCK, &handled, nil)
        return (fds[0], ignored)
    }

    /// Whether `number`'s disposition is SIG_IGN.
    static func isIgnored(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0, current.sa_flags & SA_SIGINFO == 0 else { return false }
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// Every signal noted since the last call: its number, and whether the kernel sent it.
    static func drain(_ fd: Int32) -> [(Int32, Bool)] {
        var noted: [(Int32, Bool)] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            // Each handler writes its two bytes at once (a pipe write of up to PIPE_BUF bytes
            // is atomic), so a read returns whole pairs.
            for pair in stride(from: 0, to: n - 1, by: 2) { noted.append((Int32(buffer[pair]), buffer[pair + 1] != 0)) }
        }
        return noted
    }
}

// Written before the handlers are installed; read by them.
nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1

/// The handler: one `write` (async-signal-safe), errno kept as it was.
private func noteSignal(_ number: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?) {
    let saved = errno
    let code: Int32 = info.map { $0.pointee.si_code } ?? 0
    let fromKernel: UInt16 = code == Int32(SI_KERNEL) ? 1 : 0
    var message = (UInt16(truncatingIfNeeded: number) & 0xFF | fromKernel << 8).littleEndian
    _ = write(signalPipeWriteEnd, &message, 2)
    errno = saved
}

// glibc's pipe2, which Swift's Glibc module does not import (it is behind _GNU_SOURCE).
@_silgen_name("pipe2") private func c_pipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32

// MARK: - The child's keyring

/// A thread that joins a new anonymous session keyring of its own (KEYCTL_JOIN_SESSION_KEYRING,
/// which changes the calling thread's credentials only) as it starts, and then runs what it is
/// given: `coffer run` starts every child from it, so the child's session keyring is that new,
/// empty one and the vault keys `coffer unlock` keeps in coffer's session keyring (possessor
/// only) are out of the child's reach, while coffer itself keeps them.
final class IsolatedSpawner: @unchecked Sendable {
    // @unchecked Sendable: `job` and `finished` are guarded by `condition`; `joinError` is
    // written before `init` returns and only read after.
    private let condition = NSCondition()
    private var job: (() -> Void)?
    private var finished = false
    /// The errno of joining the new keyring; 0 when it was joined.
    private(set) var joinError: Int32 = 0

    init() {
        let started = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            if coffer_key_join_session(nil) < 0 { joinError = errno }
            started.signal()
            loop()
        }
        thread.start()
        started.wait()
    }

    /// Runs jobs until the process ends.
    private func loop() {
        condition.lock()
        while true {
            while job == nil { condition.wait() }
            let next = job!
            job = nil
            condition.unlock()
            next()
            condition.lock()
            finished = true
            condition.broadcast()
        }
    }

    /// Runs `body` on the thread, waits for it, and returns what it returned.
    func perform<T>(_ body: () -> T) -> T {
        var result: T?
        withoutActuallyEscaping(body) { body in
            condition.lock()
            job = { result = body() }
            finished = false
            condition.broadcast()
            while !finished { condition.wait() }
            condition.unlock()
        }
        return result!
    }
}
