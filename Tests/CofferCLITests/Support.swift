import CofferTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// These tests run the built `coffer` binary as a user would: through argv, the environment,
// standard input and output, and the exit status. Every child runs in a new session (no
// controlling terminal), with a minimal environment (nothing of the developer's COFFER_* or
// HOME leaks in), and is killed if it runs for more than 30 s, so a prompt can never hang the
// suite.

/// The built `coffer` the tests run.
let cofferPath = builtProduct(named: "coffer").path
/// The developer tools built beside it (not installed): the benchmark suite and the guided tour.
let cofferBenchPath = builtProduct(named: "coffer-bench").path
let cofferDemoPath = builtProduct(named: "coffer-demo").path

// NSLock, not Synchronization.Mutex: ThreadSanitizer sees it.
private let spawnLock = NSLock()

/// A child that exits without reading all of its standard input must not kill the test process
/// with SIGPIPE: the write then fails with EPIPE, which ``Child/wait(timeout:)`` handles.
private let ignoreBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

/// What a finished `coffer` run left behind.
struct Run: CustomStringConvertible {
    var arguments: [String]
    var status: Int32
    var stdout: [UInt8]
    var stderr: [UInt8]
    var seconds: Double
    var timedOut = false
    /// Bytes never to show in a test log (the sandbox's passphrases and the secrets it stored).
    var redactions: [[UInt8]] = []

    var out: String { String(decoding: stdout, as: UTF8.self) }
    var err: String { String(decoding: stderr, as: UTF8.self) }

    /// For failure messages: the run with every passphrase and stored secret redacted.
    var description: String {
        "coffer \(arguments.joined(separator: " ")) → \(status) in \(String(format: "%.2f", seconds)) s"
            + "\nstdout: \(redacted(stdout))\nstderr: \(redacted(stderr))"
    }

    private func redacted(_ bytes: [UInt8]) -> String {
        if redactions.contains(where: { !$0.isEmpty && bytes.firstRange(of: $0) != nil }) {
            return "<\(bytes.count) bytes, holding a secret: not shown>"
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether standard output is exactly `expected` (a plain Bool, so a failing `#expect`
    /// does not print the secret).
    func printed(_ expected: [UInt8]) -> Bool { stdout == expected }
}

/// A running `coffer` child: spawned at once, collected by ``wait()``.
final class Child {
    let arguments: [String]
    let pid: pid_t
    private var input: [UInt8]
    private var stdinFD: Int32
    private let stdoutFD: Int32
    private let stderrFD: Int32
    private let start = Date()

    /// `stdin == nil` gives the child `/dev/null`; a `terminal` (a pseudo-terminal's device)
    /// becomes its standard input and its controlling terminal instead. `rawArguments`, when
    /// given, are passed as they are (bytes that need not be UTF-8) instead of `arguments`.
    /// `program` is `coffer` unless given; `newSession: false` keeps the child in this
    /// process's session (another program run as the test's own thread would run it).
    init(
        _ arguments: [String], rawArguments: [[UInt8]]? = nil, environment: [String: String],
        rawEnvironment: [[UInt8]] = [], stdin: [UInt8]?, terminal: String? = nil, program: String = cofferPath,
        newSession: Bool = true
    ) throws {
        self.arguments = arguments
        ignoreBrokenPipes
        let argv = rawArguments ?? arguments.map { Array($0.utf8) }
        // Tests spawn in parallel: make the pipes and spawn under one lock, so no child
        // inherits another test's pipe (which would keep that pipe open past its own child).
        let spawned = try spawnLock.withLock {
            try Self.spawn(
                program, argv, environment: environment, raw: rawEnvironment, stdin: stdin, terminal: terminal,
                newSession: newSession)
        }
        pid = spawned.pid
        input = stdin ?? []
        stdinFD = spawned.stdin
        stdoutFD = spawned.stdout
        stderrFD = spawned.stderr
        if stdin == nil || input.isEmpty {
            close(stdinFD)
            stdinFD = -1
        } else {
            _ = fcntl(stdinFD, F_SETFL, fcntl(stdinFD, F_GETFL) | O_NONBLOCK)
        }
    }

    private static func spawn(
        _ program: String, _ arguments: [[UInt8]], environment: [String: String], raw rawEnvironment: [[UInt8]],
        stdin: [UInt8]?, terminal: String?, newSession: Bool
    ) throws -> (
        pid: pid_t, stdin: Int32, stdout: Int32, stderr: Int32
    ) {
        var inPipe: [Int32] = [-1, -1]
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        guard pipe(&inPipe) == 0, pipe(&outPipe) == 0, pipe(&errPipe) == 0 else { throw POSIXError(.EMFILE) }
        for fd in inPipe + outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let terminal {
            // Opened after setsid and without O_NOCTTY: it becomes the controlling terminal.
            posix_spawn_file_actions_addopen(&actions, 0, terminal, O_RDWR, 0)
        } else if stdin != nil {
            posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // POSIX_SPAWN_SETSID (glibc's value; Swift does not import the macro): a new session,
        // so the child has no controlling terminal and /dev/tty cannot be opened (unless
        // `terminal` gives it one).
        //
        // And the signal state a shell gives a command: nothing blocked (the test runner's
        // threads block most signals, and a spawned child inherits the mask) and SIGPIPE back to
        // its default (this process ignores it). POSIX_SPAWN_SETSIGDEF 0x04, SETSIGMASK 0x08.
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, (newSession ? 0x80 : 0) | 0x04 | 0x08)

        let argv: [UnsafeMutablePointer<CChar>?] =
            ([Array(program.utf8)] + arguments).map { bytes in
                let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
                for (index, byte) in bytes.enumerated() { copy[index] = CChar(bitPattern: byte) }
                copy[bytes.count] = 0
                return copy
            } + [nil]
        let envp =
            environment.map { strdup("\($0.key)=\($0.value)") }
            + rawEnvironment.map { bytes in
                let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
                for (index, byte) in bytes.enumerated() { copy[index] = CChar(bitPattern: byte) }
                copy[bytes.count] = 0
                return strdup(copy).map { duplicate in
                    copy.deallocate()
                    return duplicate
                }
            } + [nil]
        defer {
            argv.forEach { $0?.deallocate() }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, program, &actions, &attributes, argv, envp)
        close(inPipe[0])
        close(outPipe[1])
        close(errPipe[1])
        guard result == 0 else {
            close(inPipe[1])
            close(outPipe[0])
            close(errPipe[0])
            throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO)
        }
        return (pid, inPipe[1], outPipe[0], errPipe[0])
    }

    /// Feeds standard input, collects both outputs, and reaps the child (killing it after
    /// `timeout` seconds).
    func wait(timeout: Double = 30) -> Run {
        var out: [UInt8] = []
        var err: [UInt8] = []
        var openOut = true
        var openErr = true
        var timedOut = false
        var chunk = [UInt8](repeating: 0, count: 65536)
        while openOut || openErr || stdinFD >= 0 {
            let left = timeout - Date().timeIntervalSince(start)
            if left <= 0 {
                timedOut = true
                kill(pid, SIGKILL)
                break
            }
            var fds: [pollfd] = []
            if openOut { fds.append(pollfd(fd: stdoutFD, events: Int16(POLLIN), revents: 0)) }
            if openErr { fds.append(pollfd(fd: stderrFD, events: Int16(POLLIN), revents: 0)) }
            if stdinFD >= 0 { fds.append(pollfd(fd: stdinFD, events: Int16(POLLOUT), revents: 0)) }
            let ready = poll(&fds, nfds_t(fds.count), Int32(min(left, 1) * 1000))
            if ready < 0 && errno != EINTR { break }
            for entry in fds where entry.revents != 0 {
                if entry.fd == stdinFD {
                    let n = input.withUnsafeBytes { write(stdinFD, $0.baseAddress, $0.count) }
                    if n > 0 { input.removeFirst(n) }
                    if n < 0 && errno != EAGAIN && errno != EINTR || input.isEmpty {
                        close(stdinFD)  // also on EPIPE: the child stopped reading
                        stdinFD = -1
                    }
                    continue
                }
                let n = read(entry.fd, &chunk, chunk.count)
                if n > 0 {
                    if entry.fd == stdoutFD { out += chunk[..<n] } else { err += chunk[..<n] }
                } else if n == 0 || errno != EINTR && errno != EAGAIN {
                    if entry.fd == stdoutFD { openOut = false } else { openErr = false }
                }
            }
        }
        if stdinFD >= 0 { close(stdinFD) }
        close(stdoutFD)
        close(stderrFD)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = (status & 0x7f) == 0
        return Run(
            arguments: arguments, status: exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), stdout: out,
            stderr: err, seconds: Date().timeIntervalSince(start), timedOut: timedOut)
    }
}

/// A private (`0700`) directory for one test, with a vault path, a random passphrase in a file,
/// and a record of every run so the whole suite can assert the passphrase never leaked.
final class Sandbox {
    /// The sandbox's directory (`0700`), removed with everything in it when the sandbox goes.
    private let directory: TemporaryDirectory
    var path: String { directory.path }
    /// Random, so finding it in an output means it leaked.
    let passphrase = "pp-" + UUID().uuidString
    let newPassphrase = "new-" + UUID().uuidString
    var vault: String { path + "/vault.coffer" }
    var passphraseFile: String { path + "/passphrase" }
    var newPassphraseFile: String { path + "/new-passphrase" }
    /// Every secret given to ``set(_:_:_:_:sourceLocation:)``, redacted from failure messages.
    private(set) var secrets: [[UInt8]] = []

    init() throws {
        directory = try TemporaryDirectory(prefix: "coffer-cli")
        // One trailing newline, as `echo` writes it: coffer strips exactly one.
        try write(passphrase + "\n", to: passphraseFile)
        try write(newPassphrase + "\n", to: newPassphraseFile)
    }

    func write(_ text: String, to file: String) throws { try write(Array(text.utf8), to: file) }

    func write(_ bytes: [UInt8], to file: String) throws {
        guard
            FileManager.default.createFile(atPath: file, contents: Data(bytes), attributes: [.posixPermissions: 0o600])
        else { throw POSIXError(.EIO) }
    }

    /// Writes an executable that a child is about to run. A `cp` child writes it, so this
    /// process never holds it open for writing: a file written here could be inherited, still
    /// open for writing, by a child another test forks at that moment, and the exec of the
    /// script would then fail with ETXTBSY ("Text file busy").
    func writeExecutable(_ text: String, to file: String) throws {
        let staging = file + ".staging"
        try write(text, to: staging)
        let copy = try HelperChild.run(["--", staging, file], executable: URL(fileURLWithPath: "/bin/cp"))
        guard copy.reason == .exit, copy.status == 0, chmod(file, 0o700) == 0 else { throw POSIXError(.EIO) }
    }

    /// The environment every child gets: nothing inherited but PATH; HOME inside the sandbox;
    /// the test-only fast KDF; a short lock timeout.
    var baseEnvironment: [String: String] {
        [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "HOME": path + "/home",
            "COFFER_TEST_FAST_KDF": "1",
            "COFFER_LOCK_TIMEOUT": "5",
        ]
    }

    /// Starts `coffer` with `--vault <sandbox vault>` and `--passphrase-file` unless told otherwise.
    /// `rawArguments`, when given, follow that prefix as bytes (which need not be UTF-8)
    /// instead of `arguments`, which then only describe the run. `program` is `coffer` unless given.
    func start(
        _ arguments: [String], rawArguments: [[UInt8]]? = nil, stdin: [UInt8]? = nil,
        environment: [String: String] = [:], vault: Bool = true, passphraseFile: Bool = true,
        terminal: PseudoTerminal? = nil, program: String = cofferPath
    ) throws -> Child {
        var prefix: [String] = []
        if vault { prefix += ["--vault", self.vault] }
        if passphraseFile { prefix += ["--passphrase-file", self.passphraseFile] }
        var env = baseEnvironment
        for (key, value) in environment { env[key] = value }
        return try Child(
            prefix + arguments, rawArguments: rawArguments.map { prefix.map { Array($0.utf8) } + $0 },
            environment: env, stdin: stdin, terminal: terminal?.devicePath, program: program)
    }

    /// Runs `coffer` to completion and checks what every run must satisfy: it did not hang, and
    /// neither passphrase appears in its output.
    @discardableResult
    func run(
        _ arguments: [String], rawArguments: [[UInt8]]? = nil, stdin: [UInt8]? = nil,
        environment: [String: String] = [:], vault: Bool = true, passphraseFile: Bool = true,
        program: String = cofferPath, timeout: Double = 30, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Run {
        let run = try start(
            arguments, rawArguments: rawArguments, stdin: stdin, environment: environment, vault: vault,
            passphraseFile: passphraseFile, program: program
        ).wait(timeout: timeout)
        return expectClean(run, program: program, sourceLocation: sourceLocation)
    }

    /// Checks what every run must satisfy — it did not hang, no passphrase in its output, errors
    /// start with "coffer: " (the program's name) — and returns it ready to describe itself with
    /// secrets redacted.
    @discardableResult
    func expectClean(_ run: Run, program: String = cofferPath, sourceLocation: SourceLocation = #_sourceLocation) -> Run {
        var run = run
        run.redactions = [Array(passphrase.utf8), Array(newPassphrase.utf8)] + secrets
        #expect(!run.timedOut, "timed out: \(run)", sourceLocation: sourceLocation)
        for secret in [passphrase, newPassphrase] {
            let bytes = Array(secret.utf8)
            let leaked = run.stdout.firstRange(of: bytes) != nil || run.stderr.firstRange(of: bytes) != nil
            #expect(
                !leaked, "a passphrase appears in the output of: coffer \(run.arguments.joined(separator: " "))",
                sourceLocation: sourceLocation)
        }
        // Errors are one line, prefixed "coffer: " (usage errors may add the usage lines after it).
        if run.status != 0, run.status != 2 {
            // A Bool first: #expect would otherwise print stderr itself, unredacted.
            let prefixed = run.err.hasPrefix(URL(fileURLWithPath: program).lastPathComponent + ": ")
            #expect(prefixed, "\(run)", sourceLocation: sourceLocation)
        }
        return run
    }

    /// `coffer init` (fast KDF), expecting success.
    func initVault(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let run = try run(["init"], sourceLocation: sourceLocation)
        #expect(run.status == 0, "\(run)", sourceLocation: sourceLocation)
    }

    /// `coffer set`, expecting success.
    func set(
        _ service: String, _ account: String, _ secret: [UInt8], _ extra: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let run = try run(["set", service, account] + extra, stdin: secret, sourceLocation: sourceLocation)
        #expect(run.status == 0, "\(run)", sourceLocation: sourceLocation)
        #expect(
            run.stdout.firstRange(of: secret) == nil || secret.count < 4, "set echoed the secret",
            sourceLocation: sourceLocation)
    }

    /// XORs the vault file's byte at `offset` with `mask` (damage, as bit rot makes it).
    func flipBits(at offset: Int, mask: UInt8) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: vault))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: [byte ^ mask])
    }

    /// Where the vault's data ends: `usedBytes` from `coffer info --json`.
    func dataEnd() throws -> Int {
        let run = try run(["info", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(run.stdout)) as? [String: Any]
        return object?["usedBytes"] as? Int ?? 0
    }
}

/// Exit codes from the contract.
enum Exit {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let notFound: Int32 = 3
    static let wrongKey: Int32 = 4
    static let integrity: Int32 = 5
    static let busy: Int32 = 6
}

/// A pseudo-terminal: the test plays the person at the keyboard on its master side.
final class PseudoTerminal {
    let master: Int32
    let devicePath: String
    /// Everything the child wrote to the terminal (prompts, and any echo).
    private(set) var transcript: [UInt8] = []

    init() throws {
        master = c_posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard master >= 0, c_grantpt(master) == 0, c_unlockpt(master) == 0, let name = c_ptsname(master) else {
            throw POSIXError(.ENODEV)
        }
        devicePath = String(cString: name)
    }

    deinit { close(master) }

    /// Reads the terminal until `text` has appeared; false after `timeout` seconds.
    func waitFor(_ text: String, timeout: Double = 10) -> Bool {
        let needle = Array(text.utf8)
        let deadline = Date().addingTimeInterval(timeout)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while transcript.firstRange(of: needle) == nil {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return false }
            var entry = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, Int32(left * 1000)) > 0 else { continue }
            let n = read(master, &chunk, chunk.count)
            if n <= 0 { return false }  // EIO: the child closed the terminal
            transcript += chunk[..<n]
        }
        return true
    }

    /// Types `text` and Return.
    func type(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    /// Types `bytes` as they are (no Return): control characters such as Ctrl-Z (0x1A) too.
    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    /// Whether the terminal echoes what is typed (its ECHO flag; the master side sees the
    /// terminal's modes on Linux).
    var echoes: Bool {
        var mode = termios()
        return tcgetattr(master, &mode) == 0 && mode.c_lflag & tcflag_t(ECHO) != 0
    }

    /// Turns echo on, as a shell does when it takes the terminal back after a job stops.
    func turnEchoOn() {
        var mode = termios()
        guard tcgetattr(master, &mode) == 0 else { return }
        mode.c_lflag |= tcflag_t(ECHO)
        tcsetattr(master, TCSANOW, &mode)
    }

    /// Reads whatever else arrives within `seconds` (for checking nothing was echoed).
    func drain(_ seconds: Double = 0.2) { _ = waitFor("\u{0}never\u{0}", timeout: seconds) }
}

// glibc's pseudo-terminal calls: Swift's Glibc module hides them behind _XOPEN_SOURCE, so they
// are declared here by symbol (plain C ABI: ints and a pointer).
@_silgen_name("posix_openpt") private func c_posix_openpt(_ flags: Int32) -> Int32
@_silgen_name("grantpt") private func c_grantpt(_ fd: Int32) -> Int32
@_silgen_name("unlockpt") private func c_unlockpt(_ fd: Int32) -> Int32
@_silgen_name("ptsname") private func c_ptsname(_ fd: Int32) -> UnsafeMutablePointer<CChar>?
