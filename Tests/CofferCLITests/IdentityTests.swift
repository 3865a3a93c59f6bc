import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer identity` and `coffer slot`: a key pair per machine, and the key slots that name them.
@Suite("coffer identities and key slots")
struct IdentityTests {
    @Test("identity new writes a 0600 file, prints only the recipient; identity show prints it again", .timeLimit(.minutes(10)))
    func identityNewAndShow() throws {
        let box = try Sandbox()
        let file = box.path + "/keys/machine"
        let made = try box.run(["identity", "new", "--output", file], vault: false, passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        let recipient = made.out.trimmingCharacters(in: .newlines)
        #expect(recipient.hasPrefix("age1") && recipient.count == 62, "\(made)")
        var status = stat()
        #expect(stat(file, &status) == 0 && status.st_mode & 0o777 == 0o600)
        let contents = try String(contentsOfFile: file, encoding: .utf8)
        let secretLine = try #require(contents.split(separator: "\n").first { $0.hasPrefix("AGE-SECRET-KEY-1") })
        // The secret is in the file only: never on standard output or error.
        #expect(!made.out.contains(secretLine) && !made.err.contains(secretLine))
        #expect(contents.contains("# public key: \(recipient)"))
        let shown = try box.run(["identity", "show", file], vault: false, passphraseFile: false)
        #expect(shown.status == Exit.ok && shown.out == recipient + "\n", "\(shown)")
        let piped = try box.run(["identity", "show", "-"], stdin: Array(contents.utf8), vault: false, passphraseFile: false)
        #expect(piped.out == recipient + "\n", "\(piped)")
        // Never overwritten; a bad file is named by line, never quoted.
        let again = try box.run(["identity", "new", "--output", file], vault: false, passphraseFile: false)
        #expect(again.status == Exit.failure && again.err.contains("refusing to overwrite"), "\(again)")
        try box.write("# comment\nAGE-SECRET-KEY-1NOTVALIDATALL\n", to: box.path + "/bad")
        let bad = try box.run(["identity", "show", box.path + "/bad"], vault: false, passphraseFile: false)
        #expect(bad.status != Exit.ok && bad.err.contains("line 2") && !bad.err.contains("NOTVALID"), "\(bad)")
        // The default place is under $XDG_CONFIG_HOME, and COFFER_IDENTITY overrides it.
        let xdg = try box.run(
            ["identity", "new"], environment: ["XDG_CONFIG_HOME": box.path + "/config"], vault: false, passphraseFile: false)
        #expect(xdg.status == Exit.ok && FileManager.default.fileExists(atPath: box.path + "/config/coffer/identity"), "\(xdg)")
    }

    @Test("slot add --recipient lets that machine's identity open the vault; slot rm takes it away", .timeLimit(.minutes(10)))
    func recipientSlotLifecycle() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("hunter2".utf8))
        let identity = box.path + "/machine.identity"
        let made = try box.run(["identity", "new", "-o", identity], vault: false, passphraseFile: false)
        let recipient = made.out.trimmingCharacters(in: .newlines)
        // A recipient string with a typo is refused before any passphrase is asked for.
        let typo = try box.run(["slot", "add", "--recipient", String(recipient.dropLast()) + (recipient.hasSuffix("q") ? "p" : "q")])
        #expect(typo.status == Exit.usage && typo.err.contains("checksum"), "\(typo)")
        let added = try box.run(["slot", "add", "--recipient", recipient])
        #expect(added.status == Exit.ok, "\(added)")
        let listed = try box.run(["slot", "list"])
        #expect(listed.out.contains("recipient") && listed.out.contains(recipient), "\(listed)")
        // The machine opens it with its identity file, by option or by COFFER_IDENTITY.
        let byOption = try box.run(["--identity", identity, "get", "db.internal", "app"], passphraseFile: false)
        #expect(byOption.status == Exit.ok && byOption.out == "hunter2", "\(byOption)")
        let byEnvironment = try box.run(
            ["get", "db.internal", "app"], environment: ["COFFER_IDENTITY": identity], passphraseFile: false)
        #expect(byEnvironment.status == Exit.ok && byEnvironment.out == "hunter2", "\(byEnvironment)")
        let info = try box.run(["info"])
        #expect(info.out.contains("version 2") && info.out.contains(recipient), "\(info)")
        // Removed by its recipient string: the identity opens nothing now (exit 4).
        let removed = try box.run(["slot", "rm", recipient])
        #expect(removed.status == Exit.ok, "\(removed)")
        let refused = try box.run(["--identity", identity, "get", "db.internal", "app"], passphraseFile: false)
        #expect(refused.status == Exit.wrongKey, "\(refused)")
        #expect(try box.run(["slot", "list", "--json"]).out.contains("\"passphrase\""))
        // A missing identity file is a usage error (2), said before anything is opened.
        let missing = try box.run(["--identity", box.path + "/nope", "list"], passphraseFile: false)
        #expect(missing.status == Exit.usage && missing.err.contains("does not exist"), "\(missing)")
        // The identity on standard input.
        let readd = try box.run(["slot", "add", "--recipient", recipient])
        #expect(readd.status == Exit.ok, "\(readd)")
        let again = try box.run(["slot", "add", "--recipient", recipient])
        #expect(again.out.contains("already has a key slot"), "\(again)")
        let piped = try box.run(
            ["--identity", "-", "get", "db.internal", "app"], stdin: Array(try String(contentsOfFile: identity, encoding: .utf8).utf8),
            passphraseFile: false)
        #expect(piped.status == Exit.ok && piped.out == "hunter2", "\(piped)")
        // COFFER_IDENTITY set for everyday use does not decide who can open a new vault.
        // (Without a terminal it asks for a passphrase source instead.)
        let fresh = try box.run(
            ["--vault", box.path + "/fresh.coffer", "init"], environment: ["COFFER_IDENTITY": identity], vault: false,
            passphraseFile: false)
        #expect(fresh.status == Exit.usage && fresh.err.contains("--identity PATH"), "\(fresh)")
        #expect(!FileManager.default.fileExists(atPath: box.path + "/fresh.coffer"))
        // The last slot is never removed.
        #expect(try box.run(["slot", "rm", recipient]).status == Exit.ok)
        let last = try box.run(["slot", "rm", "0"])
        #expect(last.status != Exit.ok && last.err.contains("last key slot"), "\(last)")
    }

    @Test("rotate --remove-slot revokes a machine; a key-file slot without its file is refused, naming it, and nothing changes", .timeLimit(.minutes(10)))
    func rotateRevokes() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("hunter2".utf8))
        var recipients: [String] = []
        for name in ["kept", "revoked"] {
            let made = try box.run(["identity", "new", "-o", box.path + "/\(name).identity"], vault: false, passphraseFile: false)
            recipients.append(made.out.trimmingCharacters(in: .newlines))
            #expect(try box.run(["slot", "add", "--recipient", recipients.last!, "--label", "\(name)-host"]).status == Exit.ok)
        }
        let listed = try box.run(["slot", "list"])
        #expect(listed.out.contains("kept-host") && listed.out.contains("revoked-host"), "\(listed)")
        #expect(try box.run(["info"]).out.contains("(revoked-host)"))
        let control = try box.run(["slot", "add", "--passphrase", "--new-passphrase-file", box.newPassphraseFile, "--label", "a\u{07}b"])
        #expect(control.status == Exit.usage && control.err.contains("control characters"), "\(control)")
        try box.write(String(repeating: "k", count: 40), to: box.path + "/backup.key")
        #expect(try box.run(["slot", "add", "--new-key-file", box.path + "/backup.key"]).status == Exit.ok)
        let vaultBefore = try Data(contentsOf: URL(fileURLWithPath: box.vault))
        // The key-file slot cannot be re-wrapped without its file: refused, named, unchanged.
        let refused = try box.run(["rotate", "--remove-slot", recipients[1]])
        #expect(refused.status == Exit.usage && refused.err.contains("key slot 3 (keyFile)"), "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.vault)) == vaultBefore)
        // A recipient with no slot is refused before anything changes.
        let unknown = try box.run(["rotate", "--remove-slot", "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"])
        #expect(unknown.status == Exit.notFound, "\(unknown)")
        let bad = try box.run(["rotate", "--remove-slot", "machine-b"])
        #expect(bad.status == Exit.usage, "\(bad)")
        // Keeping the key file, removing the revoked machine.
        let rotated = try box.run(["rotate", "--remove-slot", recipients[1], "--keep-key-file", box.path + "/backup.key"])
        #expect(rotated.status == Exit.ok && rotated.out.contains("1 item re-sealed, 3 slots kept, 1 removed"), "\(rotated)")
        #expect(rotated.out.contains("removed: recipient \(recipients[1]) (revoked-host)"), "\(rotated)")
        let revoked = try box.run(["--identity", box.path + "/revoked.identity", "get", "db.internal", "app"], passphraseFile: false)
        #expect(revoked.status == Exit.wrongKey, "\(revoked)")
        for unlock in [["--identity", box.path + "/kept.identity"], ["--key-file", box.path + "/backup.key"]] {
            let opened = try box.run(unlock + ["get", "db.internal", "app"], passphraseFile: false)
            #expect(opened.status == Exit.ok && opened.out == "hunter2", "\(opened)")
        }
        #expect(try box.run(["get", "db.internal", "app"]).out == "hunter2")
        // --json, and removing by number.
        let json = try box.run(["rotate", "--remove-slot", "2", "--json"])
        #expect(json.status == Exit.ok, "\(json)")
        let object = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
        #expect(object?["removedSlots"] as? Int == 1 && object?["keptSlots"] as? Int == 2, "\(json)")
        let keyFile = try box.run(["--key-file", box.path + "/backup.key", "get", "db.internal", "app"], passphraseFile: false)
        #expect(keyFile.status == Exit.wrongKey, "\(keyFile)")
    }
}
