import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// `coffer` run as git-credential-coffer and docker-credential-coffer (links to the binary, as
// `make install` makes them). The git tests drive the installed `git credential fill/approve/
// reject`, which runs the helper as it does in use; the docker tests speak docker's protocol
// to the helper directly. Every child is in a new session: no terminal, so never a prompt.

/// A sandbox vault, and a folder of links named as git and docker look for the helpers.
struct HelperBox {
    let box: Sandbox
    var bin: String { box.path + "/bin" }

    init() throws {
        box = try Sandbox()
        try box.initVault()
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: box.path + "/home", withIntermediateDirectories: true)
        for name in ["git-credential-coffer", "docker-credential-coffer"] {
            try FileManager.default.createSymbolicLink(atPath: bin + "/" + name, withDestinationPath: cofferPath)
        }
    }

    /// The helpers on PATH, the vault and its passphrase in the environment (`unlocked: false`:
    /// no passphrase), git's own configuration and prompts out of the way.
    func environment(unlocked: Bool = true) -> [String: String] {
        var environment = box.baseEnvironment
        environment["PATH"] = bin + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["COFFER_VAULT"] = box.vault
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        if unlocked { environment["COFFER_PASSPHRASE"] = box.passphrase }
        return environment
    }

    /// `git [config…] credential <action>` with `input` on standard input.
    func git(_ action: String, _ input: String, config: [String] = [], unlocked: Bool = true) throws -> Run {
        let arguments = ["-c", "credential.helper=coffer"] + config.flatMap { ["-c", $0] } + ["credential", action]
        return checked(
            try Child(
                arguments, environment: environment(unlocked: unlocked), stdin: Array(input.utf8), program: "/usr/bin/git"
            ).wait(timeout: 20))
    }

    /// `run`, checked not to have hung nor to show the vault's passphrase, and redacting it.
    func checked(_ run: Run, sourceLocation: SourceLocation = #_sourceLocation) -> Run {
        var run = run
        run.redactions = [Array(box.passphrase.utf8)]
        let passphrase = Array(box.passphrase.utf8)
        #expect(!run.timedOut, "timed out: \(run)", sourceLocation: sourceLocation)
        let leaked = run.stdout.firstRange(of: passphrase) != nil || run.stderr.firstRange(of: passphrase) != nil
        #expect(!leaked, "the passphrase appears in the output of \(run.arguments)", sourceLocation: sourceLocation)
        return run
    }

    /// A helper run directly: `name` (git-credential-coffer or docker-credential-coffer) `arguments`.
    func helper(_ name: String, _ arguments: [String], _ input: [UInt8], unlocked: Bool = true) throws -> Run {
        checked(
            try Child(arguments, environment: environment(unlocked: unlocked), stdin: input, program: bin + "/" + name)
                .wait(timeout: 20))
    }

    /// `coffer list --json`: [service, account] pairs.
    func items() throws -> [[String]] {
        let run = try box.run(["list", "--json"])
        let rows = try JSONSerialization.jsonObject(with: Data(run.stdout)) as? [[String: Any]] ?? []
        return rows.map { [$0["service"] as? String ?? "", $0["account"] as? String ?? ""] }
    }
}

@Suite("git-credential-coffer: git's credential helper protocol")
struct GitCredentialHelperTests {
    @Test("git credential approve/fill/reject through the helper: users apart, useHttpPath, erase by host", .timeLimit(.minutes(10)))
    func gitRoundTrip() throws {
        let helper = try HelperBox()
        for (user, password) in [("alice", "pw-alice-1"), ("bob", "pw-bob-2")] {
            let approved = try helper.git("approve", "protocol=https\nhost=example.com\nusername=\(user)\npassword=\(password)\n")
            #expect(approved.status == 0, "\(approved)")
        }
        // Two users of one host stay apart, and `coffer list` shows what each item is.
        for (user, password) in [("alice", "pw-alice-1"), ("bob", "pw-bob-2")] {
            let filled = try helper.git("fill", "protocol=https\nhost=example.com\nusername=\(user)\n")
            #expect(filled.status == 0 && filled.out.contains("username=\(user)\npassword=\(password)\n"), "\(filled)")
        }
        #expect(try helper.items() == [["git:https://example.com", "alice"], ["git:https://example.com", "bob"]])

        // credential.useHttpPath: git sends the path, and only that path's item answers.
        let path = ["credential.useHttpPath=true"]
        let stored = try helper.git(
            "approve", "protocol=https\nhost=git.example.org\npath=team/one.git\nusername=carol\npassword=pw-one\n", config: path)
        #expect(stored.status == 0, "\(stored)")
        let same = try helper.git("fill", "url=https://git.example.org/team/one.git\n", config: path)
        #expect(same.status == 0 && same.out.contains("username=carol\npassword=pw-one\n"), "\(same)")
        // Another path finds nothing: git falls back to its prompt, which is disabled here.
        let other = try helper.git("fill", "url=https://git.example.org/team/two.git\n", config: path)
        #expect(other.status != 0 && !other.out.contains("pw-one"), "\(other)")
        #expect(try helper.items().contains(["git:https://git.example.org/team/one.git", "carol"]))

        // A reject naming the host alone erases every user of it, and nothing else.
        let rejected = try helper.git("reject", "protocol=https\nhost=example.com\n")
        #expect(rejected.status == 0, "\(rejected)")
        #expect(try helper.items() == [["git:https://git.example.org/team/one.git", "carol"]])
        let gone = try helper.git("fill", "protocol=https\nhost=example.com\nusername=alice\n")
        #expect(gone.status != 0 && !gone.out.contains("pw-alice"), "\(gone)")
    }

    @Test("The helper's options in credential.helper ('coffer --vault … --passphrase-file …') choose and unlock the vault", .timeLimit(.minutes(10)))
    func helperOptions() throws {
        let helper = try HelperBox()
        let configured = "credential.helper=coffer --vault \(helper.box.vault) --passphrase-file \(helper.box.passphraseFile)"
        // The first, empty helper entry resets the list, so only the configured one runs.
        let config = ["credential.helper=", configured]
        let approved = try helper.git("approve", "protocol=https\nhost=h.test\nusername=u\npassword=pw-options\n", config: config, unlocked: false)
        #expect(approved.status == 0, "\(approved)")
        let filled = try helper.git("fill", "protocol=https\nhost=h.test\n", config: config, unlocked: false)
        #expect(filled.status == 0 && filled.out.contains("username=u\npassword=pw-options\n"), "\(filled)")
    }

    @Test("A locked vault with no terminal and nothing to unlock it: get answers nothing at once, store changes nothing", .timeLimit(.minutes(10)))
    func lockedAnswersNothing() throws {
        let helper = try HelperBox()
        try helper.box.set("git:https://locked.test", "u", Array("pw-locked".utf8))
        let get = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nhost=locked.test\n".utf8), unlocked: false)
        #expect(get.status == 0 && get.stdout.isEmpty && get.err.contains("locked"), "\(get)")
        // Through git: the helper says nothing, so git goes on to its prompt (disabled here: fails).
        let fill = try helper.git("fill", "protocol=https\nhost=locked.test\n", unlocked: false)
        #expect(fill.status != 0 && !fill.out.contains("pw-locked") && fill.err.contains("terminal prompts disabled"), "\(fill)")
        let store = try helper.helper(
            "git-credential-coffer", ["store"], Array("protocol=https\nhost=new.test\nusername=u\npassword=p\n".utf8), unlocked: false)
        #expect(store.status != 0 && store.err.contains("locked"), "\(store)")
        #expect(try helper.items() == [["git:https://locked.test", "u"]])
    }

    @Test("password_expiry_utc and oauth_refresh_token are kept and returned; an empty user name and password too", .timeLimit(.minutes(10)))
    func extraAttributes() throws {
        let helper = try HelperBox()
        let request = "protocol=https\nhost=oauth.test\nusername=o\npassword=pw-oauth\npassword_expiry_utc=1999999999\noauth_refresh_token=rt-secret\nwwwauth[]=Basic\n"
        let store = try helper.helper("git-credential-coffer", ["store"], Array(request.utf8))
        #expect(store.status == 0, "\(store)")
        let get = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nhost=oauth.test\n".utf8))
        #expect(
            get.out == "username=o\npassword=pw-oauth\npassword_expiry_utc=1999999999\noauth_refresh_token=rt-secret\n",
            "\(get)")
        // The item's secret begins with the password, so `coffer get` of a plain credential is it.
        #expect(try helper.box.run(["get", "git:https://oauth.test", "o"]).out.hasPrefix("pw-oauth\n"))

        let empty = try helper.git("approve", "protocol=https\nhost=sso.test\nusername=\npassword=\n")
        #expect(empty.status == 0, "\(empty)")
        let filled = try helper.git("fill", "protocol=https\nhost=sso.test\n")
        #expect(filled.status == 0 && filled.out.hasSuffix("username=\npassword=\n"), "\(filled)")
        #expect(try helper.items().contains(["git:https://sso.test", "%"]))
    }

    @Test("An item not written by the helper cannot add lines to git's answer: only the password and the kept attributes", .timeLimit(.minutes(10)))
    func answerCarriesNoInjectedLines() throws {
        let helper = try HelperBox()
        // A secret with lines git would obey (quit, another host) besides a kept attribute.
        let secret = "pw-first\nquit=1\nhost=evil.test\npassword_expiry_utc=1999999999\nusername=mallory\n"
        let set = try helper.box.run(["set", "git:https://inject.test", "u"], stdin: Array(secret.utf8))
        #expect(set.status == 0, "\(set)")
        let get = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nhost=inject.test\n".utf8))
        #expect(get.status == 0 && get.out == "username=u\npassword=pw-first\npassword_expiry_utc=1999999999\n", "\(get)")
        // A user name with a line break (possible through `coffer set`) is passed over.
        let named = try helper.box.run(["set", "git:https://names.test", "u\nhost=evil.test"], stdin: Array("pw".utf8))
        #expect(named.status == 0, "\(named)")
        let none = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nhost=names.test\n".utf8))
        #expect(none.status == 0 && none.out.isEmpty, "\(none)")
        let filled = try helper.git("fill", "protocol=https\nhost=inject.test\n")
        #expect(filled.status == 0 && filled.out.contains("host=inject.test\n") && !filled.out.contains("evil"), "\(filled)")
    }

    @Test("User names compare by their bytes, a url= is refused, a stored CRLF line answers without its CR", .timeLimit(.minutes(10)))
    func bytesURLAndCR() throws {
        let helper = try HelperBox()
        // josé with U+00E9, then asked for as e + U+0301: another user, as git compares.
        let composed = try helper.git("approve", "protocol=https\nhost=names.test\nusername=jos\u{E9}\npassword=pw-nfc\n")
        #expect(composed.status == 0, "\(composed)")
        let decomposed = try helper.helper(
            "git-credential-coffer", ["get"], Array("protocol=https\nhost=names.test\nusername=jose\u{301}\n".utf8))
        #expect(decomposed.status == 0 && decomposed.out.isEmpty, "\(decomposed)")
        let erase = try helper.helper(
            "git-credential-coffer", ["erase"], Array("protocol=https\nhost=names.test\nusername=jose\u{301}\n".utf8))
        #expect(erase.status == 0, "\(erase)")
        #expect(try helper.items().contains(["git:https://names.test", "jos\u{E9}"]))
        // url= would widen a match to every host of the protocol: refused, nothing answered.
        let url = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nurl=https://other.test\n".utf8))
        #expect(url.status == 2 && url.out.isEmpty && url.err.contains("url="), "\(url)")
        // A secret set from a CRLF file: git gets the password without the CR.
        let set = try helper.box.run(["set", "git:https://crlf.test", "u"], stdin: Array("pw-crlf\r\n".utf8))
        #expect(set.status == 0, "\(set)")
        let get = try helper.helper("git-credential-coffer", ["get"], Array("protocol=https\nhost=crlf.test\n".utf8))
        #expect(get.status == 0 && get.out == "username=u\npassword=pw-crlf\n", "\(get)")
    }

    @Test("GIT_TERMINAL_PROMPT=0: a locked vault with a terminal is not asked for, get answers nothing at once", .timeLimit(.minutes(10)))
    func noPromptUnderGitTerminalPromptZero() throws {
        let helper = try HelperBox()
        let terminal = try PseudoTerminal()
        var environment = helper.environment(unlocked: false)
        environment["GIT_TERMINAL_PROMPT"] = "0"
        // The terminal is the helper's standard input too: the request is typed there, and a
        // blank line ends it.
        let child = try Child(
            ["get"], environment: environment, stdin: nil, terminal: terminal.devicePath,
            program: helper.bin + "/git-credential-coffer")
        for line in ["protocol=https", "host=prompt.test", ""] { terminal.type(line) }
        let run = helper.checked(child.wait(timeout: 20))
        #expect(run.status == 0 && run.out.isEmpty && run.err.contains("nothing answered"), "\(run)")
        terminal.drain()
        #expect(terminal.transcript.firstRange(of: Array("Passphrase".utf8)) == nil, "a prompt reached the terminal")
    }

    @Test("erase with a password removes only the items holding it", .timeLimit(.minutes(10)))
    func eraseMatchesPassword() throws {
        let helper = try HelperBox()
        for user in ["a", "b"] {
            let store = try helper.helper(
                "git-credential-coffer", ["store"], Array("protocol=https\nhost=e.test\nusername=\(user)\npassword=pw-\(user)\n".utf8))
            #expect(store.status == 0, "\(store)")
        }
        let erase = try helper.helper("git-credential-coffer", ["erase"], Array("protocol=https\nhost=e.test\npassword=pw-b\n".utf8))
        #expect(erase.status == 0, "\(erase)")
        #expect(try helper.items() == [["git:https://e.test", "a"]])
    }

    @Test("Bad requests (no '=', a NUL byte, not UTF-8, too large, no protocol, store without a password) get a clear error and change nothing", .timeLimit(.minutes(10)))
    func badRequests() throws {
        let helper = try HelperBox()
        try helper.box.set("git:https://keep.test", "u", Array("pw-keep".utf8))
        let before = try helper.items()
        let large = Array("protocol=https\nhost=keep.test\npath=".utf8) + [UInt8](repeating: 0x61, count: 70_000) + [10]
        let cases: [(String, [UInt8], String)] = [
            ("erase", Array("protocol=https\nhost=keep.test\npw-keep-not-a-line\n".utf8), "not key=value"),
            ("erase", Array("protocol=https\nhost=keep.test\0\n".utf8), "NUL"),
            ("erase", Array("protocol=https\nhost=keep".utf8) + [0xFF, 10], "not UTF-8"),
            ("erase", large, "larger than 64 KiB"),
            ("erase", Array("host=keep.test\n".utf8), "no protocol"),
            ("store", Array("protocol=https\nhost=keep.test\nusername=u\n".utf8), "needs protocol, username and password"),
        ]
        for (operation, input, expected) in cases {
            let run = try helper.helper("git-credential-coffer", [operation], input)
            #expect(run.status == 2 && run.err.hasPrefix("coffer: ") && run.err.contains(expected), "\(run)")
            #expect(!run.err.contains("pw-keep"), "the error shows the request: \(run)")
        }
        #expect(try helper.items() == before)
        #expect(try helper.box.run(["get", "git:https://keep.test", "u"]).out == "pw-keep")
        // An operation git may add later is ignored, as gitcredentials(7) asks.
        let unknown = try helper.helper("git-credential-coffer", ["capability"], [])
        #expect(unknown.status == 0 && unknown.stdout.isEmpty, "\(unknown)")
    }

    @Test("install.sh links git-credential-coffer and docker-credential-coffer to coffer; the manual page says how to set them up", .timeLimit(.minutes(10)))
    func installLinks() throws {
        let box = try Sandbox()
        let prefix = box.path + "/prefix"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/install.sh").path
        let run = try Child([cofferPath, prefix], environment: box.baseEnvironment, stdin: nil, program: script).wait(timeout: 120)
        #expect(run.status == 0, "\(run)")
        for name in ["git-credential-coffer", "docker-credential-coffer"] {
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: prefix + "/bin/" + name)) == "coffer", "\(name)")
        }
        let page = try String(contentsOfFile: prefix + "/share/man/man1/coffer.1", encoding: .utf8)
        #expect(page.contains("credential.helper coffer") && page.contains("credsStore"))
    }
}

@Suite("docker-credential-coffer: docker's credential helper protocol")
struct DockerCredentialHelperTests {
    static let missing = "credentials not found in native keychain\n"

    @Test("store, get, list, a second login replacing the first, erase; a missing login answers docker's exact message", .timeLimit(.minutes(10)))
    func dockerRoundTrip() throws {
        let helper = try HelperBox()
        let url = "https://registry.example.com/v1/"
        func store(_ user: String, _ secret: String) throws {
            let json = #"{"ServerURL":"\#(url)","Username":"\#(user)","Secret":"\#(secret)"}"#
            let run = try helper.helper("docker-credential-coffer", ["store"], Array(json.utf8))
            #expect(run.status == 0 && run.stdout.isEmpty, "\(run)")
        }
        try store("first", "tok-first")
        try store("second", "tok-second")
        let get = try helper.helper("docker-credential-coffer", ["get"], Array((url + "\n").utf8))
        #expect(get.status == 0, "\(get)")
        let answer = try JSONSerialization.jsonObject(with: Data(get.stdout)) as? [String: String]
        #expect(answer == ["ServerURL": url, "Username": "second", "Secret": "tok-second"])
        let list = try helper.helper("docker-credential-coffer", ["list"], [])
        #expect((try JSONSerialization.jsonObject(with: Data(list.stdout)) as? [String: String]) == [url: "second"], "\(list)")
        #expect(try helper.items() == [["docker:" + url, "second"]])

        let erase = try helper.helper("docker-credential-coffer", ["erase"], Array(url.utf8))
        #expect(erase.status == 0, "\(erase)")
        for action in ["get", "erase"] {
            let run = try helper.helper("docker-credential-coffer", [action], Array(url.utf8))
            #expect(run.status == 1 && run.out == Self.missing, "\(run)")
        }
        // Locked, without a terminal: get says "not found" at once, so docker goes on without a login.
        try store("third", "tok-third")
        let locked = try helper.helper("docker-credential-coffer", ["get"], Array(url.utf8), unlocked: false)
        #expect(locked.status == 1 && locked.out == Self.missing, "\(locked)")
    }

    @Test("A server URL with spaces around it is stored as get and erase read it; a user name with a control character is refused; get and list agree on the latest login", .timeLimit(.minutes(10)))
    func trimmedURLsControlNamesAndLatestLogin() throws {
        let helper = try HelperBox()
        let spaced = #"{"ServerURL": "  https://spaced.test  ", "Username": "u", "Secret": "s-1"}"#
        let store = try helper.helper("docker-credential-coffer", ["store"], Array(spaced.utf8))
        #expect(store.status == 0, "\(store)")
        let get = try helper.helper("docker-credential-coffer", ["get"], Array("https://spaced.test\n".utf8))
        #expect(get.status == 0 && get.out.contains(#""Secret":"s-1""#), "\(get)")
        let erase = try helper.helper("docker-credential-coffer", ["erase"], Array(" https://spaced.test ".utf8))
        #expect(erase.status == 0, "\(erase)")
        #expect(try helper.items().filter { $0[0].hasPrefix("docker:") }.isEmpty)

        let control = #"{"ServerURL": "https://c.test", "Username": "u\u001b[31m", "Secret": "s"}"#
        let refused = try helper.helper("docker-credential-coffer", ["store"], Array(control.utf8))
        #expect(refused.status != 0 && refused.out.contains("control character"), "\(refused)")
        #expect(try helper.items().filter { $0[0].hasPrefix("docker:") }.isEmpty)

        // Two logins left for one server (two docker logins that raced): the latest answers.
        try helper.box.set("docker:https://race.test", "older", Array("s-old".utf8))
        try helper.box.set("docker:https://race.test", "newer", Array("s-new".utf8))
        let latest = try helper.helper("docker-credential-coffer", ["get"], Array("https://race.test".utf8))
        #expect(latest.status == 0 && latest.out.contains(#""Username":"newer""#), "\(latest)")
        let list = try helper.helper("docker-credential-coffer", ["list"], [])
        #expect(list.status == 0 && list.out.contains(#""https://race.test":"newer""#), "\(list)")
    }

    @Test("Bad requests (not JSON, missing fields, a NUL byte, too large, a URL of two lines) get a clear error and change nothing", .timeLimit(.minutes(10)))
    func badRequests() throws {
        let helper = try HelperBox()
        let keep = #"{"ServerURL":"keep.test","Username":"u","Secret":"tok-keep"}"#
        #expect(try helper.helper("docker-credential-coffer", ["store"], Array(keep.utf8)).status == 0)
        let cases: [(String, [UInt8], String)] = [
            ("store", Array(#"{"ServerURL":"keep.test","Username":"u","Secret":"tok-new""#.utf8), "not a JSON object"),
            ("store", Array(#"{"Username":"u","Secret":"tok-new"}"#.utf8), "no credentials server URL"),
            ("store", Array(#"{"ServerURL":"keep.test","Secret":"tok-new"}"#.utf8), "no credentials username"),
            ("store", Array(#"{"ServerURL":"keep.test","Username":"u"}"#.utf8), "no Secret"),
            ("store", Array(#"{"ServerURL":"keep.test","Username":"v","Secret":"tok-new"}"#.utf8) + [0], "NUL"),
            ("store", [UInt8](repeating: 0x20, count: 70_000), "larger than 64 KiB"),
            ("erase", Array("keep.test\nother.test\n".utf8), "control character"),
            ("erase", [], "no credentials server URL"),
            ("frobnicate", [], "unknown action"),
        ]
        for (action, input, expected) in cases {
            let run = try helper.helper("docker-credential-coffer", [action], input)
            #expect(run.status != 0 && run.out.contains(expected) && !run.out.contains("tok-"), "\(run)")
        }
        #expect(try helper.items() == [["docker:keep.test", "u"]])
        let get = try helper.helper("docker-credential-coffer", ["get"], Array("keep.test".utf8))
        #expect(get.out.contains(#""Secret":"tok-keep""#), "\(get)")
    }
}
