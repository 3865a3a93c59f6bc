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

struct SetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Store a secret read from standard input (all of it, byte for byte).",
        discussion: """
            Every byte of standard input is the secret, binary-safe: nothing is trimmed, so use \
            printf '%s' rather than echo unless the newline is meant to be part of it. When \
            standard input is a terminal, the secret is typed without echo and ends at the newline. \
            An empty standard input stores an empty secret; an empty line typed at the terminal is \
            refused. An existing item is replaced; its label and comment are kept unless given.

            Examples:
              printf '%s' "$TOKEN" | coffer set api.github.com octocat --label "GitHub token"
              coffer set db.internal app < db-password.txt
              coffer set ssh deploy-key --comment "rotated 2026-05" < ~/.ssh/id_ed25519
            """)

    @ParentCommand var root: CofferCommand
    @Argument(help: "The service, for example a host name: api.github.com.") var service: String
    @Argument(help: "The account within the service: a user name, an e-mail, a key name.") var account: String
    @Option(help: "A readable name for the item.") var label: String?
    @Option(help: "A note kept with the item (not secret: shown by list --json).") var comment: String?

    // Its arguments' help says more than `get`'s and `rm`'s (ItemName), so it keeps its own.
    func validate() throws { try ItemName.check(service: service, account: account) }

    func run() throws {
        if root.global.keyFile == GlobalOptions.standardInputKeyFile {
            throw CLIError.usage(
                "set reads the secret from standard input, so the key cannot come from there too: "
                    + "give --key-file a file")
        }
        let keychain = try root.global.openKeychain()
        let (secret, typed) = try Input.secretFromStandardInput(
            prompt: "Secret for \(escapedName(service)) / \(escapedName(account)): ")
        // An empty line at the prompt is most likely a slip of the Return key; an empty standard
        // input is what the caller meant (keyring clients store empty passwords).
        guard secret.count > 0 || !typed else {
            throw CLIError.usage(
                "the secret is empty: type it at the prompt, or give it on standard input, for example printf '%s' \"$TOKEN\" | coffer set \(shellQuoted(service)) \(shellQuoted(account))"
            )
        }
        try keychain.set(secret, service: service, account: account, label: label, comment: comment)
        writeOut(
            "stored \(escapedName(service)) / \(escapedName(account)) (\(secret.count) byte\(secret.count == 1 ? "" : "s"))\n"
        )
    }
}

struct GetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Write a secret to standard output: exactly the stored bytes, nothing added.",
        discussion: """
            No newline is added, so the output can be piped or captured as it is. Exits 3 when \
            there is no such item.

            Examples:
              coffer get api.github.com octocat | gh auth login --with-token
              export GITHUB_TOKEN="$(coffer get api.github.com octocat)"
              coffer get ssh deploy-key > id_ed25519
            """)

    @ParentCommand var root: CofferCommand
    @OptionGroup var item: ItemName

    func run() throws {
        let keychain = try root.global.openKeychain()
        guard let secret = try keychain.secret(service: item.service, account: item.account) else {
            throw item.notFound(in: keychain.location)
        }
        let written = secret.withUnsafeBytes { writeAll(STDOUT_FILENO, $0) }
        guard written else {
            throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))")
        }
    }
}

struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List items: service, account, label and dates — never secrets.",
        discussion: """
            --json prints an array of objects with service, account, label, comment, created and \
            modified (ISO 8601, UTC, with milliseconds as stored), sorted by service then account.

            The table shows names that hold control characters in $'…' form (as ls does), so a \
            name cannot drive the terminal, and cuts every cell at \(maximumCellWidth) characters \
            (ending it with …). --json prints names in full.

            Examples:
              coffer list
              coffer list api.github.com
              coffer list --json | jq -r '.[].account'
            """)

    @ParentCommand var root: CofferCommand
    @Argument(help: "Only the items of this service.") var service: String?
    @Flag(help: "Print JSON.") var json = false

    struct Row: Encodable {
        var service: String
        var account: String
        var label: String
        var comment: String
        var created: Date
        var modified: Date
    }

    /// The widest cell `list` prints in its table (without it, one 1 MB name would pad every
    /// row to 1 MB). Names can be much longer; `--json` prints them in full.
    static let maximumCellWidth = 40

    func validate() throws {
        if let service { try checkName(service, "service") }
    }

    func run() throws {
        let keychain = try root.global.openKeychain()
        let items = try keychain.items(service: service)
        if json {
            let rows = items.map {
                Row(
                    service: $0.service, account: $0.account, label: $0.label, comment: $0.comment, created: $0.created,
                    modified: $0.modified)
            }
            writeOut(try encodeJSON(rows))
            return
        }
        guard !items.isEmpty else {
            if isatty(STDOUT_FILENO) == 1 {
                writeOut(service.map { "no items for service \(quotedName($0))\n" } ?? "no items\n")
            }
            return
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd HH:mm"
        let table =
            [["SERVICE", "ACCOUNT", "LABEL", "MODIFIED"]]
            + items.map {
                [
                    escapedName($0.service), escapedName($0.account), escapedName($0.label),
                    formatter.string(from: $0.modified),
                ]
            }
        writeOut(formatTable(table, maximumWidth: Self.maximumCellWidth))
    }
}

struct RemoveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rm",
        abstract: "Remove an item.",
        discussion: """
            Exits 3 when there is no such item. The removal is durable when coffer exits; the \
            secret's old sealed record stays in the file, encrypted, until the file is compacted \
            (coffer compact, or automatically once superseded records outweigh live ones).

            Examples:
              coffer rm api.github.com octocat
              coffer rm api.github.com octocat && coffer compact
            """)

    @ParentCommand var root: CofferCommand
    @OptionGroup var item: ItemName

    func run() throws {
        let keychain = try root.global.openKeychain()
        guard try keychain.remove(service: item.service, account: item.account) else {
            throw item.notFound(in: keychain.location)
        }
        writeOut("removed \(escapedName(item.service)) / \(escapedName(item.account))\n")
    }
}

/// The `<service> <account>` arguments that name one item, for `get` and `rm`.
struct ItemName: ParsableArguments {
    @Argument(help: "The service.") var service: String
    @Argument(help: "The account.") var account: String

    func validate() throws { try Self.check(service: service, account: account) }

    /// An empty service or account is a usage error (exit 2), before the vault is opened.
    static func check(service: String, account: String) throws {
        try checkName(service, "service")
        try checkName(account, "account")
    }

    /// Exit 3: the vault at `location` holds no such item.
    func notFound(in location: String) -> CLIError {
        CLIError(
            .notFound,
            "no item for service \(quotedName(service)), account \(quotedName(account)) in " + quotedName(location))
    }
}

/// Pretty, sorted JSON with ISO 8601 dates (milliseconds, UTC) and a final newline.
func encodeJSON(_ value: some Encodable) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .custom { date, encoder in
        var container = encoder.singleValueContainer()
        try container.encode(iso8601Milliseconds(date))
    }
    return String(decoding: try encoder.encode(value), as: UTF8.self) + "\n"
}


/// Left-aligned columns separated by two spaces; with `maximumWidth`, every cell is cut to at
/// most that many characters first, so no row is padded to an unbounded width.
func formatTable(_ rows: [[String]], maximumWidth: Int? = nil) -> String {
    guard let columns = rows.first?.count else { return "" }
    let cells = maximumWidth.map { width in rows.map { $0.map { $0.truncated(to: width) } } } ?? rows
    let widths = (0..<columns).map { column in cells.map { $0[column].count }.max() ?? 0 }
    return cells.map { row in
        row.enumerated().map { column, cell in
            column == columns - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
}
