import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `.env` files as `coffer run --env-file` reads them: `NAME=VALUE` lines.
///
/// The format, strictly (a line that breaks it is an error naming the file and the line, never
/// quoting the line, which may hold a secret):
/// - A line is ended by `\n`; one `\r` before it is dropped (files written on Windows).
/// - Blank lines, and lines whose first character after spaces and tabs is `#`, are ignored.
/// - `export ` (followed by spaces or tabs) may come first, as in a shell script.
/// - NAME is `[A-Za-z_][A-Za-z0-9_]*`, followed at once by `=` (no space before it).
/// - VALUE is empty, or `'…'` (every byte up to the next `'` as it is), or `"…"` (up to the
///   next unescaped `"`; `\"`, `\\`, `\$`, `\n`, `\r` and `\t` are the only escapes), or
///   unquoted: the rest of the line up to a ` #` or `\t#` comment, trailing spaces and tabs
///   removed. After a closing quote, only spaces, tabs and a `#` comment may follow. A space
///   right after `=` is an error (quote a value that starts with one). A quoted value ends on
///   its own line. Nothing is expanded: `$HOME` is five characters.
enum DotEnv {
    /// One assignment: the variable's name, its value's bytes, and the line it is on (from 1).
    struct Assignment {
        let name: String
        let value: [UInt8]
        let line: Int
    }

    /// The largest file read.
    static let maximumSize = 16 * 1024 * 1024

    /// Reads and parses the file at `path`.
    static func read(_ path: String) throws -> [Assignment] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw CLIError.usage("the env file \(quotedName(path)) does not exist") }
            throw CLIError(.failure, "cannot read the env file \(quotedName(path)): \(String(cString: strerror(code)))")
        }
        defer { close(fd) }
        var status = stat()
        if fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFDIR {
            throw CLIError.usage("the env file \(quotedName(path)) is a directory")
        }
        // Wiped when released: an env file may hold plain secrets of its own.
        let buffer = WipingBuffer(capacity: 4096)
        try buffer.readToEnd(fd, limit: maximumSize, what: "the env file \(quotedName(path))")
        return try buffer.withUnsafeBytes { try parse($0, file: path) }
    }

    /// Parses `.env` text; `file` names it in errors.
    static func parse(_ text: UnsafeRawBufferPointer, file: String) throws -> [Assignment] {
        var assignments: [Assignment] = []
        var lineNumber = 0
        var start = 0
        while start < text.count {
            var end = start
            while end < text.count, text[end] != UInt8(ascii: "\n") { end += 1 }
            lineNumber += 1
            var last = end
            if last > start, text[last - 1] == UInt8(ascii: "\r") { last -= 1 }
            if let assignment = try parseLine(UnsafeRawBufferPointer(rebasing: text[start..<last]), line: lineNumber, file: file) {
                assignments.append(assignment)
            }
            start = end + 1
        }
        return assignments
    }

    /// Whether `name` may name an environment variable here: `[A-Za-z_][A-Za-z0-9_]*`.
    static func isValidName<S: Collection<UInt8>>(_ name: S) -> Bool {
        guard let first = name.first, isNameStart(first) else { return false }
        return name.allSatisfy { isNameStart($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    private static func isNameStart(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || byte == UInt8(ascii: "_")
    }

    private static func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }

    /// One line: `nil` for a blank line or a comment.
    private static func parseLine(_ line: UnsafeRawBufferPointer, line number: Int, file: String) throws -> Assignment? {
        func fail(_ reason: String) -> CLIError {
            CLIError.usage("line \(number) of the env file \(quotedName(file)): \(reason)")
        }
        if line.contains(0) { throw fail("a NUL byte, which no environment variable can hold") }
        var index = 0
        while index < line.count, isBlank(line[index]) { index += 1 }
        if index == line.count || line[index] == UInt8(ascii: "#") { return nil }
        let export = Array("export".utf8)
        if line.count - index > export.count, Array(line[index..<(index + export.count)]) == export,
            isBlank(line[index + export.count])
        {
            index += export.count
            while index < line.count, isBlank(line[index]) { index += 1 }
        }
        let nameStart = index
        while index < line.count, line[index] != UInt8(ascii: "="), !isBlank(line[index]) { index += 1 }
        let nameBytes = line[nameStart..<index]
        guard index < line.count, line[index] == UInt8(ascii: "=") else {
            throw fail("expected NAME=VALUE (with no space before the =)")
        }
        guard isValidName(nameBytes) else {
            throw fail("not a variable name (letters, digits and _, not starting with a digit)")
        }
        let name = String(decoding: nameBytes, as: UTF8.self)
        index += 1
        var value: [UInt8] = []
        /// Checks that only blanks and a comment follow `from`.
        func expectEnd(from start: Int, after what: String) throws {
            var rest = start
            while rest < line.count, isBlank(line[rest]) { rest += 1 }
            guard rest == line.count || line[rest] == UInt8(ascii: "#") else {
                throw fail("unexpected text after \(what) (a comment starts with #)")
            }
        }
        if index == line.count {
            // NAME= : the empty value.
        } else if isBlank(line[index]) {
            // NAME= # comment is empty; NAME= value is ambiguous (a shell would run `value`).
            try expectEnd(from: index, after: "the =")
        } else if line[index] == UInt8(ascii: "'") {
            var close = index + 1
            while close < line.count, line[close] != UInt8(ascii: "'") { close += 1 }
            guard close < line.count else { throw fail("the ' quote is not closed on this line") }
            value = Array(line[(index + 1)..<close])
            try expectEnd(from: close + 1, after: "the closing quote")
        } else if line[index] == UInt8(ascii: "\"") {
            var cursor = index + 1
            var closed = false
            while cursor < line.count {
                let byte = line[cursor]
                if byte == UInt8(ascii: "\"") {
                    closed = true
                    break
                }
                if byte == UInt8(ascii: "\\") {
                    guard cursor + 1 < line.count else { break }
                    switch line[cursor + 1] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "$"): value.append(line[cursor + 1])
                    case UInt8(ascii: "n"): value.append(UInt8(ascii: "\n"))
                    case UInt8(ascii: "r"): value.append(UInt8(ascii: "\r"))
                    case UInt8(ascii: "t"): value.append(UInt8(ascii: "\t"))
                    default: throw fail("an unknown escape in a \"…\" value (known: \\\" \\\\ \\$ \\n \\r \\t)")
                    }
                    cursor += 2
                    continue
                }
                value.append(byte)
                cursor += 1
            }
            guard closed else { throw fail("the \" quote is not closed on this line") }
            try expectEnd(from: cursor + 1, after: "the closing quote")
        } else {
            var end = index
            while end < line.count, !(line[end] == UInt8(ascii: "#") && isBlank(line[end - 1])) { end += 1 }
            while end > index, isBlank(line[end - 1]) { end -= 1 }
            value = Array(line[index..<end])
        }
        return Assignment(name: name, value: value, line: number)
    }
}

/// The environment `coffer run` gives its child: every variable in order, each a plain value or
/// a reference to an item (whose secret is filled in at each start).
struct ChildEnvironment {
    /// A variable's value.
    enum Value {
        /// `NAME=VALUE` exactly as it will be passed (bytes from the environment or a file).
        case plain([UInt8])
        /// An item whose secret becomes the value.
        case reference(SecretReference)
    }

    /// One variable: its value, and where it was set (for messages).
    struct Entry {
        var value: Value
        var origin: String
    }

    /// The variables' names in the order they first appeared (later sources override the
    /// value, not the place).
    private(set) var order: [[UInt8]] = []
    private(set) var entries: [[UInt8]: Entry] = [:]

    /// Sets `name` (bytes; the environment may hold names that are not identifiers).
    mutating func set(_ name: [UInt8], _ entry: Entry) {
        if entries.updateValue(entry, forKey: name) == nil { order.append(name) }
    }

    /// The entries in order, with their names.
    var ordered: [(name: [UInt8], entry: Entry)] { order.map { ($0, entries[$0]!) } }

    /// Every distinct item referred to, in order of first use, with the first place naming it.
    var references: [(reference: SecretReference, origin: String)] {
        var seen: Set<SecretReference> = []
        var found: [(SecretReference, String)] = []
        for (_, entry) in ordered {
            if case .reference(let reference) = entry.value, seen.insert(reference).inserted {
                found.append((reference, entry.origin))
            }
        }
        return found
    }

    /// A plain variable's value (for PATH), `nil` when unset or a reference.
    func plainValue(_ name: String) -> [UInt8]? {
        guard case .plain(let bytes)? = entries[Array(name.utf8)]?.value else { return nil }
        let prefix = name.utf8.count + 1
        return Array(bytes[prefix...])
    }

    /// `value` as a reference when it starts with `coffer://`; `nil` when it does not; a usage
    /// error naming `origin` when it starts so but is malformed.
    static func reference<S: Collection<UInt8>>(in value: S, origin: String) throws -> SecretReference? {
        let scheme = Array(SecretReference.scheme.utf8)
        guard value.starts(with: scheme) else { return nil }
        guard let text = String(validating: Array(value), as: UTF8.self) else {
            throw CLIError.usage("\(origin) is not a valid reference: it is not UTF-8")
        }
        switch SecretReference.parse(text[...]) {
        case .success(let reference): return reference
        case .failure(let error): throw CLIError.usage("\(origin) is not a valid reference: \(error.reason)")
        }
    }

    /// The variables of this process's environment, then each env file's in order, then each
    /// `--env NAME=REF`; a later one overrides an earlier one of the same name.
    static func assemble(envFiles: [String], assignments: [String]) throws -> ChildEnvironment {
        var environment = ChildEnvironment()
        let block: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ
        if var cursor = block {
            while let entry = cursor.pointee {
                let bytes = Array(UnsafeRawBufferPointer(start: entry, count: strlen(entry)))
                let split = bytes.firstIndex(of: UInt8(ascii: "=")) ?? bytes.count
                let name = Array(bytes[..<split])
                let origin = "the environment variable \(escapedName(String(decoding: name, as: UTF8.self)))"
                let value = split < bytes.count ? bytes[(split + 1)...] : []
                if let reference = try reference(in: value, origin: origin) {
                    environment.set(name, Entry(value: .reference(reference), origin: origin))
                } else {
                    environment.set(name, Entry(value: .plain(bytes), origin: origin))
                }
                cursor += 1
            }
        }
        for file in envFiles {
            for assignment in try DotEnv.read(file) {
                let origin = "\(assignment.name) on line \(assignment.line) of the env file \(quotedName(file))"
                let name = Array(assignment.name.utf8)
                if let reference = try reference(in: assignment.value, origin: origin) {
                    environment.set(name, Entry(value: .reference(reference), origin: origin))
                } else {
                    environment.set(name, Entry(value: .plain(name + [UInt8(ascii: "=")] + assignment.value), origin: origin))
                }
            }
        }
        for (index, assignment) in assignments.enumerated() {
            let parts = assignment.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            // Never any part of the argument in a message unless it is NAME=coffer://…: a token
            // pasted in its place (`--env "$TOKEN"`, `--env TOKEN=ghp_…`) would be printed, and
            // a token's characters before its first = can look like a name. The argument's
            // position says which one it is.
            let malformed = "argument \(index + 1) of --env is not NAME=coffer://SERVICE/ACCOUNT"
            guard parts.count == 2 else { throw CLIError.usage("\(malformed): it has no =") }
            guard parts[1].hasPrefix(SecretReference.scheme) else {
                throw CLIError.usage("\(malformed): its value must be a reference, coffer://SERVICE/ACCOUNT")
            }
            guard DotEnv.isValidName(parts[0].utf8) else {
                throw CLIError.usage("\(malformed): NAME must be letters, digits and _, not starting with a digit")
            }
            let origin = "--env \(parts[0])"
            guard let reference = try reference(in: parts[1].utf8, origin: origin) else {
                throw CLIError.usage("\(malformed): its value must be a reference, coffer://SERVICE/ACCOUNT")
            }
            environment.set(Array(parts[0].utf8), Entry(value: .reference(reference), origin: origin))
        }
        return environment
    }
}
