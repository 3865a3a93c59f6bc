import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation
#if Postgres
import CofferPostgres
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

struct InitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a vault. Refuses to overwrite an existing file.",
        discussion: """
            The vault is unlocked by a passphrase (asked twice on the terminal, or from \
            --passphrase-file or $COFFER_PASSPHRASE) or by a key file. With --key-file PATH and \
            no file there yet, a new random 32-byte key is written to PATH (mode 0600): keep it \
            somewhere other than beside the vault. The directory is created (mode 0700).

            --kdf sets how hard Argon2id makes each guess at the passphrase (and each unlock): \
            interactive (64 MiB), moderate (256 MiB, the default) or sensitive (1 GiB). \
            `coffer bench` shows what each costs on this machine.

            Examples:
              coffer init
              coffer --vault ~/work.coffer init --kdf sensitive
              coffer --vault ci.coffer --key-file /run/secrets/coffer.key init
            """)

    @ParentCommand var root: CofferCommand
    @Option(help: "Argon2id cost for a passphrase: interactive, moderate or sensitive.")
    var kdf: KDFPreset = .moderate

    func run() throws {
        let global = root.global
        if let store = try global.storeURL { return try createInPostgres(store) }
        let url = try global.vaultURL
        let shown = escapedName(url.path)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) {
            if isDirectory.boolValue {
                throw CLIError.usage("\(shown) is a directory: name the vault file to create in it")
            }
            throw CLIError(.failure, "a file already exists at \(shown); refusing to overwrite it")
        }
        // A symbolic link whose target does not exist (fileExists follows links): the vault
        // would be made wherever it points, or in its place. Refused, named.
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: url.path) {
            throw CLIError(
                .failure,
                "\(shown) is a symbolic link to \(escapedName(target)), which does not exist; refusing to create the "
                    + "vault through it: remove the link, or name the vault file itself with --vault")
        }
        var createdKeyFile = false
        if let keyFile = global.keyFile, keyFile != GlobalOptions.standardInputKeyFile,
            !FileManager.default.fileExists(atPath: keyFile)
        {
            try writeNewKeyFile(keyFile)
            createdKeyFile = true
        }
        let unlock = try global.unlock(prompt: "Passphrase for the new vault \(shown): ", confirm: true)
        let parameters = global.keyFile == nil ? kdf.parameters : .moderate
        let vault = try Vault.create(at: url, unlock: unlock, kdf: parameters, lockTimeout: try global.lockTimeout())
        let slot = try vault.info().keySlots.first
        let how =
            slot?.kind == "passphrase"
            ? "a passphrase (\(describeKDF(opsLimit: slot?.opsLimit, memLimitBytes: slot?.memLimitBytes)))"
            : slot?.kind == "recipient"
                ? "the identity of recipient \(slot?.recipient ?? "?")"
            : global.keyFile == GlobalOptions.standardInputKeyFile
                ? "the key read from standard input" : "the key file \(escapedName(global.keyFile ?? ""))"
        writeOut("created vault \(shown), unlocked by \(how)\n")
        if createdKeyFile { writeOut("wrote a new random key to \(escapedName(global.keyFile ?? "")) (mode 0600)\n") }
    }

    /// `coffer --store postgres://…?vault=NAME init`: the one way to make a PostgreSQL vault.
    private func createInPostgres(_ store: String) throws {
        #if Postgres
        let global = root.global
        guard store.hasPrefix("postgres://") || store.hasPrefix("postgresql://") else {
            throw CLIError.usage("--store takes a postgres:// URL (the file vault is chosen with --vault)")
        }
        let (configuration, name) = try GlobalOptions.postgresVault(store)
        var createdKeyFile = false
        if let keyFile = global.keyFile, keyFile != GlobalOptions.standardInputKeyFile,
            !FileManager.default.fileExists(atPath: keyFile)
        {
            try writeNewKeyFile(keyFile)
            createdKeyFile = true
        }
        let unlock = try global.unlock(
            prompt: "Passphrase for the new vault \(escapedName(name)) on \(configuration): ", confirm: true)
        let parameters = global.keyFile == nil ? kdf.parameters : .moderate
        _ = try PostgresVault.create(name: name, unlock: unlock, kdf: parameters, configuration: configuration)
        writeOut("created vault \(escapedName(name)) on \(configuration)\n")
        if createdKeyFile { writeOut("wrote a new random key to \(escapedName(global.keyFile ?? "")) (mode 0600)\n") }
        #else
        throw CLIError(.failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }

    /// Writes 32 random bytes to a new file, `0600`, durably; never replaces an existing file.
    private func writeNewKeyFile(_ path: String) throws {
        try writeNewSecretFile(path, try SecureBytes.random(count: 32), what: "key file")
    }
}

struct PasswdCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passwd",
        abstract: "Change the vault's passphrase (crash-safe: the old or the new one always works).",
        discussion: """
            The current passphrase (or key file) unlocks the vault as for every command. The new \
            passphrase comes from --new-passphrase-file, else $COFFER_NEW_PASSPHRASE, else the \
            terminal (asked twice). Only the header is rewritten; items are not re-encrypted.

            Examples:
              coffer passwd
              coffer --passphrase-file old.txt passwd --new-passphrase-file new.txt
              coffer passwd --kdf sensitive
            """)

    @ParentCommand var root: CofferCommand
    @Option(
        name: .customLong("new-passphrase-file"),
        help: ArgumentHelp("Read the new passphrase from a file (one trailing newline is removed).", valueName: "path"))
    var newPassphraseFile: String?
    @Option(help: "New Argon2id cost: interactive, moderate or sensitive (default: keep the current one).")
    var kdf: KDFPreset?

    func run() throws {
        // The passphrase itself, never a key kept by `coffer unlock`: whoever finds an unlocked
        // terminal must not be able to lock its owner out by changing the passphrase.
        let vault = try root.global.openVault(usingSessionKey: false)
        let new = try Input.newPassphrase(file: newPassphraseFile)
        try vault.changePassphrase(to: .passphrase(new), kdf: kdf?.parameters)
        writeOut("changed the passphrase of \(escapedName(vault.url.path))\n")
    }
}

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Authenticate every record and the header; exit 5 on any failure.",
        discussion: """
            Reads the whole file again and checks every record's authentication tag and its \
            place in the chain of records, so a flipped bit, a truncated, reordered or replayed \
            record is found. The failure names the byte offset.

            With --salvage (a file vault whose records fail): keeps every record that still \
            authenticates, in order, and rewrites the vault with them, after asking on the \
            terminal (--yes: without asking). The damaged file is first copied aside, next to \
            the vault, and the warning names the copy. What a dropped record did is lost: an \
            item it set keeps its value from before, an item it removed comes back, and when \
            the damage leaves the records after it unchecked (the chain of records breaks \
            there), they are dropped too. Restoring a backup keeps more when there is one. A \
            vault that verifies is left as it is; a damaged header cannot be salvaged.

            With --store (a PostgreSQL vault): authenticates every row and names each one that \
            fails — altered, copied from another row or vault, sealed under another vault name, \
            or inserted by hand with a version beyond the vault's counter — and exits 5 when one \
            does. --repair then removes exactly those rows, after asking on the terminal (--yes: \
            without asking); a row that authenticates is never touched.

            Examples:
              coffer verify
              coffer verify || echo "the vault was damaged or tampered with" >&2
              coffer verify --salvage
              coffer --store 'postgres://app@db.internal/fleet?vault=prod' verify --repair
            """)

    @ParentCommand var root: CofferCommand
    @Flag(help: "With --store: remove the rows verify names as damaged (asks first).")
    var repair = false
    @Flag(help: "A file vault that fails: keep every record that still authenticates, set the damaged file aside (asks first).")
    var salvage = false
    @Flag(help: "With --repair or --salvage: go ahead without asking.")
    var yes = false

    func run() throws {
        if try root.global.storeURL != nil {
            guard !salvage else {
                throw CLIError.usage(
                    "--salvage works on a file vault only: on a PostgreSQL vault (--store), `verify --repair` removes "
                        + "the rows that fail")
            }
            return try verifyStore()
        }
        guard !repair else {
            throw CLIError.usage("--repair works on a PostgreSQL vault (--store) only: a file vault keeps its records in one authenticated chain, so no record can be cut out of it; `coffer verify --salvage` keeps those that still authenticate")
        }
        // What opened the vault is kept only for a salvage, to open it again without asking twice.
        var unlock: VaultUnlock?
        do {
            let vault = try root.global.openVault(unlockedWith: salvage ? { unlock = $0 } : nil)
            let result = try vault.verify()
            writeOut("ok: \(escapedName(vault.url.path)): \(Self.counts(result))\n")
        } catch let error as CofferError where error.code == .corrupted {
            guard salvage, let unlock else {
                throw CLIError(.integrity, "verification FAILED: \(cliMessage(for: error))")
            }
            guard isSalvageable(error) else {
                throw CLIError(
                    .integrity,
                    "verification FAILED: \(messageWithoutSalvageAdvice(error)); salvage cannot help here (it keeps "
                        + "records, and the damage is not to a record): restore a backup")
            }
            try salvageVault(after: error, unlock: unlock)
        }
    }

    /// "header and N records authenticated, M items".
    private static func counts(_ result: VaultVerification) -> String {
        "header and \(result.records) record\(result.records == 1 ? "" : "s") authenticated, "
            + "\(result.items) item\(result.items == 1 ? "" : "s")"
    }

    /// `--salvage` of a file vault that failed with `failure`: asks, then opens it again with
    /// the same key, `recovery: .salvage` (which copies the damaged file aside, keeps the
    /// records that authenticate and rewrites the vault), and verifies what is left.
    private func salvageVault(after failure: CofferError, unlock: VaultUnlock) throws {
        let place = escapedName(try root.global.vaultURL.path)
        // The failure without its advice (which is what is being done).
        printError("verification FAILED: \(messageWithoutSalvageAdvice(failure))")
        if !yes,
            try !Input.confirm(
                "Salvage \(place): keep only the records that still authenticate (what a dropped record changed is "
                    + "lost), rewrite the vault with them, and copy the damaged file aside? Type yes to salvage: ")
        {
            throw CLIError(.failure, "nothing was changed")
        }
        let result: VaultVerification
        do {
            result = try root.global.openVault(recovery: .salvage, unlock: unlock).verify()
        } catch let error as CofferError where error.code != .wrongKey {
            // Never "run verify --salvage" again as advice: it is what failed.
            throw CLIError(
                ExitStatus(error),
                "salvage did not complete: \(messageWithoutSalvageAdvice(error)); restore a backup (a copy of the "
                    + "damaged file is kept beside the vault when a warning above names it)")
        }
        writeOut(
            "salvaged \(place): \(Self.counts(result)); what the dropped records changed is lost, so check the items "
                + "you depend on\n")
    }

    private func verifyStore() throws {
        #if Postgres
        guard let vault = try root.global.openKeychain() as? PostgresVault else {
            throw CLIError.usage("--store takes a postgres:// URL")
        }
        let report = try vault.verify()
        let place = "vault \(escapedName(vault.name)) on \(vault.configuration)"
        if report.aheadOfCounter > 0 {
            writeError(
                "warning: \(report.aheadOfCounter) authentic row(s) of \(place) carry a version beyond the vault's counter: "
                    + "the counter was put back (by SQL, or a restore of that table alone); they are kept\n")
        }
        guard !report.damaged.isEmpty else {
            let unbound = report.unbound > 0 ? " (\(report.unbound) written before vault names were bound)" : ""
            writeOut("ok: \(place): \(report.intact) row\(report.intact == 1 ? "" : "s") authenticated\(unbound)\n")
            return
        }
        for row in report.damaged { writeError("damaged: \(row)\n") }
        let count = "\(report.damaged.count) damaged row\(report.damaged.count == 1 ? "" : "s")"
        guard repair else {
            throw CLIError(
                .integrity,
                "verification FAILED: \(count) in \(place), \(report.intact) intact; "
                    + "remove them with `coffer --store … verify --repair`")
        }
        if !yes, try !Input.confirm("Remove \(count) from \(place)? Type yes to remove: ") {
            throw CLIError(.failure, "nothing was removed")
        }
        let removed = try vault.removeDamagedRows(report.damaged)
        writeOut("removed \(removed) damaged row\(removed == 1 ? "" : "s") from \(place); \(report.intact) intact row\(report.intact == 1 ? "" : "s") kept\n")
        #else
        throw CLIError(.failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }
}

struct InfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show the format version, key slots and KDF parameters, item count and file size.",
        discussion: """
            Nothing secret is shown. --json prints an object with path, formatVersion, keySlots \
            (kind, opsLimit, memLimitBytes), itemCount, recordCount, fileSize (bytes on disk: \
            the file grows in preallocated steps) and usedBytes (where its data ends).

            Examples:
              coffer info
              coffer info --json | jq .itemCount
            """)

    @ParentCommand var root: CofferCommand
    @Flag(help: "Print JSON.") var json = false

    struct Report: Encodable {
        var path: String
        var formatVersion: Int
        var keySlots: [KeySlotInfo]
        var itemCount: Int
        var recordCount: Int
        var fileSize: Int64
        var usedBytes: Int64
    }

    func run() throws {
        let vault = try root.global.openVault()
        let info = try vault.info()
        let onDisk = (try? FileManager.default.attributesOfItem(atPath: vault.url.path)[.size] as? Int64) ?? nil
        if json {
            // The path as the file system has it, with what a terminal would act on as \u escapes.
            let report = Report(
                path: vault.url.path, formatVersion: info.formatVersion, keySlots: info.keySlots,
                itemCount: info.itemCount, recordCount: info.recordCount, fileSize: onDisk ?? info.fileSize,
                usedBytes: info.fileSize)
            writeOut(escapingControls(try encodeJSON(report), json: true))
            return
        }
        var rows = [["vault", escapedName(vault.url.path)], ["format", "version \(info.formatVersion)"]]
        for (index, slot) in info.keySlots.enumerated() {
            let kdf = describeKDF(opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
            let detail = slot.recipient ?? kdf
            let named = slot.label.map { " (\(escapedName($0)))" } ?? ""
            rows.append(["key slot \(index)", (detail.isEmpty ? slot.kind : "\(slot.kind), \(detail)") + named])
        }
        rows.append(["items", "\(info.itemCount)"])
        rows.append(["records", "\(info.recordCount) (\(info.recordCount - info.itemCount) superseded or removed)"])
        rows.append(["file size", "\(onDisk ?? info.fileSize) bytes on disk, \(info.fileSize) in use"])
        writeOut(formatTable(rows))
    }
}

struct CompactCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Rewrite the vault with only its live items (drops replaced and removed records).",
        discussion: """
            Items are re-sealed under a new epoch and the new file replaces the old one \
            atomically; it is durable when coffer exits 0.

            Examples:
              coffer compact
            """)

    @ParentCommand var root: CofferCommand

    func run() throws {
        let vault = try root.global.openVault()
        let before = try vault.info()
        try vault.compact()
        let after = try vault.info()
        writeOut(
            "compacted \(escapedName(vault.url.path)): \(before.fileSize) → \(after.fileSize) bytes in use, \(before.recordCount) → \(after.recordCount) records\n"
        )
    }
}

/// Writes `contents` to a new file at `path`, mode `0600`, durably (the file and its directory
/// `fsync`ed); never replaces an existing file (`O_EXCL`), and removes what it made on failure.
func writeNewSecretFile(_ path: String, _ contents: SecureBytes, what: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else {
        let code = errno
        if code == EEXIST {
            throw CLIError(
                .failure, "a file already exists at \(escapedName(path)); refusing to overwrite it with a new \(what)")
        }
        throw CLIError(.failure, "cannot create the \(what) \(escapedName(path)): \(String(cString: strerror(code)))")
    }
    defer { close(fd) }
    let written = contents.withUnsafeBytes { writeAll(fd, $0) }
    guard written, fsync(fd) == 0 else {
        let reason = String(cString: strerror(errno))
        unlink(path)
        throw CLIError(.failure, "cannot write the \(what) \(escapedName(path)): \(reason)")
    }
    let parent = (path as NSString).deletingLastPathComponent
    let directory = open(parent.isEmpty ? "." : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if directory >= 0 {
        fsync(directory)
        close(directory)
    }
}
