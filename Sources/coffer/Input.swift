import Coffer
import CofferCrypto
import CofferInterchange
import CofferRuntime
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads secrets (passphrases, key files, the secret given to `set`) as bytes, straight into
/// ``SecureBytes``, through a buffer that is wiped whenever it grows and when it is released —
/// never through a Swift `String`, which cannot be wiped.
enum Input {
    /// The largest passphrase accepted from a file or a prompt, and the largest secret from a
    /// terminal. (A secret piped to `set` may be up to 64 MiB.)
    static let maximumPassphrase = 64 * 1024
    static let maximumSecret = 64 * 1024 * 1024

    /// A new passphrase: from `file`, else `$COFFER_NEW_PASSPHRASE`, else the terminal (asked twice).
    static func newPassphrase(file: String?) throws -> SecureBytes {
        if let file { return try passphraseFile(file) }
        if let fromEnvironment = try environment("COFFER_NEW_PASSPHRASE") { return fromEnvironment }
        return try prompt(
            "New passphrase: ", confirmation: "Repeat the new passphrase: ",
            noSource: "no new passphrase given and no terminal to ask on: use --new-passphrase-file PATH or set COFFER_NEW_PASSPHRASE")
    }

    /// A passphrase file's bytes with exactly one trailing `"\n"` removed, if there is one.
    ///
    /// `echo 'passphrase' > file` then works, while a passphrase that really ends in a newline
    /// can still be written (with two). Nothing else is stripped: not `"\r"`, not spaces.
    static func passphraseFile(_ path: String) throws -> SecureBytes {
        let buffer = try readFile(path, what: "passphrase file", limit: maximumPassphrase)
        if buffer.count > 0, buffer.last == UInt8(ascii: "\n") { buffer.count -= 1 }
        guard buffer.count > 0 else {
            throw CLIError.usage("the passphrase file \(path) is empty")
        }
        return try buffer.secureCopy()
    }

    /// The value environment variable `name` (one of ``Hardening/secretVariables``) had at
    /// start-up, as bytes, or `nil` when it was not set. It is no longer in the environment.
    static func environment(_ name: String) throws -> SecureBytes? {
        try Hardening.secret(name)
    }

    /// Whether a terminal can be opened to ask for a passphrase.
    static var hasTerminal: Bool {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    /// Asks a question on the controlling terminal (typed with echo); true only for "yes".
    /// Throws a usage error at once when there is no terminal: never waits.
    static func confirm(_ question: String) throws -> Bool {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else { throw CLIError.usage("no terminal to ask on: pass --yes to go ahead without asking") }
        defer { close(tty) }
        let prompt = Array(question.utf8)
        _ = prompt.withUnsafeBytes { write(tty, $0.baseAddress, $0.count) }
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while answer.count < 64 {
            let n = read(tty, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 || byte == UInt8(ascii: "\n") { break }
            answer.append(byte)
        }
        return String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespaces) == "yes"
    }

    /// Whether a passphrase may be asked on the terminal: false for git's credential helper
    /// under `GIT_TERMINAL_PROMPT=0`, where nobody may be there to answer.
    nonisolated(unsafe) static var promptsAllowed = true

    /// Asks for a passphrase on the controlling terminal without echo (twice with
    /// `confirmation`). Throws a usage error at once when there is no terminal, or when
    /// ``promptsAllowed`` is false: never waits.
    static func prompt(_ text: String, confirmation: String? = nil, noSource: String) throws -> SecureBytes {
        guard promptsAllowed else { throw CLIError.usage(noSource) }
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else { throw CLIError.usage(noSource) }
        defer { close(tty) }
        let first = try readHidden(from: tty, promptTo: tty, prompt: text, limit: maximumPassphrase)
        guard first.count > 0 else { throw CLIError.usage("the passphrase is empty") }
        if let confirmation {
            let second = try readHidden(from: tty, promptTo: tty, prompt: confirmation, limit: maximumPassphrase)
            guard first == second else { throw CLIError(.failure, "the two passphrases differ; nothing was changed") }
        }
        return first
    }

    /// The secret for `set`: every byte of standard input (possibly none), or — when standard
    /// input is a terminal — one line typed without echo (`typed` is then true).
    static func secretFromStandardInput(prompt: String) throws -> (secret: SecureBytes, typed: Bool) {
        if isatty(STDIN_FILENO) == 1 {
            // The prompt goes to the terminal, so it shows even when stderr is redirected.
            let tty = open("/dev/tty", O_WRONLY | O_CLOEXEC | O_NOCTTY)
            defer { if tty >= 0 { close(tty) } }
            let secret = try readHidden(
                from: STDIN_FILENO, promptTo: tty >= 0 ? tty : STDERR_FILENO, prompt: prompt, limit: maximumPassphrase)
            return (secret, true)
        }
        let buffer = WipingBuffer(capacity: 4096)
        try buffer.readToEnd(STDIN_FILENO, limit: maximumSecret, what: "standard input")
        return (try buffer.secureCopy(), false)
    }

    /// The key for `--key-file -`: every byte of standard input, at most
    /// `VaultUnlock.maximumKeyFileSize`. A terminal is refused (a key is not typed).
    static func keyFromStandardInput() throws -> SecureBytes {
        guard isatty(STDIN_FILENO) != 1 else {
            throw CLIError.usage("--key-file - reads the key from standard input, which is a terminal: pipe the key in")
        }
        let buffer = WipingBuffer(capacity: 4096)
        let limit = VaultUnlock.maximumKeyFileSize
        do {
            try buffer.readToEnd(STDIN_FILENO, limit: limit, what: "standard input")
        } catch let error as InterchangeError where error.kind == .usage {
            throw CLIError.usage("the key on standard input holds more than \(limit) bytes, the limit for a key file")
        }
        return try buffer.secureCopy()
    }

    /// Reads a key file whole (for `init` to check that it exists; the library reads it again).
    static func readFile(_ path: String, what: String, limit: Int) throws -> WipingBuffer {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw CLIError.usage("the \(what) \(path) does not exist") }
            throw CLIError(.failure, "cannot open the \(what) \(path): \(String(cString: strerror(code)))")
        }
        defer { close(fd) }
        var status = stat()
        let size = fstat(fd, &status) == 0 ? Int(status.st_size) : 0
        guard (status.st_mode & S_IFMT) != S_IFDIR else { throw CLIError.usage("the \(what) \(path) is a directory") }
        let buffer = WipingBuffer(capacity: min(max(size + 1, 64), limit + 1))
        try buffer.readToEnd(fd, limit: limit, what: "the \(what) \(path)")
        return buffer
    }

    // MARK: - Terminal

    /// Reads one line from `input` with echo off, restoring the terminal afterwards — also when
    /// the process is interrupted (Ctrl-C) while waiting.
    ///
    /// Job control is handled as OpenSSH's `readpassphrase` does, so the rest of a passphrase
    /// is never shown after a suspension: on Ctrl-Z (SIGTSTP, or SIGTTIN/SIGTTOU in the
    /// background) the terminal is given back as it was, then the process stops; when it
    /// continues, echo is turned off again, the prompt is shown again and what was typed before
    /// is discarded. A SIGCONT handler turns echo off again in any case (also after a SIGSTOP,
    /// which cannot be caught, or a shell that put its own terminal modes back).
    private static func readHidden(from input: Int32, promptTo output: Int32, prompt: String, limit: Int) throws
        -> SecureBytes
    {
        var original = termios()
        let isTerminal = tcgetattr(input, &original) == 0
        var quiet = original
        quiet.c_lflag &= ~tcflag_t(ECHO)
        if isTerminal { TerminalGuard.install(fd: input, original: original, quiet: quiet) }
        defer {
            if isTerminal {
                TerminalGuard.remove()
                tcsetattr(input, TCSAFLUSH, &original)
                writeAll(output, [UInt8(ascii: "\n")])
            }
        }
        let buffer = WipingBuffer(capacity: 256)
        var byte: UInt8 = 0
        defer { byte = 0 }
        reading: while true {
            // Echo off before the prompt: whatever is typed after seeing it is never shown.
            if isTerminal { tcsetattr(input, TCSAFLUSH, &quiet) }
            writeAll(output, Array(prompt.utf8))
            buffer.count = 0
            while true {
                if let stop = TerminalGuard.takePendingStop() {
                    // The handler gave the terminal back; now stop for real (the signal's default
                    // action), and when continued, start the prompt over.
                    raise(stop)
                    TerminalGuard.rearm(stop)
                    writeAll(output, [UInt8(ascii: "\n")])
                    continue reading
                }
                let n = read(input, &byte, 1)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CLIError(.failure, "cannot read from the terminal: \(String(cString: strerror(errno)))")
                }
                if n == 0 || byte == UInt8(ascii: "\n") { break reading }
                guard buffer.count < limit else { throw CLIError.usage("the input is longer than \(limit) bytes") }
                buffer.append(byte)
            }
        }
        return try buffer.secureCopy()
    }
}

/// The signal handling around a prompt without echo. Its state is written on the main thread
/// before the handlers are installed and read by the handlers.
private enum TerminalGuard {
    static let exitSignals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
    static let stopSignals = [SIGTSTP, SIGTTIN, SIGTTOU]

    /// The actions in place before ``install(fd:original:quiet:)``, put back by ``remove()`` (so
    /// the crash handlers of `Hardening` survive a prompt).
    nonisolated(unsafe) static var previous: [SavedSignalAction] = []

    static func install(fd: Int32, original: termios, quiet: termios) {
        savedTerminalFD = fd
        savedTerminalState = original
        quietTerminalState = quiet
        pendingStop = 0
        // No SA_RESTART (flags 0), so a blocked `read` returns EINTR and the loop sees a deferred stop.
        previous =
            exitSignals.map { SignalHandlers.install(restoreTerminalAndDie, for: $0) }
            + stopSignals.map { SignalHandlers.install(restoreTerminalAndStop, for: $0) }
            + [SignalHandlers.install(turnEchoOffAgain, for: SIGCONT)]
    }

    static func remove() {
        for action in previous { action.restore() }
        previous = []
        savedTerminalFD = -1
    }

    /// The stop signal a handler caught and deferred, if any (its action is then the default).
    static func takePendingStop() -> Int32? {
        let stop = pendingStop
        guard stop != 0 else { return nil }
        pendingStop = 0
        return stop
    }

    /// Catches `number` again after a deferred stop.
    static func rearm(_ number: Int32) { SignalHandlers.install(restoreTerminalAndStop, for: number) }
}

// Read by the signal handlers (async-signal-safe calls only: tcsetattr, tcgetpgrp, getpgrp,
// signal, raise).
nonisolated(unsafe) private var savedTerminalFD: Int32 = -1
nonisolated(unsafe) private var savedTerminalState = termios()
nonisolated(unsafe) private var quietTerminalState = termios()
nonisolated(unsafe) private var pendingStop: Int32 = 0

private func restoreTerminalAndDie(_ number: Int32) {
    if savedTerminalFD >= 0 { tcsetattr(savedTerminalFD, TCSANOW, &savedTerminalState) }
    _ = signal(number, SIG_DFL)
    raise(number)
}

/// Ctrl-Z at the prompt: the terminal goes back to how the shell expects it, and the stop is
/// left to the reading loop (which raises it with the default action).
private func restoreTerminalAndStop(_ number: Int32) {
    if savedTerminalFD >= 0 { tcsetattr(savedTerminalFD, TCSANOW, &savedTerminalState) }
    _ = signal(number, SIG_DFL)
    pendingStop = number
}

/// SIGCONT (after `fg`): echo off again, if this process is in the foreground (a background
/// process changing the terminal would be stopped by SIGTTOU; it gets here again when brought
/// to the foreground).
private func turnEchoOffAgain(_ number: Int32) {
    let fd = savedTerminalFD
    guard fd >= 0, tcgetpgrp(fd) == getpgrp() else { return }
    tcsetattr(fd, TCSANOW, &quietTerminalState)
}
