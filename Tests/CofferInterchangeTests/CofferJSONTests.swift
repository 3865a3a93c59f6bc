import CofferCrypto
import CofferInterchange
import CofferVault
import Foundation
import Testing

/// Coffer's own export format, in process: what `CofferJSON.parse` accepts (the documented
/// format, optional and unknown members), what it refuses (duplicate names, deep nesting, bad
/// base64, another format or version, bytes that are not UTF-8), the batch's check, and the
/// writer read back by the parser and by Foundation.
@Suite("Coffer JSON export: parse, check and write")
struct CofferJSONTests {
    /// One imported item as the tests compare it.
    struct Imported: Equatable, CustomStringConvertible {
        var service: String
        var account: String
        var label: String?
        var comment: String?
        var secret: [UInt8]
        var origin: String

        init(
            _ service: String, _ account: String, label: String? = nil, comment: String? = nil, secret: [UInt8],
            origin: String
        ) {
            self.service = service
            self.account = account
            self.label = label
            self.comment = comment
            self.secret = secret
            self.origin = origin
        }

        var description: String {
            "\(service) / \(account) label \(label ?? "nil") comment \(comment ?? "nil") secret \(secret) from \(origin)"
        }
    }

    static func parse(_ text: String) throws -> ImportBatch { try parse(bytes: Array(text.utf8)) }

    static func parse(bytes: [UInt8]) throws -> ImportBatch {
        let batch = ImportBatch()
        try bytes.withUnsafeBytes { try CofferJSON.parse($0, into: batch) }
        return batch
    }

    static func items(_ batch: ImportBatch) -> [Imported] {
        batch.items.map { item in
            Imported(
                item.service, item.account, label: item.label, comment: item.comment,
                secret: batch.withSecret(item) { Array($0) },
                origin: item.origin)
        }
    }

    /// The error parsing `text` throws.
    static func failure(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> InterchangeError? {
        interchangeError(sourceLocation: sourceLocation) { _ = try parse(text) }
    }

    /// An export holding `items` (each an object's JSON text), then `extra` members.
    static func export(_ items: [String] = [], extra: String = "") -> String {
        #"{"format": "coffer-export", "version": 1, "items": ["# + items.joined(separator: ", ") + "]" + extra + "}"
    }

    // MARK: - Parsing

    @Test("The documented example: every member read; the secret's text as UTF-8")
    func documentedExample() throws {
        let batch = try Self.parse(
            """
            {"format": "coffer-export", "version": 1, "exported": "2026-05-01T12:00:00.000Z",
             "items": [{"service": "db.internal", "account": "app", "label": "", "comment": "",
                        "created": "…", "modified": "…", "secretEncoding": "utf8", "secret": "hunter2"}]}
            """)
        #expect(
            Self.items(batch) == [
                Imported("db.internal", "app", label: "", comment: "", secret: Array("hunter2".utf8), origin: "item 1")
            ])
        #expect(batch.notes == [])
        #expect(CofferJSON.formatName == "coffer-export" && CofferJSON.version == 1)
    }

    @Test(
        "label, comment and secretEncoding may be left out; created, modified, exported and unknown members are ignored, in any order"
    )
    func optionalAndUnknownMembers() throws {
        let batch = try Self.parse(
            """
            {"exported": "x", "extra": {"nested": [1, -2.5e3, 0, 1E+2, true, false, null, {"x": "y"}, []], "k": {}},
             "format": "coffer-export",
             "items": [
               {"service": "s1", "account": "a1", "secret": "one", "created": "…", "modified": "…", "unknown": [1, {"2": 3}]},
               {"secret": "two", "secretEncoding": "utf8", "comment": "C", "label": "L", "account": "a2", "service": "s2"}
             ],
             "version": 1, "zzz": null}
            """)
        #expect(
            Self.items(batch) == [
                Imported("s1", "a1", secret: Array("one".utf8), origin: "item 1"),
                Imported("s2", "a2", label: "L", comment: "C", secret: Array("two".utf8), origin: "item 2"),
            ])
        #expect(try Self.items(Self.parse(Self.export())) == [])
        // Surrounding white space is allowed.
        #expect(try Self.items(Self.parse(" \r\n\t" + Self.export() + "\n\n")) == [])
    }

    @Test("A utf8 secret is the JSON string's text: every escape decoded, a NUL and raw UTF-8 kept")
    func utf8Secrets() throws {
        let batch = try Self.parse(
            Self.export([
                #"{"service": "s", "account": "a", "secret": "q\"b\\s\/n\nt\tr\rb\bf\fu\u00e9\u2028p\ud83d\ude00"}"#,
                #"{"service": "s", "account": "b", "secret": "é ✓ 😀 \u0000 \u001b"}"#,
                #"{"service": "s\u00e9", "account": "\ud83d\ude00", "label": "\t", "comment": "\n", "secret": ""}"#,
            ]))
        #expect(
            Self.items(batch) == [
                Imported(
                    "s", "a", secret: Array("q\"b\\s/n\nt\tr\rb\u{08}f\u{0C}u\u{E9}\u{2028}p😀".utf8), origin: "item 1"),
                Imported("s", "b", secret: Array("é ✓ 😀 \u{0} \u{1B}".utf8), origin: "item 2"),
                Imported("sé", "😀", label: "\t", comment: "\n", secret: [], origin: "item 3"),
            ])
    }

    @Test("A base64 secret: the standard alphabet with padding, any bytes")
    func base64Secrets() throws {
        let encoded = ["", "QQ==", "QUI=", "QUJD", "AAEC/w==", "+/+/", "AP8AgA0KIg=="]
        let batch = try Self.parse(
            Self.export(
                encoded.enumerated().map {
                    #"{"service": "s", "account": "a\#($0.offset)", "secretEncoding": "base64", "secret": "\#($0.element)"}"#
                }))
        let secrets = Self.items(batch).map(\.secret)
        #expect(secrets == encoded.map { [UInt8](Data(base64Encoded: $0) ?? Data([0xEE])) })
        #expect(secrets[4] == [0, 1, 2, 0xFF])
    }

    @Test(
        "A base64 secret is a JSON string like any other: escapes in it (\\/ as JSONEncoder writes it) are decoded first"
    )
    func base64SecretWithEscapes() throws {
        // JSONSerialization and JSONEncoder write "/" as "\/"; a document they re-serialise is
        // still the same export.
        let batch = try Self.parse(
            Self.export([
                #"{"service": "s", "account": "a", "secretEncoding": "base64", "secret": "AAEC\/w=="}"#,
                #"{"service": "s", "account": "b", "secretEncoding": "base64", "secret": "\u0041\u0041EC/w=="}"#,
            ]))
        #expect(Self.items(batch).map(\.secret) == [[0, 1, 2, 0xFF], [0, 1, 2, 0xFF]])
    }

    // MARK: - Refusals

    @Test("Bad base64 is refused, naming the item and never quoting the text")
    func badBase64() throws {
        let secret = "c2VjcmV0" + String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(8))
        for text in ["QQ", "QQ=", "QQ=A", "Q===", "QQ==QQ==", "QU I=", "-_-_", #"QQ==\n"#, "\(secret)!", "\(secret)="] {
            let error = try #require(
                Self.failure(
                    Self.export([
                        #"{"service": "s", "account": "a", "secret": "x"}"#,
                        #"{"service": "s", "account": "b", "secretEncoding": "base64", "secret": "\#(text)"}"#,
                    ])), "\(text)")
            #expect(error.kind == .usage)
            #expect(
                error.message.hasSuffix("item 2: the secret is not base64 (standard alphabet, padded)"),
                "\(text): \(error)")
            let quoted = error.message.contains(secret)
            #expect(!quoted, "the message quotes the secret")
        }
    }

    @Test("A member name given twice is refused, also when spelled with escapes, in any object")
    func duplicateMembers() throws {
        let cases: [(String, String)] = [
            (#"{"format": "coffer-export", "format": "coffer-export", "version": 1, "items": []}"#, "format"),
            (Self.export([#"{"service": "s", "account": "a", "secret": "x", "secret": "y"}"#]), "secret"),
            (Self.export([#"{"service": "s", "account": "a", "secret": "x", "s\u0065cret": "y"}"#]), "secret"),
            (Self.export(extra: #", "extra": [{"k": 1, "j": 2, "k": 3}]"#), "k"),
        ]
        for (text, name) in cases {
            let error = try #require(Self.failure(text), "\(text)")
            #expect(error.kind == .usage)
            #expect(error.message == "line 1 of the JSON file: the member '\(name)' appears twice", "\(text)")
        }
        // The name is quoted escaped for a terminal.
        let crafted = #"x\u001b]0;t\u0007"# + "\u{9B}\u{202E}"
        let error = try #require(Self.failure(Self.export(extra: #", ""# + crafted + #"": 0, ""# + crafted + #"": 1"#)))
        #expect(error.message.hasSuffix("appears twice"))
        #expect(!holdsRawTerminalControls(error.message), "\(error.message.debugDescription)")
        // The same name in different objects is not a duplicate; 40,000 members are read.
        var members = ""
        for index in 0..<40_000 { members += ",\"k\(index)\":{\"k\(index)\":0}" }
        #expect(try Self.parse(Self.export(extra: members)).items.isEmpty)
        #expect(
            Self.failure(Self.export(extra: members + #","k39999":1"#))?.message.hasSuffix(
                "the member 'k39999' appears twice") == true)
    }

    @Test("Nesting: 64 levels are read, 65 refused (a deeper document too, without recursing through it)")
    func nestingLimit() throws {
        // The top object is one level; 63 arrays inside make 64.
        let deepest = Self.export(
            extra: #", "deep": "# + String(repeating: "[", count: 63) + String(repeating: "]", count: 63))
        #expect(try Self.parse(deepest).items.isEmpty)
        let objects = Self.export(
            extra: #", "deep": "# + String(repeating: #"{"a":"#, count: 62) + "0" + String(repeating: "}", count: 62))
        #expect(try Self.parse(objects).items.isEmpty)
        for text in [
            Self.export(extra: #", "deep": "# + String(repeating: "[", count: 64) + String(repeating: "]", count: 64)),
            Self.export(
                extra: #", "deep": "# + String(repeating: #"{"a":"#, count: 63) + "0"
                    + String(repeating: "}", count: 63)),
            Self.export(
                extra: #", "deep": "# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)),
            String(repeating: "[", count: 1_000_000),
        ] {
            let error = try #require(Self.failure(text))
            #expect(error.message == "line 1 of the JSON file: nested more than 64 levels deep")
        }
    }

    @Test("Another format, another version, or no version number is refused")
    func formatAndVersion() throws {
        let notCoffer = #"the JSON file is not a Coffer export: its "format" is not "coffer-export""#
        for text in [
            #"{"format": "other", "version": 1, "items": []}"#, #"{"version": 1, "items": []}"#,
            #"{"format": 1, "version": 1, "items": []}"#,
            #"{"format": "Coffer-Export", "version": 1, "items": []}"#,
        ] {
            #expect(Self.failure(text)?.message == notCoffer, "\(text)")
        }
        // The format's name compared decoded.
        #expect(try Self.parse(#"{"format": "coffer\u002dexport", "version": 1, "items": []}"#).items.isEmpty)

        #expect(
            Self.failure(#"{"format": "coffer-export", "version": 2, "items": []}"#)?.message
                == "the Coffer export is version 2; this coffer reads version 1 (it was written by a newer coffer)")
        #expect(
            Self.failure(#"{"format": "coffer-export", "version": 0, "items": []}"#)?.message
                == "the Coffer export is version 0; this coffer reads version 1")
        for version in [#""1""#, "null", "[1]", "true"] {
            #expect(
                Self.failure(#"{"format": "coffer-export", "version": "# + version + #", "items": []}"#)?.message
                    == #"the Coffer export has no "version" number"#, "\(version)")
        }
        #expect(
            Self.failure(#"{"format": "coffer-export", "items": []}"#)?.message
                == #"the Coffer export has no "version" number"#)
    }

    @Test("Input that is not UTF-8 is refused before anything is read")
    func notUTF8() throws {
        let prefix = Array(
            #"{"format": "coffer-export", "version": 1, "items": [{"service": "s", "account": "a", "secret": ""#.utf8)
        let suffix = Array(#""}]}"#.utf8)
        #expect(try Self.parse(bytes: prefix + suffix).items.count == 1)
        for bad: [UInt8] in [[0xFF], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0xF4, 0x90, 0x80, 0x80]] {
            let error = try #require(interchangeError { _ = try Self.parse(bytes: prefix + bad + suffix) }, "\(bad)")
            #expect(error.kind == .usage)
            #expect(error.message == "the JSON file is not UTF-8")
        }
    }

    @Test("Broken JSON and a wrong shape are refused, naming the line and the item")
    func malformedDocuments() throws {
        let cases: [(String, String)] = [
            ("", "line 1 of the JSON file: the JSON text ends early"),
            ("[]", "the JSON file is not a Coffer export: it is not an object"),
            ("\"x\"", "the JSON file is not a Coffer export: it is not an object"),
            (Self.export() + " x", "line 1 of the JSON file: text after the end of the JSON value"),
            (Self.export() + "{}", "line 1 of the JSON file: text after the end of the JSON value"),
            (#"{"format": "coffer-export", "version": 1}"#, #"the Coffer export has no "items" array"#),
            (#"{"format": "coffer-export", "version": 1, "items": {}}"#, #"the Coffer export has no "items" array"#),
            (Self.export(["1"]), "line 1 of the JSON file: item 1: not an object"),
            (Self.export([#"{"account": "a", "secret": "x"}"#]), #"line 1 of the JSON file: item 1: no "service""#),
            (Self.export([#"{"service": "s", "secret": "x"}"#]), #"line 1 of the JSON file: item 1: no "account""#),
            (Self.export([#"{"service": "s", "account": "a"}"#]), #"line 1 of the JSON file: item 1: no "secret""#),
            (
                Self.export([#"{"service": 1, "account": "a", "secret": "x"}"#]),
                #"line 1 of the JSON file: item 1: "service" is not a string"#
            ),
            (
                Self.export([#"{"service": "s", "account": "a", "label": null, "secret": "x"}"#]),
                #"line 1 of the JSON file: item 1: "label" is not a string"#
            ),
            (
                Self.export([#"{"service": "s", "account": "a", "secretEncoding": "hex", "secret": "00"}"#]),
                #"line 1 of the JSON file: item 1: "secretEncoding" is neither "utf8" nor "base64""#
            ),
            (
                Self.export(["{\"service\": \"s\", \"account\": \"a\", \"secret\": \"raw\nnewline\"}"]),
                "line 1 of the JSON file: a control character inside a string (write it as an escape)"
            ),
            (
                Self.export([#"{"service": "\ud800", "account": "a", "secret": "x"}"#]),
                "line 1 of the JSON file: a \\u escape holds half a surrogate pair"
            ),
            (
                Self.export([#"{"service": "s", "account": "a", "secret": "x"},"#]),
                "line 1 of the JSON file: not a JSON value"
            ),
            (#"{"format": "coffer-export", "version": 1, "items": [}"#, "line 1 of the JSON file: not a JSON value"),
            (
                #"{"format": "coffer-export" "version": 1, "items": []}"#,
                "line 1 of the JSON file: expected , or } in an object"
            ),
            (
                #"{"format": "coffer-export", "version": 1, "items": [1 2]}"#,
                "line 1 of the JSON file: expected , or ] in an array"
            ),
            (
                #"{"format": "coffer-export", "version": 1, "items": [], "x": tru}"#,
                "line 1 of the JSON file: not a JSON value"
            ),
            (
                #"{"format": "coffer-export", "version": 1, "items": [], "x": "open}"#,
                "line 1 of the JSON file: a string is never closed"
            ),
        ]
        for (text, message) in cases {
            let error = try #require(Self.failure(text), "\(text.debugDescription)")
            #expect(error.kind == .usage, "\(text.debugDescription)")
            #expect(error.message == message, "\(text.debugDescription)")
        }
        // The line is the one the fault is on.
        let multiline =
            "{\n  \"format\": \"coffer-export\",\n  \"version\": 1,\n  \"items\": [\n    {\"service\": \"s\", \"account\": \"a\"}\n  ]\n}\n"
        #expect(Self.failure(multiline)?.message == #"line 5 of the JSON file: item 1: no "secret""#)
    }

    @Test("Numbers are RFC 8259's: a leading +, a leading or trailing point and leading zeros are refused")
    func strictNumbers() throws {
        for number in ["0", "-0", "12", "-1.5", "1e5", "1E-5", "2.5e+3"] {
            #expect(try Self.parse(Self.export(extra: #", "n": "# + number)).items.isEmpty, "\(number)")
        }
        for number in ["+1", ".5", "1.", "01", "-01", "-", "1e", "--1"] {
            let error = try #require(Self.failure(Self.export(extra: #", "n": "# + number)), "\(number)")
            #expect(error.message == "line 1 of the JSON file: not a JSON value", "\(number)")
        }
    }

    @Test("An unknown escape inside a secret is refused without quoting any of it")
    func unknownEscapeInSecret() throws {
        let secret = "hunter2-" + UUID().uuidString
        let text =
            "{\n\"format\": \"coffer-export\",\n\"version\": 1,\n\"items\": [\n{\"service\": \"s\", \"account\": \"a\", \"secret\": \"\(secret)\\Zrest\"}]}"
        let error = try #require(Self.failure(text))
        #expect(error.message == "line 5 of the JSON file: an unknown escape after a backslash")
        let quoted = error.message.contains(secret) || error.message.contains("\\Z")
        #expect(!quoted, "the message quotes the secret")
    }

    // MARK: - ImportBatch.check

    static func batch(
        _ items: [(service: String, account: String, origin: String)], label: String? = nil, comment: String? = nil
    )
        -> ImportBatch
    {
        let batch = ImportBatch()
        for item in items {
            batch.add(
                service: item.service, account: item.account, label: label, comment: comment, origin: item.origin,
                secret: { out in out.append(contentsOf: Array("secret".utf8)) })
        }
        return batch
    }

    static func checkFailure(_ batch: ImportBatch, sourceLocation: SourceLocation = #_sourceLocation)
        -> InterchangeError?
    {
        interchangeError(sourceLocation: sourceLocation) { try batch.check() }
    }

    @Test(
        "check: an empty name, a NUL, or a name, label or comment over the vault's limits is refused, naming the item")
    func checkNames() throws {
        let longest = String(repeating: "s", count: Vault.maximumNameLength)
        let longestText = String(repeating: "t", count: Vault.maximumTextLength)
        try Self.batch([(longest, longest, "item 1")], label: longestText, comment: longestText).check()
        // Names with controls, which `coffer set` accepts, pass: only a NUL is refused.
        try Self.batch([("multi\nline", "tab\there", "item 1"), ("esc\u{1B}[31m", "csi\u{9B}\u{202E}\u{7F}", "item 2")])
            .check()

        let cases: [(ImportBatch, String)] = [
            (Self.batch([("s", "a", "item 1"), ("", "a", "item 2")]), "item 2: the service is empty"),
            (Self.batch([("s", "", "line 7")]), "line 7: the account is empty"),
            (
                Self.batch([("s\u{0}x", "a", "item 1")]),
                "item 1: the service holds a NUL, which no command line can pass (coffer get and rm could not name the item)"
            ),
            (
                Self.batch([("s", "a\u{0}", "item 1")]),
                "item 1: the account holds a NUL, which no command line can pass (coffer get and rm could not name the item)"
            ),
            (
                Self.batch([(longest + "s", "a", "item 1")]),
                "item 1: the service is \(Vault.maximumNameLength + 1) bytes long; at most \(Vault.maximumNameLength) are allowed"
            ),
            // Bytes of UTF-8 are counted, not characters.
            (
                Self.batch([("s", String(repeating: "é", count: Vault.maximumNameLength / 2 + 1), "item 1")]),
                "item 1: the account is \(Vault.maximumNameLength + 2) bytes long; at most \(Vault.maximumNameLength) are allowed"
            ),
            (
                Self.batch([("s", "a", "item 1")], label: longestText + "t"),
                "item 1: the label is \(Vault.maximumTextLength + 1) bytes long; at most \(Vault.maximumTextLength) are allowed"
            ),
            (
                Self.batch([("s", "a", "item 1")], comment: longestText + "t"),
                "item 1: the comment is \(Vault.maximumTextLength + 1) bytes long; at most \(Vault.maximumTextLength) are allowed"
            ),
        ]
        for (batch, message) in cases {
            let error = try #require(Self.checkFailure(batch), "\(message)")
            #expect(error.kind == .usage)
            #expect(error.message == message)
        }
    }

    @Test("check: items named twice are listed with where each came from; names compared by their exact bytes")
    func checkDuplicates() throws {
        let one = try #require(
            Self.checkFailure(
                Self.batch([("svc", "acct", "line 1"), ("svc", "other", "line 2"), ("svc", "acct", "line 3")])))
        #expect(one.kind == .usage)
        #expect(
            one.message == "the input names 1 item more than once: svc / acct (line 1 and line 3); nothing was imported"
        )

        let pairs =
            (0..<12).map { (service: "s", account: "a\($0)", origin: "item \($0 + 1)") }
            + (0..<12).map { (service: "s", account: "a\($0)", origin: "item \($0 + 13)") }
        let many = try #require(Self.checkFailure(Self.batch(pairs)))
        #expect(
            many.message.hasPrefix(
                "the input names 12 items more than once: s / a0 (item 1 and item 13), s / a1 (item 2 and item 14), "))
        #expect(many.message.hasSuffix(", s / a9 (item 10 and item 22) and 2 more; nothing was imported"))
        #expect(!many.message.contains("s / a10 (") && !many.message.contains("s / a11 ("))

        // Printed escaped.
        let crafted = try #require(
            Self.checkFailure(Self.batch([("a\u{1B}b", "x\u{202E}", "item 1"), ("a\u{1B}b", "x\u{202E}", "item 2")])))
        #expect(
            crafted.message.contains(#"$'a\033b' / $'x\342\200\256' (item 1 and item 2)"#),
            "\(crafted.message.debugDescription)")
        #expect(!holdsRawTerminalControls(crafted.message))

        // Canonically equivalent but different bytes, and names that differ in case: distinct items.
        try Self.batch([
            ("caf\u{E9}", "a", "item 1"), ("cafe\u{301}", "a", "item 2"), ("Svc", "A", "item 3"),
            ("svc", "a", "item 4"),
        ]).check()
    }

    // MARK: - Writing

    /// `bytes` as `appendString` writes them.
    static func jsonString(_ bytes: [UInt8]) -> [UInt8] {
        let out = WipingBuffer(capacity: 16)
        bytes.withUnsafeBytes { CofferJSON.appendString($0, to: out) }
        return out.withUnsafeBytes { Array($0) }
    }

    @Test(
        "appendString: quotes, backslashes and controls escaped, the rest as it is; JSONSerialization reads the same string"
    )
    func appendString() throws {
        #expect(
            Self.jsonString(Array("a\"b\\c\n\r\t\u{1}\u{1F}\u{7F}é/".utf8))
                == Array(#""a\"b\\c\n\r\t\u0001\u001f\u007fé/""#.utf8))
        var text = String(decoding: (0..<0x80).map { UInt8($0) }, as: UTF8.self)
        text += "é ✓ 😀 \u{9B}\u{202E}\u{2028}"
        let written = Self.jsonString(Array(text.utf8))
        #expect(!written.contains { $0 < 0x20 || $0 == 0x7F })
        let read =
            try JSONSerialization.jsonObject(with: Data([UInt8(ascii: "[")] + written + [UInt8(ascii: "]")]))
            as? [String]
        #expect(read == [text])
        let fromString = WipingBuffer(capacity: 16)
        CofferJSON.appendString(text, to: fromString)
        #expect(fromString.withUnsafeBytes { Array($0) } == written)
    }

    @Test("appendBase64 writes what Foundation writes, and decodeBase64 reads it back")
    func appendBase64() throws {
        var generator = SystemRandomNumberGenerator()
        for count in Array(0...10) + [63, 64, 65, 1000] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let out = WipingBuffer(capacity: 16)
            bytes.withUnsafeBytes { CofferJSON.appendBase64($0, to: out) }
            let written = out.withUnsafeBytes { Array($0) }
            #expect(written == Array(("\"" + Data(bytes).base64EncodedString() + "\"").utf8), "\(count) bytes")
            let decoded = WipingBuffer(capacity: 16)
            try Array(written.dropFirst().dropLast()).withUnsafeBytes {
                try CofferJSON.decodeBase64($0, into: decoded) { InterchangeError.usage("not base64") }
            }
            #expect(decoded.withUnsafeBytes { Array($0) } == bytes, "\(count) bytes")
        }
    }

    /// A vault item (its memberwise initialiser is internal to CofferVault: made through its
    /// public Decodable conformance), times in seconds since 1970.
    static func item(
        _ service: String, _ account: String, label: String = "", comment: String = "", created: Double,
        modified: Double
    )
        throws -> VaultItem
    {
        let fields: [String: Any] = [
            "service": service, "account": account, "label": label, "comment": comment, "created": created,
            "modified": modified,
        ]
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(VaultItem.self, from: JSONSerialization.data(withJSONObject: fields))
    }

    @Test(
        "write: the export reads back through parse item for item, byte for byte; a secret that is not UTF-8 goes as base64"
    )
    func writeThenParse() throws {
        let created = 1_777_636_800.25  // 2026-05-01T12:00:00.250Z
        let items = [
            try Self.item(
                "db.internal", "app", label: "Database", comment: "rotated, \"often\"", created: created,
                modified: created + 0.5),
            try Self.item("bin", "blob", created: 0, modified: 0),
            try Self.item(
                "multi\nline", "esc\u{1B}[31m", label: "tab\t\u{7F}", comment: "c\n\u{9B}\u{202E}\u{2028}",
                created: created, modified: created),
            try Self.item("empty", "one", created: created, modified: created),
            try Self.item("gone", "meanwhile", created: created, modified: created),
        ]
        let secrets: [String: [UInt8]] = [
            "db.internal": Array("hunter2".utf8), "bin": [0xFF, 0x00, 0x80, 0x0A, 0xC3],
            "multi\nline": Array("q\"uo\\te\nline\ttab\u{1}ctl é ✓ \u{0}".utf8), "empty": [],
        ]
        let written = try CofferJSON.write(items: items) { item in
            // An item removed meanwhile has no secret: it is left out.
            guard let bytes = secrets[item.service] else { return nil }
            return try SecureBytes(copying: bytes)
        }
        let batch = ImportBatch()
        try written.withUnsafeBytes { try CofferJSON.parse($0, into: batch) }
        #expect(
            Self.items(batch) == [
                Imported(
                    "db.internal", "app", label: "Database", comment: "rotated, \"often\"",
                    secret: Array("hunter2".utf8), origin: "item 1"),
                Imported(
                    "bin", "blob", label: "", comment: "", secret: [0xFF, 0x00, 0x80, 0x0A, 0xC3], origin: "item 2"),
                Imported(
                    "multi\nline", "esc\u{1B}[31m", label: "tab\t\u{7F}", comment: "c\n\u{9B}\u{202E}\u{2028}",
                    secret: Array("q\"uo\\te\nline\ttab\u{1}ctl é ✓ \u{0}".utf8), origin: "item 3"),
                Imported("empty", "one", label: "", comment: "", secret: [], origin: "item 4"),
            ])
        try batch.check()

        // Foundation reads the same document.
        let document = try #require(
            try JSONSerialization.jsonObject(with: written.withUnsafeBytes { Data($0) }) as? [String: Any])
        #expect(document["format"] as? String == "coffer-export" && document["version"] as? Int == 1)
        let exported = try #require(document["exported"] as? String)
        #expect(exported.count == 24 && exported.hasSuffix("Z") && exported.dropFirst(10).first == "T", "\(exported)")
        let rows = try #require(document["items"] as? [[String: Any]])
        #expect(rows.count == 4)
        #expect(rows.map { $0["secretEncoding"] as? String } == ["utf8", "base64", "utf8", "utf8"])
        #expect(rows.first?["created"] as? String == "2026-05-01T12:00:00.250Z")
        #expect(rows.first?["modified"] as? String == "2026-05-01T12:00:00.750Z")
        #expect(rows.dropFirst().first?["created"] as? String == "1970-01-01T00:00:00.000Z")
        #expect(rows.dropFirst().first?["secret"] as? String == "/wCACsM=")
        #expect(rows.map { $0["service"] as? String } == ["db.internal", "bin", "multi\nline", "empty"])

        // No items: an empty array, which parses.
        let none = try CofferJSON.write(items: []) { _ in nil }
        let empty = ImportBatch()
        try none.withUnsafeBytes { try CofferJSON.parse($0, into: empty) }
        #expect(empty.items.isEmpty)
    }
}
