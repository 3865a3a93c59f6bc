// Names going out of the CLI: text that must not drive the terminal, and must be safe to paste
// into a shell. Shared by the commands and the import parsers' messages.

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
package func escapedName(_ name: String) -> String {
    if name.hasPrefix("$'") || name.unicodeScalars.contains(where: needsEscape) { return dollarQuoted(name) }
    return name
}

/// A name quoted for a message: `'svc'`, or `$'…'` when it holds control characters.
package func quotedName(_ name: String) -> String {
    if name.unicodeScalars.contains(where: needsEscape) { return dollarQuoted(name) }
    return "'" + name.replacingAll("'", with: "'\\''") + "'"
}

/// `text` with every character a terminal would act on (C0 and C1 controls, bidirectional
/// overrides and other format characters, line separators) written as an escape, the rest
/// unchanged: `\uXXXX` when `json` (the same string to a JSON reader: JSONEncoder leaves C1
/// controls, U+202E and U+2028 raw; its line breaks, only ever between values, are kept), else
/// `\ooo` for each byte (a library message, which may carry a path, printed as one line).
package func escapingControls(_ text: String, json: Bool = false) -> String {
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

/// `name` as one shell word that, pasted into bash, zsh or ksh, is exactly `name` and never runs
/// anything: bare when it is only safe characters, else single-quoted, else `$'…'` (for a name
/// with control characters; a shell without `$'…'`, such as dash, reads that form literally but
/// still runs nothing).
package func shellQuoted(_ name: String) -> String {
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
    package func replacingAll(_ target: String, with replacement: String) -> String {
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
}
