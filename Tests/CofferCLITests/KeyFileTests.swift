import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Key files the CLI is given: only regular files up to 64 KiB, or
/// the explicit `--key-file -` for a key on standard input.
@Suite("coffer key files")
struct KeyFileTests {
    /// A vault unlocked by a 32-byte key file `init` wrote; returns the key file's path.
    private func keyFileVault(_ box: Sandbox) throws -> String {
        let key = box.path + "/vault.key"
        let made = try box.run(["--key-file", key, "init"], passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        let set = try box.run(["--key-file", key, "set", "svc", "acct"], stdin: Array("k".utf8), passphraseFile: false)
        #expect(set.status == Exit.ok, "\(set)")
        return key
    }

    @Test("a FIFO as the key file is refused at once, with the way to use a pipe", .timeLimit(.minutes(10)))
    func fifoIsRefused() throws {
        let box = try Sandbox()
        _ = try keyFileVault(box)
        let fifo = box.path + "/key.fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        let run = box.expectClean(
            try box.start(["--key-file", fifo, "get", "svc", "acct"], passphraseFile: false).wait(timeout: 5))
        #expect(!run.timedOut, "coffer waited on the FIFO")
        #expect(run.status == Exit.usage, "\(run)")
        #expect(run.err.contains("FIFO") && run.err.contains("--key-file -"), "\(run)")
    }

    @Test("a pipe given by its /dev/fd path gets a clear message, not 'holds 0 bytes'")
    func devFdPipe() throws {
        let box = try Sandbox()
        let key = try keyFileVault(box)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: key))
        // The child's standard input is a pipe holding the key: /dev/stdin is what <(…) gives.
        let run = try box.run(
            ["--key-file", "/dev/stdin", "get", "svc", "acct"], stdin: [UInt8](bytes), passphraseFile: false)
        #expect(run.status == Exit.usage, "\(run)")
        #expect(!run.err.contains("0 bytes") && run.err.contains("--key-file -"), "\(run)")
    }

    @Test("--key-file - reads the key from standard input, for every command that does not need stdin")
    func keyFromStandardInput() throws {
        let box = try Sandbox()
        let key = try keyFileVault(box)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: key)))
        let get = try box.run(["--key-file", "-", "get", "svc", "acct"], stdin: bytes, passphraseFile: false)
        #expect(get.status == Exit.ok, "\(get)")
        #expect(get.printed(Array("k".utf8)))
        let wrong = try box.run(["--key-file", "-", "get", "svc", "acct"], stdin: bytes + [0], passphraseFile: false)
        #expect(wrong.status == Exit.wrongKey, "\(wrong)")
        // set needs standard input for the secret.
        let set = try box.run(["--key-file", "-", "set", "svc", "b"], stdin: bytes, passphraseFile: false)
        #expect(set.status == Exit.usage, "\(set)")
        // init with a key from standard input: the same bytes in a file then open it.
        let other = box.path + "/other.coffer"
        let fresh = (0..<48).map { UInt8($0 * 5 % 251) }
        let made = try box.run(
            ["--vault", other, "--key-file", "-", "init"], stdin: fresh, vault: false, passphraseFile: false)
        #expect(made.status == Exit.ok, "\(made)")
        #expect(!FileManager.default.fileExists(atPath: box.path + "/-"), "init wrote a key file named -")
        try box.write(fresh, to: box.path + "/fresh.key")
        let list = try box.run(
            ["--vault", other, "--key-file", box.path + "/fresh.key", "list"], vault: false, passphraseFile: false)
        #expect(list.status == Exit.ok, "\(list)")
        // Too much on standard input.
        let huge = try box.run(
            ["--key-file", "-", "list"], stdin: [UInt8](repeating: 7, count: 65537), passphraseFile: false)
        #expect(huge.status == Exit.usage, "\(huge)")
        #expect(huge.err.contains("65536"), "\(huge)")
    }

    @Test("a key file above 64 KiB is exit 2 and says the limit")
    func oversizedKeyFile() throws {
        let box = try Sandbox()
        let key = try keyFileVault(box)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: key)))
        let large = box.path + "/large.key"
        try box.write(bytes + [UInt8](repeating: 0, count: 65536 - bytes.count + 1), to: large)
        let run = try box.run(["--key-file", large, "get", "svc", "acct"], passphraseFile: false)
        #expect(run.status == Exit.usage, "\(run)")
        #expect(run.err.contains("65536"), "\(run)")
    }
}
