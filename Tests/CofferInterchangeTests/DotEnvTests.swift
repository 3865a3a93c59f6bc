import CofferInterchange
import Foundation
import Testing

/// `.env` files, in process: the format exactly as `DotEnv`'s documentation states it, and
/// errors that name the file and the line but never quote what is on it.
@Suite("DotEnv: .env files")
struct DotEnvTests {
    /// One assignment as the tests compare it.
    struct Parsed: Equatable, CustomStringConvertible {
        var name: String
        var value: [UInt8]
        var line: Int

        init(_ name: String, _ value: String, line: Int) {
            self.init(name, bytes: Array(value.utf8), line: line)
        }

        init(_ name: String, bytes: [UInt8], line: Int) {
            self.name = name
            self.value = bytes
            self.line = line
        }

        var description: String { "\(name) = \(value) (line \(line))" }
    }

    static func parse(_ text: String, file: String = "app.env") throws -> [Parsed] {
        try parse(bytes: Array(text.utf8), file: file)
    }

    static func parse(bytes: [UInt8], file: String = "app.env") throws -> [Parsed] {
        let assignments = try bytes.withUnsafeBytes { try DotEnv.parse($0, file: file) }
        return assignments.map { Parsed($0.name, bytes: $0.value, line: $0.line) }
    }

    /// The error parsing `text` throws.
    static func failure(_ text: String, file: String = "app.env", sourceLocation: SourceLocation = #_sourceLocation)
        -> InterchangeError?
    {
        interchangeError(sourceLocation: sourceLocation) { _ = try parse(text, file: file) }
    }

    // MARK: - Lines

    @Test("A line ends at LF; one CR before it is dropped; the last line needs no newline")
    func lineEnds() throws {
        #expect(try Self.parse("A=1\nB=2") == [Parsed("A", "1", line: 1), Parsed("B", "2", line: 2)])
        #expect(
            try Self.parse("A=1\r\nB='two'\r\nC=\"three\" # c\r\nD=\r\n")
                == [
                    Parsed("A", "1", line: 1), Parsed("B", "two", line: 2), Parsed("C", "three", line: 3),
                    Parsed("D", "", line: 4),
                ])
        // Only one CR is dropped: a second one belongs to the unquoted value.
        #expect(try Self.parse("A=x\r\r\n") == [Parsed("A", "x\r", line: 1)])
        // A CR alone does not end a line.
        #expect(try Self.parse("A=x\rB=y\n") == [Parsed("A", "x\rB=y", line: 1)])
        #expect(try Self.parse("") == [])
        #expect(try Self.parse("\n\r\n\n") == [])
    }

    @Test(
        "Blank lines and lines whose first character after spaces and tabs is # are ignored; lines keep their numbers")
    func commentsAndBlankLines() throws {
        let text = "\n   \n\t\n# comment\n  # indented\n\t#tabbed\n#A=1\nB=2\n \t # A=3\n"
        #expect(try Self.parse(text) == [Parsed("B", "2", line: 8)])
    }

    @Test("export followed by spaces or tabs may come first; export alone is a name like any other")
    func exportPrefix() throws {
        #expect(
            try Self.parse("export A=1\nexport\tB=2\n  export  \t C=3\nexport=4\nexportD=5\n")
                == [
                    Parsed("A", "1", line: 1), Parsed("B", "2", line: 2), Parsed("C", "3", line: 3),
                    Parsed("export", "4", line: 4),
                    Parsed("exportD", "5", line: 5),
                ])
        for text in ["export A\n", "export\n", "export A B=1\n"] {
            let error = try #require(Self.failure(text), "\(text)")
            #expect(
                error.message == "line 1 of the env file 'app.env': expected NAME=VALUE (with no space before the =)",
                "\(text)")
        }
    }

    @Test("Duplicate names are all returned, in order, each with its line")
    func duplicateNames() throws {
        #expect(
            try Self.parse("A=1\nB=2\nA=3\n") == [
                Parsed("A", "1", line: 1), Parsed("B", "2", line: 2), Parsed("A", "3", line: 3),
            ])
    }

    // MARK: - Names

    @Test("NAME is [A-Za-z_][A-Za-z0-9_]*, followed at once by =")
    func names() throws {
        #expect(
            try Self.parse("_=1\n_a9=2\nZ=3\nlower_UPPER_09=4\n")
                == [
                    Parsed("_", "1", line: 1), Parsed("_a9", "2", line: 2), Parsed("Z", "3", line: 3),
                    Parsed("lower_UPPER_09", "4", line: 4),
                ])
        for text in ["1A=x", "A-B=x", "A.B=x", "é=x", "=x", "A$=x"] {
            let error = try #require(Self.failure(text), "\(text)")
            #expect(
                error.message
                    == "line 1 of the env file 'app.env': not a variable name (letters, digits and _, not starting with a digit)",
                "\(text)")
            #expect(error.kind == .usage)
        }
        for text in ["A =x", "A\t=x", "A", "A x=y"] {
            let error = try #require(Self.failure(text), "\(text)")
            #expect(
                error.message == "line 1 of the env file 'app.env': expected NAME=VALUE (with no space before the =)",
                "\(text)")
        }
        #expect(DotEnv.isValidName("A".utf8) && DotEnv.isValidName("_".utf8) && DotEnv.isValidName("a_1Z".utf8))
        #expect(!DotEnv.isValidName("".utf8) && !DotEnv.isValidName("1a".utf8) && !DotEnv.isValidName("a-b".utf8))
        #expect(!DotEnv.isValidName("é".utf8) && !DotEnv.isValidName("a b".utf8) && !DotEnv.isValidName("a=".utf8))
    }

    // MARK: - Values

    @Test("Empty values: nothing after the =, or only a comment after it")
    func emptyValues() throws {
        #expect(
            try Self.parse("A=\nB= # a comment\nC=\t#c\n") == [
                Parsed("A", "", line: 1), Parsed("B", "", line: 2), Parsed("C", "", line: 3),
            ])
    }

    @Test(
        "Unquoted: the rest of the line up to a ' #' or tab-# comment, trailing spaces and tabs removed, nothing expanded"
    )
    func unquotedValues() throws {
        let cases: [(String, String)] = [
            ("A=value with spaces # a comment", "value with spaces"),
            ("A=x\t# a comment after a tab", "x"),
            ("A=a#b", "a#b"),
            ("A=https://example.com/#anchor", "https://example.com/#anchor"),
            ("A=#not-a-comment", "#not-a-comment"),
            ("A=trailing \t \t", "trailing"),
            ("A=$HOME ${USER} `id` $(id)", "$HOME ${USER} `id` $(id)"),
            ("A=x=y==", "x=y=="),
            (#"A=it's "quoted" inside"#, #"it's "quoted" inside"#),
            (#"A=back\nslash"#, #"back\nslash"#),
            ("A=é ✓ 😀", "é ✓ 😀"),
        ]
        for (line, value) in cases {
            #expect(try Self.parse(line + "\n") == [Parsed("A", value, line: 1)], "\(line)")
        }
        // Bytes that are not UTF-8 pass unchanged: a value is bytes.
        #expect(
            try Self.parse(bytes: Array("A=".utf8) + [0xFF, 0xFE, 0x80] + [0x0A]) == [
                Parsed("A", bytes: [0xFF, 0xFE, 0x80], line: 1)
            ])
    }

    @Test("'…': every byte up to the next ' as it is")
    func singleQuotedValues() throws {
        let cases: [(String, String)] = [
            (#"A='single # not a comment $HOME \n "x" \'"#, #"single # not a comment $HOME \n "x" \"#),
            ("A=''", ""),
            ("A=' lead and trail '", " lead and trail "),
            ("A='x' # a comment", "x"),
            ("A='x'\t \t", "x"),
            ("A='tab\there'", "tab\there"),
        ]
        for (line, value) in cases {
            #expect(try Self.parse(line + "\n") == [Parsed("A", value, line: 1)], "\(line)")
        }
    }

    @Test("Double quotes: up to the next unescaped quote; six escapes, nothing expanded")
    func doubleQuotedValues() throws {
        #expect(try Self.parse(#"A="a\"b\\c\$d\ne\rf\tg""# + "\n") == [Parsed("A", "a\"b\\c$d\ne\rf\tg", line: 1)])
        let cases: [(String, String)] = [
            (#"A="$HOME 'x' # not a comment""#, "$HOME 'x' # not a comment"),
            (#"A="""#, ""),
            (#"A="x" # a comment"#, "x"),
            ("A=\"x\"\t#c", "x"),
            (#"A=" spaced ""#, " spaced "),
        ]
        for (line, value) in cases {
            #expect(try Self.parse(line + "\n") == [Parsed("A", value, line: 1)], "\(line)")
        }
        let unknown = try #require(Self.failure(#"A="\q""#))
        #expect(
            unknown.message
                == #"line 1 of the env file 'app.env': an unknown escape in a "…" value (known: \" \\ \$ \n \r \t)"#)
    }

    // MARK: - Errors

    @Test("Each malformed line is a usage error naming the file and the line")
    func malformedLines() throws {
        let cases: [(text: String, line: Int, reason: String)] = [
            ("A='x' trailing\n", 1, "unexpected text after the closing quote (a comment starts with #)"),
            (#"A="x"y"# + "\n", 1, "unexpected text after the closing quote (a comment starts with #)"),
            ("A= value\n", 1, "unexpected text after the = (a comment starts with #)"),
            ("A='unclosed\n", 1, "the ' quote is not closed on this line"),
            (#"A="unclosed"# + "\n", 1, #"the " quote is not closed on this line"#),
            (#"A="ends in a backslash\"# + "\n", 1, #"the " quote is not closed on this line"#),
            (#"A="only an escaped quote\""# + "\n", 1, #"the " quote is not closed on this line"#),
            // A quoted value ends on its own line.
            ("A='first\nsecond'\n", 1, "the ' quote is not closed on this line"),
            ("OK=1\nA=\"first\nsecond\"\n", 2, #"the " quote is not closed on this line"#),
            ("# c\r\n\r\nOK=1\r\nA=\"unclosed\r\n", 4, #"the " quote is not closed on this line"#),
            ("OK=1\nNAME = value\n", 2, "expected NAME=VALUE (with no space before the =)"),
            ("A=x\u{0}y\n", 1, "a NUL byte, which no environment variable can hold"),
        ]
        for (text, line, reason) in cases {
            let error = try #require(Self.failure(text), "\(text)")
            #expect(error.kind == .usage, "\(text)")
            #expect(error.message == "line \(line) of the env file 'app.env': \(reason)", "\(text)")
        }
        // The file's name is quoted for a terminal: escaped, never raw.
        let error = try #require(Self.failure("1A=x\n", file: "evil\u{1B}]0;x\u{07}\u{202E}.env"))
        #expect(
            error.message.hasPrefix(#"line 1 of the env file $'evil\033]0;x\007\342\200\256.env': "#),
            "\(error.message.debugDescription)")
        #expect(!holdsRawTerminalControls(error.message))
        let quote = try #require(Self.failure("1A=x\n", file: "it's.env"))
        #expect(quote.message.hasPrefix(#"line 1 of the env file 'it'\''s.env': "#))
    }

    @Test("A malformed line's message never quotes its value, nor what comes before its =")
    func messagesNeverQuoteTheLine() throws {
        let value = "ghp_" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let lines = [
            "A='\(value)' trailing", "A=\"\(value)\\q\"", "A= \(value)", "1A=\(value)", "A \(value)", "\(value)",
            "my-token=\(value)",
            "A='\(value)", "A=\"\(value)", "A=\"\(value)\" \(value)", "export \(value)", "A=\(value)\u{0}",
            "A='\(value)\nB=\(value)'",
        ]
        for (index, line) in lines.enumerated() {
            let error = try #require(Self.failure("OK=1\n" + line + "\n"), "line \(index)")
            #expect(error.message.hasPrefix("line 2 of the env file 'app.env': "), "line \(index)")
            // Bools, so that a failure prints neither the message nor the value.
            let quotesValue = error.message.contains(value) || error.description.contains(value)
            let quotesName = error.message.contains("my-token") || error.message.contains("ghp_")
            #expect(!quotesValue, "line \(index): the message quotes the value")
            #expect(!quotesName, "line \(index): the message quotes the part before the =")
        }
    }

    // MARK: - Files

    @Test("read: the file's assignments; a missing file or a directory is a usage error naming it")
    func readFile() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/app.env"
            let text = "# settings\nexport A='x y'\r\nB=\"two\\tparts\" # c\nC=3"
            #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            let assignments = try DotEnv.read(path).map { Parsed($0.name, bytes: $0.value, line: $0.line) }
            #expect(
                assignments == [
                    Parsed("A", "x y", line: 2), Parsed("B", "two\tparts", line: 3), Parsed("C", "3", line: 4),
                ])

            // Errors name the path given.
            #expect(FileManager.default.createFile(atPath: path, contents: Data("A=1\nB= oops\n".utf8)))
            let bad = try #require(interchangeError { _ = try DotEnv.read(path) })
            #expect(bad.kind == .usage && bad.message.hasPrefix("line 2 of the env file '\(path)': "), "\(bad)")

            let missing = try #require(interchangeError { _ = try DotEnv.read(directory + "/absent.env") })
            #expect(
                missing.kind == .usage && missing.message == "the env file '\(directory)/absent.env' does not exist",
                "\(missing)")
            let folder = try #require(interchangeError { _ = try DotEnv.read(directory) })
            #expect(
                folder.kind == .usage && folder.message == "the env file '\(directory)' is a directory", "\(folder)")
        }
    }

    @Test("read: a file of exactly maximumSize bytes is read; one byte more is refused", .timeLimit(.minutes(10)))
    func sizeLimit() throws {
        #expect(DotEnv.maximumSize == 16 * 1024 * 1024)
        try withTemporaryDirectory { directory in
            let path = directory + "/big.env"
            // A=xxx…x\n: exactly the limit.
            var bytes = Array("A=".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: DotEnv.maximumSize - 3) + [0x0A]
            #expect(bytes.count == DotEnv.maximumSize)
            #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
            let read = try DotEnv.read(path)
            // Counts, so that a failure prints no 16 MiB value.
            let names = read.map(\.name), length = read.first?.value.count ?? -1
            #expect(names == ["A"])
            #expect(length == DotEnv.maximumSize - 3)

            bytes.insert(UInt8(ascii: "x"), at: 2)
            #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
            let error = try #require(interchangeError { _ = try DotEnv.read(path) })
            #expect(error.kind == .usage)
            #expect(error.message == "the env file '\(path)' holds more than \(DotEnv.maximumSize) bytes", "\(error)")
        }
    }
}
