// The entry point: parse, run, and turn any error into one line on standard error and the exit
// code `coffer` promises (see ExitStatus.swift). swift-argument-parser's `main()` is not used
// because it exits 64 on a usage error; coffer's contract says 2.

import ArgumentParser
import CofferCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Warnings as one line each, control characters escaped like errors' (a path in a warning may
// hold escape sequences); the library's default handler writes them as they are.
CofferWarning.setHandler { warning in printError("warning: \(warning)") }

do {
    try Hardening.apply()
    try checkArgumentsAreUTF8()
    try checkEnvironmentIsUTF8()
    // Run as git-credential-coffer or docker-credential-coffer: that tool's protocol.
    if try !CredentialHelper.runIfNamed(CommandLine.arguments.first, Array(CommandLine.arguments.dropFirst())) {
        var command = try CofferCommand.parseAsRoot()
        try command.run()
    }
    // A command's output that could not be written (standard output closed, a full disk, a
    // closed pipe) is a failure, never a silent success: `coffer list >&-` used to exit 0.
    if let failure = standardOutputFailure.withLock({ $0 }) {
        throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(failure)))")
    }
    exit(ExitStatus.success.rawValue)
} catch {
    exit(report(error).rawValue)
}
