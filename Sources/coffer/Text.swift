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

extension String {
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
