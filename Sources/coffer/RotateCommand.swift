import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

/// `coffer rotate`: a new master key for the vault, and revocation of removed slots.
struct RotateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate",
        abstract: "Give the vault a new key: re-seal every item, re-wrap the kept slots, remove the named ones.",
        discussion: """
            This is how a machine, a person or a leaked key is revoked: a removed slot's \
            passphrase, key or identity opens nothing written from now on, even for someone who \
            kept the old key. (It still opens an old copy, and the secrets it could read before \
            are as known as before: change them too.)

            Recipient slots are re-wrapped with no secret, and so is the slot you unlock with. \
            Any other passphrase or key-file slot must be removed or have its secret given \
            (--keep-passphrase-file, --keep-key-file); otherwise nothing is changed and the slot \
            is named.

            A file vault is rewritten once, atomically: a crash at any point leaves the old vault \
            or the new one. A PostgreSQL vault (--store) is rotated in one transaction while the \
            fleet runs: instances with a slot follow by themselves, and an instance whose slot \
            was removed gets "wrong passphrase or key".

            Name a recipient slot by its recipient string rather than its number: numbers move when \
            slots are added or removed, and a number read from `slot list` before someone else \
            changed the slots names another slot. What was removed is printed.

            Examples:
              coffer rotate --remove-slot age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p
              coffer rotate --remove-slot 2 --keep-key-file /etc/coffer/backup.key
              coffer --store 'postgres://app@db/prod?vault=app' --identity ~/.config/coffer/identity rotate --remove-slot 3
            """)

    @ParentCommand var root: CofferCommand
    @Option(
        name: .customLong("remove-slot"),
        help: ArgumentHelp("A slot to remove: its number in `coffer slot list`, or a recipient (age1…). Repeatable.", valueName: "slot"))
    var removeSlots: [String] = []
    @Option(
        name: .customLong("keep-passphrase-file"),
        help: ArgumentHelp("The passphrase of another passphrase slot to keep, from a file. Repeatable.", valueName: "path"))
    var keepPassphraseFiles: [String] = []
    @Option(
        name: .customLong("keep-key-file"),
        help: ArgumentHelp("The key file of another key-file slot to keep. Repeatable.", valueName: "path"))
    var keepKeyFiles: [String] = []
    @Flag(help: "Print what was done as JSON.") var json = false

    func run() throws {
        // Every argument is checked before the vault is opened (and a passphrase asked for).
        var indices: Set<Int> = []
        var recipients: [X25519Recipient] = []
        for which in removeSlots {
            if let index = Int(which), index >= 0 {
                indices.insert(index)
            } else if let recipient = X25519Recipient(which) {
                recipients.append(recipient)
            } else {
                throw CLIError.usage("--remove-slot takes a slot number (see `coffer slot list`) or a recipient (age1…): \(quotedName(which))")
            }
        }
        var keeping: [VaultUnlock] = []
        for path in keepKeyFiles {
            try GlobalOptions.checkRegularFile(path, what: "key file", option: "--keep-key-file")
            keeping.append(.keyFile(URL(fileURLWithPath: path)))
        }
        for path in keepPassphraseFiles { keeping.append(.passphrase(try Input.passphraseFile(path))) }
        let vault = try root.global.openKeySlotStore()
        let slots = try vault.keySlots()
        // A recipient named for removal must have a slot: a typo must not rotate and keep the
        // machine it meant to revoke.
        for recipient in recipients where !slots.contains(where: { $0.recipient == recipient.description }) {
            throw CLIError(.notFound, "the vault has no key slot for recipient \(recipient); nothing was changed")
        }
        let rotation = try vault.rotate(removing: indices, removingRecipients: recipients, keeping: keeping)
        if json {
            writeOut(try encodeJSON(rotation))
            return
        }
        var text =
            "rotated the key of \(escapedName(vault.location)): \(rotation.items) item\(rotation.items == 1 ? "" : "s") re-sealed, "
            + "\(rotation.keptSlots) slot\(rotation.keptSlots == 1 ? "" : "s") kept, \(rotation.removedSlots) removed\n"
        // What was revoked, to check against what was meant (slot numbers move when slots change).
        for slot in rotation.removed {
            text += "  removed: \(slot.recipient.map { "recipient \($0)" } ?? slot.kind)\(slot.label.map { " (\(escapedName($0)))" } ?? "")\n"
        }
        writeOut(text)
    }
}
