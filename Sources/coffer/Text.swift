import ArgumentParser

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Text that crosses the CLI's boundary: arguments and environment variables coming in (which
// must be valid UTF-8), names going out (which must not drive the terminal, and must be safe to
// paste into a shell).

// MARK: - Incoming

/// Refuses any command-line argument that is not valid UTF-8.
///
/// swift-argument-parser only ever sees `CommandLine.arguments`, where invalid bytes have
/// already been replaced by U+FFFD: `svc\xff` and `svc\xfe` would both become `svc\u{FFFD}` and
/// name the same item. So the raw bytes of `argv` are checked before parsing. The message names
/// the argument's position, never its text (it may be a secret typed in the wrong place).
func checkArgumentsAreUTF8() throws {
    let argv = CommandLine.unsafeArgv
    for index in 1..<Int(CommandLine.argc) {
        guard let argument = argv[index] else { continue }
        guard String(validatingCString: argument) != nil else {
            throw CLIError.usage(
                "argument \(index) is not valid UTF-8: names, labels, comments and paths must be UTF-8 text")
        }
    }
}

/// The environment variables coffer reads as text (paths and numbers).
let textVariables = ["COFFER_VAULT", "XDG_DATA_HOME", "HOME", "COFFER_LOCK_TIMEOUT"]

/// Refuses, before parsing, any of ``textVariables`` that is not valid UTF-8: a usage error
/// rather than a path silently repaired into another one.
func checkEnvironmentIsUTF8() throws {
    for name in textVariables {
        if let value = getenv(name), String(validatingCString: value) == nil {
            throw CLIError.usage("\(name) is not valid UTF-8")
        }
    }
}

/// The value of environment variable `name`, or `nil` when it is unset.
///
/// Read with `getenv` (not `ProcessInfo.environment`, which copies every variable into a
/// `String`); for ``textVariables``, checked to be UTF-8 by ``checkEnvironmentIsUTF8()``.
func environmentText(_ name: String) -> String? {
    getenv(name).map { String(decoding: UnsafeRawBufferPointer(start: $0, count: strlen($0)), as: UTF8.self) }
}

/// Checks a service or account name given on the command line: an empty one is a usage error
/// (exit 2) in every command, before the vault is opened.
func checkName(_ name: String, _ what: String) throws {
    if name.isEmpty { throw ValidationError("the \(what) must not be empty") }
}

// MARK: - Outgoing

/// Whether `scalar` must not reach a terminal raw: C0 and C1 controls and DEL (category Cc,
/// which covers ESC, BEL and the 8-bit CSI U+009B), format characters such as the bidirectional
/// overrides (Cf), and the line and paragraph separators (Zl, Zp).
private func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar.properties.generalCategory {
    case .control, .format, .lineSeparator, .paragraphSeparator: true
    default: false
    }
}

/// `$'…'` with every byte that needs it escaped in octal (`\033`), the form bash, zsh and ksh
/// read back as the same bytes: reversible, and inert on a terminal.
private func dollarQuoted(_ text: String) -> String {
    var out = "$'"
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\\": out += "\\\\"
        case "'": out += "\\'"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case "\r": out += "\\r"
        default:
            if needsEscape(scalar) {
                for byte in String(scalar).utf8 {
                    let octal = String(byte, radix: 8)
                    out += "\\" + String(repeating: "0", count: 3 - octal.count) + octal
                }
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "'"
}

/// A name as it is printed in a table or a message: unchanged when it holds nothing a terminal
/// would act on, else in `$'…'` form as `ls` prints such names (`$'evil\033]0;…'`). A name
/// that itself begins with `$'` is quoted too, so the printed form is never ambiguous.
func escapedName(_ name: String) -> String {
    if name.hasPrefix("$'") || name.unicodeScalars.contains(where: needsEscape) { return dollarQuoted(name) }
    return name
}

/// A name quoted for a message: `'svc'`, or `$'…'` when it holds control characters.
func quotedName(_ name: String) -> String {
    if name.unicodeScalars.contains(where: needsEscape) { return dollarQuoted(name) }
    return "'" + name.replacingAll("'", with: "'\\''") + "'"
}

/// `text` with every character a terminal would act on (C0 and C1 controls, bidirectional
/// overrides and other format characters, line separators) written as an escape, the rest
/// unchanged: `\uXXXX` when `json` (the same string to a JSON reader: JSONEncoder leaves C1
/// controls, U+202E and U+2028 raw; its line breaks, only ever between values, are kept), else
/// `\ooo` for each byte (a library message, which may carry a path, printed as one line).
func escapingControls(_ text: String, json: Bool = false) -> String {
    func escaped(_ scalar: Unicode.Scalar) -> Bool { needsEscape(scalar) && !(json && scalar == "\n") }
    guard text.unicodeScalars.contains(where: escaped) else { return text }
    var out = ""
    for scalar in text.unicodeScalars {
        guard escaped(scalar) else {
            out.unicodeScalars.append(scalar)
            continue
        }
        if json {
            for unit in String(scalar).utf16 {
                let hex = String(unit, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            }
        } else {
            for byte in String(scalar).utf8 {
                let octal = String(byte, radix: 8)
                out += "\\" + String(repeating: "0", count: 3 - octal.count) + octal
            }
        }
    }
    return out
}

/// `name` as one shell word that, pasted into bash, zsh or sh, is exactly `name` and never runs
/// anything: bare when it is only safe characters, else single-quoted, else `$'…'`.
func shellQuoted(_ name: String) -> String {
    let safe = name.unicodeScalars.allSatisfy { scalar in
        scalar.isASCII
            && (("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
                || "@%_+=:,./-".unicodeScalars.contains(scalar))
    }
    if safe && !name.isEmpty { return name }
    return quotedName(name)
}

extension String {
    /// Every occurrence of `target` replaced (without Foundation).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound]
            out += replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }

    /// At most `width` characters: longer text is cut and ends in `…`.
    func truncated(to width: Int) -> String {
        guard width > 0 else { return "" }
        var index = startIndex
        var kept = 0
        while index < endIndex {
            if kept == width - 1 {
                // One character may still fit in full; more than one means cutting.
                let next = self.index(after: index)
                return next == endIndex ? self : String(self[..<index]) + "…"
            }
            index = self.index(after: index)
            kept += 1
        }
        return self
    }
}
