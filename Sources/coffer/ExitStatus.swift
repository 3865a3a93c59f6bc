import ArgumentParser
import Coffer
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The exit codes `coffer` promises; scripts rely on them, so they never change.
enum ExitStatus: Int32 {
    case success = 0
    /// Anything not listed below (I/O, a vault that already exists or does not exist, …).
    case failure = 1
    /// Bad arguments, or no way to get a passphrase (no source and no terminal), or a request
    /// above one of Coffer's documented limits (a name too long, a key file too large, a vault
    /// whose header asks for more key-derivation work than the ceiling): nothing was changed.
    case usage = 2
    /// The item does not exist.
    case notFound = 3
    /// The passphrase or key does not open the vault (the file is intact).
    case wrongKey = 4
    /// The file fails authentication: tampered with or damaged.
    case integrity = 5
    /// Another process held the vault's lock past the timeout.
    case busy = 6
}

/// An error the CLI itself raises, with the exit status it stands for.
struct CLIError: Error, CustomStringConvertible {
    var status: ExitStatus
    var message: String

    init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }

    static func usage(_ message: String) -> CLIError { CLIError(.usage, message) }

    var description: String { message }
}

extension ExitStatus {
    /// The exit status for a library error.
    ///
    /// `notFound` from the library means "no such item" once the CLI has checked that the vault
    /// and the key file exist (it does, before opening), so it maps to 3.
    init(_ error: CofferError) {
        switch error.code {
        case .notFound: self = .notFound
        case .wrongKey: self = .wrongKey
        case .corrupted, .rolledBack: self = .integrity
        case .busy: self = .busy
        case .invalidArgument: self = .usage
        // A documented ceiling (name length, key file size, the KDF cost a vault header may ask
        // for): like a usage error, nothing was done and retrying the same thing cannot help. For
        // a vault header that asks too much this is still 2, not 4 or 5: the passphrase was never
        // tried and the file may be intact (written with a higher setting elsewhere).
        case .limitExceeded: self = .usage
        default: self = .failure
        }
    }
}

/// What the command says for a library error: its description, with hints a terminal user can
/// act on.
func message(for error: CofferError, salvageAdvice: Bool = true) -> String {
    var text = error.description
    if error.code == .busy, getenv("COFFER_LOCK_TIMEOUT") == nil {
        text += " (wait longer with COFFER_LOCK_TIMEOUT=SECONDS)"
    }
    // The library's hint names its `kdfLimit:` parameter, which this command has no flag for.
    let libraryHint = "; open it with a higher kdfLimit if you trust this file"
    if error.code == .limitExceeded, let range = text.range(of: libraryHint) {
        text.replaceSubrange(
            range,
            with: "; coffer will not run it (a file from elsewhere could ask for any cost); "
                + "a program you trust can open it with Vault.open(at:unlock:kdfLimit:)")
    }
    // A damaged record of a vault file: the library's hint names `Vault.open`'s `recovery:`
    // parameter; this command's way is `verify --salvage`.
    if salvageAdvice, isSalvageable(error) {
        let libraryWay = "open with `recovery: .salvage`"
        if let range = text.range(of: libraryWay) {
            text.replaceSubrange(range, with: "run `coffer verify --salvage`")
        } else if !text.contains("salvage") {
            text += " — restore a backup, or run `coffer verify --salvage` to keep every record that still "
                + "authenticates (the damaged file is kept aside)"
        }
    }
    return text
}

/// Prints `error` to standard error as `coffer: …` and returns the exit status to use.
///
/// Messages come from Coffer (which never puts a secret in one) or from this CLI; they are
/// folded to one line.
func report(_ error: any Error) -> ExitStatus {
    switch error {
    case let error as CLIError:
        printError(error.message)
        return error.status
    case let error as InterchangeError:
        printError(error.message)
        return error.kind == .usage ? .usage : .failure
    case let error as CofferError:
        let text = message(for: error)
        printError(text)
        return ExitStatus(error)
    case let error as ExitCode:
        return ExitStatus(rawValue: error.rawValue) ?? .failure
    default:
        // swift-argument-parser's own errors: help and --version are clean exits to stdout;
        // everything else is a usage error (exit 2, not its default 64).
        let code = CofferCommand.exitCode(for: error)
        let full = CofferCommand.fullMessage(for: error)
        if code == .success {
            writeOut(full.hasSuffix("\n") ? full : full + "\n")
            return .success
        }
        let message = redactingArguments(CofferCommand.message(for: error))
        printError(message.isEmpty ? "invalid arguments" : message)
        // Keep the usage lines (they name the subcommand) but not the repeated "Error:" line.
        let rest = redactingArguments(full).split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("Error:") }
            .joined(separator: "\n")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        if !rest.isEmpty { writeError(rest + "\n") }
        return .usage
    }
}

/// `message` (from swift-argument-parser) with every quoted command-line argument replaced by
/// its position, for example `Unexpected argument <argument 4>`.
///
/// `coffer set svc acct ghp_SECRET` is an easy slip — the secret belongs on standard input —
/// and echoing the stray word would put the secret on the screen and in logs. Option names
/// (`--kdf`) and subcommand names are left as they are: they are not where a secret is typed.
func redactingArguments(_ message: String, arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> String {
    let commands = Set(CofferCommand.configuration.subcommands.compactMap { $0.configuration.commandName })
    var out = message
    // Longest first, so an argument that contains another is replaced whole.
    let candidates = arguments.enumerated().sorted { $0.element.count > $1.element.count }
    for (index, argument) in candidates where !argument.isEmpty && !commands.contains(argument) {
        if argument.hasPrefix("--"), argument.dropFirst(2).allSatisfy({ $0.isLetter || $0 == "-" }) { continue }
        out = out.replacingAll("'\(argument)'", with: "<argument \(index + 1)>")
        if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
            // --option=value: the value may be shown on its own.
            let value = String(argument[argument.index(after: equals)...])
            if !value.isEmpty { out = out.replacingAll("'\(value)'", with: "<argument \(index + 1)>") }
        }
    }
    return out
}

/// Writes `coffer: <message>` as one line to standard error.
func printError(_ message: String) {
    let line = message.split(whereSeparator: \.isNewline).joined(separator: " ")
    // A library error may carry a path (a directory named with escape sequences): inert here.
    writeError("coffer: \(escapingControls(line))\n")
}

/// The errno of the first write to standard output that failed, if any; `main` turns it into
/// exit 1 once the command has run.
let standardOutputFailure = Locked<Int32?>(nil)

/// Writes `text` to standard output; a failure is remembered in ``standardOutputFailure``.
func writeOut(_ text: String) {
    if !writeAll(STDOUT_FILENO, Array(text.utf8)) {
        let code = errno
        standardOutputFailure.withLock { if $0 == nil { $0 = code } }
    }
}
func writeError(_ text: String) { writeAll(STDERR_FILENO, Array(text.utf8)) }

/// Whether salvage can help with `error`: damage to a vault file's records, which the error
/// places at a byte offset. Not a damaged header (salvage cannot open it either), nor a file
/// cut short while it was open (what was cut is gone from the file; nothing is left to keep).
func isSalvageable(_ error: CofferError) -> Bool {
    error.code == .corrupted && error.offset != nil && error.message.contains("record")
        && !error.message.contains("cut short")
}

/// `error` as ``message(for:)`` words it, without the library's advice to restore a backup or
/// salvage: for a salvage that is under way or failed.
func messageWithoutSalvageAdvice(_ error: CofferError) -> String {
    var error = error
    if let advice = error.message.range(of: " — restore a backup") {
        error.message.removeSubrange(advice.lowerBound...)
    }
    return message(for: error, salvageAdvice: false)
}

/// ``message(for:)``, under a name commands can call (a command's own static `message(for:)`,
/// from swift-argument-parser, hides the function above inside it).
func cliMessage(for error: CofferError) -> String { message(for: error) }
