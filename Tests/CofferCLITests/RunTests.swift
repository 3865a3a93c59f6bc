import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer run`: real programs (`sh`, `env`, `python3`) started with secrets in their
/// environment and nowhere else, their output masked, their signals and status passed through,
/// restarted by `--watch`.
@Suite("coffer run")
struct RunTests {
    /// A random secret, so finding it anywhere means it leaked there.
    static func secret(_ tag: String) -> [UInt8] { Array("\(tag)-\(UUID().uuidString)".utf8) }

    /// Polls `condition` every 20 ms until it holds or `seconds` pass (a generous bound, never a
    /// speed asserted).
    static func eventually(_ seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date() + seconds
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        return try condition()
    }

    /// Waits for a `coffer run` started with `box.start`: it did not hang, and no passphrase is
    /// in its output. (Not ``Sandbox/expectClean(_:sourceLocation:)``: a child's own failure
    /// status comes with the child's own standard error, not a `coffer: ` line.)
    static func settled(
        _ box: Sandbox, _ child: Child, timeout: Double = 120, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Run {
        var run = child.wait(timeout: timeout)
        run.redactions = [Array(box.passphrase.utf8), Array(box.newPassphrase.utf8)] + box.secrets
        #expect(!run.timedOut, "timed out: \(run)", sourceLocation: sourceLocation)
        for passphrase in run.redactions.prefix(2) {
            let leaked = run.stdout.firstRange(of: passphrase) != nil || run.stderr.firstRange(of: passphrase) != nil
            #expect(!leaked, "a passphrase appears in the output", sourceLocation: sourceLocation)
        }
        return run
    }

    /// A file's bytes, or `nil` when it cannot be read.
    static func contents(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) }
    }

    /// A `python3 -c` program's arguments.
    static func python(_ program: String, _ arguments: String...) -> [String] {
        ["python3", "-c", program] + arguments
    }

    /// `coffer … run …` as a long-running child whose output the test reads as it arrives.
    static func startLive(_ box: Sandbox, _ arguments: [String], environment: [String: String] = [:]) throws -> HelperChild {
        var env = box.baseEnvironment
        for (key, value) in environment { env[key] = value }
        return try HelperChild(
            ["--vault", box.vault, "--passphrase-file", box.passphraseFile] + arguments,
            executable: URL(fileURLWithPath: cofferPath), environment: env, inheritsEnvironment: false,
            standardError: .capture)
    }

    /// The processes whose environment or command line holds `marker` (this user's, as `/proc` shows them).
    static func processes(holding marker: String) -> [pid_t] {
        let needle = Array(marker.utf8)
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid_t($0) }.filter { pid in
            pid != getpid()
                && ["environ", "cmdline"].contains { contents("/proc/\(pid)/\($0)")?.firstRange(of: needle) != nil }
        }
    }

    /// Every regular file under `directory`, recursively.
    static func files(under directory: String) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: directory)
        var found: [String] = []
        while let name = enumerator?.nextObject() as? String {
            var status = stat()
            let path = directory + "/" + name
            if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG { found.append(path) }
        }
        return found
    }

    @Test(
        "The secret reaches the child's environment, and not its argv, coffer's argv or environment, a file, or any output",
        .timeLimit(.minutes(10)))
    func secretOnlyInEnvironment() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Self.secret("only-env")
        try box.set("db.internal", "app", secret)
        let scratch = box.path + "/tmp"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false)
        let (pidFile, valueFile, go) = (box.path + "/child.pid", box.path + "/child.value", box.path + "/go")
        let program = """
            import os, sys, time
            open(sys.argv[2], "wb").write(os.environb[b"DB_PASSWORD"])
            open(sys.argv[1], "w").write(str(os.getpid()))
            deadline = time.time() + 120
            while not os.path.exists(sys.argv[3]) and time.time() < deadline: time.sleep(0.02)
            """
        let child = try box.start(
            ["run", "--env", "DB_PASSWORD=coffer://db.internal/app", "--"] + Self.python(program, pidFile, valueFile, go),
            environment: ["TMPDIR": scratch])
        #expect(Self.eventually { Self.contents(pidFile).map { !$0.isEmpty } ?? false }, "the child never started")
        let childPID = Self.contents(pidFile).map { String(decoding: $0, as: UTF8.self) } ?? "?"
        // While both run: the child's argv, coffer's argv and coffer's environment hold no secret.
        let childArguments = Self.contents("/proc/\(childPID)/cmdline")
        #expect(childArguments != nil && childArguments!.firstRange(of: secret) == nil, "in the child's /proc/PID/cmdline")
        let cofferArguments = Self.contents("/proc/\(child.pid)/cmdline")
        #expect(cofferArguments != nil && cofferArguments!.firstRange(of: secret) == nil, "in coffer's /proc/PID/cmdline")
        let cofferEnvironment = Self.contents("/proc/\(child.pid)/environ") ?? []
        #expect(cofferEnvironment.firstRange(of: secret) == nil, "in coffer's /proc/PID/environ")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let run = Self.settled(box, child)
        #expect(run.status == Exit.ok, "\(run)")
        #expect(Self.contents(valueFile) == secret, "the child's DB_PASSWORD is not the stored secret")
        #expect(run.stdout.firstRange(of: secret) == nil && run.stderr.firstRange(of: secret) == nil)
        // No file coffer could have written holds it: only the one the child wrote on purpose.
        for file in Self.files(under: box.path) where file != valueFile {
            #expect(Self.contents(file)?.firstRange(of: secret) == nil, "the secret is in \(file)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch) == [], "coffer left files in TMPDIR")
    }

    @Test(
        "Plain variables pass unchanged; env files (quotes, comments, export) and --env override in order",
        .timeLimit(.minutes(10)))
    func environmentAssembly() throws {
        let box = try Sandbox()
        try box.initVault()
        let first = Self.secret("first")
        let second = Self.secret("second")
        try box.set("db.internal", "app", first)
        try box.set("api", "team/ops", second)
        let one = box.path + "/one.env"
        let two = box.path + "/two.env"
        try box.write(
            """
            # a comment, then a blank line

              export QUOTED_SINGLE='single # not a comment $HOME'
            QUOTED_DOUBLE="double \\"quoted\\"\\tand \\$HOME" # a comment
            UNQUOTED=an unquoted value   # a comment
            EMPTY=
            CRLF=windows\r
            OVERRIDDEN=from one.env
            FROM_FILE=coffer://db.internal/app
            QUOTED_REFERENCE='coffer://api/team%2Fops'
            URL=https://example.com/#anchor

            """, to: one)
        try box.write("OVERRIDDEN=from two.env\nLAST=from two.env\n", to: two)
        let dump = box.path + "/env.out"
        let run = try box.run(
            [
                "run", "--env-file", one, "--env-file", two, "--env", "LAST=coffer://api/team%2Fops", "--",
                "sh", "-c", "env -0 > \"$0\"", dump,
            ],
            environment: [
                "PLAIN": "a b=c 'd' \"e\" coffer:/not-a-reference", "FROM_ENVIRONMENT": "coffer://db.internal/app",
                "OVERRIDDEN": "from the environment",
            ])
        #expect(run.status == Exit.ok, "\(run)")
        var seen: [String: [UInt8]] = [:]
        for entry in (Self.contents(dump) ?? []).split(separator: 0) {
            let split = entry.firstIndex(of: UInt8(ascii: "=")) ?? entry.endIndex
            seen[String(decoding: entry[..<split], as: UTF8.self)] = Array(entry[entry.index(after: split)...])
        }
        func text(_ name: String) -> String? { seen[name].map { String(decoding: $0, as: UTF8.self) } }
        #expect(text("PLAIN") == "a b=c 'd' \"e\" coffer:/not-a-reference")
        #expect(text("HOME") == box.baseEnvironment["HOME"])
        #expect(seen["FROM_ENVIRONMENT"] == first, "a reference in the environment was not replaced")
        #expect(seen["FROM_FILE"] == first, "a reference in an env file was not replaced")
        #expect(seen["QUOTED_REFERENCE"] == second, "a quoted reference with %2F was not replaced")
        #expect(seen["LAST"] == second, "--env did not override the env file")
        #expect(text("OVERRIDDEN") == "from two.env")
        #expect(text("QUOTED_SINGLE") == "single # not a comment $HOME")
        #expect(text("QUOTED_DOUBLE") == "double \"quoted\"\tand $HOME")
        #expect(text("UNQUOTED") == "an unquoted value")
        #expect(text("EMPTY") == "")
        #expect(text("CRLF") == "windows")
        #expect(text("URL") == "https://example.com/#anchor")
    }

    @Test("A malformed env file line, reference or --env is a usage error (2) naming where it is", .timeLimit(.minutes(10)))
    func malformedInput() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("never-shown-1".utf8))
        let file = box.path + "/bad.env"
        let marker = box.path + "/started"
        let lines: [(String, String)] = [
            ("OK=1\nNAME = value\n", "line 2"),
            ("1NAME=value\n", "line 1"),
            ("# c\n\nA=\"unclosed\n", "line 3"),
            ("A='x' trailing\n", "line 1"),
            ("A=\"\\q\"\n", "line 1"),
            ("A= spaced\n", "line 1"),
            ("A=coffer://db.internal/app/extra\n", "line 1"),
        ]
        for (text, said) in lines {
            try box.write(text, to: file)
            let run = try box.run(["run", "--env-file", file, "--", "touch", marker])
            #expect(run.status == Exit.usage, "\(text): \(run)")
            #expect(run.err.contains(said) && run.err.contains("bad.env"), "\(text): \(run)")
        }
        let cases: [([String], [String: String], String)] = [
            (["run", "--env", "X=coffer://db.internal/%zz", "--", "touch", marker], [:], "--env X"),
            (["run", "--env", "X=plain", "--", "touch", marker], [:], "argument 1 of --env"),
            (["run", "--env", "1X=coffer://db.internal/app", "--", "touch", marker], [:], "NAME="),
            (["run", "--", "touch", marker], ["BROKEN": "coffer://only-a-service"], "BROKEN"),
            (["run", "--env-file", box.path + "/absent.env", "--", "touch", marker], [:], "absent.env"),
            (["run", "--restart-signal", "HUP", "--", "touch", marker], [:], "--watch"),
            (["run", "--watch", "--restart-signal", "NOPE", "--env", "X=coffer://db.internal/app", "--", "touch", marker], [:], "--restart-signal takes one of"),
            (["run", "--watch", "--", "touch", marker], [:], "nothing to watch"),
            (["run"], [:], "no command"),
            (["run", "--"], [:], "no command"),
        ]
        for (arguments, environment, said) in cases {
            let run = try box.run(arguments, environment: environment)
            #expect(run.status == Exit.usage && run.err.contains(said), "\(arguments): \(run)")
        }
        // A mistyped --env or env file line never shows its value (it may be the secret itself),
        // nor the part before its = (a token's characters can look like a name): only which
        // argument it is.
        let value = "ghp_" + UUID().uuidString
        let leaks: [([String], String?)] = [
            (["run", "--env", "my-token=\(value)", "--", "touch", marker], "argument 1 of --env"),
            (["run", "--env", value, "--", "touch", marker], "argument 1 of --env"),
            (["run", "--env", "TOKEN=\(value)", "--", "touch", marker], "argument 1 of --env"),
        ]
        for (arguments, said) in leaks {
            let run = try box.run(arguments)
            #expect(run.status == Exit.usage, "\(run)")
            #expect(!run.err.contains(value) && !run.out.contains(value), "the value is in the message: \(run)")
            if let said { #expect(run.err.contains(said), "\(run)") }
        }
        for line in [
            "A='\(value)' trailing\n", "A=\"\(value)\\q\"\n", "A= \(value)\n", "1A=\(value)\n", "A \(value)\n", "\(value)\n",
            "my-token=\(value)\n",
        ] {
            try box.write(line, to: file)
            let run = try box.run(["run", "--env-file", file, "--", "touch", marker])
            #expect(run.status == Exit.usage && run.err.contains("line 1"), "\(run)")
            #expect(!run.err.contains(value) && !run.out.contains(value), "the value is in the message: \(run)")
        }
        #expect(!FileManager.default.fileExists(atPath: marker), "a command was started")
    }

    @Test(
        "A token pasted where --env NAME=REF or a --restart-signal goes is never echoed, not even its part before an =",
        .timeLimit(.minutes(10)))
    func pastedTokenNotEchoed() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("never-shown-9".utf8))
        let marker = box.path + "/started"
        let random = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        // Token shapes: base64 with padding (what comes before the = is a valid variable name),
        // a name-like head and a plain value, a JWT, an API key with a dash.
        let tokens = [
            "dG9rZW5\(random)==", "Secret_\(random)=x\(random)", "eyJhbGciOiJIUzI1NiJ9.\(random).c2ln", "sk-\(random)=",
            "ghp_\(random)",
        ]
        for token in tokens {
            // The token is the second --env: the message says so, and shows nothing of it.
            let run = try box.run(["run", "--env", "A=coffer://db.internal/app", "--env", token, "--", "touch", marker])
            #expect(run.status == Exit.usage, "\(run)")
            #expect(run.err.contains("argument 2 of --env is not NAME=coffer://SERVICE/ACCOUNT"), "\(run)")
            let signal = try box.run(
                ["run", "--watch", "--restart-signal", token, "--env", "A=coffer://db.internal/app", "--", "touch", marker])
            #expect(signal.status == Exit.usage && signal.err.contains("--restart-signal takes one of"), "\(signal)")
            for output in [run, signal] {
                for part in token.split(separator: "=") where part.count >= 4 {
                    #expect(!output.err.contains(part) && !output.out.contains(part), "a part of the token is in the message: \(output)")
                }
            }
        }
        // A well-formed one is named: its name is a variable's, its value a reference.
        let named = try box.run(["run", "--env", "A=coffer://db.internal/app", "--env", "B=coffer://db.internal/%zz", "--", "touch", marker])
        #expect(named.status == Exit.usage && named.err.contains("--env B is not a valid reference"), "\(named)")
        #expect(!FileManager.default.fileExists(atPath: marker), "a command was started")
    }

    @Test("A missing item fails with exit 3 naming the reference; the command is never started", .timeLimit(.minutes(10)))
    func missingItem() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("never-shown-2".utf8))
        let marker = box.path + "/started"
        let run = try box.run(
            ["run", "--env", "A=coffer://db.internal/app", "--env", "B=coffer://db.internal/nobody", "--", "touch", marker])
        #expect(run.status == Exit.notFound, "\(run)")
        #expect(run.err.contains("coffer://db.internal/nobody") && run.err.contains("--env B"), "\(run)")
        #expect(!FileManager.default.fileExists(atPath: marker), "the command was started")
    }

    @Test("Masking: a secret written whole, split across two writes, or on standard error is concealed; near misses are not", .timeLimit(.minutes(10)))
    func masking() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Self.secret("mask")
        try box.set("svc", "acct", secret)
        let program = """
            import os, time
            s = os.environb[b"S"]
            os.write(1, b"whole:" + s + b":end\\n")
            os.write(1, b"split:" + s[:5])
            time.sleep(0.3)
            os.write(1, s[5:] + b":end\\n")
            os.write(1, b"near:" + s[:5])
            time.sleep(0.3)
            os.write(1, b"!" + s[6:] + b":end\\n")
            os.write(2, b"stderr:" + s + b"\\n")
            os.write(1, b"tail:" + s[:4])
            """
        let run = try box.run(["run", "--env", "S=coffer://svc/acct", "--"] + Self.python(program))
        #expect(run.status == Exit.ok, "\(run)")
        let near = "near:" + String(decoding: secret[..<5], as: UTF8.self) + "!" + String(decoding: secret[6...], as: UTF8.self)
        let expected =
            "whole:<concealed by coffer>:end\nsplit:<concealed by coffer>:end\n\(near):end\ntail:"
            + String(decoding: secret[..<4], as: UTF8.self)
        #expect(run.out == expected, "\(run)")
        #expect(run.err == "stderr:<concealed by coffer>\n", "\(run)")
        #expect(run.stdout.firstRange(of: secret) == nil && run.stderr.firstRange(of: secret) == nil)
    }

    @Test("Masking does not delay a line: it is written while the child still runs", .timeLimit(.minutes(10)))
    func lineNotDelayed() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Self.secret("line")
        try box.set("svc", "acct", secret)
        let go = box.path + "/go"
        let program = """
            import os, sys, time
            s = os.environb[b"S"]
            os.write(1, b"first line ends with " + s[:3] + b"\\n")
            os.write(1, b"then " + s + b"\\n")
            deadline = time.time() + 120
            while not os.path.exists(sys.argv[1]) and time.time() < deadline: time.sleep(0.02)
            os.write(1, b"done\\n")
            """
        let child = try Self.startLive(box, ["run", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, go))
        // The child waits for `go`, which only the test creates, after seeing both lines.
        let seen = Self.eventually(120) { child.lines.count >= 2 }
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        #expect(seen, "the lines did not arrive while the child ran")
        let status = child.wait()
        let lines = child.lines
        #expect(status == 0)
        #expect(lines.count == 3 && lines[1] == "then <concealed by coffer>" && lines[2] == "done")
        #expect(lines.first == "first line ends with " + String(decoding: secret[..<3], as: UTF8.self))
        #expect(child.output.utf8.firstRange(of: secret) == nil && child.standardError.utf8.firstRange(of: secret) == nil)
    }

    @Test(
        "Masking keeps up with a long run of a periodic secret (4 MiB of a, secret aaaa): its replacement is written while the command runs",
        .timeLimit(.minutes(10)))
    func periodicRunStreams() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("aaaa".utf8))
        let (wrote, go) = (box.path + "/wrote", box.path + "/go")
        // 4 MiB of `a` (the secret's first byte, so the secret is in no argument), then nothing
        // until the test creates `go`: the run has not ended while the test looks.
        let program = """
            import os, sys, time
            view = memoryview(os.environb[b"S"][:1] * (4 * 1024 * 1024))
            while view: view = view[os.write(1, view):]
            open(sys.argv[1], "w").close()
            deadline = time.time() + 120
            while not os.path.exists(sys.argv[2]) and time.time() < deadline: time.sleep(0.02)
            os.write(1, b"\\ndone\\n")
            """
        let child = try Self.startLive(box, ["run", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, wrote, go))
        // A pipe holds 64 KiB: the child's writes end only once coffer has read nearly all of
        // them (a hang guard, not a measure of speed).
        let consumed = Self.eventually(60) { FileManager.default.fileExists(atPath: wrote) }
        // The replacement is out while the run may still go on; the run's bytes are not held.
        let seen = Self.eventually(60) { child.output == "<concealed by coffer>" }
        let early = child.output.prefix(200)
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        #expect(consumed, "coffer did not read the 4 MiB within 60 s")
        #expect(seen, "before the run ended, coffer wrote \(early.count) characters: \(early)")
        let status = child.wait()
        #expect(status == 0)
        let output = child.output
        #expect(output == "<concealed by coffer>\ndone\n", "\(output.count) characters: \(output.prefix(200))")
    }

    @Test("--no-masking passes the output through untouched", .timeLimit(.minutes(10)))
    func noMasking() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Self.secret("plain")
        try box.set("svc", "acct", secret)
        let run = try box.run(["run", "--no-masking", "--env", "S=coffer://svc/acct", "--", "sh", "-c", "printf %s \"$S\""])
        #expect(run.status == Exit.ok, "\(run)")
        #expect(run.printed(secret), "\(run)")
    }

    @Test("coffer exits with the child's status, 128 + n for signal n, 127 not found, 126 not executable", .timeLimit(.minutes(10)))
    func exitStatus() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-3".utf8))
        let notExecutable = box.path + "/script"
        try box.write("#!/bin/sh\nexit 0\n", to: notExecutable)
        let cases: [([String], Int32)] = [
            (["sh", "-c", "exit 7"], 7),
            (["sh", "-c", "kill -9 $$"], 137),
            (["sh", "-c", "kill -TERM $$"], 143),
            (["env", "true"], 0),
            (["coffer-run-no-such-command-\(UUID().uuidString)"], 127),
            ([box.path + "/absent"], 127),
            ([notExecutable], 126),
        ]
        for (command, status) in cases {
            let run = Self.settled(box, try box.start(["run", "--env", "S=coffer://svc/acct", "--"] + command))
            #expect(run.status == status, "\(command): \(run)")
            if status == 126 || status == 127 { #expect(run.err.hasPrefix("coffer: "), "\(run)") }
        }
    }

    @Test("INT, TERM, HUP, QUIT, USR1, USR2 and WINCH sent to coffer reach the child; coffer exits with its status", .timeLimit(.minutes(10)))
    func signalForwarding() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-4".utf8))
        let (ready, log) = (box.path + "/ready", box.path + "/signals")
        let program = """
            import os, signal, sys, time
            log = open(sys.argv[2], "a")
            def note(number, frame):
                log.write("%d\\n" % number); log.flush()
                if number == signal.SIGTERM: sys.exit(42)
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
                signal.signal(s, note)
            open(sys.argv[1], "w").close()
            deadline = time.time() + 120
            while time.time() < deadline: time.sleep(0.02)
            """
        let child = try box.start(["run", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, ready, log))
        #expect(Self.eventually(120) { FileManager.default.fileExists(atPath: ready) }, "the child never got ready")
        func logged() -> [Int32] {
            String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n").compactMap { Int32($0) }
        }
        for number in [SIGUSR1, SIGUSR2, SIGHUP, SIGINT, SIGQUIT, SIGWINCH] {
            kill(child.pid, number)
            #expect(Self.eventually { logged().contains(number) }, "signal \(number) did not reach the child")
        }
        kill(child.pid, SIGTERM)
        let run = Self.settled(box, child)
        #expect(run.status == 42, "\(run)")
        #expect(logged().last == SIGTERM)
    }

    @Test("--watch: coffer set from another process restarts the child with the new value", .timeLimit(.minutes(10)))
    func watchRestarts() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Self.secret("before"))
        let log = box.path + "/starts"
        // Each start appends its pid and which value it got (by the value's tag: the secret
        // itself is never in an argument).
        let program = """
            import os, sys, time
            value = os.environb[b"S"]
            which = "first" if value.startswith(b"before-") else "second" if value.startswith(b"after-") else "other"
            with open(sys.argv[1], "a") as log: log.write("%d %s\\n" % (os.getpid(), which))
            deadline = time.time() + 300
            while time.time() < deadline: time.sleep(0.05)
            """
        let child = try Self.startLive(box, ["run", "--watch", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, log))
        func starts() -> [Substring] {
            String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n")
        }
        #expect(Self.eventually(120) { starts().count == 1 }, "the child never started: \(child.transcript)")
        let second = Self.secret("after")
        let before = Date()
        try box.set("svc", "acct", second)
        let restarted = Self.eventually(20) { starts().count >= 2 }
        let seconds = Date().timeIntervalSince(before)
        #expect(restarted, "no restart within 20 s of coffer set")
        print("coffer run --watch (file vault): the restarted child ran \(String(format: "%.3f", seconds)) s after coffer set began")
        #expect(starts().last?.hasSuffix(" second") == true, "the restarted child did not get the new value")
        #expect(starts().first?.hasSuffix(" first") == true)
        // The old child is gone: only the new one runs.
        let oldPID = starts().first.flatMap { $0.split(separator: " ").first }.flatMap { pid_t($0) } ?? 0
        #expect(Self.eventually { kill(oldPID, 0) != 0 }, "the first child still runs")
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.wait() == 128 + SIGTERM)
        #expect(child.standardError.contains("coffer://svc/acct changed"))
        #expect(child.standardError.utf8.firstRange(of: second) == nil && child.output.utf8.firstRange(of: second) == nil)
    }

    @Test(
        "--watch: after two restarts, a process the first child left behind still has its value concealed in the output",
        .timeLimit(.minutes(10)))
    func watchKeepsEarlierValuesConcealed() throws {
        let box = try Sandbox()
        try box.initVault()
        let values = [Self.secret("first"), Self.secret("second"), Self.secret("third")]
        try box.set("svc", "acct", values[0])
        let (log, go) = (box.path + "/starts", box.path + "/go")
        let marker = "coffer-run-leftover-\(UUID().uuidString)"
        // Started in the background by the first child, outliving it: once the test creates
        // `go`, it writes the value it inherited to the output it shares with every child.
        let writer = """
            import os, sys, time
            deadline = time.time() + 120
            while not os.path.exists(sys.argv[1]) and time.time() < deadline: time.sleep(0.02)
            os.write(1, b"left behind:" + os.environb[b"S"] + b":end\\n")
            """
        let program = """
            import os, subprocess, sys, time
            value = os.environb[b"S"]
            which = next((tag for tag in ("first", "second", "third") if value.startswith(tag.encode() + b"-")), "other")
            if which == "first": subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2]])
            with open(sys.argv[1], "a") as log: log.write("%d %s\\n" % (os.getpid(), which))
            deadline = time.time() + 300
            while time.time() < deadline: time.sleep(0.05)
            """
        let child = try Self.startLive(
            box, ["run", "--watch", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, log, go, writer),
            environment: ["LEFTOVER_MARKER": marker])
        defer {
            for pid in Self.processes(holding: marker) { kill(pid, SIGKILL) }
        }
        func starts() -> [Substring] { String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n") }
        #expect(Self.eventually(120) { starts().count == 1 }, "the child never started: \(child.transcript)")
        // Two changes, each waited for: the third child runs, the first value is two behind.
        for (index, value) in values.enumerated().dropFirst() {
            try box.set("svc", "acct", value)
            #expect(Self.eventually(60) { starts().count >= index + 1 }, "no restart \(index): \(child.transcript)")
        }
        #expect(starts().map { $0.split(separator: " ").last ?? "" } == ["first", "second", "third"], "\(starts())")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let written = Self.eventually(60) { child.lines.contains { $0.hasPrefix("left behind:") } }
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.wait() == 128 + SIGTERM)
        // Bools, not the output: a failure must not print the value that leaked.
        #expect(written, "the left-behind process wrote nothing")
        let concealed = child.lines.contains("left behind:<concealed by coffer>:end")
        #expect(concealed, "the left-behind process's line is not masked")
        for (index, value) in values.enumerated() {
            let leaked = child.output.utf8.firstRange(of: value) != nil || child.standardError.utf8.firstRange(of: value) != nil
            #expect(!leaked, "value \(index + 1) is in coffer's output")
        }
    }

    @Test("A storm of TERM, HUP and USR1 to coffer while --watch restarts the child leaves no process behind", .timeLimit(.minutes(10)))
    func signalStormLeavesNoOrphan() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("storm-0".utf8))
        let marker = "coffer-run-storm-\(UUID().uuidString)"
        let log = box.path + "/starts"
        // Ignores HUP and USR1; on TERM it takes 2 s to stop, so the storm lands mid-restart.
        let program = """
            import os, signal, sys, time
            def stop(number, frame):
                time.sleep(2)
                os._exit(42)
            signal.signal(signal.SIGHUP, lambda n, f: None)
            signal.signal(signal.SIGUSR1, lambda n, f: None)
            signal.signal(signal.SIGTERM, stop)
            with open(sys.argv[1], "a") as log: log.write("%d\\n" % os.getpid())
            deadline = time.time() + 300
            while time.time() < deadline: time.sleep(0.02)
            """
        let child = try Self.startLive(
            box, ["run", "--watch", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, log, marker),
            environment: ["STORM_MARKER": marker])
        let coffer = child.process.processIdentifier
        func starts() -> [pid_t] {
            String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n").compactMap { pid_t($0) }
        }
        func restartsAnnounced() -> Int { child.standardError.components(separatedBy: "changed: restarting").count - 1 }
        func storm(_ signals: [Int32], seconds: Double) {
            let end = Date() + seconds
            var round = 0
            while Date() < end, child.process.isRunning {
                kill(coffer, signals[round % signals.count])
                round += 1
                usleep(2_000)
            }
        }
        #expect(Self.eventually(120) { starts().count == 1 }, "the child never started: \(child.transcript)")
        // Restarts under a storm of forwarded signals, sent while the old child is stopping (a
        // child still starting up could die of one, which also ends coffer: then the rounds stop).
        for round in 1...3 where child.process.isRunning {
            try box.set("svc", "acct", Array("storm-\(round)".utf8))
            _ = Self.eventually(60) { restartsAnnounced() >= round || !child.process.isRunning }
            storm([SIGHUP, SIGUSR1], seconds: 0.3)
            _ = Self.eventually(60) { starts().count >= round + 1 || !child.process.isRunning }
        }
        // Then a change, and TERMs among the others while the child is being stopped for it.
        if child.process.isRunning {
            try box.set("svc", "acct", Array("storm-final".utf8))
            _ = Self.eventually(60) { restartsAnnounced() >= 4 || !child.process.isRunning }
        }
        storm([SIGTERM, SIGHUP, SIGUSR1, SIGTERM], seconds: 0.5)
        // coffer ends (a TERM reaches whichever child runs by then); killed only if it never does.
        let ended = Self.eventually(120) { !child.process.isRunning }
        if !ended { child.process.terminate() }
        let status = child.wait()
        #expect(ended, "coffer did not exit after the TERMs: \(child.transcript)")
        print(
            "coffer run --watch storm: \(starts().count) children started, \(restartsAnnounced()) restarts announced, "
                + "coffer exited \(status)")
        // The storm did not stop the restarts: the first change's, at least, started a child
        // (the old one takes 2 s to stop, far longer than the storm sent during it).
        #expect(starts().count >= 2, "no restart during the storm: \(child.transcript)")
        #expect(restartsAnnounced() >= 1, "\(child.transcript)")
        // The last TERM ended the child that ran (it exits 42 on TERM), or a child still
        // starting up died of one of the storm's signals (128 + n); coffer exits with that.
        let possible: Set<Int32> = [42, 128 + SIGTERM, 128 + SIGHUP, 128 + SIGUSR1]
        #expect(possible.contains(status), "coffer exited \(status): \(child.transcript)")
        #expect(Self.eventually(30) { Self.processes(holding: marker).isEmpty }, "left behind: \(Self.processes(holding: marker))")
        for pid in starts() { #expect(kill(pid, 0) != 0, "child \(pid) still runs") }
    }

    @Test("A signal ignored when coffer starts (nohup) stays ignored, by coffer and by the command", .timeLimit(.minutes(10)))
    func ignoredSignalStaysIgnored() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-5".utf8))
        let (ready, log) = (box.path + "/ready", box.path + "/signals")
        // Notes USR1; exits 42 on TERM; says whether HUP is ignored. HUP is left alone: were it
        // at its default action, a HUP would kill the child.
        let program = """
            import os, signal, sys, time
            log = open(sys.argv[2], "a")
            def note(number, frame):
                log.write("%d\\n" % number); log.flush()
                if number == signal.SIGTERM: os._exit(42)
            signal.signal(signal.SIGUSR1, note)
            signal.signal(signal.SIGTERM, note)
            open(sys.argv[1], "w").write("ignored" if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else "default")
            deadline = time.time() + 120
            while time.time() < deadline: time.sleep(0.02)
            """
        let arguments =
            ["-c", "trap '' HUP; exec \"$0\" \"$@\"", cofferPath, "--vault", box.vault, "--passphrase-file", box.passphraseFile]
            + ["run", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, ready, log)
        let child = try HelperChild(
            arguments, executable: URL(fileURLWithPath: "/bin/sh"), environment: box.baseEnvironment,
            inheritsEnvironment: false, standardError: .capture)
        #expect(
            Self.eventually(120) { (Self.contents(ready) ?? []).count > 0 }, "the child never got ready: \(child.transcript)")
        #expect(Self.contents(ready).map { String(decoding: $0, as: UTF8.self) } == "ignored", "HUP was reset for the child")
        func logged() -> [Int32] {
            String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n").compactMap { Int32($0) }
        }
        let coffer = child.process.processIdentifier
        // HUP, then USR1: had coffer a handler for HUP, it would pass it on first (the lower
        // signal is delivered first), and the child would die of it before noting USR1.
        kill(coffer, SIGHUP)
        kill(coffer, SIGUSR1)
        #expect(Self.eventually { logged().contains(SIGUSR1) }, "USR1 did not reach the child: \(child.transcript)")
        #expect(child.process.isRunning, "coffer ended: \(child.transcript)")
        kill(coffer, SIGTERM)
        #expect(child.wait() == 42, "\(child.transcript)")
    }

    @Test("A process the child leaves behind, still writing to its output, does not keep coffer running", .timeLimit(.minutes(10)))
    func backgroundWriterDoesNotHoldCoffer() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-6".utf8))
        let marker = "coffer-run-writer-\(UUID().uuidString)"
        // It writes for a minute or more, far beyond the deadline below; coffer must not wait for it.
        let script = "(i=0; while [ $i -lt 1200 ]; do echo x; sleep 0.05; i=$((i+1)); done) & exit 3"
        let child = try box.start(
            ["run", "--env", "S=coffer://svc/acct", "--", "sh", "-c", script], environment: ["WRITER_MARKER": marker])
        let run = Self.settled(box, child, timeout: 45)
        #expect(run.status == 3, "\(run)")
        // Once coffer is gone, the writer's next write fails (SIGPIPE); if not, it is ended here.
        if !Self.eventually(30, { Self.processes(holding: marker).isEmpty }) {
            for pid in Self.processes(holding: marker) { kill(pid, SIGKILL) }
        }
    }

    @Test("The command cannot reach the vault key coffer unlock keeps; coffer itself still opens the vault with it", .timeLimit(.minutes(10)))
    func keyringIsolation() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        let secret = Self.secret("keyring")
        try box.set("svc", "acct", secret)
        let unlocked = try ring.perform { try box.start(["unlock"], passphraseFile: true) }.wait()
        #expect(unlocked.status == Exit.ok, "\(unlocked)")
        // /proc/keys lists the possessor-only key to its possessors only: the ring's thread sees it.
        let seen = try ring.perform { Self.contents("/proc/keys") ?? [] }
        #expect(seen.firstRange(of: Array("coffer:".utf8)) != nil, "the kept key is not in the ring's /proc/keys")
        // No passphrase: coffer opens the vault with the kept key; the child must not see it.
        let dump = box.path + "/keys"
        let run = try ring.perform {
            try box.start(
                ["run", "--env", "S=coffer://svc/acct", "--", "sh", "-c", "cat /proc/keys > \"$0\"; test -n \"$S\"", dump],
                passphraseFile: false)
        }.wait()
        #expect(run.status == Exit.ok, "\(run)")
        let child = Self.contents(dump)
        #expect(child != nil, "the child did not read /proc/keys")
        #expect(child?.firstRange(of: Array("coffer:".utf8)) == nil, "the child sees the kept key")
        let got = try ring.perform { try box.start(["get", "svc", "acct"], passphraseFile: false) }.wait()
        #expect(got.status == Exit.ok && got.printed(secret), "\(got)")
        _ = try ring.perform { try box.start(["lock"], passphraseFile: false) }.wait()
    }

    @Test("The command gets the core size limit coffer was started with (coffer itself writes no core file)", .timeLimit(.minutes(10)))
    func coreLimitForTheCommand() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-8".utf8))
        // coffer started with a soft core limit of 4096 blocks; the command must see it, not
        // the 0 coffer sets for itself (before, the hard limit was 0 too, so no command of
        // `coffer run` could ever write a core file).
        let report = box.path + "/core-limit"
        let arguments =
            ["-c", "ulimit -S -c 4096 2>/dev/null; ulimit -S -c > '\(report).before'; exec \"$0\" \"$@\"", cofferPath, "--vault", box.vault, "--passphrase-file", box.passphraseFile]
            + ["run", "--env", "S=coffer://svc/acct", "--", "sh", "-c", "ulimit -S -c > '\(report)'"]
        // disable_coredump=0: a ThreadSanitizer build's runtime (make test-tsan) would otherwise
        // set the soft core limit to 0 before coffer's main, so coffer would start with 0 (an
        // option the runtime of a build without sanitizers ignores).
        var environment = box.baseEnvironment
        environment["TSAN_OPTIONS"] = "halt_on_error=1:disable_coredump=0"
        let child = try HelperChild(
            arguments, executable: URL(fileURLWithPath: "/bin/sh"), environment: environment,
            inheritsEnvironment: false, standardError: .capture)
        #expect(child.wait() == 0, "\(child.transcript)")
        // 4096 where the hard limit allows it (this machine's is unlimited); the same as coffer
        // was started with in any case.
        let before = try String(contentsOfFile: report + ".before", encoding: .utf8)
        #expect(try String(contentsOfFile: report, encoding: .utf8) == before && before != "0\n", "\(before)")
    }

    @Test("As execvp: a script without #! runs with /bin/sh; without PATH, /bin:/usr/bin is searched", .timeLimit(.minutes(10)))
    func execvpParity() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("never-shown-7".utf8))
        let script = box.path + "/plain-script"
        try box.writeExecutable("echo \"from a script: $*\"\nexit 5\n", to: script)
        let run = Self.settled(box, try box.start(["run", "--env", "S=coffer://svc/acct", "--", script, "one", "two"]))
        #expect(run.status == 5 && run.out == "from a script: one two\n", "\(run)")
        // PATH unset in coffer's environment: sh is still found.
        var environment = box.baseEnvironment
        environment.removeValue(forKey: "PATH")
        let child = try HelperChild(
            ["--vault", box.vault, "--passphrase-file", box.passphraseFile, "run", "--env", "S=coffer://svc/acct", "--", "sh", "-c", "exit 4"],
            executable: URL(fileURLWithPath: cofferPath), environment: environment, inheritsEnvironment: false,
            standardError: .capture)
        #expect(child.wait() == 4, "\(child.transcript)")
    }

    @Test("--watch: a change made after the secrets were read but before watching began is not missed", .timeLimit(.minutes(10)))
    func watchSeesEarlyChange() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Self.secret("before"))
        let (log, pause) = (box.path + "/starts", box.path + "/pause")
        let program = """
            import os, sys, time
            value = os.environb[b"S"]
            which = "first" if value.startswith(b"before-") else "second" if value.startswith(b"after-") else "other"
            with open(sys.argv[1], "a") as log: log.write("%d %s\\n" % (os.getpid(), which))
            deadline = time.time() + 300
            while time.time() < deadline: time.sleep(0.05)
            """
        let child = try Self.startLive(
            box, ["run", "--watch", "--env", "S=coffer://svc/acct", "--"] + Self.python(program, log),
            environment: ["COFFER_TEST_RUN_PAUSE": pause])
        func starts() -> [Substring] { String(decoding: Self.contents(log) ?? [], as: UTF8.self).split(separator: "\n") }
        // coffer has read the secret and waits before watching: the change lands in between.
        #expect(
            Self.eventually(120) { FileManager.default.fileExists(atPath: pause + ".waiting") },
            "coffer never paused: \(child.transcript)")
        try box.set("svc", "acct", Self.secret("after"))
        _ = FileManager.default.createFile(atPath: pause, contents: nil)
        // The new value reaches a child: the first one, or (at worst) a restarted one.
        #expect(
            Self.eventually(60) { starts().last?.hasSuffix(" second") == true },
            "the change was never seen: \(starts()) \(child.transcript)")
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.wait() == 128 + SIGTERM)
    }
}
