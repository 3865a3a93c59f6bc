import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Every command, used as a person or a script would use it.
@Suite("coffer commands")
struct CommandTests {
    @Test("init creates a 0600 vault and refuses to overwrite it")
    func initRefusesToOverwrite() throws {
        let box = try Sandbox()
        try box.initVault()
        var status = stat()
        #expect(stat(box.vault, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
        let before = try Data(contentsOf: URL(fileURLWithPath: box.vault))

        let again = try box.run(["init"])
        #expect(again.status == Exit.failure, "\(again)")
        #expect(again.err.contains("already exists"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.vault)) == before)

        let info = try box.run(["info", "--json"])
        #expect(info.status == Exit.ok)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(info.stdout)) as? [String: Any])
        let slots = try #require(object["keySlots"] as? [[String: Any]])
        #expect(slots.first?["kind"] as? String == "passphrase")
        #expect(object["formatVersion"] as? Int == 1)
        #expect(object["itemCount"] as? Int == 0)
        let onDisk = try #require(try FileManager.default.attributesOfItem(atPath: box.vault)[.size] as? Int)
        #expect(object["fileSize"] as? Int == onDisk)
        #expect((object["usedBytes"] as? Int ?? 0) > 0 && (object["usedBytes"] as? Int ?? 0) <= onDisk)
    }

    @Test("set then get round-trips binary secrets byte for byte")
    func binaryRoundTrip() throws {
        let box = try Sandbox()
        try box.initVault()
        var large = [UInt8](repeating: 0, count: 1 << 20)
        for i in large.indices { large[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 7) }
        let secrets: [(String, [UInt8])] = [
            ("nul-newline", [0x00, 0x0A, 0x41, 0x00, 0x0D, 0x0A, 0x00]),
            ("trailing-newline", Array("hunter2\n".utf8)),
            ("only-newlines", [0x0A, 0x0A]),
            ("all-bytes", (0...255).map { UInt8($0) }),
            ("not-utf8", [0xFF, 0xFE, 0xC3, 0x28]),
            ("one-mebibyte", large),
        ]
        for (account, secret) in secrets { try box.set("binary", account, secret) }
        for (account, secret) in secrets {
            let get = try box.run(["get", "binary", account])
            #expect(get.status == Exit.ok, "\(get)")
            #expect(get.printed(secret), "\(account): \(get.stdout.count) bytes back, \(secret.count) stored")
            #expect(get.stderr.isEmpty)
        }
    }

    @Test("set replaces, keeps label and comment; list shows attributes only")
    func listShowsAttributes() throws {
        let box = try Sandbox()
        try box.initVault()
        let token = Array("ghp_\(UUID().uuidString)".utf8)
        try box.set("api.github.com", "octocat", token, ["--label", "GitHub token", "--comment", "CI"])
        try box.set("db.internal", "app", Array("pw-\(UUID().uuidString)".utf8))
        try box.set("api.github.com", "octocat", token + [0x21])  // replace, attributes kept

        let text = try box.run(["list"])
        #expect(text.status == Exit.ok)
        #expect(
            text.out.contains("api.github.com") && text.out.contains("octocat") && text.out.contains("GitHub token"))
        #expect(text.out.contains("db.internal"))
        #expect(text.stdout.firstRange(of: token) == nil)

        let json = try box.run(["list", "--json"])
        #expect(json.status == Exit.ok)
        #expect(json.stdout.firstRange(of: token) == nil)
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]])
        #expect(rows.count == 2)
        let github = try #require(rows.first { $0["service"] as? String == "api.github.com" })
        #expect(github["account"] as? String == "octocat")
        #expect(github["label"] as? String == "GitHub token")
        #expect(github["comment"] as? String == "CI")
        #expect(github["created"] is String && github["modified"] is String)
        #expect(Set(github.keys) == ["service", "account", "label", "comment", "created", "modified"])

        let filtered = try box.run(["list", "db.internal", "--json"])
        let only = try #require(try JSONSerialization.jsonObject(with: Data(filtered.stdout)) as? [[String: Any]])
        #expect(only.count == 1 && only.first?["service"] as? String == "db.internal")

        let get = try box.run(["get", "api.github.com", "octocat"])
        #expect(get.printed(token + [0x21]))
    }

    @Test("rm removes an item; a missing item is exit 3 for get and rm")
    func removeAndNotFound() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("secret-value".utf8))
        let rm = try box.run(["rm", "svc", "acct"])
        #expect(rm.status == Exit.ok, "\(rm)")
        let get = try box.run(["get", "svc", "acct"])
        #expect(get.status == Exit.notFound, "\(get)")
        #expect(get.stdout.isEmpty)
        #expect(get.err.hasPrefix("coffer: ") && get.err.contains("svc"))
        #expect(get.err.split(separator: "\n").count == 1)
        let again = try box.run(["rm", "svc", "acct"])
        #expect(again.status == Exit.notFound, "\(again)")
        let never = try box.run(["get", "other", "acct"])
        #expect(never.status == Exit.notFound)
    }

    @Test("passwd changes the passphrase: the old one then fails with exit 4")
    func passwd() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("s3cret".utf8))
        let change = try box.run(["passwd", "--new-passphrase-file", box.newPassphraseFile])
        #expect(change.status == Exit.ok, "\(change)")

        let old = try box.run(["get", "svc", "acct"])
        #expect(old.status == Exit.wrongKey, "\(old)")
        let new = try box.run(
            ["--passphrase-file", box.newPassphraseFile, "get", "svc", "acct"], passphraseFile: false)
        #expect(new.status == Exit.ok, "\(new)")
        #expect(new.printed(Array("s3cret".utf8)))

        // And back, through the environment variables.
        let back = try box.run(
            ["passwd"], environment: ["COFFER_PASSPHRASE": box.newPassphrase, "COFFER_NEW_PASSPHRASE": box.passphrase],
            passphraseFile: false)
        #expect(back.status == Exit.ok, "\(back)")
        #expect(try box.run(["get", "svc", "acct"]).status == Exit.ok)
    }

    @Test("verify authenticates every record and prints counts")
    func verify() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("a", "1", Array("one".utf8))
        try box.set("b", "2", Array("two".utf8))
        try box.set("a", "1", Array("uno".utf8))
        let run = try box.run(["verify"])
        #expect(run.status == Exit.ok, "\(run)")
        #expect(run.out.contains("3 records") && run.out.contains("2 items"), "\(run)")
    }

    @Test("info shows format, KDF, items and size")
    func info() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("a", "1", Array("one".utf8))
        let run = try box.run(["info"])
        #expect(run.status == Exit.ok, "\(run)")
        for word in ["format", "version 1", "passphrase", "Argon2id", "items", "file size"] {
            #expect(run.out.contains(word), "missing \(word): \(run)")
        }
    }

    @Test("compact drops superseded records and keeps every item")
    func compact() throws {
        let box = try Sandbox()
        try box.initVault()
        for round in 0..<20 {
            try box.set("svc", "acct", Array("value-\(round)-\(String(repeating: "x", count: 200))".utf8))
        }
        try box.set("svc", "other", Array("kept".utf8))
        let before = try box.dataEnd()
        let run = try box.run(["compact"])
        #expect(run.status == Exit.ok, "\(run)")
        let after = try box.dataEnd()
        #expect(after < before, "\(after) ≥ \(before)")
        #expect(
            try box.run(["get", "svc", "acct"]).printed(Array("value-19-\(String(repeating: "x", count: 200))".utf8)))
        #expect(try box.run(["get", "svc", "other"]).printed(Array("kept".utf8)))
        #expect(try box.run(["verify"]).out.contains("2 records"))
    }

    @Test("a key file unlocks; init writes a new one (0600); another key is exit 4")
    func keyFile() throws {
        let box = try Sandbox()
        let key = box.path + "/vault.key"
        let made = try box.run(["--key-file", key, "init"], passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        var status = stat()
        #expect(stat(key, &status) == 0 && status.st_size == 32 && status.st_mode & 0o777 == 0o600)
        let set = try box.run(["--key-file", key, "set", "svc", "acct"], stdin: Array("k".utf8), passphraseFile: false)
        #expect(set.status == Exit.ok, "\(set)")
        #expect(try box.run(["--key-file", key, "get", "svc", "acct"], passphraseFile: false).printed(Array("k".utf8)))

        let other = box.path + "/other.key"
        try box.write((0..<32).map { UInt8($0) }, to: other)
        let wrong = try box.run(["--key-file", other, "get", "svc", "acct"], passphraseFile: false)
        #expect(wrong.status == Exit.wrongKey, "\(wrong)")
        let missing = try box.run(["--key-file", box.path + "/nope.key", "get", "svc", "acct"], passphraseFile: false)
        #expect(missing.status == Exit.usage, "\(missing)")
    }

    @Test("a passphrase file loses exactly one trailing newline")
    func passphraseFileNewline() throws {
        let box = try Sandbox()
        try box.initVault()  // the file holds passphrase + "\n"
        let viaEnvironment = try box.run(
            ["list"], environment: ["COFFER_PASSPHRASE": box.passphrase], passphraseFile: false)
        #expect(viaEnvironment.status == Exit.ok, "\(viaEnvironment)")
        let twoNewlines = box.path + "/two"
        try box.write(box.passphrase + "\n\n", to: twoNewlines)
        let run = try box.run(["--passphrase-file", twoNewlines, "list"], passphraseFile: false)
        #expect(run.status == Exit.wrongKey, "\(run)")
        let bare = box.path + "/bare"
        try box.write(box.passphrase, to: bare)
        #expect(try box.run(["--passphrase-file", bare, "list"], passphraseFile: false).status == Exit.ok)
    }

    @Test("the vault path: --vault, else $COFFER_VAULT, else $XDG_DATA_HOME, else ~/.local/share")
    func vaultPath() throws {
        let box = try Sandbox()
        let fromEnvironment = box.path + "/env.coffer"
        #expect(try box.run(["init"], environment: ["COFFER_VAULT": fromEnvironment], vault: false).status == Exit.ok)
        #expect(FileManager.default.fileExists(atPath: fromEnvironment))

        let xdg = box.path + "/xdg"
        #expect(try box.run(["init"], environment: ["XDG_DATA_HOME": xdg], vault: false).status == Exit.ok)
        #expect(FileManager.default.fileExists(atPath: xdg + "/coffer/default.coffer"))

        #expect(try box.run(["init"], vault: false).status == Exit.ok)  // HOME is <sandbox>/home
        #expect(FileManager.default.fileExists(atPath: box.path + "/home/.local/share/coffer/default.coffer"))

        // --vault wins over the environment.
        let run = try box.run(["init"], environment: ["COFFER_VAULT": fromEnvironment])
        #expect(run.status == Exit.ok, "\(run)")
        #expect(FileManager.default.fileExists(atPath: box.vault))
    }

    @Test("set on a missing vault says to run coffer init")
    func setWithoutVault() throws {
        let box = try Sandbox()
        let run = try box.run(["set", "svc", "acct"], stdin: Array("x".utf8))
        #expect(run.status == Exit.failure, "\(run)")
        #expect(run.err.contains("coffer init"), "\(run)")
        #expect(!FileManager.default.fileExists(atPath: box.vault))
    }

    @Test("--help on every command, with examples; bench is listed")
    func help() throws {
        let box = try Sandbox()
        let root = try box.run(["--help"], vault: false, passphraseFile: false)
        #expect(root.status == Exit.ok)
        let commands = ["init", "set", "get", "list", "rm", "passwd", "verify", "info", "compact", "bench"]
        for command in commands {
            #expect(root.out.contains("  \(command) "), "coffer --help does not list \(command)")
            let help = try box.run([command, "--help"], vault: false, passphraseFile: false)
            #expect(help.status == Exit.ok, "\(help)")
            #expect(help.out.contains("Examples:") && help.out.contains("coffer \(command)"), "\(help)")
        }
    }
}

/// The terminal prompt, driven through a pseudo-terminal as a person would type.
@Suite("coffer on a terminal")
struct TerminalTests {
    /// Types `first` at init's passphrase prompt on `terminal`, and `second` at its repeat.
    static func answerInitPrompts(
        on terminal: PseudoTerminal, _ first: String, _ second: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(terminal.waitFor("Passphrase for the new vault"), sourceLocation: sourceLocation)
        terminal.type(first)
        #expect(terminal.waitFor("Repeat the passphrase"), sourceLocation: sourceLocation)
        terminal.type(second)
    }

    @Test("init asks twice, get once, set reads the secret — all without echo", .timeLimit(.minutes(10)))
    func promptsWithoutEcho() throws {
        let box = try Sandbox()
        let terminal = try PseudoTerminal()
        let initChild = try box.start(["init"], passphraseFile: false, terminal: terminal)
        Self.answerInitPrompts(on: terminal, box.passphrase, box.passphrase)
        let made = box.expectClean(initChild.wait())
        #expect(made.status == Exit.ok, "\(made)")
        terminal.drain()
        let echoed = terminal.transcript.firstRange(of: Array(box.passphrase.utf8)) != nil
        #expect(!echoed, "the passphrase was echoed on the terminal")

        try box.set("svc", "acct", Array("typed-secret".utf8))
        let second = try PseudoTerminal()
        let getChild = try box.start(["get", "svc", "acct"], passphraseFile: false, terminal: second)
        #expect(second.waitFor("Passphrase for \(box.vault)"))
        second.type(box.passphrase)
        let get = box.expectClean(getChild.wait())
        #expect(get.status == Exit.ok, "\(get)")
        #expect(get.printed(Array("typed-secret".utf8)))
        second.drain()
        #expect(second.transcript.firstRange(of: Array(box.passphrase.utf8)) == nil)

        // set on a terminal: the secret is typed without echo, up to Return.
        let fourth = try PseudoTerminal()
        let typed = "typed-" + UUID().uuidString
        let setChild = try box.start(["set", "svc", "typed"], terminal: fourth)
        #expect(fourth.waitFor("Secret for svc / typed"))
        fourth.type(typed)
        let set = box.expectClean(setChild.wait())
        #expect(set.status == Exit.ok, "\(set)")
        fourth.drain()
        #expect(fourth.transcript.firstRange(of: Array(typed.utf8)) == nil, "the secret was echoed")
        #expect(try box.run(["get", "svc", "typed"]).printed(Array(typed.utf8)))

        // Two different entries for init: nothing is created.
        let third = try PseudoTerminal()
        let other = box.path + "/other.coffer"
        let mismatch = try box.start(["--vault", other, "init"], vault: false, passphraseFile: false, terminal: third)
        Self.answerInitPrompts(on: third, box.passphrase, box.newPassphrase)
        let refused = box.expectClean(mismatch.wait())
        #expect(refused.status == Exit.failure, "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: other))
    }
}
