// `coffer` run as git's or docker's credential helper: under the name `git-credential-coffer`
// or `docker-credential-coffer` (links `make install` creates), it speaks that tool's protocol
// on standard input and output instead of parsing coffer's commands. Both open the keychain the
// other commands open (GlobalOptions.openKeychain), so they unlock as they do: a key kept by
// `coffer unlock`, --key-file, --identity or $COFFER_IDENTITY, a passphrase file or variable,
// and a prompt only on a terminal.
import ArgumentParser
import Coffer
import CofferCrypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

enum CredentialHelper {
    static let gitName = "git-credential-coffer"
    static let dockerName = "docker-credential-coffer"

    /// The largest request read from standard input: a credential is a few hundred bytes.
    static let maximumRequest = 64 * 1024
    /// How long the request may take to arrive: the tools write it at once, then close the pipe.
    static let requestSeconds = 60.0

    /// Runs the helper that `program` (argv[0]) names with `arguments`; false when it names none.
    static func runIfNamed(_ program: String?, _ arguments: [String]) throws -> Bool {
        switch program?.split(separator: "/").last {
        case gitName?: try parse(GitCredentialCommand.self, arguments).run()
        case dockerName?: try parse(DockerCredentialCommand.self, arguments).run()
        default: return false
        }
        return true
    }

    /// `type` parsed from `arguments`; its own help for --help, a usage error (exit 2) otherwise.
    private static func parse<Command: ParsableCommand>(_ type: Command.Type, _ arguments: [String]) throws -> Command {
        do {
            return try type.parse(arguments)
        } catch {
            if type.exitCode(for: error) == .success {
                writeOut(type.fullMessage(for: error) + "\n")
                throw ExitCode.success
            }
            throw CLIError.usage(redactingArguments(type.message(for: error), arguments: arguments))
        }
    }

    /// Standard input up to end of file (or until `isComplete` says the request ended), at most
    /// ``maximumRequest`` bytes, within ``requestSeconds``. The caller zeroes the bytes.
    static func readRequest(isComplete: ([UInt8]) -> Bool = { _ in false }) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        // Never reallocated (so never copied) while it holds a secret.
        bytes.reserveCapacity(maximumRequest + chunk.count)
        defer { SecureMemory.zero(&chunk) }
        let deadline = Date().addingTimeInterval(requestSeconds)
        while !isComplete(bytes) {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                SecureMemory.zero(&bytes)
                throw CLIError.usage("the request on standard input did not end within \(Int(requestSeconds)) s")
            }
            var entry = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(min(left, 1) * 1000) + 1)
            if ready == 0 || ready < 0 && errno == EINTR { continue }
            let count = ready < 0 ? -1 : read(STDIN_FILENO, &chunk, chunk.count)
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                let reason = String(cString: strerror(errno))
                SecureMemory.zero(&bytes)
                throw CLIError(.failure, "cannot read the request on standard input: \(reason)")
            }
            if count == 0 { break }
            guard bytes.count + count <= maximumRequest else {
                SecureMemory.zero(&bytes)
                throw CLIError.usage("the request on standard input is larger than \(maximumRequest / 1024) KiB")
            }
            bytes += chunk[..<count]
        }
        if bytes.contains(0) {
            SecureMemory.zero(&bytes)
            throw CLIError.usage("the request on standard input holds a NUL byte")
        }
        return bytes
    }

    /// `bytes` as UTF-8 text (a name: never a secret, which stays bytes), or a usage error naming `what`.
    static func text(_ bytes: ArraySlice<UInt8>, _ what: String) throws -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CLIError.usage("the \(what) in the request is not UTF-8")
        }
        return text
    }

    /// The keychain `global` names, unlocked as every command unlocks it (a prompt only on a
    /// terminal); a helper's request is on standard input, so no key comes from there.
    static func openKeychain(_ global: GlobalOptions) throws -> any Keychain {
        if global.keyFile == GlobalOptions.standardInputKeyFile || global.identity == GlobalOptions.standardInputKeyFile {
            throw CLIError.usage(
                "a credential helper reads its request on standard input: give --key-file or --identity a file")
        }
        do {
            return try global.openKeychain()
        } catch let error as CLIError where error.status == .usage && error.message == GlobalOptions.noPassphraseSource {
            throw CLIError(.failure, locked)
        }
    }

    static let locked =
        "the vault is locked and there is no terminal to ask for its passphrase on (`coffer unlock` keeps its key "
        + "for this login session; or set COFFER_IDENTITY)"

    /// The keychain, or `nil` (and a one-line note) when it is locked, nothing unlocks it without
    /// asking (no kept key, no key file, identity or passphrase) and there is no terminal to ask
    /// on: a `get` then answers nothing at once, and the tool asks the user.
    static func openUnlessLocked(_ global: GlobalOptions) throws -> (any Keychain)? {
        do {
            return try openKeychain(global)
        } catch let error as CLIError where error.message == locked {
            writeError("coffer: \(locked): nothing answered\n")
            return nil
        }
    }
}
