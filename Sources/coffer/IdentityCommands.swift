import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer identity`: a key pair of this machine's or person's own.
struct IdentityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "identity",
        abstract: "Make an X25519 identity, or show the recipient string of one.",
        discussion: """
            An identity is a key pair of your own: the identity file stays on this machine \
            (mode 0600, never printed), and its recipient string (age1…) is what you hand to \
            whoever manages a vault, so that your identity opens it. The vault's key never travels.

            The strings are age's (age-keygen writes the same files), so keys you already have \
            work; coffer does not read or write age-encrypted files.

            The identity file is FILE, else $COFFER_IDENTITY, else $XDG_CONFIG_HOME/coffer/identity, \
            else ~/.config/coffer/identity.

            Examples:
              coffer identity new                       # prints age1…
              coffer identity new --output /etc/coffer/identity
              coffer identity show ~/.config/coffer/identity
            """,
        subcommands: [IdentityNewCommand.self, IdentityShowCommand.self])

    /// The identity file: `explicit`, `$COFFER_IDENTITY`, `$XDG_CONFIG_HOME/coffer/identity`,
    /// `~/.config/coffer/identity`.
    static func path(_ explicit: String?) -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let path = environmentText("COFFER_IDENTITY"), !path.isEmpty { return path }
        if let xdg = environmentText("XDG_CONFIG_HOME"), xdg.hasPrefix("/") {
            return URL(fileURLWithPath: xdg).appendingPathComponent("coffer/identity").path
        }
        let home = environmentText("HOME").flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return URL(fileURLWithPath: home).appendingPathComponent(".config/coffer/identity").path
    }
}

struct IdentityNewCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new",
        abstract: "Make a new identity file (0600) and print its recipient string.",
        discussion: """
            Refuses to overwrite an existing file. The directory is created (mode 0700) when \
            missing. Standard output is the recipient string alone, for scripts:
              recipient=$(coffer identity new --output /etc/coffer/identity)
            """)

    @Option(name: [.short, .long], help: "Where to write the identity (see `coffer identity --help` for the default).")
    var output: String?

    func run() throws {
        let path = IdentityCommand.path(output)
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, !FileManager.default.fileExists(atPath: parent) {
            do {
                try FileManager.default.createDirectory(
                    atPath: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw CLIError(.failure, "cannot create the directory \(parent) for the identity file")
            }
        }
        let identity = try X25519Identity.generate()
        try writeNewSecretFile(path, try identity.fileContents(), what: "identity file")
        writeOut("\(identity.recipient)\n")
        writeError("wrote a new identity to \(escapedName(path)) (mode 0600); its recipient string is on standard output\n")
    }
}

struct IdentityShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print the recipient string (age1…) of each identity in an identity file.",
        discussion: """
            FILE may be - to read the identity from standard input (a pipe; at most 64 KiB).
            """)

    @Argument(help: "The identity file (see `coffer identity --help` for the default).")
    var file: String?

    func run() throws {
        let identities: [X25519Identity]
        if file == GlobalOptions.standardInputKeyFile {
            identities = try IdentityFile.parse(try Input.keyFromStandardInput())
        } else {
            identities = try IdentityFile.read(URL(fileURLWithPath: IdentityCommand.path(file)))
        }
        writeOut(identities.map { "\($0.recipient)\n" }.joined())
    }
}
