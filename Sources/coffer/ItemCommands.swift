import ArgumentParser
import Coffer
import Foundation

#if canImport(Glibc)
    import Glibc
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
            An existing item is replaced; its label and comment are kept unless given.

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

    func run() throws {
        let vault = try root.global.openVault()
        let secret = try Input.secretFromStandardInput(prompt: "Secret for \(service) / \(account): ")
        guard secret.count > 0 else {
            throw CLIError.usage(
                "the secret is empty: give it on standard input, for example printf '%s' \"$TOKEN\" | coffer set \(service) \(account)"
            )
        }
        try vault.set(secret, service: service, account: account, label: label, comment: comment)
        writeOut("stored \(service) / \(account) (\(secret.count) byte\(secret.count == 1 ? "" : "s"))\n")
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
    @Argument(help: "The service.") var service: String
    @Argument(help: "The account.") var account: String

    func run() throws {
        let vault = try root.global.openVault()
        guard let secret = try vault.secret(service: service, account: account) else {
            throw CLIError(.notFound, "no item for service '\(service)', account '\(account)' in \(vault.url.path)")
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
            modified (ISO 8601, UTC), sorted by service then account.

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

    func run() throws {
        let vault = try root.global.openVault()
        let items = try vault.items(service: service)
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
            if isatty(STDOUT_FILENO) == 1 { writeOut(service.map { "no items for service '\($0)'\n" } ?? "no items\n") }
            return
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd HH:mm"
        let table =
            [["SERVICE", "ACCOUNT", "LABEL", "MODIFIED"]]
            + items.map { [$0.service, $0.account, $0.label, formatter.string(from: $0.modified)] }
        writeOut(formatTable(table))
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
    @Argument(help: "The service.") var service: String
    @Argument(help: "The account.") var account: String

    func run() throws {
        let vault = try root.global.openVault()
        guard try vault.remove(service: service, account: account) else {
            throw CLIError(.notFound, "no item for service '\(service)', account '\(account)' in \(vault.url.path)")
        }
        writeOut("removed \(service) / \(account)\n")
    }
}

/// Pretty, sorted JSON with ISO 8601 dates and a final newline.
func encodeJSON(_ value: some Encodable) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    return String(decoding: try encoder.encode(value), as: UTF8.self) + "\n"
}

/// Left-aligned columns separated by two spaces.
func formatTable(_ rows: [[String]]) -> String {
    guard let columns = rows.first?.count else { return "" }
    let widths = (0..<columns).map { column in rows.map { $0[column].count }.max() ?? 0 }
    return rows.map { row in
        row.enumerated().map { column, cell in
            column == columns - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
}
