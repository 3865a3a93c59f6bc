import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What reaches coffer through argv and the environment, and what it prints back: names and
/// variables that are not UTF-8, empty or control-character names, long names, out-of-range
/// numbers, and a secret typed where an argument goes.
@Suite("coffer arguments, environment and names")
struct ArgumentTests {
    @Test("names that are not valid UTF-8 are refused (exit 2), never collapsed into one item")
    func nonUTF8NamesAreRefused() throws {
        let box = try Sandbox()
        try box.initVault()
        for bad: UInt8 in [0xFF, 0xFE] {
            let set = Array("set".utf8)
            let svc = Array("svc".utf8)
            let acct = Array("acct".utf8)
            let cases: [[[UInt8]]] = [
                [set, svc + [bad], acct],  // the case: svc\xff and svc\xfe
                [set, svc, acct + [bad]],
                [set, svc, acct, Array("--label".utf8), [0x6C, bad]],
            ]
            for raw in cases {
                let run = try box.run(["set", "<not UTF-8>"], rawArguments: raw, stdin: Array("one".utf8))
                #expect(run.status == Exit.usage, "\(run)")
                #expect(run.err.contains("not valid UTF-8"), "\(run)")
            }
        }
        // Nothing was stored: no item named svc\u{FFFD} (what both spellings used to become).
        let list = try box.run(["list", "--json"])
        #expect(list.status == Exit.ok, "\(list)")
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout)) as? [Any]
        #expect(rows?.isEmpty == true, "\(list)")
        // get with such a name is refused too, rather than finding svc\u{FFFD}.
        try box.set("svc\u{FFFD}", "acct", Array("replacement".utf8))
        let get = try box.run(
            ["get", "<not UTF-8>"], rawArguments: [Array("get".utf8), Array("svc".utf8) + [0xFF], Array("acct".utf8)])
        #expect(get.status == Exit.usage, "\(get)")
        #expect(get.stdout.isEmpty)
    }

    @Test("a stray argument (a secret typed in the wrong place) is not echoed in the usage error")
    func strayArgumentIsNotEchoed() throws {
        let box = try Sandbox()
        try box.initVault()
        let token = "ghp_" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        for arguments in [
            ["set", "svc", "acct", token], ["get", "svc", "acct", token],
            ["set", "svc", "acct", "--label", "l", token],
            [token], ["set", "svc", "acct", "--kdf=\(token)"], ["init", "--kdf", token],
        ] {
            let run = try box.run(arguments, stdin: Array("x".utf8))
            #expect(run.status == Exit.usage, "exit \(run.status) for \(arguments.count) arguments")
            let leaked =
                run.stderr.firstRange(of: Array(token.utf8)) != nil
                || run.stdout.firstRange(of: Array(token.utf8)) != nil
            #expect(!leaked, "the stray argument was echoed (\(arguments.count) arguments)")
            #expect(run.err.hasPrefix("coffer: "))
        }
        // Still says what was wrong, by position.
        let run = try box.run(["set", "svc", "acct", token], stdin: Array("x".utf8))
        #expect(run.err.contains("<argument 8>"), "\(run.err.count) bytes")  // after --vault V --passphrase-file P
    }

    @Test("an empty service or account is a usage error (exit 2) in every command")
    func emptyNamesAreUsageErrors() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("v".utf8))
        let cases: [[String]] = [
            ["get", "svc", ""], ["get", "", "acct"], ["rm", "svc", ""], ["rm", "", "acct"], ["set", "svc", ""],
            ["set", "", "acct"], ["list", ""],
        ]
        for arguments in cases {
            let run = try box.run(arguments, stdin: Array("x".utf8))
            #expect(run.status == Exit.usage, "\(run)")
            #expect(run.err.contains("must not be empty"), "\(run)")
        }
        #expect(try box.run(["get", "svc", "acct"]).printed(Array("v".utf8)))
    }

    @Test("list --json gives dates with their milliseconds")
    func jsonDatesKeepMilliseconds() throws {
        let box = try Sandbox()
        try box.initVault()
        let before = Date()
        try box.set("svc", "acct", Array("v".utf8))
        let after = Date()
        let run = try box.run(["list", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout)) as? [[String: Any]])
        let created = try #require(rows.first?["created"] as? String)
        let modified = try #require(rows.first?["modified"] as? String)
        #expect(created.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil, "\(created)")
        #expect(modified == created)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let date = try #require(formatter.date(from: created))
        // To the millisecond: within the window the item was written in.
        #expect(date.timeIntervalSince(before) >= -0.001 && after.timeIntervalSince(date) >= -0.001, "\(created)")
    }

    @Test("an empty standard input stores an empty secret")
    func emptySecretFromStandardInput() throws {
        let box = try Sandbox()
        try box.initVault()
        let set = try box.run(["set", "svc", "empty"], stdin: [])
        #expect(set.status == Exit.ok, "\(set)")
        #expect(set.out.contains("0 bytes"), "\(set)")
        let get = try box.run(["get", "svc", "empty"])
        #expect(get.status == Exit.ok, "\(get)")
        #expect(get.stdout.isEmpty)
        let list = try box.run(["list", "--json"])
        #expect(list.out.contains("\"empty\""), "\(list)")
    }

    @Test("an empty line at the prompt is refused, with a shell-quoted hint", .timeLimit(.minutes(10)))
    func emptyLineAtPromptIsRefused() throws {
        let box = try Sandbox()
        try box.initVault()
        let terminal = try PseudoTerminal()
        let service = "$(touch pwned)"
        let child = try box.start(["set", service, "it's"], terminal: terminal)
        #expect(terminal.waitFor("Secret for"))
        terminal.type("")
        let run = box.expectClean(child.wait())
        #expect(run.status == Exit.usage, "\(run)")
        #expect(run.err.contains("coffer set '$(touch pwned)' 'it'\\''s'"), "\(run)")
        #expect(!run.err.contains(" $(touch pwned) "), "\(run)")
    }

    @Test("names with control characters are escaped, not sent to the terminal")
    func controlCharactersAreEscaped() throws {
        let box = try Sandbox()
        try box.initVault()
        let evil = "evil\u{1B}]0;pwned\u{07}\u{1B}[2J"
        let set = try box.run(["set", evil, "u\u{9B}31m", "--label", "l\u{202E}x"], stdin: Array("v".utf8))
        #expect(set.status == Exit.ok, "\(set)")
        let list = try box.run(["list"])
        #expect(list.status == Exit.ok, "\(list)")
        for output in [set, list] {
            #expect(!output.stdout.contains(0x1B) && !output.stdout.contains(0x07), "\(output)")
            #expect(output.stdout.firstRange(of: [0xC2, 0x9B]) == nil, "8-bit CSI passed through: \(output)")
            #expect(output.stdout.firstRange(of: Array("\u{202E}".utf8)) == nil, "\(output)")
            #expect(output.out.contains("$'evil\\033]0;pwned\\007\\033[2J'"), "\(output)")
            #expect(output.out.contains("$'u\\302\\23331m'"), "\(output)")
        }
        #expect(list.out.contains("$'l\\342\\200\\256x'"), "\(list)")
        // Error messages too (the account does not exist).
        let missing = try box.run(["get", evil, "nobody"])
        #expect(missing.status == Exit.notFound, "\(missing)")
        #expect(!missing.stderr.contains(0x1B) && !missing.stderr.contains(0x07), "\(missing)")
        // JSON keeps the name exactly (escaped as JSON).
        let json = try box.run(["list", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]])
        #expect(rows.first?["service"] as? String == evil)
        #expect(!json.stdout.contains(0x1B))
        // A plain name is printed as it is.
        try box.set("plain name", "acct", Array("v".utf8))
        #expect(try box.run(["list", "plain name"]).out.contains("plain name  acct"))
    }

    @Test("list cuts long names instead of padding every row to them; --json keeps them whole")
    func longNamesAreCutInTheTable() throws {
        let box = try Sandbox()
        try box.initVault()
        // 200 characters: well past the 40-character cell, well within any name-length limit.
        let long = String(repeating: "s", count: 200)
        try box.set(long, "acct", Array("v".utf8))
        try box.set("short", "acct", Array("v".utf8))
        let list = try box.run(["list"])
        #expect(list.status == Exit.ok, "\(list.status)")
        let lines = list.out.split(separator: "\n")
        #expect(lines.count == 3)
        for line in lines { #expect(line.count <= 40 + 2 + 7 + 2 + 5 + 2 + 16, "a line of \(line.count) characters") }
        #expect(list.out.contains(String(repeating: "s", count: 39) + "…"))
        let json = try box.run(["list", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]])
        #expect(rows.contains { $0["service"] as? String == long })
    }

    @Test("COFFER_VAULT, HOME or COFFER_LOCK_TIMEOUT that is not UTF-8 is a usage error")
    func environmentMustBeUTF8() throws {
        let box = try Sandbox()
        try box.initVault()
        for name in ["COFFER_VAULT", "HOME", "XDG_DATA_HOME", "COFFER_LOCK_TIMEOUT"] {
            var environment = box.baseEnvironment
            environment[name] = nil
            let child = try Child(
                ["list"], environment: environment, rawEnvironment: [Array("\(name)=/tmp/v".utf8) + [0xFF]], stdin: nil)
            let run = box.expectClean(child.wait())
            #expect(run.status == Exit.usage, "\(name): \(run)")
            #expect(run.err.contains("\(name) is not valid UTF-8"), "\(run)")
        }
    }

    @Test("COFFER_LOCK_TIMEOUT out of range is a usage error, never a crash")
    func lockTimeoutIsValidated() throws {
        let box = try Sandbox()
        try box.initVault()
        for value in ["1e10", "1e308", "86401", "9223372037", "inf", "nan", "-1", "", "5s"] {
            let run = try box.run(["list"], environment: ["COFFER_LOCK_TIMEOUT": value])
            #expect(run.status == Exit.usage, "COFFER_LOCK_TIMEOUT=\(value): \(run)")
            #expect(run.err.contains("COFFER_LOCK_TIMEOUT"), "\(run)")
        }
        for value in ["86400", "0", "0.25"] {
            let run = try box.run(["list"], environment: ["COFFER_LOCK_TIMEOUT": value])
            #expect(run.status == Exit.ok, "COFFER_LOCK_TIMEOUT=\(value): \(run)")
        }
        // A set that must wait uses the timeout too (the value the library converts).
        let set = try box.run(["set", "a", "b"], stdin: [1], environment: ["COFFER_LOCK_TIMEOUT": "1e308"])
        #expect(set.status == Exit.usage, "\(set)")
    }
}
