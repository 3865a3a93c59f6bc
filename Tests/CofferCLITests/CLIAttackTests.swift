// Attacks on the `coffer` CLI from outside: a process started with standard streams closed.
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A command run with some of descriptors 0, 1 and 2 closed (a daemon, cron, `cmd >&- <&-`):
/// the kernel hands the lowest free descriptor to the next `open`, so before the fix the vault's
/// lock file or the vault itself became "standard output", and `coffer list` wrote its table over
/// the vault's header (the vault no longer opened) while `coffer get` wrote the secret, in
/// plaintext, into the file at offset 0.
@Suite("coffer with standard streams closed")
struct CLIAttackTests {
    /// Runs `coffer` with `arguments` and the descriptors in `closed` closed (the others on
    /// `/dev/null`); returns the exit status (-1 when it did not finish within 30 s).
    private func runClosing(_ closed: Set<Int32>, _ arguments: [String], environment: [String: String]) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in 0...2 {
            if closed.contains(fd) {
                posix_spawn_file_actions_addclose(&actions, fd)
            } else {
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([cofferPath] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, cofferPath, &actions, nil, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        let deadline = Date().addingTimeInterval(30)
        var status: Int32 = 0
        while true {
            let done = waitpid(pid, &status, WNOHANG)
            if done == pid { break }
            if done < 0 && errno != EINTR { return -1 }
            if Date() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return -1
            }
            usleep(10_000)
        }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    /// Every byte of every file in the sandbox except the passphrase files.
    private func filesContain(_ needle: [UInt8], in box: Sandbox) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: box.path).filter { name in
            let path = box.path + "/" + name
            guard path != box.passphraseFile, path != box.newPassphraseFile,
                let data = FileManager.default.contents(atPath: path)
            else { return false }
            return [UInt8](data).firstRange(of: needle) != nil
        }
    }

    @Test("`coffer list` with standard input and output closed leaves the vault intact")
    func listWithClosedStreamsKeepsTheVault() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("s3cr3t-value-\(UUID().uuidString)".utf8))
        let status = try runClosing(
            [0, 1], ["--vault", box.vault, "--passphrase-file", box.passphraseFile, "list"],
            environment: box.baseEnvironment)
        #expect(status != -1, "coffer list hung")
        // Its table could not be written: that is a failure (exit 1), not a silent success.
        #expect(status == Exit.failure, "coffer list with standard output closed exited \(status)")
        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.ok, "the vault no longer verifies after `coffer list <&- >&-`: \(verify)")
    }

    @Test("`coffer get` with standard input and output closed writes the secret into no file")
    func getWithClosedStreamsWritesNoSecretToDisk() throws {
        let box = try Sandbox()
        try box.initVault()
        let secret = Array("s3cr3t-value-\(UUID().uuidString)".utf8)
        try box.set("svc", "acct", secret)
        for closed: Set<Int32> in [[1], [0, 1], [0, 1, 2]] {
            let status = try runClosing(
                closed, ["--vault", box.vault, "--passphrase-file", box.passphraseFile, "get", "svc", "acct"],
                environment: box.baseEnvironment)
            #expect(status != -1, "coffer get hung with descriptors \(closed.sorted()) closed")
            // The names only: the secret itself is never printed.
            let leaked = try filesContain(secret, in: box)
            #expect(leaked.isEmpty, "with descriptors \(closed.sorted()) closed the secret was written to \(leaked)")
        }
        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.ok, "\(verify)")
    }
}
