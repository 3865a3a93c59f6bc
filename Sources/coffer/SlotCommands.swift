import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

/// `coffer slot`: the key slots of a vault (a file, or PostgreSQL with `--store`) — who and what can open it.
struct SlotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "slot",
        abstract: "List, add and remove the vault's key slots (passphrases, key files, recipients).",
        discussion: """
            Each key slot wraps the vault's key for one way of opening it: a passphrase, a key \
            file, a raw key, or a recipient (the age1… string of an identity, from `coffer \
            identity new` or age-keygen on the machine that will open the vault). A file vault \
            holds at most 10 slots, a PostgreSQL vault 1,000. Changing slots rewrites only the header, crash-safely (on \
            PostgreSQL, in one transaction; every instance sees it at once). With --store, the \
            PostgreSQL vault's slots.

            Removing a slot stops that passphrase, key or identity from opening the vault from \
            now on; it does not take back the vault's key from whoever opened it before: \
            `coffer rotate --remove-slot SLOT` does (see SECURITY.md).

            Examples:
              coffer slot list
              coffer slot add --recipient age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p --label web-1
              coffer slot add --passphrase
              coffer --identity ~/.config/coffer/identity get db.internal app
              coffer slot rm 1
            """,
        subcommands: [SlotListCommand.self, SlotAddCommand.self, SlotRemoveCommand.self])
}

struct SlotListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the key slots: their number, kind, and recipient or cost.")

    @ParentCommand var root: CofferCommand
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let slots = try root.global.openKeySlotStore().keySlots()
        if json {
            struct Row: Encodable {
                var slot: Int
                var kind: String
                var recipient: String?
                var label: String?
                var opsLimit: UInt64?
                var memLimitBytes: UInt64?
            }
            writeOut(
                try encodeJSON(
                    slots.enumerated().map {
                        Row(
                            slot: $0, kind: $1.kind, recipient: $1.recipient, label: $1.label, opsLimit: $1.opsLimit,
                            memLimitBytes: $1.memLimitBytes)
                    }))
            return
        }
        writeOut(
            formatTable(
                slots.enumerated().map { index, slot in
                    [
                        String(index), slot.kind, slot.label.map(escapedName) ?? "",
                        slot.recipient ?? describeKDF(opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes),
                    ]
                }))
    }
}

struct SlotAddCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Add a key slot: --recipient R, --passphrase, or --new-key-file PATH.",
        discussion: """
            --recipient takes the age1… string of an identity; only that identity's file opens \
            the new slot, and nothing secret is exchanged. --passphrase reads the new passphrase \
            from --new-passphrase-file, else $COFFER_NEW_PASSPHRASE, else the terminal (asked \
            twice). --new-key-file names an existing key file to add. --label names the slot \
            (a machine's host name, say) in `slot list`; it is stored in the vault's header, \
            authenticated with it.
            """)

    @ParentCommand var root: CofferCommand
    @Option(help: ArgumentHelp("A recipient string (age1…).", valueName: "age1…")) var recipient: String?
    @Flag(help: "Add a passphrase slot.") var passphrase = false
    @Option(
        name: .customLong("new-passphrase-file"),
        help: ArgumentHelp("With --passphrase: read it from a file (one trailing newline is removed).", valueName: "path"))
    var newPassphraseFile: String?
    @Option(name: .customLong("new-key-file"), help: ArgumentHelp("Add a slot for this key file.", valueName: "path"))
    var newKeyFile: String?
    @Option(help: "Argon2id cost of a passphrase slot: interactive, moderate or sensitive.")
    var kdf: KDFPreset = .moderate
    @Option(
        help: ArgumentHelp(
            "What `slot list` shows for the slot: the machine's or person's name (up to 64 bytes).", valueName: "label"))
    var label: String?

    func validate() throws {
        let chosen = [recipient != nil, passphrase, newKeyFile != nil].filter { $0 }.count
        guard chosen == 1 else { throw ValidationError("give exactly one of --recipient, --passphrase and --new-key-file") }
        if newPassphraseFile != nil && !passphrase {
            throw ValidationError("--new-passphrase-file goes with --passphrase")
        }
    }

    func run() throws {
        // The recipient is checked before the vault is opened (and a passphrase asked for).
        let parsed = try recipient.map { text -> X25519Recipient in
            do {
                return try X25519Recipient(parsing: text)
            } catch let error as CryptoError {
                throw CLIError.usage("--recipient: \(error.message)")
            }
        }
        let vault = try root.global.openKeySlotStore()
        if let parsed {
            if try vault.addRecipient(parsed, label: label) {
                writeOut("added a key slot for recipient \(parsed) to \(escapedName(vault.location))\n")
            } else {
                writeOut("recipient \(parsed) already has a key slot in \(escapedName(vault.location)); nothing changed\n")
            }
        } else if passphrase {
            try vault.addKeySlot(.passphrase(try Input.newPassphrase(file: newPassphraseFile)), kdf: kdf.parameters, label: label)
            writeOut("added a passphrase slot to \(escapedName(vault.location))\n")
        } else if let newKeyFile {
            try vault.addKeySlot(.keyFile(URL(fileURLWithPath: newKeyFile)), kdf: .moderate, label: label)  // no KDF for a key file
            writeOut("added a key file slot to \(escapedName(vault.location))\n")
        }
    }
}

struct SlotRemoveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rm",
        abstract: "Remove key slot SLOT (its number in `coffer slot list`, or a recipient string).",
        discussion: """
            The last slot is never removed. The slot numbers after the removed one move down by one.
            """)

    @ParentCommand var root: CofferCommand
    @Argument(help: "The slot's number, or the recipient string (age1…) of a recipient slot.") var which: String

    func run() throws {
        let recipient = Int(which) == nil ? X25519Recipient(which) : nil
        guard Int(which) != nil || recipient != nil else {
            throw CLIError.usage("SLOT is a slot number (see `coffer slot list`) or a recipient string (age1…)")
        }
        let vault = try root.global.openKeySlotStore()
        if let recipient {
            // Found and removed under one lock: a slot change made meanwhile cannot shift it.
            let removed = try vault.removeRecipient(recipient)
            guard removed > 0 else { throw CLIError(.notFound, "the vault has no key slot for recipient \(recipient)") }
            writeOut("removed the key slot for recipient \(recipient) from \(escapedName(vault.location))\n")
        } else if let index = Int(which) {
            try vault.removeKeySlot(at: index)
            writeOut("removed key slot \(index) from \(escapedName(vault.location))\n")
        }
    }
}
