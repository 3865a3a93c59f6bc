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
///   right after `=` followed by a value is an error (quote a value that starts with one);
///   `NAME=` followed only by spaces, tabs or a ` #` comment is empty. A quoted value ends on
///   its own line. Nothing is expanded: `$HOME` is five characters.
package enum DotEnv {
    /// One assignment: the variable's name, its value's bytes, and the line it is on (from 1).
    package struct Assignment {
        package let name: String
        package let value: [UInt8]
        package let line: Int
    }

    /// The largest file read.
    package static let maximumSize = 16 * 1024 * 1024

    /// Reads and parses the file at `path`.
    package static func read(_ path: String) throws -> [Assignment] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw InterchangeError.usage("the env file \(quotedName(path)) does not exist") }
            throw InterchangeError(.failure, "cannot read the env file \(quotedName(path)): \(String(cString: strerror(code)))")
        }
        defer { close(fd) }
        var status = stat()
        if fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFDIR {
            throw InterchangeError.usage("the env file \(quotedName(path)) is a directory")
        }
        // Wiped when released: an env file may hold plain secrets of its own.
        let buffer = WipingBuffer(capacity: 4096)
        try buffer.readToEnd(fd, limit: maximumSize, what: "the env file \(quotedName(path))")
        return try buffer.withUnsafeBytes { try parse($0, file: path) }
    }

    /// Parses `.env` text; `file` names it in errors.
    package static func parse(_ text: UnsafeRawBufferPointer, file: String) throws -> [Assignment] {
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
    package static func isValidName<S: Collection<UInt8>>(_ name: S) -> Bool {
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
        func fail(_ reason: String) -> InterchangeError {
            InterchangeError.usage("line \(number) of the env file \(quotedName(file)): \(reason)")
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
