import ArgumentParser
import Coffer
import CofferCore
import CofferRuntime
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `coffer export`: every item (or one service's) in Coffer's JSON, sealed to age recipients or,
/// when asked for in so many words, in plaintext.
struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the items, secrets included, as Coffer's JSON: sealed to age recipients, or with --plaintext.",
        discussion: """
            The JSON is {"format": "coffer-export", "version": 1, "exported": …, "items": [{"service", \
            "account", "label", "comment", "created", "modified", "secretEncoding", "secret"}]}: \
            secretEncoding is "utf8" when the secret is UTF-8 text (then "secret" is that text) and \
            "base64" otherwise (standard alphabet, padded). `coffer import json` reads it back.

            --recipient age1… (repeatable) seals the JSON in age's file format (age-encryption.org/v1, \
            X25519 recipients) for those recipients only: `age -d -i KEYFILE` or \
            `coffer import json FILE --identity-file KEYFILE` opens it. Without a recipient, \
            --plaintext is required: the secrets are then written readable. Sealed output is binary \
            and is not written to a terminal.

            -o FILE is created with mode 0600 and replaces an existing file atomically (a temporary \
            file beside it, fsynced, renamed); without -o the export goes to standard output.

            Examples:
              coffer export --recipient age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p -o vault.json.age
              coffer export --plaintext --service db.internal -o db.json
              age -d -i key.txt vault.json.age | jq '.items[].account'
            """)

    @ParentCommand var root: CofferCommand
    @Option(help: "Only the items of this service.") var service: String?
    @Flag(help: "Write the secrets readable (without a recipient, this is required).") var plaintext = false
    @Option(
        name: .customLong("recipient"),
        help: ArgumentHelp("Seal the export to this age recipient (age1…); may be repeated.", valueName: "age1…"))
    var recipients: [String] = []
    @Option(name: [.customShort("o"), .customLong("output")], help: ArgumentHelp("Where to write (default: standard output); created 0600.", valueName: "file"))
    var output: String?

    func validate() throws {
        if let service { try checkName(service, "service") }
        if plaintext, !recipients.isEmpty {
            throw ValidationError("--plaintext writes the secrets readable and --recipient seals them: give one of them")
        }
        for recipient in recipients {
            do {
                _ = try X25519Recipient(parsing: recipient)
            } catch let error as CryptoError {
                throw ValidationError("--recipient: \(error.message)")
            }
        }
    }

    func run() throws {
        guard plaintext || !recipients.isEmpty else {
            throw CLIError.usage(
                "an export holds every secret: give --recipient age1… to seal it for that recipient (`coffer identity new` "
                    + "makes one), or --plaintext to write it readable (best to a file: -o FILE, created 0600)")
        }
        let sealTo = try recipients.map { try X25519Recipient(parsing: $0) }
        if !sealTo.isEmpty, output == nil, isatty(STDOUT_FILENO) == 1 {
            throw CLIError.usage("the sealed export is binary: write it to a file with -o FILE, or redirect standard output")
        }
        let store = try root.global.openKeychain()
        let items = try store.items(service: service)
        let json = try CofferJSON.write(items: items) { try store.secret(service: $0.service, account: $0.account) }
        let what = sealTo.isEmpty ? "in plaintext" : "sealed to \(sealTo.count) recipient\(sealTo.count == 1 ? "" : "s")"
        let write: (UnsafeRawBufferPointer) throws -> Void = { bytes in
            if let output {
                do {
                    try DurableIO.atomicReplace(output, with: bytes, fileSystem: LiveFileSystem())
                } catch let error as CofferError {
                    throw CLIError(.failure, "cannot write \(quotedName(output)): \(error.message)")
                }
            } else if !writeAll(STDOUT_FILENO, bytes) {
                throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))")
            }
        }
        if sealTo.isEmpty {
            try json.withUnsafeBytes(write)
        } else {
            let sealed = try json.withUnsafeBytes { try AgeFile.seal($0, to: sealTo) }
            try sealed.withUnsafeBytes(write)
        }
        let destination = output.map { "\(quotedName($0)) (mode 0600)" } ?? "standard output"
        writeError("exported \(items.count) item\(items.count == 1 ? "" : "s") to \(destination), \(what)\n")
    }
}
