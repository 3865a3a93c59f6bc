import CofferInterchange
import Foundation
import Testing

/// Names going out to a terminal or a shell: `escapedName`, `quotedName`, `escapingControls` and
/// `shellQuoted` on C0 and C1 controls, bidirectional overrides and other format characters,
/// line and paragraph separators, quotes, and names that already look quoted; and what bash
/// (and sh, for the forms it reads) makes of the quoted forms.
@Suite("Escaping names for the terminal and the shell")
struct EscapingTests {
    /// Names holding something a terminal acts on, and their `$'…'` form (octal bytes).
    static let controlNames: [(String, String)] = [
        ("multi\nline", #"$'multi\nline'"#),
        ("tab\there", #"$'tab\there'"#),
        ("cr\rx", #"$'cr\rx'"#),
        ("esc\u{1B}[31m", #"$'esc\033[31m'"#),
        ("bell\u{07}", #"$'bell\007'"#),
        ("nul\u{0}", #"$'nul\000'"#),
        ("del\u{7F}", #"$'del\177'"#),
        // C1 controls: the 8-bit CSI and NEL.
        ("csi\u{9B}2J", #"$'csi\302\2332J'"#),
        ("nel\u{85}", #"$'nel\302\205'"#),
        // Format characters: RIGHT-TO-LEFT OVERRIDE, ZERO WIDTH SPACE, the byte-order mark, a tag.
        ("rlo\u{202E}txt.exe", #"$'rlo\342\200\256txt.exe'"#),
        ("zw\u{200B}", #"$'zw\342\200\213'"#),
        ("bom\u{FEFF}", #"$'bom\357\273\277'"#),
        ("tag\u{E0001}", #"$'tag\363\240\200\201'"#),
        // LINE SEPARATOR and PARAGRAPH SEPARATOR.
        ("ls\u{2028}ps\u{2029}", #"$'ls\342\200\250ps\342\200\251'"#),
        // Quotes and backslashes inside the $'…' form.
        ("it's\u{1B}", #"$'it\'s\033'"#),
        ("back\\slash\u{1B}", #"$'back\\slash\033'"#),
    ]

    /// Names with nothing a terminal acts on.
    static let plainNames = [
        "plain", "a b", #"it's "q" \ back"#, "café ✓ 😀", "e\u{301}", "$HOME", "$(id) `id` ;|&<>*?~!", "-n", "",
    ]

    @Test("escapedName: unchanged without controls; else $'…' with octal bytes, as ls prints it")
    func escapedNames() {
        for name in Self.plainNames {
            #expect(escapedName(name) == name, "\(name.debugDescription)")
        }
        for (name, escaped) in Self.controlNames {
            #expect(escapedName(name) == escaped, "\(name.debugDescription)")
            #expect(
                !holdsRawTerminalControls(escapedName(name)) && escapedName(name).allSatisfy(\.isASCII),
                "\(name.debugDescription)")
        }
    }

    @Test("escapedName: a name that itself begins with $' is quoted too, so the printed form is never ambiguous")
    func escapedNameLookingQuoted() {
        #expect(escapedName("$'x'") == #"$'$\'x\''"#)
        #expect(escapedName("$'") == #"$'$\''"#)
        #expect(escapedName(#"$'\033'"#) == #"$'$\'\\033\''"#)
        // Printed, two different names never look the same.
        let names = ["x\u{1B}", #"$'x\033'"#, "$'x'", "x"]
        #expect(Set(names.map(escapedName)).count == names.count)
    }

    @Test("quotedName: '…' with ' as '\\'' ; $'…' when the name holds controls")
    func quotedNames() {
        let cases: [(String, String)] = [
            ("svc", "'svc'"), ("", "''"), ("it's", #"'it'\''s'"#), ("a b $HOME `x`", "'a b $HOME `x`'"),
            ("$'x", #"'$'\''x'"#),
            (#"\"#, #"'\'"#), ("café", "'café'"),
        ]
        for (name, quoted) in cases {
            #expect(quotedName(name) == quoted, "\(name.debugDescription)")
        }
        for (name, escaped) in Self.controlNames {
            #expect(quotedName(name) == escaped, "\(name.debugDescription)")
        }
    }

    @Test("escapingControls: each control, format character and separator as octal bytes; the rest unchanged")
    func escapingControlsOctal() {
        for text in ["plain 'q' \"d\" \\ é ✓", "", "$'x'"] {
            #expect(escapingControls(text) == text)
        }
        let cases: [(String, String)] = [
            ("a\nb", #"a\012b"#), ("t\tx", #"t\011x"#), ("cr\r", #"cr\015"#), ("\u{1B}[31m", #"\033[31m"#),
            ("\u{9B}2J", #"\302\2332J"#),
            ("\u{85}", #"\302\205"#), ("x\u{202E}y", #"x\342\200\256y"#), ("\u{2028}", #"\342\200\250"#),
            ("\u{7F}", #"\177"#),
            ("\u{E0001}", #"\363\240\200\201"#), ("path/é\u{1B}\\", #"path/é\033\"#),
        ]
        for (text, escaped) in cases {
            #expect(escapingControls(text) == escaped, "\(text.debugDescription)")
            #expect(escapingControls(text, json: false) == escaped, "\(text.debugDescription)")
        }
    }

    @Test("escapingControls(json: true): \\uXXXX (surrogate pairs beyond the BMP); line breaks kept")
    func escapingControlsJSON() throws {
        let cases: [(String, String)] = [
            ("\u{1B}", #"\u001b"#), ("\u{9B}", #"\u009b"#), ("\u{85}", #"\u0085"#), ("\u{202E}", #"\u202e"#),
            ("\u{2028}", #"\u2028"#),
            ("\u{2029}", #"\u2029"#), ("\t", #"\u0009"#), ("\r", #"\u000d"#), ("\u{7F}", #"\u007f"#),
            ("\u{E0001}", #"\udb40\udc01"#),
            ("a\n\u{1B}b", "a\n" + #"\u001bb"#),
        ]
        for (text, escaped) in cases {
            #expect(escapingControls(text, json: true) == escaped, "\(text.debugDescription)")
        }
        let pretty = "{\n  \"a\" : 1,\n  \"b\" : \"é\"\n}"
        #expect(escapingControls(pretty, json: true) == pretty)

        // What JSONEncoder writes, escaped, is the same document to a JSON reader, with nothing raw.
        let values = [
            "name": "evil\u{1B}]0;t\u{07}\u{9B}2J\u{202E}gpj\u{2028}\u{2029}\u{85}\u{E0001}", "plain": "ok",
            "line": "a\nb",
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let json = String(decoding: try encoder.encode(values), as: UTF8.self)
        let escaped = escapingControls(json, json: true)
        #expect(
            !holdsRawTerminalControls(escaped)
                && !escaped.unicodeScalars.contains { $0 == "\u{85}" || $0 == "\u{E0001}" })
        let read = try JSONSerialization.jsonObject(with: Data(escaped.utf8)) as? [String: String]
        #expect(read == values)
    }

    @Test("shellQuoted: bare when only safe characters, else single-quoted, else $'…'")
    func shellQuotedNames() {
        let cases: [(String, String)] = [
            ("simple-name_1.2@host:/path,x+y=z%", "simple-name_1.2@host:/path,x+y=z%"),
            ("", "''"), ("a b", "'a b'"), ("it's", #"'it'\''s'"#), ("$HOME", "'$HOME'"), ("a;rm -rf /", "'a;rm -rf /'"),
            ("`id`", "'`id`'"), ("*", "'*'"), ("~", "'~'"), ("é", "'é'"), ("!x", "'!x'"), ("$'x'", #"'$'\''x'\'''"#),
        ]
        for (name, quoted) in cases {
            #expect(shellQuoted(name) == quoted, "\(name.debugDescription)")
        }
        for (name, escaped) in Self.controlNames {
            #expect(shellQuoted(name) == escaped, "\(name.debugDescription)")
        }
    }

    // MARK: - The shell reads them back

    /// Runs `script` with the shell at `path`; its exit status and standard output.
    static func run(_ path: String, _ script: String) throws -> (status: Int32, output: [UInt8]) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["-c", script]
        process.environment = ["PATH": "/usr/bin:/bin", "LC_ALL": "C"]
        process.standardInput = FileHandle.nullDevice
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, [UInt8](data))
    }

    /// Each of `words` printed by `printf '%s\0'` in the shell at `path`: the strings it made of them.
    static func readBack(_ path: String, _ words: [String]) throws -> [[UInt8]] {
        let script = words.map { "printf '%s\\0' " + $0 }.joined(separator: "\n")
        let result = try run(path, script)
        #expect(result.status == 0, "\(path) exited \(result.status)")
        return result.output.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { Array($0) }
    }

    /// Every name the shell can pass (no NUL).
    static var shellNames: [String] {
        (plainNames + controlNames.map(\.0) + ["$'x'", "$'", "x\\", "'", "''", "\"", "a\u{0301}\u{202E}'\"$`\\!*"])
            .filter { !$0.contains("\u{0}") }
    }

    @Test("bash reads shellQuoted, quotedName and escapedName's $'…' forms back as the exact name")
    func bashRoundTrip() throws {
        let names = Self.shellNames
        #expect(try Self.readBack("/bin/bash", names.map(shellQuoted)) == names.map { Array($0.utf8) })
        #expect(try Self.readBack("/bin/bash", names.map(quotedName)) == names.map { Array($0.utf8) })
        let dollarQuoted = names.filter { escapedName($0) != $0 }
        #expect(dollarQuoted.count > 10)
        #expect(try Self.readBack("/bin/bash", dollarQuoted.map(escapedName)) == dollarQuoted.map { Array($0.utf8) })
    }

    @Test("sh reads the bare and single-quoted forms back as the exact name")
    func shRoundTrip() throws {
        // sh (dash) has no $'…'; names with controls are left to bash and zsh.
        let names = Self.shellNames.filter { !shellQuoted($0).hasPrefix("$'") }
        #expect(names.count > 10)
        #expect(try Self.readBack("/bin/sh", names.map(shellQuoted)) == names.map { Array($0.utf8) })
    }
}
