import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer import` and `coffer export`: every format round-trips exact bytes; an import is one
/// commit (all items or none, also under `kill -9`); a dry run or a clash writes nothing; an
/// export is plaintext only when asked, and age-sealed files pass both ways with the real `age`.
@Suite("coffer import and export")
struct ImportExportTests {
    /// One item as `list --json` shows it, and its secret as `get` prints it.
    struct Stored: Equatable {
        var service: String
        var account: String
        var label: String
        var comment: String
        var secret: [UInt8]
    }

    /// Every item of the vault at `vault` (default: the sandbox's), with its secret.
    static func contents(_ box: Sandbox, vault: String? = nil) throws -> [Stored] {
        let prefix = vault.map { ["--vault", $0] } ?? []
        let list = try box.run(prefix + ["list", "--json"])
        #expect(list.status == Exit.ok, "\(list)")
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout)) as? [[String: Any]] ?? []
        return try rows.map { row in
            let service = row["service"] as? String ?? "", account = row["account"] as? String ?? ""
            let get = try box.run(prefix + ["get", service, account])
            #expect(get.status == Exit.ok, "\(get)")
            return Stored(
                service: service, account: account, label: row["label"] as? String ?? "",
                comment: row["comment"] as? String ?? "", secret: get.stdout)
        }
    }

    /// The number of items `list --json` shows.
    static func count(_ box: Sandbox, vault: String) throws -> Int {
        let list = try box.run(["--vault", vault, "list", "--json"])
        #expect(list.status == Exit.ok, "\(list)")
        return (try JSONSerialization.jsonObject(with: Data(list.stdout)) as? [Any])?.count ?? -1
    }

    /// Whether `secret` appears in either output of `run` (a Bool, so a failing #expect prints no secret).
    static func leaks(_ run: Run, _ secrets: [[UInt8]]) -> Bool {
        secrets.contains { !$0.isEmpty && (run.stdout.firstRange(of: $0) != nil || run.stderr.firstRange(of: $0) != nil) }
    }

    static func fileBytes(_ path: String) -> [UInt8] {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? []
    }

    // MARK: - JSON and export

    @Test("json: export --plaintext -o (0600) and import reproduce every item exactly, a non-UTF-8 secret as base64", .timeLimit(.minutes(10)))
    func jsonRoundTrip() throws {
        let box = try Sandbox()
        try box.initVault()
        let binary: [UInt8] = [0xFF, 0x00, 0x80, 0x0A, 0xC3]
        let tricky = Array("q\"uo,te\\back\nline\ttab\u{1}ctl é ✓".utf8)
        try box.set("db.internal", "app", Array("hunter2".utf8), ["--label", "Database", "--comment", "rotated, \"often\""])
        try box.set("bin", "blob", binary)
        try box.set("api/v2", "team/ops", tricky)
        try box.set("empty", "one", [])
        let before = try Self.contents(box)
        #expect(before.count == 4)
        let secrets = before.map(\.secret)

        // Without --plaintext (and no recipient): exit 2, nothing written anywhere.
        let out = box.path + "/export.json"
        let refused = try box.run(["export", "-o", out])
        #expect(refused.status == Exit.usage && refused.err.contains("--plaintext") && refused.err.contains("--recipient"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: out) && refused.stdout.isEmpty)
        let both = try box.run(["export", "--plaintext", "--recipient", "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"])
        #expect(both.status == Exit.usage && both.stdout.isEmpty, "\(both)")

        try box.write("old", to: out)
        #expect(chmod(out, 0o644) == 0)
        let exported = try box.run(["export", "--plaintext", "-o", out])
        #expect(exported.status == Exit.ok && exported.err.contains("exported 4 items"), "\(exported)")
        #expect(!Self.leaks(exported, secrets), "the export printed a secret")
        var status = stat()
        #expect(stat(out, &status) == 0 && status.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: box.path).allSatisfy { !$0.hasSuffix(".tmp") })
        let document = try JSONSerialization.jsonObject(with: Data(Self.fileBytes(out))) as? [String: Any] ?? [:]
        #expect(document["format"] as? String == "coffer-export" && document["version"] as? Int == 1)
        let items = document["items"] as? [[String: Any]] ?? []
        #expect(items.count == 4)
        let blob = items.first { $0["service"] as? String == "bin" }
        #expect(blob?["secretEncoding"] as? String == "base64")
        #expect(blob.flatMap { ($0["secret"] as? String).flatMap { Data(base64Encoded: $0) } }.map { [UInt8]($0) } == binary)
        #expect(items.first { $0["service"] as? String == "db.internal" }?["secretEncoding"] as? String == "utf8")

        // To standard output, the same JSON.
        let piped = try box.run(["export", "--plaintext", "--service", "db.internal"])
        #expect(piped.status == Exit.ok, "\(piped)")
        let one = try JSONSerialization.jsonObject(with: Data(piped.stdout)) as? [String: Any]
        #expect((one?["items"] as? [Any])?.count == 1)
        #expect(piped.stderr.firstRange(of: Array("hunter2".utf8)) == nil)

        // Into a new vault: every byte, label and comment as it was.
        let target = box.path + "/target.coffer"
        #expect(try box.run(["--vault", target, "init"]).status == Exit.ok)
        let imported = try box.run(["--vault", target, "import", "json", out])
        #expect(imported.status == Exit.ok && imported.out.contains("4 added"), "\(imported)")
        #expect(!Self.leaks(imported, secrets), "the import printed a secret")
        #expect(try Self.contents(box, vault: target) == before, "the imported items differ")
        // From standard input too; the same values again are "unchanged", and nothing is written.
        let vaultBytes = Self.fileBytes(target)
        let again = try box.run(["--vault", target, "import", "json", "-"], stdin: Self.fileBytes(out))
        #expect(again.status == Exit.ok && again.out.contains("4 unchanged"), "\(again)")
        #expect(Self.fileBytes(target) == vaultBytes)
    }

    // MARK: - .env and CSV

    @Test("dotenv: every KEY becomes an account of --service, values byte for byte", .timeLimit(.minutes(10)))
    func dotenv() throws {
        let box = try Sandbox()
        try box.initVault()
        let file = box.path + "/app.env"
        try box.write(
            """
            # a comment
            export DATABASE_URL=postgres://app@db/app
            API_TOKEN='tok en # not a comment'
            MULTI="line1\\nline2 \\"quoted\\" \\\\ $HOME"
            PLAIN=value with spaces # and a comment

            EMPTY=

            """, to: file)
        let missing = try box.run(["import", "dotenv", file])
        #expect(missing.status == Exit.usage && missing.err.contains("--service"), "\(missing)")
        let run = try box.run(["import", "dotenv", file, "--service", "myapp"])
        #expect(run.status == Exit.ok && run.out.contains("5 added"), "\(run)")
        let stored = Dictionary(uniqueKeysWithValues: try Self.contents(box).map { ($0.account, $0) })
        #expect(Set(stored.values.map(\.service)) == ["myapp"])
        #expect(stored["DATABASE_URL"]?.secret == Array("postgres://app@db/app".utf8))
        #expect(stored["API_TOKEN"]?.secret == Array("tok en # not a comment".utf8))
        #expect(stored["MULTI"]?.secret == Array("line1\nline2 \"quoted\" \\ $HOME".utf8))
        #expect(stored["PLAIN"]?.secret == Array("value with spaces".utf8))
        #expect(stored["EMPTY"]?.secret == [])
        #expect(!Self.leaks(run, [Array("tok en".utf8), Array("line1".utf8)]))
        // The same key twice is an error naming both lines; nothing is written.
        let vaultBytes = Self.fileBytes(box.vault)
        try box.write("A=1\nB=2\nA=3\n", to: file)
        let twice = try box.run(["import", "dotenv", file, "--service", "other"])
        #expect(twice.status == Exit.usage && twice.err.contains("line 1 and line 3"), "\(twice)")
        #expect(Self.fileBytes(box.vault) == vaultBytes)
    }

    @Test("KeePassXC, Bitwarden and 1Password CSV: the documented columns, quoted commas, quotes and newlines, a BOM, CRLF", .timeLimit(.minutes(10)))
    func csvFormats() throws {
        let box = try Sandbox()
        try box.initVault()
        let nasty = "pa,ss\"wo\nrd ✓"
        let quoted = "\"" + nasty.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        let cases: [(format: String, text: String, expected: [Stored], skippedNote: String?)] = [
            (
                "keepassxc",
                "\u{FEFF}\"Group\",\"Title\",\"Username\",\"Password\",\"URL\",\"Notes\",\"TOTP\",\"Icon\",\"Last Modified\",\"Created\"\r\n"
                    + "\"Root/Internet\",\"GitHub\",\"octocat\",\(quoted),\"https://github.com\",\"secret notes\",\"\",\"0\",\"x\",\"y\"\r\n"
                    + "\"Root\",\"Wi-Fi\",\"\",\"plain\",\"\",\"\",\"\",\"0\",\"x\",\"y\"\r\n",
                [
                    Stored(service: "GitHub", account: "octocat", label: "Root/Internet", comment: "https://github.com", secret: Array(nasty.utf8)),
                    Stored(service: "Wi-Fi", account: "default", label: "Root", comment: "", secret: Array("plain".utf8)),
                ],
                "Notes"
            ),
            (
                "bitwarden",
                "folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp\n"
                    + "Work,1,login,Jira,,,0,https://jira.example,alice@example.com,\(quoted),\n"
                    + ",,note,My note,\"a secure note\",,0,,,,\n",
                [
                    Stored(service: "Jira", account: "alice@example.com", label: "Work", comment: "https://jira.example", secret: Array(nasty.utf8))
                ],
                "type is not login"
            ),
            (
                "1password",
                "Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes\n"
                    + "AWS,https://aws.amazon.com,root@example.com,\(quoted),,false,false,cloud,\n",
                [
                    Stored(service: "AWS", account: "root@example.com", label: "cloud", comment: "https://aws.amazon.com", secret: Array(nasty.utf8))
                ],
                nil
            ),
        ]
        for (format, text, expected, note) in cases {
            let vault = box.path + "/\(format).coffer"
            #expect(try box.run(["--vault", vault, "init"]).status == Exit.ok)
            let file = box.path + "/\(format).csv"
            try box.write(text, to: file)
            let run = try box.run(["--vault", vault, "import", format, file])
            #expect(run.status == Exit.ok && run.out.contains("\(expected.count) added"), "\(format): \(run)")
            if let note { #expect(run.err.contains(note), "\(format): \(run)") }
            #expect(!Self.leaks(run, [Array(nasty.utf8), Array("secret notes".utf8)]), "\(format): a secret was printed")
            let stored = try Self.contents(box, vault: vault)
            #expect(stored == expected.sorted { ($0.service, $0.account) < ($1.service, $1.account) }, "\(format)")
        }
        // A header without a needed column is refused, naming it; nothing is written.
        let vault = box.path + "/keepassxc.coffer"
        let vaultBytes = Self.fileBytes(vault)
        try box.write("\"Group\",\"Title\",\"Username\",\"URL\"\n\"Root\",\"x\",\"y\",\"z\"\n", to: box.path + "/bad.csv")
        let bad = try box.run(["--vault", vault, "import", "keepassxc", box.path + "/bad.csv"])
        #expect(bad.status == Exit.usage && bad.err.contains("\"Password\""), "\(bad)")
        try box.write("Title,Username,Password\n\"open,field\n", to: box.path + "/open.csv")
        let open = try box.run(["--vault", vault, "import", "1password", box.path + "/open.csv"])
        #expect(open.status == Exit.usage && open.err.contains("line 2") && open.err.contains("never closed"), "\(open)")
        #expect(Self.fileBytes(vault) == vaultBytes)
    }

    // MARK: - One commit, dry runs, clashes

    @Test("Crafted input: a CR-only CSV, a NUL in a name, an unknown JSON escape inside a secret, 40,000 members", .timeLimit(.minutes(10)))
    func craftedInput() throws {
        let box = try Sandbox()
        try box.initVault()
        // Lines ended by a lone CR (old Mac exports) are records, not one long header.
        let crOnly = box.path + "/cr.csv"
        try box.write("Group,Title,Username,Password,URL,Notes\rRoot,t1,u,PWSECRET3,,\r", to: crOnly)
        let cr = try box.run(["import", "keepassxc", crOnly])
        #expect(cr.status == Exit.ok && cr.out.contains("1 added"), "\(cr)")
        #expect(try Self.contents(box) == [Stored(service: "t1", account: "u", label: "Root", comment: "", secret: Array("PWSECRET3".utf8))])
        #expect(!Self.leaks(cr, [Array("PWSECRET3".utf8)]))

        // A NUL in a name would make an item no command line can name (`set` cannot make one):
        // refused, named by line. Other control characters are imported (see
        // controlCharacterNamesRoundTrip).
        let nul = box.path + "/nul.csv"
        try box.write([UInt8]("Group,Title,Username,Password,URL,Notes\nRoot,t".utf8) + [0] + Array("x,u,pw,,\n".utf8), to: nul)
        let refusedNUL = try box.run(["import", "keepassxc", nul])
        #expect(refusedNUL.status == Exit.usage && refusedNUL.err.contains("line 2") && refusedNUL.err.contains("a NUL"), "\(refusedNUL)")

        // An unknown escape inside a secret is refused without quoting any byte of it.
        let escape = box.path + "/escape.json"
        try box.write(#"{"format":"coffer-export","version":1,"items":[{"service":"s","account":"a","secret":"hunter2\Zrest"}]}"#, to: escape)
        let badEscape = try box.run(["import", "json", escape])
        #expect(badEscape.status == Exit.usage && badEscape.err.contains("unknown escape"), "\(badEscape)")
        #expect(!badEscape.err.contains("\\Z") && !badEscape.err.contains("hunter2"), "\(badEscape)")

        // 40,000 members in one object: read in one pass (a member list searched per member
        // took two minutes), and a name given twice is still refused.
        var members = ""
        for index in 0..<40_000 { members += ",\"k\(index)\":0" }
        let wide = box.path + "/wide.json"
        try box.write(#"{"format":"coffer-export","version":1,"items":[]"# + members + "}", to: wide)
        let read = try box.run(["import", "json", wide, "--dry-run"])
        #expect(read.status == Exit.ok, "\(read)")
        try box.write(#"{"format":"coffer-export","version":1,"items":[],"k":0"# + members + #","k":1}"#, to: wide)
        let twice = try box.run(["import", "json", wide, "--dry-run"])
        #expect(twice.status == Exit.usage && twice.err.contains("appears twice"), "\(twice)")
    }

    @Test("A dry run lists additions, replacements and unchanged items by name and writes nothing; a clash needs --overwrite", .timeLimit(.minutes(10)))
    func dryRunAndClashes() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "same", Array("same-secret".utf8))
        try box.set("svc", "changed", Array("old-secret".utf8))
        let input = box.path + "/in.json"
        try box.write(
            """
            {"format": "coffer-export", "version": 1, "items": [
              {"service": "svc", "account": "same", "secret": "same-secret"},
              {"service": "svc", "account": "changed", "secret": "new-secret"},
              {"service": "svc", "account": "fresh", "secretEncoding": "base64", "secret": "AAEC/w=="}
            ]}
            """, to: input)
        let secrets = [Array("same-secret".utf8), Array("new-secret".utf8), Array("old-secret".utf8)]
        let vaultBytes = Self.fileBytes(box.vault)

        let dry = try box.run(["import", "json", input, "--dry-run", "--overwrite"])
        #expect(dry.status == Exit.ok, "\(dry)")
        let lines = dry.out.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        #expect(lines.contains(["add", "svc", "fresh", "item", "3"]), "\(dry)")
        #expect(lines.contains(["replace", "svc", "changed", "item", "2"]), "\(dry)")
        #expect(lines.contains(["unchanged", "svc", "same", "item", "1"]), "\(dry)")
        #expect(dry.out.contains("would add 1, replace 1, leave 1 unchanged"), "\(dry)")
        #expect(!Self.leaks(dry, secrets), "the dry run printed a secret")
        #expect(Self.fileBytes(box.vault) == vaultBytes, "the dry run wrote to the vault")

        // Without --overwrite the dry run shows the clash and fails as the import would.
        let dryClash = try box.run(["import", "json", input, "--dry-run"])
        #expect(dryClash.status == Exit.failure && dryClash.out.contains("clash"), "\(dryClash)")
        #expect(Self.fileBytes(box.vault) == vaultBytes)

        let clash = try box.run(["import", "json", input])
        #expect(clash.status == Exit.failure && clash.err.contains("svc / changed") && clash.err.contains("--overwrite"), "\(clash)")
        #expect(clash.err.contains("nothing was imported") && !Self.leaks(clash, secrets), "\(clash)")
        #expect(Self.fileBytes(box.vault) == vaultBytes, "a refused import wrote to the vault")

        let done = try box.run(["import", "json", input, "--overwrite"])
        #expect(done.status == Exit.ok && done.out.contains("1 added, 1 replaced, 1 unchanged"), "\(done)")
        let stored = Dictionary(uniqueKeysWithValues: try Self.contents(box).map { ($0.account, $0.secret) })
        #expect(stored == ["same": Array("same-secret".utf8), "changed": Array("new-secret".utf8), "fresh": [0, 1, 2, 0xFF]])
    }

    @Test("An import of 1,000 items is one commit: kill -9 at any moment leaves none of them or all", .timeLimit(.minutes(10)))
    func thousandItemsAtomic() throws {
        let box = try Sandbox()
        let total = 1000
        var json = "{\"format\": \"coffer-export\", \"version\": 1, \"items\": ["
        for index in 0..<total {
            json += (index == 0 ? "" : ",") + "\n{\"service\": \"bulk\", \"account\": \"item-\(index)\", \"secret\": \"s-\(index)-\(UUID().uuidString)\"}"
        }
        json += "]}\n"
        let input = box.path + "/bulk.json"
        try box.write(json, to: input)

        // One import left to finish, for its duration; its vault holds all of them.
        let whole = box.path + "/whole.coffer"
        #expect(try box.run(["--vault", whole, "init"]).status == Exit.ok)
        let full = try box.run(["--vault", whole, "import", "json", input])
        #expect(full.status == Exit.ok && full.out.contains("\(total) added"), "\(full)")
        #expect(try Self.count(box, vault: whole) == total)

        // Then kill -9 at points spread over that duration (and a little beyond), each on a
        // fresh vault: every time, the vault holds none of the items or all of them.
        var outcomes: [Int] = []
        let fractions: [Double] = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1]
        for (round, fraction) in fractions.enumerated() {
            let vault = box.path + "/kill-\(round).coffer"
            #expect(try box.run(["--vault", vault, "init"]).status == Exit.ok)
            let child = try box.start(["--vault", vault, "import", "json", input])
            usleep(useconds_t(max(0, full.seconds * fraction) * 1_000_000))
            kill(child.pid, SIGKILL)
            _ = child.wait()
            let count = try Self.count(box, vault: vault)
            #expect(count == 0 || count == total, "after kill -9 at \(fraction) of the import's time, \(count) of \(total) items")
            outcomes.append(count)
            let verify = try box.run(["--vault", vault, "verify"])
            #expect(verify.status == Exit.ok, "\(verify)")
        }
        #expect(outcomes.contains(0), "\(outcomes)")
    }

    // MARK: - Concurrent writers

    @Test("Two imports of one new item with different secrets at once: exactly one adds it; the other reports the clash and writes nothing", .timeLimit(.minutes(10)))
    func concurrentImportsOfOneItem() throws {
        // The clash check read the vault before the commit, outside the write lock: both imports
        // found no item, both committed, and the first import's secret was silently replaced.
        let box = try Sandbox()
        try box.initVault()
        for round in 0..<20 {
            let files = try (0..<2).map { side in
                let file = box.path + "/race-\(round)-\(side).json"
                try box.write(
                    #"{"format": "coffer-export", "version": 1, "items": [{"service": "race", "account": "r\#(round)", "secret": "secret-\#(side)-\#(round)"}]}"#,
                    to: file)
                return file
            }
            // Started at once, and (every other round) released together from the vault's lock:
            // either way their plans and commits overlap in some rounds.
            let runs = files.map { ["import", "json", $0] }
            let children = round % 2 == 0 ? try box.startTogether(runs) : try runs.map { try box.start($0) }
            let finished = children.map { box.expectClean($0.wait()) }
            let winners = finished.indices.filter { finished[$0].status == Exit.ok }
            #expect(winners.count == 1, "round \(round): \(finished)")
            for run in finished where run.status != Exit.ok {
                let refused =
                    run.status == Exit.failure && run.err.contains("race / r\(round)") && run.err.contains("already exist")
                    && run.err.contains("nothing was imported")
                #expect(refused, "round \(round): \(run)")
            }
            let stored = try box.run(["get", "race", "r\(round)"])
            #expect(
                winners.count == 1 && stored.printed(Array("secret-\(winners[0])-\(round)".utf8)),
                "round \(round): the stored secret is not the successful import's")
        }
    }

    // MARK: - Names and the terminal

    @Test("Names with a newline, a tab, an escape, a C1 control or a bidi override, which set accepts, survive export and import: plaintext to a file, to standard output, and sealed", .timeLimit(.minutes(10)))
    func controlCharacterNamesRoundTrip() throws {
        let box = try Sandbox()
        try box.initVault()
        let names = [
            ("multi\nline", "tab\there"), ("esc\u{1B}[31mred", "bell\u{07}"), ("csi\u{9B}2J", "rlo\u{202E}txt.exe"),
            ("del\u{7F}", "cr\rx"),
        ]
        for (index, (service, account)) in names.enumerated() {
            try box.set(service, account, Array("secret-\(index)".utf8), ["--label", "label\t\(index)", "--comment", "c\n\(index)"])
        }
        let before = try Self.contents(box)
        #expect(before.count == names.count)

        let plain = box.path + "/names.json"
        #expect(try box.run(["export", "--plaintext", "-o", plain]).status == Exit.ok)
        let piped = try box.run(["export", "--plaintext"])
        #expect(piped.status == Exit.ok, "\(piped)")
        let identity = box.path + "/identity"
        let made = try box.run(["identity", "new", "--output", identity], vault: false, passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        let sealed = box.path + "/names.age"
        let recipient = made.out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try box.run(["export", "--recipient", recipient, "-o", sealed]).status == Exit.ok)

        let imports: [(String, [String], [UInt8]?)] = [
            ("file", ["import", "json", plain], nil), ("stdout", ["import", "json", "-"], piped.stdout),
            ("sealed", ["import", "json", sealed, "--identity-file", identity], nil),
        ]
        for (how, arguments, stdin) in imports {
            let vault = box.path + "/from-\(how).coffer"
            #expect(try box.run(["--vault", vault, "init"]).status == Exit.ok)
            let run = try box.run(["--vault", vault] + arguments, stdin: stdin)
            #expect(run.status == Exit.ok && run.out.contains("\(names.count) added"), "\(how): \(run)")
            #expect(try Self.contents(box, vault: vault) == before, "\(how): the imported items differ")
        }
    }

    /// ESC, the 8-bit CSI (U+009B) and RIGHT-TO-LEFT OVERRIDE (U+202E), as UTF-8: what must
    /// never reach a terminal raw.
    static let terminalBytes: [[UInt8]] = [[0x1B], [0xC2, 0x9B], [0xE2, 0x80, 0xAE]]

    /// Whether either output of `run` holds one of ``terminalBytes``.
    static func printsRaw(_ run: Run) -> Bool {
        terminalBytes.contains { run.stdout.firstRange(of: $0) != nil || run.stderr.firstRange(of: $0) != nil }
    }

    /// The outputs of `run` with every byte outside printable ASCII as \xNN, for messages.
    static func shown(_ run: Run) -> String {
        func hex(_ bytes: [UInt8]) -> String {
            bytes.map { (0x20..<0x7F).contains($0) ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0) }.joined()
        }
        return "exit \(run.status); stdout: \(hex(run.stdout)); stderr: \(hex(run.stderr))"
    }

    @Test("Input printed by import is escaped: a JSON member name given twice, pass paths in the dry run's origin column and in errors (ESC, C1 CSI, U+202E)", .timeLimit(.minutes(10)))
    func importEscapesInputOnTheTerminal() throws {
        let box = try Sandbox()
        try box.initVault()
        let crafted = "x\u{1B}]0;owned\u{07}\u{9B}2J\u{202E}gpj"

        // A member name given twice (ESC and BEL as JSON escapes, CSI and U+202E raw).
        let name = #"x\u001b]0;owned\u0007"# + "\u{9B}2J\u{202E}gpj"
        let json = box.path + "/twice.json"
        try box.write(#"{"format": "coffer-export", "version": 1, "items": [], ""# + name + #"": 0, ""# + name + #"": 1}"#, to: json)
        let twice = try box.run(["import", "json", json, "--dry-run"])
        #expect(twice.status == Exit.usage && twice.err.contains("appears twice"), "\(Self.shown(twice))")
        #expect(!Self.printsRaw(twice), "\(Self.shown(twice))")

        // A pass store whose paths hold them.
        let home = box.path + "/gnupg"
        #expect(mkdir(home, 0o700) == 0)
        let gpgEnvironment = ["GNUPGHOME": home]
        defer { _ = try? Self.external("gpgconf", ["--kill", "all"], environment: gpgEnvironment, directory: box.path) }
        let generated = try Self.external(
            "gpg", ["--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", "Coffer Test <coffer@example.invalid>", "default", "default", "never"],
            environment: gpgEnvironment, directory: box.path)
        #expect(generated.status == 0, "gpg --quick-gen-key: \(generated.err)")
        let store = box.path + "/password-store"
        func encrypt(_ entry: String, _ plaintext: String) throws {
            let path = store + "/" + entry + ".gpg"
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let encrypted = try Self.external(
                "gpg", ["--batch", "--yes", "--trust-model", "always", "-r", "coffer@example.invalid", "-o", path, "--encrypt"],
                environment: gpgEnvironment, stdin: Array(plaintext.utf8), directory: box.path)
            #expect(encrypted.status == 0, "gpg --encrypt: \(encrypted.err)")
        }
        try encrypt(crafted + "/account", "first")
        try encrypt("service/" + crafted, "second")

        // The dry run's table: service, account and origin (the entry's path).
        let dry = try box.run(["import", "pass", store, "--dry-run"], environment: gpgEnvironment)
        #expect(dry.status == Exit.ok && dry.out.contains("would add 2"), "\(Self.shown(dry))")
        #expect(!Self.printsRaw(dry), "\(Self.shown(dry))")

        // One item from two entries: the error names both paths.
        try encrypt("account", "top")
        let duplicate = try box.run(["import", "pass", store, "--service", crafted], environment: gpgEnvironment)
        #expect(duplicate.status == Exit.usage && duplicate.err.contains("more than once"), "\(Self.shown(duplicate))")
        #expect(!Self.printsRaw(duplicate), "\(Self.shown(duplicate))")
        #expect(unlink(store + "/account.gpg") == 0)

        // An entry gpg cannot decrypt: the error names its path.
        try box.write("garbage", to: store + "/" + crafted + "/broken.gpg")
        let broken = try box.run(["import", "pass", store], environment: gpgEnvironment)
        #expect(broken.status == Exit.failure && broken.err.contains("broken.gpg"), "\(Self.shown(broken))")
        #expect(!Self.printsRaw(broken), "\(Self.shown(broken))")
    }

    // MARK: - pass

    /// Runs a program (gpg, age) with `environment` added, `stdin` as its input.
    @discardableResult
    static func external(
        _ program: String, _ arguments: [String], environment: [String: String] = [:], stdin: [UInt8] = [], directory: String
    ) throws -> (status: Int32, out: [UInt8], err: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [program] + arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let input = directory + "/.stdin-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: input, contents: Data(stdin), attributes: [.posixPermissions: 0o600])
        defer { unlink(input) }
        process.standardInput = FileHandle(forReadingAtPath: input)
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let errData = Locked()
        let reader = Thread { errData.set(err.fileHandleForReading.readDataToEndOfFile()) }
        reader.start()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !errData.done { usleep(1000) }
        return (process.terminationStatus, [UInt8](outData), String(decoding: errData.data, as: UTF8.self))
    }

    /// A value one thread sets and another polls.
    final class Locked: @unchecked Sendable {
        private let lock = NSLock()
        private var value: Data?
        func set(_ data: Data) { lock.withLock { value = data } }
        var done: Bool { lock.withLock { value != nil } }
        var data: Data { lock.withLock { value ?? Data() } }
    }

    @Test("pass: each .gpg file decrypted by a real gpg in batch mode; path → service/account; first line → secret", .timeLimit(.minutes(10)))
    func passStore() throws {
        let box = try Sandbox()
        try box.initVault()
        let home = box.path + "/gnupg"
        #expect(mkdir(home, 0o700) == 0)
        let gpgEnvironment = ["GNUPGHOME": home]
        defer { _ = try? Self.external("gpgconf", ["--kill", "all"], environment: gpgEnvironment, directory: box.path) }
        let generated = try Self.external(
            "gpg", ["--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", "Coffer Test <coffer@example.invalid>", "default", "default", "never"],
            environment: gpgEnvironment, directory: box.path)
        #expect(generated.status == 0, "gpg --quick-gen-key: \(generated.err)")

        let store = box.path + "/password-store"
        let entries: [(String, [UInt8])] = [
            ("web/github.com/octocat", Array("s3cr,et \"x\" ✓\nlogin: octocat\nurl: https://github.com\n".utf8)),
            ("email/work/alice", [0x70, 0xFF, 0x01, 0x0A]),
            ("top", Array("at the top".utf8)),
        ]
        for (name, plaintext) in entries {
            let path = store + "/" + name + ".gpg"
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let encrypted = try Self.external(
                "gpg", ["--batch", "--yes", "--trust-model", "always", "-r", "coffer@example.invalid", "-o", path, "--encrypt"],
                environment: gpgEnvironment, stdin: plaintext, directory: box.path)
            #expect(encrypted.status == 0, "gpg --encrypt: \(encrypted.err)")
        }
        try box.write("coffer@example.invalid\n", to: store + "/.gpg-id")
        try box.write("not an entry", to: store + "/README")

        // An entry at the top has no directory to be its service: named, and nothing written.
        let vaultBytes = Self.fileBytes(box.vault)
        let refused = try box.run(["import", "pass", store], environment: gpgEnvironment)
        #expect(refused.status == Exit.usage && refused.err.contains("top.gpg") && refused.err.contains("--service"), "\(refused)")
        #expect(Self.fileBytes(box.vault) == vaultBytes)

        let run = try box.run(["import", "pass", store, "--service", "misc"], environment: gpgEnvironment)
        #expect(run.status == Exit.ok && run.out.contains("3 added"), "\(run)")
        #expect(run.err.contains("1 entry has more lines after the first"), "\(run)")
        #expect(!Self.leaks(run, [Array("s3cr,et".utf8), Array("at the top".utf8), Array("login: octocat".utf8)]))
        let stored = try Self.contents(box)
        #expect(
            stored == [
                Stored(service: "email/work", account: "alice", label: "", comment: "", secret: [0x70, 0xFF, 0x01]),
                Stored(service: "misc", account: "top", label: "", comment: "", secret: Array("at the top".utf8)),
                Stored(service: "web/github.com", account: "octocat", label: "", comment: "", secret: Array("s3cr,et \"x\" ✓".utf8)),
            ])

        // A directory reached through a symbolic link is followed, as pass follows it; a link
        // loop ends. (Before, both were skipped without a word and the import said "complete".)
        let team = box.path + "/team-store/shared"
        try FileManager.default.createDirectory(atPath: team, withIntermediateDirectories: true)
        let linked = try Self.external(
            "gpg", ["--batch", "--yes", "--trust-model", "always", "-r", "coffer@example.invalid", "-o", team + "/deploy.gpg", "--encrypt"],
            environment: gpgEnvironment, stdin: Array("via a link".utf8), directory: box.path)
        #expect(linked.status == 0, "gpg --encrypt: \(linked.err)")
        #expect(symlink(box.path + "/team-store/shared", store + "/team") == 0)
        #expect(symlink(store, team + "/loop") == 0)
        let followed = try box.run(["import", "pass", store, "--service", "misc"], environment: gpgEnvironment)
        #expect(followed.status == Exit.ok && followed.out.contains("1 added"), "\(followed)")
        #expect(try Self.contents(box).contains(Stored(service: "team", account: "deploy", label: "", comment: "", secret: Array("via a link".utf8))))

        // An entry that is not a regular file (a FIFO, a dangling link) fails the import, named.
        #expect(mkfifo(store + "/web/pipe.gpg", 0o600) == 0)
        let fifo = try box.run(["import", "pass", store, "--service", "misc", "--overwrite", "--dry-run"], environment: gpgEnvironment)
        #expect(fifo.status == Exit.failure && fifo.err.contains("web/pipe.gpg") && fifo.err.contains("not a regular file"), "\(fifo)")
        unlink(store + "/web/pipe.gpg")
        #expect(symlink(store + "/nowhere", store + "/web/dangling.gpg") == 0)
        let dangling = try box.run(["import", "pass", store, "--service", "misc", "--overwrite", "--dry-run"], environment: gpgEnvironment)
        #expect(dangling.status == Exit.failure && dangling.err.contains("web/dangling.gpg"), "\(dangling)")
        unlink(store + "/web/dangling.gpg")

        // A file gpg cannot decrypt fails the whole import, naming the entry.
        try box.write("garbage", to: store + "/web/broken.gpg")
        let broken = try box.run(["import", "pass", store, "--service", "misc", "--overwrite"], environment: gpgEnvironment)
        #expect(broken.status == Exit.failure && broken.err.contains("web/broken.gpg"), "\(broken)")
    }

    // MARK: - age

    /// `age-keygen -o PATH`; the recipient (age1…) of the new key.
    static func ageKey(_ path: String, in box: Sandbox) throws -> String {
        let made = try external("age-keygen", ["-o", path], directory: box.path)
        #expect(made.status == 0, "\(made.err)")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return text.split(separator: "\n").first { $0.hasPrefix("# public key: ") }.map { String($0.dropFirst(14)) } ?? ""
    }

    @Test("Sealed export: age -d opens what coffer export --recipient writes; coffer import opens what age -r writes (binary and armored)", .timeLimit(.minutes(10)))
    func ageInterop() throws {
        let box = try Sandbox()
        try box.initVault()
        let binary: [UInt8] = [0x00, 0xFE, 0xFF, 0x41]
        try box.set("db.internal", "app", Array("hunter2".utf8), ["--label", "DB"])
        try box.set("bin", "blob", binary)
        // More than one 64 KiB chunk of payload.
        let large = (0..<100_000).map { UInt8(0x61 + $0 % 26) }
        try box.set("big", "secret", large)
        let before = try Self.contents(box)
        let secrets = before.map(\.secret)

        let keyFile = box.path + "/age-key.txt"
        let recipient = try Self.ageKey(keyFile, in: box)
        #expect(recipient.hasPrefix("age1"))
        let other = try Self.ageKey(box.path + "/other-key.txt", in: box)

        // coffer → age.
        let sealed = box.path + "/export.age"
        let export = try box.run(["export", "--recipient", recipient, "--recipient", other, "-o", sealed])
        #expect(export.status == Exit.ok && export.err.contains("sealed to 2 recipients"), "\(export)")
        #expect(!Self.leaks(export, secrets))
        var status = stat()
        #expect(stat(sealed, &status) == 0 && status.st_mode & 0o777 == 0o600)
        #expect(Self.fileBytes(sealed).firstRange(of: Array("hunter2".utf8)) == nil)
        let opened = try Self.external("age", ["-d", "-i", keyFile, sealed], directory: box.path)
        #expect(opened.status == 0, "age -d: \(opened.err)")
        let document = try JSONSerialization.jsonObject(with: Data(opened.out)) as? [String: Any]
        #expect((document?["items"] as? [Any])?.count == 3 && document?["format"] as? String == "coffer-export")

        // And back into coffer, with either recipient's identity.
        let target = box.path + "/target.coffer"
        #expect(try box.run(["--vault", target, "init"]).status == Exit.ok)
        let noIdentity = try box.run(["--vault", target, "import", "json", sealed])
        #expect(noIdentity.status == Exit.usage && noIdentity.err.contains("--identity-file"), "\(noIdentity)")
        let imported = try box.run(["--vault", target, "import", "json", sealed, "--identity-file", box.path + "/other-key.txt"])
        #expect(imported.status == Exit.ok && imported.out.contains("3 added"), "\(imported)")
        #expect(try Self.contents(box, vault: target) == before)

        // age → coffer: a plaintext export sealed by age, binary and armored, to a coffer identity.
        let identity = box.path + "/coffer-identity"
        let made = try box.run(["identity", "new", "--output", identity], vault: false, passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        let cofferRecipient = made.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let plain = box.path + "/plain.json"
        #expect(try box.run(["export", "--plaintext", "-o", plain]).status == Exit.ok)
        for armor in [false, true] {
            let file = box.path + "/from-age\(armor ? ".asc" : "").age"
            let sealedByAge = try Self.external(
                "age", ["-r", cofferRecipient] + (armor ? ["-a"] : []) + ["-o", file, plain], directory: box.path)
            #expect(sealedByAge.status == 0, "age -r: \(sealedByAge.err)")
            let vault = box.path + "/from-age-\(armor).coffer"
            #expect(try box.run(["--vault", vault, "init"]).status == Exit.ok)
            let run = try box.run(["--vault", vault, "import", "json", file, "--identity-file", identity])
            #expect(run.status == Exit.ok && run.out.contains("3 added"), "armor \(armor): \(run)")
            #expect(try Self.contents(box, vault: vault) == before, "armor \(armor)")
            // An identity it was not sealed to: exit 4, nothing written.
            let wrong = try box.run(["--vault", vault, "import", "json", file, "--identity-file", keyFile, "--overwrite"])
            #expect(wrong.status == Exit.wrongKey && wrong.err.contains("none of the"), "\(wrong)")
        }

        // A changed byte of the payload: exit 5, nothing written.
        var tampered = Self.fileBytes(sealed)
        tampered[tampered.count - 20] ^= 0x01
        try box.write(tampered, to: box.path + "/tampered.age")
        let vaultBytes = Self.fileBytes(target)
        let damaged = try box.run(["--vault", target, "import", "json", box.path + "/tampered.age", "--identity-file", keyFile, "--overwrite"])
        #expect(damaged.status == Exit.integrity && damaged.err.contains("fails authentication"), "\(damaged)")
        #expect(Self.fileBytes(target) == vaultBytes)
    }
}
