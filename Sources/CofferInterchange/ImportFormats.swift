package import CofferCrypto
package import CofferVault
package import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What `coffer import` reads.
package enum ImportFormat: String, CaseIterable, Sendable {
    case dotenv, json, keepassxc, bitwarden
    case onePassword = "1password"
    case pass
}

/// The items an import read, before anything is written: names and attributes, with every
/// secret in one ``WipingBuffer`` (never a `String`), wiped when the batch goes.
package final class ImportBatch {
    package struct Item {
        package var service: String
        package var account: String
        /// `nil`: the input has none (an existing item keeps its own).
        package var label: String?
        package var comment: String?
        /// Where the secret lies in ``ImportBatch/secrets``.
        package var secret: Range<Int>
        /// Where the item came from, for messages: `line 12`, `item 3`, `email/work.gpg`; text
        /// from the input (a pass entry's path) in it is escaped for printing (``escapedName(_:)``).
        package var origin: String
    }

    package let secrets = WipingBuffer(capacity: 4096)
    package private(set) var items: [Item] = []
    /// Things the input held that were deliberately not imported, said after the summary.
    package var notes: [String] = []

    package init() {}

    /// Adds an item whose secret `write` appends to ``secrets``.
    package func add(
        service: String, account: String, label: String?, comment: String?, origin: String,
        secret write: (WipingBuffer) throws -> Void
    ) rethrows {
        let start = secrets.count
        try write(secrets)
        items.append(
            Item(service: service, account: account, label: label, comment: comment, secret: start..<secrets.count, origin: origin))
    }

    package func withSecret<R>(_ item: Item, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try secrets.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[item.secret])) }
    }

    /// Refuses empty names, names and texts above the vault's limits, and two items with the
    /// same service and account, naming them and where they came from.
    package func check() throws {
        for item in items {
            for (name, what) in [(item.service, "service"), (item.account, "account")] {
                if name.isEmpty { throw InterchangeError.usage("\(item.origin): the \(what) is empty") }
                // Every name `coffer set` accepts is imported, so an export of any vault the CLI
                // wrote imports again: a newline, a tab or an escape too (printed escaped, $'…').
                // Only a NUL is refused, as no command line can pass one: `coffer get` and `rm`
                // could never name the item.
                if name.utf8.contains(0) {
                    throw InterchangeError.usage(
                        "\(item.origin): the \(what) holds a NUL, which no command line can pass (coffer get and rm could not name the item)")
                }
                if name.utf8.count > Vault.maximumNameLength {
                    throw InterchangeError.usage(
                        "\(item.origin): the \(what) is \(name.utf8.count) bytes long; at most \(Vault.maximumNameLength) are allowed")
                }
            }
            for (text, what) in [(item.label, "label"), (item.comment, "comment")] {
                if let text, text.utf8.count > Vault.maximumTextLength {
                    throw InterchangeError.usage(
                        "\(item.origin): the \(what) is \(text.utf8.count) bytes long; at most \(Vault.maximumTextLength) are allowed")
                }
            }
        }
        var seen: [ItemIdentity: String] = [:]
        var clashes: [String] = []
        for item in items {
            let key = ItemIdentity(item.service, item.account)
            if let first = seen[key] {
                clashes.append("\(escapedName(item.service)) / \(escapedName(item.account)) (\(first) and \(item.origin))")
            } else {
                seen[key] = item.origin
            }
        }
        guard clashes.isEmpty else {
            throw InterchangeError.usage(
                "the input names \(clashes.count) item\(clashes.count == 1 ? "" : "s") more than once: "
                    + listed(clashes) + "; nothing was imported")
        }
    }
}

/// An item's service and account compared by their exact UTF-8 bytes, as the vault compares them.
package struct ItemIdentity: Hashable {
    package let service: [UInt8]
    package let account: [UInt8]
    package init(_ service: String, _ account: String) {
        self.service = Array(service.utf8)
        self.account = Array(account.utf8)
    }
}

/// At most `limit` entries joined by commas, then `and N more`.
package func listed(_ entries: [String], limit: Int = 10) -> String {
    let shown = entries.prefix(limit).joined(separator: ", ")
    return entries.count > limit ? shown + " and \(entries.count - limit) more" : shown
}

extension WipingBuffer {
    /// Appends every byte of `bytes`.
    package func append(contentsOf bytes: UnsafeRawBufferPointer) {
        for byte in bytes { append(byte) }
    }

    /// Appends every byte of `bytes` (names and other text that is not secret).
    package func append(contentsOf bytes: [UInt8]) {
        for byte in bytes { append(byte) }
    }
}

/// Whether `bytes` is valid UTF-8, checked without making a `String` of them.
package func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
    var iterator = bytes.makeIterator()
    var parser = Unicode.UTF8.ForwardParser()
    while true {
        switch parser.parseScalar(from: &iterator) {
        case .valid: continue
        case .emptyInput: return true
        case .error: return false
        }
    }
}

/// The 1-based line of `offset` in `bytes`.
private func lineNumber(of offset: Int, in bytes: UnsafeRawBufferPointer) -> Int {
    var line = 1
    for index in 0..<min(offset, bytes.count) where bytes[index] == 0x0A { line += 1 }
    return line
}

private func text(_ bytes: some Collection<UInt8>, _ what: @autoclosure () -> String) throws -> String {
    guard let text = String(validating: bytes, as: UTF8.self) else { throw InterchangeError.usage("\(what()) is not UTF-8") }
    return text
}

// MARK: - CSV (KeePassXC, Bitwarden, 1Password)

/// Reads RFC 4180 CSV from bytes: fields separated by commas, records by `\n` or `\r\n`; a
/// quoted field may hold commas, newlines and `""` (one quote). A leading UTF-8 byte-order mark
/// is skipped. Fields go to one ``WipingBuffer`` reused for every record.
package struct CSVReader {
    package let input: UnsafeRawBufferPointer
    package var index = 0
    package var line = 1

    package init(_ input: UnsafeRawBufferPointer) {
        self.input = input
        if input.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
    }

    /// The next record (its fields as ranges of `scratch`, and the line it starts on), or `nil`
    /// at the end. Blank lines are skipped.
    package mutating func next(into scratch: WipingBuffer) throws -> (fields: [Range<Int>], line: Int)? {
        while true {
            guard index < input.count else { return nil }
            scratch.count = 0
            let startLine = line
            var fields: [Range<Int>] = []
            var quotedAny = false
            while true {
                let start = scratch.count
                if index < input.count, input[index] == UInt8(ascii: "\"") {
                    quotedAny = true
                    let fieldLine = line
                    index += 1
                    while true {
                        guard index < input.count else {
                            throw InterchangeError.usage("line \(fieldLine) of the CSV file: a quoted field is never closed")
                        }
                        let byte = input[index]
                        if byte == UInt8(ascii: "\"") {
                            if index + 1 < input.count, input[index + 1] == UInt8(ascii: "\"") {
                                scratch.append(byte)
                                index += 2
                                continue
                            }
                            index += 1
                            break
                        }
                        if byte == 0x0A { line += 1 }
                        scratch.append(byte)
                        index += 1
                    }
                    let atEnd =
                        index >= input.count || input[index] == UInt8(ascii: ",") || input[index] == 0x0A
                        || input[index] == 0x0D
                    guard atEnd else {
                        throw InterchangeError.usage("line \(line) of the CSV file: text follows a closing quote (write a quote inside a quoted field as \"\")")
                    }
                } else {
                    while index < input.count {
                        let byte = input[index]
                        // A record ends at LF, CRLF or a lone CR (old Mac exports): an unquoted
                        // field never holds a CR, or a CR-only file would be one header record
                        // with every secret in it, and "import" 0 items.
                        if byte == UInt8(ascii: ",") || byte == 0x0A || byte == 0x0D { break }
                        scratch.append(byte)
                        index += 1
                    }
                }
                fields.append(start..<scratch.count)
                if index < input.count, input[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if index < input.count, input[index] == 0x0D {
                    index += 1
                    if index < input.count, input[index] == 0x0A { index += 1 }
                    line += 1
                } else if index < input.count, input[index] == 0x0A {
                    index += 1
                    line += 1
                }
                break
            }
            if fields.count == 1, fields[0].isEmpty, !quotedAny { continue }
            return (fields, startLine)
        }
    }
}

/// Which columns of a password manager's CSV export become what (the README's table).
package struct CSVLayout {
    /// The name `--help` and messages use: `KeePassXC`.
    package let name: String
    /// Header names (compared without case) for each part; the first three are required.
    package let service: [String]
    package let account: [String]
    package let secret: [String]
    package let label: [String]
    package let url: [String]
    /// Columns that are never imported but counted, so the summary can say so.
    package let notImported: [String]
    /// A `type` column whose rows other than `login` are skipped (Bitwarden).
    package let type: String?

    package static let keepassxc = CSVLayout(
        name: "KeePassXC", service: ["Title"], account: ["Username"], secret: ["Password"], label: ["Group"], url: ["URL"],
        notImported: ["Notes", "TOTP"], type: nil)
    package static let bitwarden = CSVLayout(
        name: "Bitwarden", service: ["name"], account: ["login_username"], secret: ["login_password"],
        label: ["folder", "collections"], url: ["login_uri"], notImported: ["notes", "fields", "login_totp"], type: "type")
    package static let onePassword = CSVLayout(
        name: "1Password", service: ["Title"], account: ["Username"], secret: ["Password"], label: ["Tags"],
        url: ["Url", "URL", "Website"], notImported: ["Notes", "OTPAuth"], type: nil)

    /// The account of a row whose user name column is empty.
    package static let defaultAccount = "default"

    /// Reads `input` into `batch`; a row with an empty title takes `fallbackService`, or is an error.
    package func parse(_ input: UnsafeRawBufferPointer, fallbackService: String?, into batch: ImportBatch) throws {
        var reader = CSVReader(input)
        let scratch = WipingBuffer(capacity: 1024)
        guard let header = try reader.next(into: scratch) else {
            throw InterchangeError.usage("the \(name) CSV file is empty: it has no header line")
        }
        let names = try scratch.withUnsafeBytes { bytes in
            try header.fields.map {
                try text(bytes[$0], "the header of the CSV file").trimmingCharacters(in: .whitespaces).lowercased()
            }
        }
        func column(_ candidates: [String]) -> Int? {
            candidates.lazy.compactMap { names.firstIndex(of: $0.lowercased()) }.first
        }
        func required(_ candidates: [String]) throws -> Int {
            guard let index = column(candidates) else {
                throw InterchangeError.usage(
                    "the CSV file's header has no \"\(candidates[0])\" column, which a \(name) export has: is it a \(name) export?")
            }
            return index
        }
        let serviceColumn = try required(service), accountColumn = try required(account), secretColumn = try required(secret)
        let labelColumn = column(label), urlColumn = column(url), typeColumn = type.flatMap { column([$0]) }
        let unimported = notImported.compactMap { name in column([name]).map { (name, $0) } }
        var skippedTypes = 0
        var dropped: [String: Int] = [:]
        while let record = try reader.next(into: scratch) {
            guard record.fields.count == header.fields.count else {
                throw InterchangeError.usage(
                    "line \(record.line) of the CSV file has \(record.fields.count) fields where the header has \(header.fields.count)")
            }
            try scratch.withUnsafeBytes { bytes in
                func field(_ column: Int, _ what: String) throws -> String {
                    try text(bytes[record.fields[column]], "line \(record.line) of the CSV file: the \(what)")
                }
                if let typeColumn, try field(typeColumn, "type") != "login" {
                    skippedTypes += 1
                    return
                }
                for (name, column) in unimported where !record.fields[column].isEmpty {
                    dropped[name, default: 0] += 1
                }
                var title = try field(serviceColumn, service[0])
                if title.isEmpty {
                    guard let fallbackService else {
                        throw InterchangeError.usage(
                            "line \(record.line) of the CSV file: the \(service[0]) is empty; give --service NAME to use for such rows")
                    }
                    title = fallbackService
                }
                let user = try field(accountColumn, account[0])
                // A layout without the column says nothing of it: nil keeps an existing item's
                // own (as dotenv and JSON do), where "" would blank it, or make it a clash.
                let group = try labelColumn.map { try field($0, label[0]) }
                let link = try urlColumn.map { try field($0, url[0]) }
                batch.add(
                    service: title, account: user.isEmpty ? Self.defaultAccount : user, label: group, comment: link,
                    origin: "line \(record.line)"
                ) { out in
                    out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[record.fields[secretColumn]]))
                }
            }
        }
        if skippedTypes > 0 {
            batch.notes.append(
                "skipped \(skippedTypes) row\(skippedTypes == 1 ? "" : "s") whose type is not login (notes, cards, identities)")
        }
        for (column, rows) in dropped.sorted(by: { $0.key < $1.key }) {
            batch.notes.append(
                "the \(column) column of \(rows) row\(rows == 1 ? "" : "s") was not imported (it may hold secrets, and a comment is not secret)")
        }
    }
}

// MARK: - Coffer's JSON

/// Coffer's own export format, version 1:
///
/// ```json
/// {"format": "coffer-export", "version": 1, "exported": "2026-05-01T12:00:00.000Z",
///  "items": [{"service": "db.internal", "account": "app", "label": "", "comment": "",
///             "created": "…", "modified": "…", "secretEncoding": "utf8", "secret": "hunter2"}]}
/// ```
///
/// `secretEncoding` is `utf8` (the secret is the JSON string's text) or `base64` (standard
/// alphabet with padding: any bytes). On import, `label`, `comment` and `secretEncoding` may be
/// left out (`utf8`), and `created`, `modified`, `exported` and unknown members are ignored.
package enum CofferJSON {
    package static let formatName = "coffer-export"
    package static let version = 1

    // MARK: Writing

    /// Appends `bytes` as a JSON string (quotes, backslashes, and control characters escaped;
    /// everything else as it is, so the bytes must be UTF-8).
    package static func appendString(_ bytes: UnsafeRawBufferPointer, to out: WipingBuffer) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(byte)
            case 0x0A: out.append(contentsOf: Array(#"\n"#.utf8))
            case 0x0D: out.append(contentsOf: Array(#"\r"#.utf8))
            case 0x09: out.append(contentsOf: Array(#"\t"#.utf8))
            case 0..<0x20, 0x7F:
                out.append(contentsOf: Array(#"\u00"#.utf8))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    package static func appendString(_ text: String, to out: WipingBuffer) {
        Array(text.utf8).withUnsafeBytes { appendString($0, to: out) }
    }

    /// Appends standard base64 with padding.
    package static func appendBase64(_ bytes: UnsafeRawBufferPointer, to out: WipingBuffer) {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        out.append(UInt8(ascii: "\""))
        var index = 0
        while index < bytes.count {
            let left = bytes.count - index
            let group =
                UInt32(bytes[index]) << 16 | (left > 1 ? UInt32(bytes[index + 1]) << 8 : 0) | (left > 2 ? UInt32(bytes[index + 2]) : 0)
            for position in 0..<4 {
                if position <= min(left, 3) {
                    out.append(alphabet[Int(group >> (18 - 6 * UInt32(position)) & 63)])
                } else {
                    out.append(UInt8(ascii: "="))
                }
            }
            index += 3
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The export of `items`, whose secrets `secret` reads one at a time (each is dropped before
    /// the next is read).
    package static func write(items: [VaultItem], secret: (VaultItem) throws -> SecureBytes?) throws -> WipingBuffer {
        let out = WipingBuffer(capacity: 4096 + items.count * 256)
        func line(_ text: String) { out.append(contentsOf: Array(text.utf8)) }
        line("{\n  \"format\": \"\(formatName)\",\n  \"version\": \(version),\n  \"exported\": ")
        appendString(iso8601Milliseconds(Date()), to: out)
        line(",\n  \"items\": [")
        var first = true
        for item in items {
            // An item removed meanwhile (another process) is left out.
            guard let bytes = try secret(item) else { continue }
            line(first ? "\n" : ",\n")
            first = false
            for (name, value) in [
                ("service", item.service), ("account", item.account), ("label", item.label), ("comment", item.comment),
                ("created", iso8601Milliseconds(item.created)), ("modified", iso8601Milliseconds(item.modified)),
            ] {
                line(name == "service" ? "    {\"\(name)\": " : ", \"\(name)\": ")
                appendString(value, to: out)
            }
            bytes.withUnsafeBytes { secret in
                if isValidUTF8(secret) {
                    line(", \"secretEncoding\": \"utf8\", \"secret\": ")
                    appendString(secret, to: out)
                } else {
                    line(", \"secretEncoding\": \"base64\", \"secret\": ")
                    appendBase64(secret, to: out)
                }
            }
            line("}")
        }
        line(first ? "]\n}\n" : "\n  ]\n}\n")
        return out
    }

    // MARK: Reading

    /// A small strict JSON reader over bytes (RFC 8259), nesting at most 64 deep, that builds no
    /// tree of the document: ``checkDocument()`` checks it whole, then the import walks the
    /// members it needs in place (``openObject()``, ``nextMember(_:)``, ``skipValue(depth:)``).
    /// Strings stay the ranges of their raw text (escapes undecoded) until a name is needed, and
    /// a secret is decoded once, straight into the batch's wiping buffer. Beyond the input,
    /// reading holds only one set of member-name hashes per object open at a time (the duplicate
    /// check): a tree of the document cost ~33 bytes per byte read.
    package struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        /// Whether a member name given twice in an object is refused (the check of the whole
        /// document does it; walks over the checked document need not again).
        var checkingNames = true

        /// An object being read: where it starts, how many members were read, and the hashes of
        /// their names.
        struct ObjectReading {
            let start: Int
            var count = 0
            var names = Set<Int>()
        }

        /// An array being read: how many elements were read.
        struct ArrayReading {
            var count = 0
        }

        func fail(_ what: String, at offset: Int? = nil) -> InterchangeError {
            InterchangeError.usage("line \(lineNumber(of: offset ?? index, in: bytes)) of the JSON file: \(what)")
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        /// Checks that the bytes are one JSON value with nothing after it but white space.
        mutating func checkDocument() throws {
            skipSpace()
            try skipValue(depth: 0)
            skipSpace()
            guard index == bytes.count else { throw fail("text after the end of the JSON value") }
        }

        /// Checks the value at `index` and steps over it.
        mutating func skipValue(depth: Int) throws {
            guard depth < 64 else { throw fail("nested more than 64 levels deep") }
            guard index < bytes.count else { throw fail("the JSON text ends early") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                var object = openObject()
                while try nextMember(&object) != nil { try skipValue(depth: depth + 1) }
            case UInt8(ascii: "["):
                var array = openArray()
                while try nextElement(&array) { try skipValue(depth: depth + 1) }
            case UInt8(ascii: "\""):
                _ = try rawString()
            case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
                for word in ["true", "false", "null"]
                where UnsafeRawBufferPointer(rebasing: bytes[index...]).starts(with: word.utf8) {
                    index += word.utf8.count
                    return
                }
                throw fail("not a JSON value")
            default:
                let start = index
                while index < bytes.count, Self.isNumberByte(bytes[index]) { index += 1 }
                guard index > start, number(start..<index) != nil else { throw fail("not a JSON value") }
            }
        }

        static func isNumberByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "e"), UInt8(ascii: "E"):
                true
            default: false
            }
        }

        /// The text of the number at `range`, when it is one by RFC 8259's grammar:
        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` (no `+1`, `.5`, `1.` or `01`).
        func number(_ range: Range<Int>) -> String? {
            let digits = UInt8(ascii: "0")...UInt8(ascii: "9")
            var index = range.lowerBound
            func digitRun() -> Bool {
                let start = index
                while index < range.upperBound, digits.contains(bytes[index]) { index += 1 }
                return index > start
            }
            if index < range.upperBound, bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < range.upperBound, digits.contains(bytes[index]) else { return nil }
            if bytes[index] == UInt8(ascii: "0") { index += 1 } else { _ = digitRun() }
            if index < range.upperBound, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digitRun() else { return nil }
            }
            if index < range.upperBound, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < range.upperBound, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digitRun() else { return nil }
            }
            guard index == range.upperBound else { return nil }
            return String(decoding: bytes[range], as: UTF8.self)
        }

        /// Steps over the `{` at `index`.
        mutating func openObject() -> ObjectReading {
            let start = index
            index += 1
            return ObjectReading(start: start)
        }

        /// The next member of `object`: its name (the raw range) and where it starts, with
        /// `index` on its value, which the caller then reads or skips; `nil` after the `}`.
        mutating func nextMember(_ object: inout ObjectReading) throws -> (name: Range<Int>, offset: Int)? {
            skipSpace()
            guard index < bytes.count else { throw fail("the JSON text ends inside an object") }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return nil
            }
            if object.count > 0 {
                guard bytes[index] == UInt8(ascii: ",") else { throw fail("expected , or } in an object") }
                index += 1
                skipSpace()
            }
            let offset = index
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            let name = try rawString()
            if checkingNames { try checkUnique(name, at: offset, in: &object) }
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected : after a member name") }
            index += 1
            skipSpace()
            object.count += 1
            return (name, offset)
        }

        /// Refuses a member name that an earlier member of `object` has. Only hashes are kept:
        /// when one repeats (the same name, or rarely two names with one hash), the members
        /// before are read again to tell. The name is quoted: it comes from the input.
        private func checkUnique(_ name: Range<Int>, at offset: Int, in object: inout ObjectReading) throws {
            var hasher = Hasher()
            try decode(name) { hasher.combine($0) }
            guard !object.names.insert(hasher.finalize()).inserted else { return }
            var wanted: [UInt8] = []
            try decode(name) { wanted.append($0) }
            var scan = Parser(bytes: bytes, index: object.start, checkingNames: false)
            var again = scan.openObject()
            while let member = try scan.nextMember(&again), member.offset < offset {
                if decoded(member.name, equals: wanted) {
                    throw fail("the member \(quotedName(try decodeText(name))) appears twice", at: offset)
                }
                try scan.skipValue(depth: 1)
            }
        }

        /// Steps over the `[` at `index`.
        mutating func openArray() -> ArrayReading {
            index += 1
            return ArrayReading()
        }

        /// Whether `array` has another element, with `index` on it; false after the `]`.
        mutating func nextElement(_ array: inout ArrayReading) throws -> Bool {
            skipSpace()
            guard index < bytes.count else { throw fail("the JSON text ends inside an array") }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return false
            }
            if array.count > 0 {
                guard bytes[index] == UInt8(ascii: ",") else { throw fail("expected , or ] in an array") }
                index += 1
                skipSpace()
            }
            array.count += 1
            return true
        }

        /// The raw text of a string (without its quotes); `index` is on the opening quote.
        mutating func rawString() throws -> Range<Int> {
            let start = index + 1
            index = start
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return start..<(index - 1)
                }
                if byte < 0x20 { throw fail("a control character inside a string (write it as an escape)") }
                index += byte == UInt8(ascii: "\\") ? 2 : 1
            }
            throw fail("a string is never closed", at: start)
        }

        /// Whether the string at `range` decodes to exactly `expected`.
        func decoded(_ range: Range<Int>, equals expected: some Sequence<UInt8>) -> Bool {
            var iterator = expected.makeIterator()
            var same = true
            do {
                try decode(range) { byte in if same, iterator.next() != byte { same = false } }
            } catch {
                return false
            }
            return same && iterator.next() == nil
        }

        /// Decodes a string's escapes, appending the UTF-8 bytes to `out`.
        func decode(_ range: Range<Int>, into out: (UInt8) -> Void) throws {
            var index = range.lowerBound
            func hex4() throws -> UInt32 {
                guard index + 4 <= range.upperBound else { throw fail("a malformed \\u escape", at: index) }
                var value: UInt32 = 0
                for offset in 0..<4 {
                    guard let digit = Character(UnicodeScalar(bytes[index + offset])).hexDigitValue else {
                        throw fail("a malformed \\u escape", at: index)
                    }
                    value = value << 4 | UInt32(digit)
                }
                index += 4
                return value
            }
            while index < range.upperBound {
                let byte = bytes[index]
                index += 1
                guard byte == UInt8(ascii: "\\") else {
                    out(byte)
                    continue
                }
                guard index < range.upperBound else { throw fail("a string ends in a backslash", at: index) }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out(escape)
                case UInt8(ascii: "b"): out(0x08)
                case UInt8(ascii: "f"): out(0x0C)
                case UInt8(ascii: "n"): out(0x0A)
                case UInt8(ascii: "r"): out(0x0D)
                case UInt8(ascii: "t"): out(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard index + 1 < range.upperBound, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { throw fail("a \\u escape holds half a surrogate pair", at: index) }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("a \\u escape holds half a surrogate pair", at: index) }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        throw fail("a \\u escape holds half a surrogate pair", at: index)
                    }
                    for byte in UTF8.encode(UnicodeScalar(scalar)!)! { out(byte) }
                // The escaped byte is not quoted: the string may be a secret.
                default: throw fail("an unknown escape after a backslash", at: index)
                }
            }
        }

        /// A string that is not secret (names, labels), decoded.
        func decodeText(_ range: Range<Int>) throws -> String {
            var text: [UInt8] = []
            try decode(range) { text.append($0) }
            return String(decoding: text, as: UTF8.self)
        }
    }

    /// The members of an item that are read, in the order ``parse(_:into:)`` keeps them.
    private static let itemMembers = ["service", "account", "label", "comment", "secretEncoding", "secret"]

    /// Reads an export (its bytes must be UTF-8) into `batch`: the document is checked whole
    /// first, then its members are walked in place (``Parser``).
    package static func parse(_ input: UnsafeRawBufferPointer, into batch: ImportBatch) throws {
        guard isValidUTF8(input) else { throw InterchangeError.usage("the JSON file is not UTF-8") }
        var check = Parser(bytes: input)
        try check.checkDocument()
        let reader = Parser(bytes: input, checkingNames: false)
        var walk = reader
        walk.skipSpace()
        guard input[walk.index] == UInt8(ascii: "{") else {
            throw InterchangeError.usage("the JSON file is not a Coffer export: it is not an object")
        }
        // The raw text of each member's value (a string's with its quotes).
        var format: Range<Int>?, versionText: Range<Int>?, items: Range<Int>?
        var top = walk.openObject()
        while let member = try walk.nextMember(&top) {
            let start = walk.index
            try walk.skipValue(depth: 1)
            if walk.decoded(member.name, equals: "format".utf8) { format = start..<walk.index }
            if walk.decoded(member.name, equals: "version".utf8) { versionText = start..<walk.index }
            if walk.decoded(member.name, equals: "items".utf8) { items = start..<walk.index }
        }
        /// The text of a string value without its quotes; `nil` for another kind of value.
        func stringText(_ value: Range<Int>) -> Range<Int>? {
            input[value.lowerBound] == UInt8(ascii: "\"") ? (value.lowerBound + 1)..<(value.upperBound - 1) : nil
        }
        guard let format = format.flatMap(stringText), reader.decoded(format, equals: formatName.utf8) else {
            throw InterchangeError.usage("the JSON file is not a Coffer export: its \"format\" is not \"\(formatName)\"")
        }
        guard let versionText, Parser.isNumberByte(input[versionText.lowerBound]),
            let found = reader.number(versionText).flatMap({ Int($0) })
        else {
            throw InterchangeError.usage("the Coffer export has no \"version\" number")
        }
        guard found == version else {
            throw InterchangeError.usage(
                "the Coffer export is version \(found); this coffer reads version \(version)\(found > version ? " (it was written by a newer coffer)" : "")")
        }
        guard let items, input[items.lowerBound] == UInt8(ascii: "[") else {
            throw InterchangeError.usage("the Coffer export has no \"items\" array")
        }
        walk.index = items.lowerBound
        var array = walk.openArray()
        var position = 0
        while try walk.nextElement(&array) {
            position += 1
            let origin = "item \(position)", offset = walk.index
            func fail(_ what: String) -> InterchangeError { reader.fail("\(origin): \(what)", at: offset) }
            guard input[offset] == UInt8(ascii: "{") else { throw fail("not an object") }
            var values = [Range<Int>?](repeating: nil, count: itemMembers.count)
            var object = walk.openObject()
            while let member = try walk.nextMember(&object) {
                let start = walk.index
                try walk.skipValue(depth: 2)
                if let slot = itemMembers.firstIndex(where: { walk.decoded(member.name, equals: $0.utf8) }) {
                    values[slot] = start..<walk.index
                }
            }
            func string(_ key: String, required: Bool) throws -> Range<Int>? {
                guard let value = values[itemMembers.firstIndex(of: key)!] else {
                    if required { throw fail("no \"\(key)\"") }
                    return nil
                }
                guard let text = stringText(value) else { throw fail("\"\(key)\" is not a string") }
                return text
            }
            let service = try reader.decodeText(try string("service", required: true)!)
            let account = try reader.decodeText(try string("account", required: true)!)
            let label = try string("label", required: false).map { try reader.decodeText($0) }
            let comment = try string("comment", required: false).map { try reader.decodeText($0) }
            let encoding = try string("secretEncoding", required: false).map { try reader.decodeText($0) } ?? "utf8"
            let secret = try string("secret", required: true)!
            guard encoding == "utf8" || encoding == "base64" else {
                throw fail("\"secretEncoding\" is neither \"utf8\" nor \"base64\"")
            }
            try batch.add(service: service, account: account, label: label, comment: comment, origin: origin) { out in
                if encoding == "utf8" {
                    try reader.decode(secret) { out.append($0) }
                } else {
                    // The JSON string's text first (`\/` is `/`, as JSONEncoder writes it), then
                    // its base64, each in a buffer that is wiped.
                    let text = WipingBuffer(capacity: secret.count)
                    try reader.decode(secret) { text.append($0) }
                    try text.withUnsafeBytes { encoded in
                        try decodeBase64(encoded, into: out) { fail("the secret is not base64 (standard alphabet, padded)") }
                    }
                }
            }
        }
    }

    /// Standard, padded base64 (no white space), appended to `out`.
    package static func decodeBase64(_ text: UnsafeRawBufferPointer, into out: WipingBuffer, failure: () -> InterchangeError) throws {
        guard text.count % 4 == 0 else { throw failure() }
        func value(_ byte: UInt8) -> UInt32? {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(byte - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "+"): 62
            case UInt8(ascii: "/"): 63
            default: nil
            }
        }
        var index = 0
        while index < text.count {
            let isLast = index + 4 == text.count
            let padding = isLast ? (text[index + 3] == UInt8(ascii: "=") ? (text[index + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
            var group: UInt32 = 0
            for offset in 0..<4 {
                if offset >= 4 - padding {
                    group <<= 6
                    continue
                }
                guard let digit = value(text[index + offset]) else { throw failure() }
                group = group << 6 | digit
            }
            for offset in 0..<(3 - padding) { out.append(UInt8(truncatingIfNeeded: group >> (16 - 8 * UInt32(offset)))) }
            index += 4
        }
    }
}

// MARK: - pass

/// A `pass` store: every `*.gpg` file under the store's directory (files and directories whose
/// names start with `.` are skipped, and directories reached through a symbolic link are not
/// entered), decrypted with `gpg --batch --quiet --decrypt`. The file's first line (without its
/// newline) is the secret; further lines are not imported (they may be secret, and a comment is
/// not). `a/b/name.gpg` becomes service `a/b`, account `name`; an entry at the top of the store
/// (`name.gpg`) takes its service from `--service`, else is an error.
package enum PassStore {
    /// The store's entries: paths relative to `root`, sorted.
    package static func entries(root: String) throws -> [String] {
        var status = stat()
        guard stat(root, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw InterchangeError.usage("the password store \(quotedName(root)) is not a directory")
        }
        var found: [String] = []
        // Directories are followed through symbolic links, as `pass` itself does (`tree -l`),
        // each one once (by device and inode), so a link loop ends; a directory's names are
        // read and it is closed before its children are walked, so depth costs no descriptors.
        var visited = Set<[UInt64]>()
        func walk(_ relative: String) throws {
            let path = relative.isEmpty ? root : root + "/" + relative
            var own = stat()
            guard stat(path, &own) == 0 else {
                throw InterchangeError(.failure, "cannot read the directory \(quotedName(path)): \(String(cString: strerror(errno)))")
            }
            guard visited.insert([UInt64(own.st_dev), UInt64(own.st_ino)]).inserted else { return }
            guard let directory = opendir(path) else {
                throw InterchangeError(.failure, "cannot read the directory \(quotedName(path)): \(String(cString: strerror(errno)))")
            }
            var names: [String] = []
            var notUTF8 = false
            while let entry = readdir(directory) {
                let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
                if bytes.first == UInt8(ascii: ".") { continue }
                guard let name = String(validating: bytes, as: UTF8.self) else {
                    notUTF8 = true
                    break
                }
                names.append(name)
            }
            closedir(directory)
            if notUTF8 {
                throw InterchangeError.usage(
                    "a name in the password store's directory \(quotedName(path)) is not UTF-8: rename it or move it out")
            }
            for name in names.sorted() {
                let child = relative.isEmpty ? name : relative + "/" + name
                var target = stat()
                let reachable = stat(root + "/" + child, &target) == 0
                if reachable, target.st_mode & S_IFMT == S_IFDIR {
                    try walk(child)
                    continue
                }
                guard name.hasSuffix(".gpg"), name.count > 4 else { continue }  // not an entry (pass ignores it too)
                // An entry that cannot be read is never dropped without a word: the import is
                // all or nothing, and "complete" must mean every entry.
                guard reachable, target.st_mode & S_IFMT == S_IFREG else {
                    throw InterchangeError(
                        .failure,
                        "the password store entry \(quotedName(child)) is not a regular file (a FIFO, a device, or a link "
                            + "that leads nowhere or in a loop): fix it or move it out of the store, then import again")
                }
                found.append(child)
            }
        }
        try walk("")
        return found
    }

    /// Decrypts every entry into `batch`.
    package static func read(root: String, fallbackService: String?, into batch: ImportBatch) throws {
        let entries = try entries(root: root)
        var topLevel: [String] = []
        var longer = 0
        for entry in entries {
            var parts = entry.split(separator: "/").map(String.init)
            let account = String(parts.removeLast().dropLast(4))
            let service: String
            if parts.isEmpty {
                guard let fallbackService else {
                    topLevel.append(entry)
                    continue
                }
                service = fallbackService
            } else {
                service = parts.joined(separator: "/")
            }
            let plaintext = try decrypt(root + "/" + entry, entry: entry)
            plaintext.withUnsafeBytes { bytes in
                let end = bytes.firstIndex(of: 0x0A) ?? bytes.count
                if end + 1 < bytes.count, bytes[(end + 1)...].contains(where: { ![0x0A, 0x0D, 0x20, 0x09].contains($0) }) {
                    longer += 1
                }
                batch.add(service: service, account: account, label: nil, comment: nil, origin: escapedName(entry)) { out in
                    out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<end]))
                }
            }
        }
        guard topLevel.isEmpty else {
            throw InterchangeError.usage(
                "\(topLevel.count) entr\(topLevel.count == 1 ? "y is" : "ies are") at the top of the store, with no directory to be the service: "
                    + listed(topLevel.map { quotedName($0) }) + "; give --service NAME for them")
        }
        if entries.isEmpty { batch.notes.append("the store holds no .gpg file") }
        if longer > 0 {
            batch.notes.append(
                "\(longer) entr\(longer == 1 ? "y has" : "ies have") more lines after the first, which were not imported")
        }
    }

    /// The largest decrypted entry accepted.
    package static let maximumEntry = 16 * 1024 * 1024

    /// `gpg --batch --quiet --decrypt -- PATH`, spawned without a shell, its standard input
    /// `/dev/null`, its output read through a pipe into wiping memory. gpg's messages are read
    /// through a second pipe, and the last of them goes into the error when gpg fails.
    package static func decrypt(_ path: String, entry: String) throws -> WipingBuffer {
        var outPipe: [Int32] = [-1, -1], errPipe: [Int32] = [-1, -1]
        guard pipe(&outPipe) == 0 else {
            throw InterchangeError(.failure, "cannot make a pipe for gpg: \(String(cString: strerror(errno)))")
        }
        guard pipe(&errPipe) == 0 else {
            let code = errno
            close(outPipe[0])
            close(outPipe[1])
            throw InterchangeError(.failure, "cannot make a pipe for gpg: \(String(cString: strerror(code)))")
        }
        // No end may reach another child: gpg gets the write ends as its outputs only.
        for fd in outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var open = [outPipe[0], errPipe[0]]
        defer { for fd in open where fd >= 0 { close(fd) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], STDOUT_FILENO)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], STDERR_FILENO)
        let arguments = ["gpg", "--batch", "--quiet", "--decrypt", "--", path]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, "gpg", &actions, nil, &argv, environ)
        close(outPipe[1])
        close(errPipe[1])
        guard spawned == 0 else {
            throw InterchangeError(
                .failure,
                "cannot run gpg to decrypt the pass entry \(quotedName(entry)): \(String(cString: strerror(spawned)))"
                    + (spawned == ENOENT ? " (is GnuPG installed and on PATH?)" : ""))
        }
        let output = WipingBuffer(capacity: 256)
        var messages: [UInt8] = []
        var failure: InterchangeError?
        // Both pipes at once, so gpg never blocks on a full one.
        try withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 16) { chunk in
            defer { SecureMemory.zero(chunk) }
            while open[0] >= 0 || open[1] >= 0 {
                var fds = open.filter { $0 >= 0 }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                if poll(&fds, nfds_t(fds.count), -1) < 0 {
                    if errno == EINTR { continue }
                    throw InterchangeError(.failure, "cannot read gpg's output: \(String(cString: strerror(errno)))")
                }
                for ready in fds where ready.revents != 0 {
                    let n = Glibc.read(ready.fd, chunk.baseAddress, chunk.count)
                    if n < 0, errno == EINTR || errno == EAGAIN { continue }
                    let which = ready.fd == open[0] ? 0 : 1
                    if n <= 0 {
                        close(ready.fd)
                        open[which] = -1
                        continue
                    }
                    let bytes = UnsafeRawBufferPointer(rebasing: chunk[..<n])
                    if which == 1 {
                        if messages.count < 65536 { messages += bytes }
                    } else if failure == nil {
                        if output.count + n > maximumEntry {
                            failure = InterchangeError.usage("the pass entry \(quotedName(entry)) holds more than \(maximumEntry) bytes")
                            // gpg gets EPIPE (or SIGPIPE) and stops.
                            close(ready.fd)
                            open[0] = -1
                        } else {
                            output.append(contentsOf: bytes)
                        }
                    }
                }
            }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        if let failure { throw failure }
        let exited = status & 0x7F == 0
        guard exited, (status >> 8) & 0xFF == 0 else {
            let how = exited ? "exit \((status >> 8) & 0xFF)" : "signal \(status & 0x7F)"
            // gpg's messages quote the entry's path: nothing a terminal acts on (controls, C1
            // controls such as CSI, bidirectional overrides) is printed raw.
            let said = String(decoding: messages, as: UTF8.self).split(whereSeparator: \.isNewline).suffix(3)
                .map { line in
                    String(
                        line.unicodeScalars.map { scalar in
                            switch scalar.properties.generalCategory {
                            case .control, .format, .lineSeparator, .paragraphSeparator: " "
                            default: Character(scalar)
                            }
                        })
                }
                .joined(separator: "; ")
            throw InterchangeError(
                .failure,
                "gpg could not decrypt the pass entry \(quotedName(entry)) (\(how)\(said.isEmpty ? "" : ": " + said)); nothing was imported")
        }
        return output
    }
}

/// `2026-05-01T12:34:56.789Z`: a vault stores times in whole milliseconds, so this is all of
/// it (JSONEncoder's `.iso8601` drops the fraction).
package func iso8601Milliseconds(_ date: Date) -> String {
    let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
    guard milliseconds.isFinite, abs(milliseconds) < 1e15 else { return "" }
    let total = Int64(milliseconds)
    var seconds = time_t(total >= 0 ? total / 1000 : (total - 999) / 1000)
    let fraction = Int(total - Int64(seconds) * 1000)
    var parts = tm()
    guard gmtime_r(&seconds, &parts) != nil else { return "" }
    func pad(_ value: Int32, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
    return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))"
        + "T\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(fraction), 3))Z"
}
