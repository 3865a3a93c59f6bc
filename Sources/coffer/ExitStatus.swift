import ArgumentParser
import Coffer
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The exit codes `coffer` promises (issue 5); scripts rely on them, so they never change.
enum ExitStatus: Int32 {
    case success = 0
    /// Anything not listed below (I/O, a vault that already exists or does not exist, …).
    case failure = 1
    /// Bad arguments, or no way to get a passphrase (no source and no terminal).
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
        case .corrupted: self = .integrity
        case .busy: self = .busy
        case .invalidArgument: self = .usage
        default: self = .failure
        }
    }
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
    case let error as CofferError:
        var text = error.description
        if error.code == .busy, ProcessInfo.processInfo.environment["COFFER_LOCK_TIMEOUT"] == nil {
            text += " (wait longer with COFFER_LOCK_TIMEOUT=SECONDS)"
        }
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
        let message = CofferCommand.message(for: error)
        printError(message.isEmpty ? "invalid arguments" : message)
        // Keep the usage lines (they name the subcommand) but not the repeated "Error:" line.
        let rest = full.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("Error:") }
            .joined(separator: "\n")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        if !rest.isEmpty { writeError(rest + "\n") }
        return .usage
    }
}

/// Writes `coffer: <message>` as one line to standard error.
func printError(_ message: String) {
    let line = message.split(whereSeparator: \.isNewline).joined(separator: " ")
    writeError("coffer: \(line)\n")
}

func writeOut(_ text: String) { writeAll(STDOUT_FILENO, Array(text.utf8)) }
func writeError(_ text: String) { writeAll(STDERR_FILENO, Array(text.utf8)) }

/// Writes every byte to `fd`, retrying partial writes and EINTR. Returns false on failure.
@discardableResult
func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard var next = bytes.baseAddress else { return true }
    var left = bytes.count
    while left > 0 {
        let n = write(fd, next, left)
        if n < 0 {
            if errno == EINTR { continue }
            return false
        }
        next += n
        left -= n
    }
    return true
}

@discardableResult
func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { writeAll(fd, $0) }
}
