import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Crash output, core dumps and the environment, through the test-only
/// `COFFER_TEST_HOOK` (see Sources/coffer/Hardening.swift).
@Suite("coffer process hardening")
struct HardeningTests {
    /// Every 6-byte window of `secret`, raw and as the hex a memory dump prints (`70 70 2d …`).
    private func fragments(of secret: String) -> [[UInt8]] {
        let bytes = Array(secret.utf8)
        return (0...(bytes.count - 6)).flatMap { start -> [[UInt8]] in
            let window = Array(bytes[start..<(start + 6)])
            let hex = window.map { String(format: "%02x", $0) }.joined(separator: " ")
            return [window, Array(hex.utf8), Array(hex.uppercased().utf8)]
        }
    }

    @Test("a fault next to a secret prints one fixed line, no memory, and dies of the signal")
    func crashPrintsNoMemory() throws {
        let box = try Sandbox()
        try box.initVault()
        let run = try box.run(
            ["list"], environment: ["COFFER_PASSPHRASE": box.passphrase, "COFFER_TEST_HOOK": "crash-in-secret"],
            passphraseFile: false)
        #expect(run.status == 128 + SIGSEGV, "exit \(run.status)")
        let leaked = fragments(of: box.passphrase).contains { run.stderr.firstRange(of: $0) != nil }
        #expect(!leaked, "stderr holds bytes of the passphrase (\(run.stderr.count) bytes of stderr)")
        // Bools first, so a failure never prints stderr (it may hold the secret).
        let report = run.err.contains("Registers") || run.err.contains("Backtracing")
        #expect(!report, "a crash report was printed")
        let fixedLine = run.err.hasPrefix("coffer: terminated by a fatal signal")
        #expect(fixedLine, "\(run.stderr.count) bytes of stderr")
        let lines = run.err.split(separator: "\n").count
        #expect(lines == 1, "more than one line on stderr")
        // Also with the backtracer asked for explicitly.
        let asked = try box.run(
            ["list"],
            environment: [
                "COFFER_PASSPHRASE": box.passphrase, "COFFER_TEST_HOOK": "crash-in-secret",
                "SWIFT_BACKTRACE": "enable=yes,sanitize=no,registers=all",
            ], passphraseFile: false)
        #expect(asked.status == 128 + SIGSEGV)
        let askedLeaked = fragments(of: box.passphrase).contains { asked.stderr.firstRange(of: $0) != nil }
        #expect(!askedLeaked, "stderr holds bytes of the passphrase")
        let askedReport = asked.err.contains("Registers")
        #expect(!askedReport, "a crash report was printed")
    }

    @Test(
        "while it runs, coffer is not dumpable, its core limit is 0 and its environment holds no passphrase",
        .timeLimit(.minutes(10)))
    func notDumpableAndEnvironmentScrubbed() throws {
        let box = try Sandbox()
        try box.initVault()
        let terminal = try PseudoTerminal()
        // set waits at its prompt for the secret, long after reading $COFFER_PASSPHRASE.
        let child = try box.start(
            ["set", "svc", "acct"],
            environment: [
                "COFFER_PASSPHRASE": box.passphrase, "COFFER_NEW_PASSPHRASE": box.newPassphrase,
                "COFFER_TEST_HOOK": "report",
            ], passphraseFile: false, terminal: terminal)
        #expect(terminal.waitFor("Secret for svc / acct"))

        let environ = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(child.pid)/environ"))
        #expect(environ.count > 0)
        for secret in [box.passphrase, box.newPassphrase] {
            #expect(environ.firstRange(of: Data(secret.utf8)) == nil, "a passphrase is in /proc/<pid>/environ")
        }
        #expect(environ.firstRange(of: Data("COFFER_PASSPHRASE".utf8)) == nil)
        #expect(environ.firstRange(of: Data("COFFER_NEW_PASSPHRASE".utf8)) == nil)
        #expect(environ.firstRange(of: Data("COFFER_TEST_FAST_KDF=1".utf8)) != nil, "the rest is kept")

        let limits = try String(contentsOfFile: "/proc/\(child.pid)/limits", encoding: .utf8)
        let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
        // The soft limit is 0 (and the process is not dumpable); the hard limit is kept, so that
        // `coffer run` can give its command the limit coffer was started with.
        #expect(
            core?.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).first == "0",
            "\(core ?? "")")

        terminal.type("typed-" + UUID().uuidString)
        let run = box.expectClean(child.wait())
        #expect(run.status == Exit.ok, "\(run)")
        let reported = run.err.contains("coffer: test hook: dumpable=0 coreDumps=0")
        #expect(reported, "\(run)")
    }
}
