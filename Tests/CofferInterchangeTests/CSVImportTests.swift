import CofferInterchange
import Foundation
import Testing

/// CSV exports of password managers, in process: the RFC 4180 reader, then each tool's layout on
/// a small export of that tool (its header names as it writes them).
@Suite("CSV import: CSVReader and the KeePassXC, Bitwarden and 1Password layouts")
struct CSVImportTests {
    /// One record as the tests compare it.
    struct Record: Equatable, CustomStringConvertible {
        var fields: [String]
        var line: Int

        init(_ fields: [String], line: Int) {
            self.fields = fields
            self.line = line
        }

        var description: String { "\(fields) (line \(line))" }
    }

    static func records(_ text: String) throws -> [Record] { try records(bytes: Array(text.utf8)) }

    static func records(bytes: [UInt8]) throws -> [Record] {
        try bytes.withUnsafeBytes { input in
            var reader = CSVReader(input)
            let scratch = WipingBuffer(capacity: 16)
            var found: [Record] = []
            while let record = try reader.next(into: scratch) {
                let fields = scratch.withUnsafeBytes { bytes in
                    record.fields.map { String(decoding: bytes[$0], as: UTF8.self) }
                }
                found.append(Record(fields, line: record.line))
            }
            return found
        }
    }

    /// One imported item as the tests compare it.
    struct Imported: Equatable, CustomStringConvertible {
        var service: String
        var account: String
        var label: String?
        var comment: String?
        var secret: [UInt8]
        var origin: String

        init(_ service: String, _ account: String, label: String?, comment: String?, secret: String, origin: String) {
            self.init(service, account, label: label, comment: comment, secretBytes: Array(secret.utf8), origin: origin)
        }

        init(
            _ service: String, _ account: String, label: String?, comment: String?, secretBytes: [UInt8], origin: String
        ) {
            self.service = service
            self.account = account
            self.label = label
            self.comment = comment
            self.secret = secretBytes
            self.origin = origin
        }

        var description: String {
            "\(service) / \(account) label \(label ?? "nil") comment \(comment ?? "nil") secret \(secret) from \(origin)"
        }
    }

    static func parse(_ layout: CSVLayout, _ text: String, fallbackService: String? = nil) throws -> ImportBatch {
        try parse(layout, bytes: Array(text.utf8), fallbackService: fallbackService)
    }

    static func parse(_ layout: CSVLayout, bytes: [UInt8], fallbackService: String? = nil) throws -> ImportBatch {
        let batch = ImportBatch()
        try bytes.withUnsafeBytes { try layout.parse($0, fallbackService: fallbackService, into: batch) }
        return batch
    }

    static func items(_ batch: ImportBatch) -> [Imported] {
        batch.items.map { item in
            Imported(
                item.service, item.account, label: item.label, comment: item.comment,
                secretBytes: batch.withSecret(item) { Array($0) }, origin: item.origin)
        }
    }

    /// The note said of a column whose values were dropped.
    static func droppedNote(_ column: String, rows: Int) -> String {
        "the \(column) column of \(rows) row\(rows == 1 ? "" : "s") was not imported (it may hold secrets, and a comment is not secret)"
    }

    // MARK: - CSVReader

    @Test(
        "Fields split at commas, records at LF, CRLF or a lone CR; blank lines skipped; the last record needs no newline"
    )
    func recordsAndFields() throws {
        #expect(
            try Self.records("a,b,c\n1,,3\n,\n\"\"\nlast")
                == [
                    Record(["a", "b", "c"], line: 1), Record(["1", "", "3"], line: 2), Record(["", ""], line: 3),
                    Record([""], line: 4),
                    Record(["last"], line: 5),
                ])
        #expect(try Self.records("a,b\r\nc,d\r\n") == [Record(["a", "b"], line: 1), Record(["c", "d"], line: 2)])
        #expect(try Self.records("a,b\rc,d\r") == [Record(["a", "b"], line: 1), Record(["c", "d"], line: 2)])
        #expect(try Self.records("a\n\n\r\n\nb\n") == [Record(["a"], line: 1), Record(["b"], line: 5)])
        #expect(try Self.records("") == [])
        #expect(try Self.records("\n\r\n") == [])
    }

    @Test(
        "A quoted field holds commas, newlines (CRLF kept as it is) and doubled quotes; a leading byte-order mark is skipped"
    )
    func quotedFields() throws {
        #expect(
            try Self.records(#""a,b","say ""hi""",plain,"""#) == [Record(["a,b", #"say "hi""#, "plain", ""], line: 1)])
        #expect(
            try Self.records("\"one\ntwo\",x\nnext,y\n") == [
                Record(["one\ntwo", "x"], line: 1), Record(["next", "y"], line: 3),
            ])
        #expect(
            try Self.records("\"one\r\ntwo\",x\r\nnext,y\r\n")
                == [Record(["one\r\ntwo", "x"], line: 1), Record(["next", "y"], line: 3)])
        #expect(try Self.records("\"\"\"\"\n") == [Record(["\""], line: 1)])
        #expect(try Self.records("\u{FEFF}a,b\n") == [Record(["a", "b"], line: 1)])
        #expect(try Self.records("\u{FEFF}\"Group\",\"Title\"\r\n") == [Record(["Group", "Title"], line: 1)])
    }

    @Test(
        "An unclosed quote is an error naming the line it opens on; so is text after a closing quote, naming its line")
    func readerErrors() throws {
        let unclosed = try #require(interchangeError { _ = try Self.records("a,b\nc,\"open\nmore\n") })
        #expect(unclosed.kind == .usage)
        #expect(unclosed.message == "line 2 of the CSV file: a quoted field is never closed")
        let after = try #require(interchangeError { _ = try Self.records("\"ab\"c,d\n") })
        #expect(after.kind == .usage)
        #expect(
            after.message
                == #"line 1 of the CSV file: text follows a closing quote (write a quote inside a quoted field as "")"#)
        let afterMultiline = try #require(interchangeError { _ = try Self.records("x\n\"a\nb\" c\n") })
        #expect(afterMultiline.message.hasPrefix("line 3 of the CSV file: text follows a closing quote"))

        // Neither quotes the field, which may be a password.
        let secret = "pw-" + UUID().uuidString
        for text in ["Title,Password\nsvc,\"\(secret)", "Title,Password\nsvc,\"\(secret)\"\(secret)\n"] {
            let error = try #require(interchangeError { _ = try Self.records(text) })
            let quoted = error.message.contains(secret)
            #expect(!quoted, "the message quotes the field")
        }
    }

    // MARK: - Layouts

    @Test("KeePassXC: Title, Username, Password, Group as label, URL as comment; Notes and TOTP counted, not imported")
    func keepassxc() throws {
        let text =
            "\u{FEFF}\"Group\",\"Title\",\"Username\",\"Password\",\"URL\",\"Notes\",\"TOTP\",\"Icon\",\"Last Modified\",\"Created\"\r\n"
            + "\"Root/Internet\",\"GitHub\",\"octocat\",\"pa,ss\"\"wo\nrd ✓\",\"https://github.com\",\"secret notes\",\"otpauth://totp/x\",\"0\",\"2026-05-01T12:00:00Z\",\"2026-05-01T12:00:00Z\"\r\n"
            + "\"Root\",\"Wi-Fi\",\"\",\"plain\",\"\",\"\",\"\",\"0\",\"x\",\"y\"\r\n"
            + "\"Root\",\"Mail\",\"me\",\"\",\"\",\"more notes\",\"\",\"0\",\"x\",\"y\"\r\n"
        let batch = try Self.parse(.keepassxc, text)
        #expect(
            Self.items(batch) == [
                Imported(
                    "GitHub", "octocat", label: "Root/Internet", comment: "https://github.com",
                    secret: "pa,ss\"wo\nrd ✓", origin: "line 2"),
                Imported(
                    "Wi-Fi", CSVLayout.defaultAccount, label: "Root", comment: "", secret: "plain", origin: "line 4"),
                Imported("Mail", "me", label: "Root", comment: "", secret: "", origin: "line 5"),
            ])
        #expect(batch.notes == [Self.droppedNote("Notes", rows: 2), Self.droppedNote("TOTP", rows: 1)])
        let noted = batch.notes.joined(separator: "\n")
        let leaked = noted.contains("secret notes") || noted.contains("more notes") || noted.contains("otpauth")
        #expect(!leaked, "a note quotes a value")
    }

    @Test(
        "Bitwarden: name, login_username, login_password, folder as label, login_uri as comment; rows of another type skipped"
    )
    func bitwarden() throws {
        let text =
            "folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp\n"
            + "Work,1,login,Jira,,,0,https://jira.example,alice@example.com,\"pa,ss\",\n"
            + ",,note,My note,\"a secure note\",,0,,,,\n"
            + ",,card,Visa,,\"cvv: 123\",0,,,,\n"
            + ",0,login,Mail,\"recovery codes\",\"pin: 9\",0,,bob,hunter2,otpauth://totp/mail\n"
        let batch = try Self.parse(.bitwarden, text)
        #expect(
            Self.items(batch) == [
                Imported(
                    "Jira", "alice@example.com", label: "Work", comment: "https://jira.example", secret: "pa,ss",
                    origin: "line 2"),
                Imported("Mail", "bob", label: "", comment: "", secret: "hunter2", origin: "line 5"),
            ])
        // The skipped rows' columns are not counted; the others are, by name, sorted.
        #expect(
            batch.notes == [
                "skipped 2 rows whose type is not login (notes, cards, identities)",
                Self.droppedNote("fields", rows: 1),
                Self.droppedNote("login_totp", rows: 1), Self.droppedNote("notes", rows: 1),
            ])
        let noted = batch.notes.joined(separator: "\n")
        let leaked =
            noted.contains("secure note") || noted.contains("cvv") || noted.contains("recovery")
            || noted.contains("pin: 9")
        #expect(!leaked, "a note quotes a value")

        // One skipped row: singular.
        let one = try Self.parse(.bitwarden, "type,name,login_username,login_password\nidentity,Me,,\nlogin,Site,u,p\n")
        #expect(one.notes == ["skipped 1 row whose type is not login (notes, cards, identities)"])
        #expect(Self.items(one) == [Imported("Site", "u", label: nil, comment: nil, secret: "p", origin: "line 3")])
    }

    @Test("Bitwarden organization export: collections as the label")
    func bitwardenCollections() throws {
        let batch = try Self.parse(
            .bitwarden,
            "collections,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp\n"
                + "Engineering,login,Deploy,,,0,,ci,tok,\n")
        #expect(
            Self.items(batch) == [
                Imported("Deploy", "ci", label: "Engineering", comment: "", secret: "tok", origin: "line 2")
            ])
        #expect(batch.notes == [])
    }

    @Test("1Password: Title, Username, Password, Tags as label, Url (or Website) as comment; Notes and OTPAuth counted")
    func onePassword() throws {
        let batch = try Self.parse(
            .onePassword,
            "Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes\n"
                + "AWS,https://aws.amazon.com,root@example.com,\"pa,ss\",,false,false,cloud,\n"
                + "Bank,https://bank.example,me,pin,otpauth://totp/bank,true,false,,\"security answers\"\n")
        #expect(
            Self.items(batch) == [
                Imported(
                    "AWS", "root@example.com", label: "cloud", comment: "https://aws.amazon.com", secret: "pa,ss",
                    origin: "line 2"),
                Imported("Bank", "me", label: "", comment: "https://bank.example", secret: "pin", origin: "line 3"),
            ])
        #expect(batch.notes == [Self.droppedNote("Notes", rows: 1), Self.droppedNote("OTPAuth", rows: 1)])

        // Header names compared without case and surrounding spaces; Website when there is no Url.
        let website = try Self.parse(
            .onePassword, " title ,WEBSITE,username, Password\nShop,https://shop.example,,pw\n")
        #expect(
            Self.items(website) == [
                Imported("Shop", "default", label: nil, comment: "https://shop.example", secret: "pw", origin: "line 2")
            ])
        // Url is preferred to Website.
        let both = try Self.parse(
            .onePassword, "Title,Website,Url,Username,Password\nA,https://w.example,https://u.example,x,y\n")
        #expect(Self.items(both).map(\.comment) == ["https://u.example"])
    }

    @Test(
        "A layout's optional columns missing from the header: label and comment are nil (an existing item keeps its own)"
    )
    func optionalColumnsAbsent() throws {
        for layout in [CSVLayout.keepassxc, .bitwarden, .onePassword] {
            let header = [layout.service[0], layout.account[0], layout.secret[0]].joined(separator: ",")
            let batch = try Self.parse(layout, header + "\nsvc,acct,pw\n")
            #expect(
                Self.items(batch) == [
                    Imported("svc", "acct", label: nil, comment: nil, secret: "pw", origin: "line 2")
                ], "\(layout.name)")
            #expect(batch.notes == [], "\(layout.name)")
        }
    }

    @Test(
        "An empty title takes the fallback service, or is an error naming the line and --service; an empty user name is \"default\""
    )
    func fallbackServiceAndDefaultAccount() throws {
        #expect(CSVLayout.defaultAccount == "default")
        let text = "Group,Title,Username,Password\nRoot,,alice,pw\nRoot,Named,,pw2\n"
        let error = try #require(interchangeError { _ = try Self.parse(.keepassxc, text) })
        #expect(error.kind == .usage)
        #expect(error.message == "line 2 of the CSV file: the Title is empty; give --service NAME to use for such rows")
        let batch = try Self.parse(.keepassxc, text, fallbackService: "misc")
        #expect(
            Self.items(batch) == [
                Imported("misc", "alice", label: "Root", comment: nil, secret: "pw", origin: "line 2"),
                Imported("Named", "default", label: "Root", comment: nil, secret: "pw2", origin: "line 3"),
            ])
        let bitwarden = try #require(
            interchangeError { _ = try Self.parse(.bitwarden, "name,login_username,login_password\n,u,p\n") })
        #expect(
            bitwarden.message == "line 2 of the CSV file: the name is empty; give --service NAME to use for such rows")
    }

    @Test("A header without a required column is refused, naming the column and the tool")
    func missingRequiredColumns() throws {
        for layout in [CSVLayout.keepassxc, .bitwarden, .onePassword] {
            let required = [layout.service[0], layout.account[0], layout.secret[0]]
            for missing in required {
                let header = (["Extra"] + required.filter { $0 != missing }).joined(separator: ",")
                let error = try #require(
                    interchangeError { _ = try Self.parse(layout, header + "\nx,y,z\n") }, "\(layout.name)")
                #expect(error.kind == .usage)
                #expect(
                    error.message
                        == "the CSV file's header has no \"\(missing)\" column, which a \(layout.name) export has: is it a \(layout.name) export?"
                )
            }
        }
        #expect(
            CSVLayout.keepassxc.name == "KeePassXC" && CSVLayout.bitwarden.name == "Bitwarden"
                && CSVLayout.onePassword.name == "1Password")
    }

    @Test("An empty file, a row with the wrong number of fields and a name that is not UTF-8 are errors naming where")
    func malformedExports() throws {
        for text in ["", "\u{FEFF}", "\n\n"] {
            let error = try #require(interchangeError { _ = try Self.parse(.keepassxc, text) })
            #expect(error.message == "the KeePassXC CSV file is empty: it has no header line")
        }
        let short = try #require(
            interchangeError { _ = try Self.parse(.onePassword, "Title,Username,Password\nA,b\n") })
        #expect(short.message == "line 2 of the CSV file has 2 fields where the header has 3")
        let long = try #require(
            interchangeError { _ = try Self.parse(.onePassword, "Title,Username,Password\nA,b,c\n\"x\ny\",b,c,d\n") })
        #expect(long.message == "line 3 of the CSV file has 4 fields where the header has 3")

        let header = Array("Title,Username,Password\n".utf8)
        let badName = try #require(
            interchangeError { _ = try Self.parse(.keepassxc, bytes: header + [0xFF] + Array(",u,p\n".utf8)) })
        #expect(badName.message == "line 2 of the CSV file: the Title is not UTF-8")
        let badHeader = try #require(
            interchangeError { _ = try Self.parse(.keepassxc, bytes: [0xFF] + Array(",".utf8) + header) })
        #expect(badHeader.message == "the header of the CSV file is not UTF-8")
    }

    @Test("A password is bytes: not UTF-8, a NUL, quotes and newlines pass unchanged")
    func secretBytes() throws {
        let secret: [UInt8] = [0xFF, 0x00, 0x80, 0x0A, 0x22, 0x2C]
        let quoted: [UInt8] = [0x22, 0xFF, 0x00, 0x80, 0x0A, 0x22, 0x22, 0x2C, 0x22]  // "…""," as CSV quotes it
        let batch = try Self.parse(.keepassxc, bytes: Array("Title,Username,Password\nA,u,".utf8) + quoted + [0x0A])
        #expect(
            Self.items(batch) == [Imported("A", "u", label: nil, comment: nil, secretBytes: secret, origin: "line 2")])
    }

    @Test("A CR-only export (old Mac line ends) is read as records, not one header")
    func crOnlyExport() throws {
        let batch = try Self.parse(.keepassxc, "Group,Title,Username,Password,URL,Notes\rRoot,t1,u,PWSECRET3,,\r")
        #expect(
            Self.items(batch) == [
                Imported("t1", "u", label: "Root", comment: "", secret: "PWSECRET3", origin: "line 2")
            ])
    }

    @Test("A NUL in a name is refused by the batch's check, named by its line")
    func nulInName() throws {
        let batch = try Self.parse(.keepassxc, "Group,Title,Username,Password\nRoot,t\u{0}x,u,pw\n")
        let error = try #require(interchangeError { try batch.check() })
        #expect(error.kind == .usage)
        #expect(error.message.hasPrefix("line 2: the service holds a NUL"), "\(error)")
    }
}
