import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation


#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `coffer import`: items from another tool's export, written in one commit or not at all.
struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Add items from a .env file, a Coffer export, a KeePassXC, Bitwarden or 1Password CSV, or a pass store.",
        discussion: """
            Everything is read and checked first; then all the items are written in one commit \
            (one journal append, or one PostgreSQL transaction): an interrupted import leaves \
            none of them. --dry-run lists what would be added, replaced or left unchanged (names \
            only, never secrets) and writes nothing. An existing item whose secret, label or \
            comment differs is a clash: without --overwrite, the clashes are listed and nothing \
            is written. An item already there with the same values is left unchanged. Two \
            items of the input with the same service and account are an error naming both. \
            Without --overwrite, whether an item exists is decided again under the vault's write \
            lock, with the commit: an item another writer stored meanwhile is never replaced. \
            Names may hold any character but NUL (names are printed with control characters \
            escaped, $'…'), so whatever `coffer set` stored and `coffer export` wrote imports \
            again. json is read in place, without a tree of the document: an import holds at \
            most about 6 bytes per input byte beyond what the vault holds. The input is at most \
            256 MiB.

              format     service / account / secret / label / comment
              dotenv     --service / NAME / VALUE / – / –
              json       service / account / secret / label / comment
              keepassxc  Title / Username / Password / Group / URL
              bitwarden  name / login_username / login_password / folder / login_uri
              1password  Title / Username / Password / Tags / Url
              pass       directory / file name less .gpg / first line / – / –

            dotenv reads NAME=VALUE lines as `coffer run --env-file` does (# comments, an \
            export prefix, '…' literal, "…" with \\n \\r \\t \\" \\\\ \\$ escapes, an \
            unquoted value ends at " #"; nothing is expanded). json is Coffer's export \
            (`coffer export`); one sealed with age (by `coffer export --recipient` or `age -r`, \
            binary or armored) is opened with --identity-file, else --identity, else \
            $COFFER_IDENTITY. Bitwarden's collections column stands in for folder in an \
            organization export, and rows whose type is not login are skipped; 1Password's URL \
            column may also be named Website. In a pass store, a/b/c.gpg is service a/b, \
            account c, each file decrypted by gpg --batch --quiet --decrypt.

            CSV files may have a byte-order mark, CRLF line ends, and quoted fields holding \
            commas, quotes ("") and newlines; the header names the columns (in any order and \
            case), and a missing required column is named. An empty user name becomes the \
            account "\(CSVLayout.defaultAccount)". An empty title, and a pass entry at the top \
            of the store, take --service (else it is an error). Notes, TOTP seeds, custom fields \
            and the lines of a pass entry after the first are not imported (they may hold \
            secrets, and a label or comment is not secret); the summary says how many were left out.

            Examples:
              coffer import dotenv .env --service myapp
              coffer import keepassxc keepass.csv --dry-run
              coffer import pass ~/.password-store
              coffer import json export.json.age --identity-file ~/.config/coffer/identity
              coffer export --plaintext | ssh other coffer import json - --overwrite
            """)

    /// The largest input read.
    static let maximumInput = 256 * 1024 * 1024

    @ParentCommand var root: CofferCommand
    @Argument(help: "dotenv, json, keepassxc, bitwarden, 1password or pass.") var format: ImportFormat
    @Argument(
        help: ArgumentHelp(
            "The file to read, - for standard input; for pass, the store's directory (default: $PASSWORD_STORE_DIR, else ~/.password-store).",
            valueName: "file"))
    var file: String?
    @Option(
        help: ArgumentHelp(
            "dotenv: the service of every item (required). Other formats: the service of rows with an empty title and of pass entries at the top of the store.",
            valueName: "name"))
    var service: String?
    @Flag(help: "List what would be added, replaced or left unchanged (names only), and write nothing.") var dryRun = false
    @Flag(help: "Replace existing items whose secret, label or comment differ.") var overwrite = false
    @Option(
        name: .customLong("identity-file"),
        help: ArgumentHelp(
            "An identity file (AGE-SECRET-KEY-1…) that opens an age-sealed export; may be repeated.", valueName: "path"))
    var identityFiles: [String] = []

    func validate() throws {
        if let service { try checkName(service, "service") }
        if format == .dotenv, service == nil {
            throw ValidationError("dotenv needs --service NAME: the service of every item (each KEY becomes an account)")
        }
        if format != .pass, file == nil { throw ValidationError("give the FILE to import, or - for standard input") }
        if format == .pass, file == "-" { throw ValidationError("pass reads a directory, not standard input") }
        if !identityFiles.isEmpty, format != .json { throw ValidationError("--identity-file opens a sealed json export only") }
    }

    func run() throws {
        if file == "-", root.global.keyFile == GlobalOptions.standardInputKeyFile || root.global.identity == "-" {
            throw CLIError.usage(
                "the input is read from standard input, so the key cannot come from there too: give the input as a file")
        }
        let batch = ImportBatch()
        if format == .pass {
            try PassStore.read(root: passDirectory, fallbackService: service, into: batch)
        } else {
            let input = try readInput()
            try input.withUnsafeBytes { bytes in
                if format == .json, AgeFile.isAgeFile(bytes) {
                    let identities = try sealingIdentities()
                    do {
                        try AgeFile.open(bytes, identities: identities) { try CofferJSON.parse($0, into: batch) }
                    } catch let error as AgeFileError {
                        throw CLIError(Self.status(error.reason), "cannot open \(inputName): \(error.message)")
                    }
                } else {
                    try parse(bytes, into: batch)
                }
            }
        }
        try batch.check()

        let store = try root.global.openKeychain()
        // Without --overwrite, the items to add are added only if none of them exists by then,
        // decided under the vault's write lock with the commit (``Keychain/add(_:)``): an item
        // another writer stores after the plan was made is never replaced. The plan is then made
        // again, once or twice, so the import ends as it would have had it started later.
        for attempt in 1...Self.attempts {
            let plan = try Self.plan(batch, against: store)
            let clashes = plan.filter { $0.change == .replace }
            let counts = Dictionary(grouping: plan, by: \.change).mapValues(\.count)
            let added = counts[.add] ?? 0, replaced = counts[.replace] ?? 0, unchanged = counts[.unchanged] ?? 0
            let refused = !clashes.isEmpty && !overwrite
            let clashError = CLIError(
                .failure,
                "\(clashes.count) item\(clashes.count == 1 ? "" : "s") of the input already exist\(clashes.count == 1 ? "s" : "") "
                    + "in \(quotedName(store.location)) with another secret, label or comment: "
                    + listed(clashes.map { "\(escapedName($0.item.service)) / \(escapedName($0.item.account))" })
                    + "; --overwrite replaces them; nothing was imported")
            if dryRun {
                let rows = plan.map { entry in
                    [
                        entry.change == .replace && refused ? "clash" : entry.change.rawValue,
                        escapedName(entry.item.service), escapedName(entry.item.account), entry.item.origin,
                    ]
                }
                if !rows.isEmpty { writeOut(formatTable(rows, maximumWidth: ListCommand.maximumCellWidth)) }
                writeOut(
                    "dry run: would add \(added), replace \(replaced)\(refused ? " (refused without --overwrite)" : ""), "
                        + "leave \(unchanged) unchanged in \(escapedName(store.location)); nothing was written\n")
                notes(batch)
                if refused { throw clashError }
                return
            }
            if refused { throw clashError }
            let changed = plan.filter { $0.change != .unchanged }.map(\.item)
            if !changed.isEmpty {
                // Without --overwrite every change is an addition (a replacement is a clash).
                let present = try Self.commit(changed, from: batch, to: store, onlyAdding: !overwrite)
                if !present.isEmpty {
                    guard attempt < Self.attempts else {
                        throw CLIError(
                            .failure,
                            "other writers kept storing items of the input in \(quotedName(store.location)) while it was "
                                + "imported, most recently "
                                + listed(present.map { "\(escapedName($0.service)) / \(escapedName($0.account))" })
                                + "; nothing was imported")
                    }
                    continue
                }
            }
            writeOut(
                "imported \(plan.count) item\(plan.count == 1 ? "" : "s") into \(escapedName(store.location)) in one commit: "
                    + "\(added) added, \(replaced) replaced, \(unchanged) unchanged\n")
            notes(batch)
            return
        }
    }

    /// How many times the import is planned when other writers store items of the input
    /// between its plan and its commit.
    static let attempts = 3

    /// What the import does to one item.
    enum Change: String {
        case add, replace, unchanged
    }

    /// Each item of `batch` with what importing it changes in `store`.
    static func plan(_ batch: ImportBatch, against store: any Keychain) throws -> [(item: ImportBatch.Item, change: Change)] {
        var existing: [ItemIdentity: VaultItem] = [:]
        for item in try store.items(service: nil) { existing[ItemIdentity(item.service, item.account)] = item }
        return try batch.items.map { item in
            guard let current = existing[ItemIdentity(item.service, item.account)],
                let secret = try store.secret(service: item.service, account: item.account)
            else { return (item, .add) }
            let sameSecret = secret.withUnsafeBytes { stored in
                batch.withSecret(item) { stored.count == $0.count && SecureMemory.constantTimeEqual(stored, $0) }
            }
            let same =
                sameSecret && (item.label.map { $0.utf8.elementsEqual(current.label.utf8) } ?? true)
                && (item.comment.map { $0.utf8.elementsEqual(current.comment.utf8) } ?? true)
            return (item, same ? .unchanged : .replace)
        }
    }

    /// Writes `items` in one commit (``Keychain/apply(_:)``: for a file vault one journal append
    /// and one fsync, for a PostgreSQL vault one transaction); `onlyAdding`, only if none of them
    /// exists (``Keychain/add(_:)``). Returns the items that exist (then nothing was written).
    /// The secrets are copied into arrays (what ``VaultChange`` holds) only now, and those arrays
    /// are wiped once the commit is done.
    static func commit(_ items: [ImportBatch.Item], from batch: ImportBatch, to store: any Keychain, onlyAdding: Bool)
        throws -> [VaultItemID]
    {
        var secrets = items.map { item in batch.withSecret(item) { [UInt8]($0) } }
        // Runs after `apply`'s changes are released, so each array is wiped in place.
        defer { for index in secrets.indices { SecureMemory.zero(&secrets[index]) } }
        return try apply(items, secrets, to: store, onlyAdding: onlyAdding)
    }

    private static func apply(_ items: [ImportBatch.Item], _ secrets: [[UInt8]], to store: any Keychain, onlyAdding: Bool)
        throws -> [VaultItemID]
    {
        let changes = zip(items, secrets).map { item, secret in
            VaultChange.set(
                service: item.service, account: item.account, secret: secret, label: item.label, comment: item.comment)
        }
        guard onlyAdding else {
            try store.apply(changes)
            return []
        }
        return try store.add(changes)
    }

    /// What was deliberately left out, on standard error.
    private func notes(_ batch: ImportBatch) {
        for note in batch.notes { writeError("coffer: note: \(note)\n") }
    }

    /// The input's name in messages.
    private var inputName: String { file == "-" ? "standard input" : quotedName(file ?? "") }

    /// `pass`: FILE, else `$PASSWORD_STORE_DIR`, else `~/.password-store`.
    private var passDirectory: String {
        if let file { return file }
        if let directory = environmentText("PASSWORD_STORE_DIR"), !directory.isEmpty { return directory }
        let home = environmentText("HOME").flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.password-store"
    }

    private func readInput() throws -> WipingBuffer {
        guard let file, file != "-" else {
            let buffer = WipingBuffer(capacity: 4096)
            try buffer.readToEnd(STDIN_FILENO, limit: Self.maximumInput, what: "standard input")
            return buffer
        }
        return try Input.readFile(file, what: "file to import", limit: Self.maximumInput)
    }

    private func parse(_ bytes: UnsafeRawBufferPointer, into batch: ImportBatch) throws {
        switch format {
        case .dotenv:
            // The syntax of `coffer run --env-file` (DotEnv), so both read a .env file alike.
            for assignment in try DotEnv.parse(bytes, file: file == "-" ? "(standard input)" : file ?? "") {
                batch.add(service: service!, account: assignment.name, label: nil, comment: nil, origin: "line \(assignment.line)") {
                    $0.append(contentsOf: assignment.value)
                }
            }
        case .json: try CofferJSON.parse(bytes, into: batch)
        case .keepassxc: try CSVLayout.keepassxc.parse(bytes, fallbackService: service, into: batch)
        case .bitwarden: try CSVLayout.bitwarden.parse(bytes, fallbackService: service, into: batch)
        case .onePassword: try CSVLayout.onePassword.parse(bytes, fallbackService: service, into: batch)
        case .pass: break
        }
    }

    /// The identities that may open a sealed export: --identity-file, else --identity, else
    /// $COFFER_IDENTITY.
    private func sealingIdentities() throws -> [X25519Identity] {
        var paths = identityFiles
        if paths.isEmpty, let identity = root.global.identity { paths = [identity] }
        if paths.isEmpty, let identity = environmentText("COFFER_IDENTITY"), !identity.isEmpty { paths = [identity] }
        guard !paths.isEmpty else {
            throw CLIError.usage(
                "\(inputName) is sealed with age: give --identity-file PATH, an identity file of a recipient it was sealed to")
        }
        return try paths.flatMap { path -> [X25519Identity] in
            guard path != "-" else {
                throw CLIError.usage("give the identity that opens the sealed export as a file: --identity-file PATH")
            }
            try GlobalOptions.checkRegularFile(path, what: "identity file", option: "--identity-file")
            return try IdentityFile.read(URL(fileURLWithPath: path))
        }
    }

    /// The exit status for an age file that cannot be opened.
    static func status(_ reason: AgeFileError.Reason) -> ExitStatus {
        switch reason {
        case .noMatchingIdentity: .wrongKey
        case .damaged, .malformed: .integrity
        case .notAgeFile, .unsupported: .failure
        }
    }
}

extension ImportFormat: ExpressibleByArgument {}
