import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Where the vault file is, and what is beside it (planted links, aliases, read-only files),
/// tried the way a user or an attacker meets it: through the `coffer` binary.
@Suite("coffer: planted links, two paths to one vault, read-only vaults")
struct FilePlacementTests {
    static let victim = Array("a file the attacker wants overwritten\n".utf8)

    @Test func aSymlinkedLockFileIsRefusedAndItsTargetUntouched() throws {
        let box = try Sandbox()
        try box.write(Self.victim, to: box.path + "/victim")
        symlink(box.path + "/victim", box.vault + ".lock")
        let initRun = try box.run(["init"])
        #expect(initRun.status != 0)
        #expect(initRun.err.contains("symbolic link"), "\(initRun)")
        #expect(FileManager.default.contents(atPath: box.path + "/victim") == Data(Self.victim))

        unlink(box.vault + ".lock")
        try box.initVault()
        try box.set("svc", "acct", Array("s3cret".utf8))
        unlink(box.vault + ".lock")
        symlink(box.path + "/victim", box.vault + ".lock")
        let get = try box.run(["get", "svc", "acct"])  // read-only use must not write through it either
        #expect(get.status != 0)
        #expect(get.err.contains("symbolic link"), "\(get)")
        #expect(FileManager.default.contents(atPath: box.path + "/victim") == Data(Self.victim))
    }

    @Test func twoPathsToOneVaultShareItsLockAndTheSymlinkSurvivesCompaction() throws {
        let box = try Sandbox()
        try box.initVault()
        let alias = box.path + "/other"
        mkdir(alias, 0o700)
        symlink(box.vault, alias + "/v.coffer")
        // Writers through both names, at once: one lock file, nothing lost.
        var children: [Child] = []
        for i in 0..<4 {
            let vault = i % 2 == 0 ? box.vault : alias + "/v.coffer"
            children.append(
                try box.start(
                    ["--vault", vault, "set", "svc", "acct\(i)"], stdin: Array("secret-\(i)".utf8), vault: false))
        }
        for child in children {
            let run = box.expectClean(child.wait())
            #expect(run.status == 0, "\(run)")
        }
        #expect(!FileManager.default.fileExists(atPath: alias + "/v.coffer.lock"))
        let compact = try box.run(["--vault", alias + "/v.coffer", "compact"], vault: false)
        #expect(compact.status == 0, "\(compact)")
        let type = try FileManager.default.attributesOfItem(atPath: alias + "/v.coffer")[.type] as? FileAttributeType
        #expect(type == .typeSymbolicLink)
        let list = try box.run(["list"])
        for i in 0..<4 { #expect(list.out.contains("acct\(i)"), "\(list)") }
        #expect(try box.run(["verify"]).status == 0)
    }

    @Test func aDeviceAFIFOOrADirectoryAsTheVaultGetsAClearUsageError() throws {
        let box = try Sandbox()
        // `/dev/null.lock` may be left by an older coffer (the bug itself): start without it.
        unlink("/dev/null.lock")
        let null = try box.run(["--vault", "/dev/null", "get", "svc", "acct"], vault: false)
        #expect(null.status == 2, "\(null)")
        #expect(null.err.contains("not a Coffer store file"), "\(null)")
        #expect(!FileManager.default.fileExists(atPath: "/dev/null.lock"))

        mkfifo(box.path + "/fifo", 0o600)
        let fifo = try box.run(["--vault", box.path + "/fifo", "list"], vault: false)  // must not hang
        #expect(fifo.status == 2, "\(fifo)")
        #expect(!FileManager.default.fileExists(atPath: box.path + "/fifo.lock"))

        mkdir(box.path + "/dir", 0o700)
        let directory = try box.run(["--vault", box.path + "/dir", "init"], vault: false)
        #expect(directory.status != 0, "\(directory)")
        #expect(directory.err.contains("directory"), "\(directory)")
        #expect(!directory.err.contains("already exists"), "\(directory)")
    }

    @Test func aVaultOnAReadOnlyMountIsReadAndNeverWritten() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("on-a-read-only-mount".utf8))
        unlink(box.vault + ".lock")
        let before = FileManager.default.contents(atPath: box.vault)
        // A private mount namespace: the sandbox bound read-only over itself.
        let script = """
            mount --bind "$BOX" "$BOX" && mount -o remount,bind,ro "$BOX" || exit 99
            "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" get svc acct > "$OUT/get" 2> "$OUT/get.err"; echo "get $?"
            "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" list > /dev/null 2>&1; echo "list $?"
            "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" verify > /dev/null 2>&1; echo "verify $?"
            printf x | "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" set svc other 2> "$OUT/set.err"; echo "set $?"
            """
        let out = try TemporaryDirectory(prefix: "coffer-cli-out")
        let result = try shell(["unshare", "-m", "--propagation", "private", "sh", "-c", script], box: box, out: out.path)
        #expect(result.contains("get 0"), "\(result)")
        #expect(result.contains("list 0"), "\(result)")
        #expect(result.contains("verify 0"), "\(result)")
        #expect(result.contains("set 1"), "\(result)")
        let secretRead = FileManager.default.contents(atPath: out.path + "/get") == Data("on-a-read-only-mount".utf8)
        #expect(secretRead)
        let setError = String(decoding: FileManager.default.contents(atPath: out.path + "/set.err") ?? Data(), as: UTF8.self)
        #expect(setError.contains("read-only"), "\(setError)")
        #expect(FileManager.default.contents(atPath: box.vault) == before)
    }

    @Test func aReadOnlyVaultIsReadByItsOwnerWithoutALockFile() throws {
        // An unprivileged owner (root ignores permissions): a `0400` vault in a `0500` directory.
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("owner-only".utf8))
        handToNobody(box)
        chmod(box.vault, 0o400)
        chmod(box.path, 0o500)
        defer { chmod(box.path, 0o700) }
        let script = """
            "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" get svc acct > "$OUT/get" 2>/dev/null; echo "get $?"
            """
        let (result, out) = try runAsNobody(script, box: box)
        #expect(result.contains("get 0"), "\(result)")
        #expect(FileManager.default.contents(atPath: out.path + "/get") == Data("owner-only".utf8))
        #expect(!FileManager.default.fileExists(atPath: box.vault + ".lock"))
    }

    @Test func aLockFileAnotherUserPlantedDoesNotForceAReadOfTheirFiles() throws {
        // In a shared (1777) directory, an attacker's 0644 lock file makes the owner's write open
        // fail with EACCES; that must not turn into reading whatever the attacker put there.
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("victim-secret".utf8))
        handToNobody(box)  // the victim
        let attacker: uid_t = 1000
        chmod(box.path, 0o1777)
        defer { chmod(box.path, 0o700) }
        try box.write(Array(repeating: 0, count: 4096), to: box.vault + ".lock")
        chown(box.vault + ".lock", attacker, gid_t(attacker))
        chmod(box.vault + ".lock", 0o644)
        let script = """
            "$COFFER" --vault "$BOX/vault.coffer" --passphrase-file "$BOX/passphrase" get svc acct > "$OUT/get" 2> "$OUT/err"; echo "get $?"
            """
        let (result, out) = try runAsNobody(script, box: box)
        #expect(result.contains("get 1"), "\(result)")
        let error = String(decoding: FileManager.default.contents(atPath: out.path + "/err") ?? Data(), as: UTF8.self)
        #expect(error.contains("owned by user 1000"), "\(error)")
        #expect(FileManager.default.contents(atPath: out.path + "/get")?.isEmpty == true)
    }

    /// An unprivileged user, for the tests that need permissions to count (root ignores them).
    static let nobody: uid_t = 65534

    /// Hands the sandbox (its directory, vault and passphrase file) to ``nobody``, without the
    /// lock file its setup left.
    private func handToNobody(_ box: Sandbox) {
        unlink(box.vault + ".lock")
        for file in [box.path, box.vault, box.passphraseFile] { chown(file, Self.nobody, gid_t(Self.nobody)) }
    }

    /// Runs `script` with sh as ``nobody``, `$OUT` a fresh directory that user owns; returns the
    /// script's standard output, and the directory.
    private func runAsNobody(_ script: String, box: Sandbox) throws -> (output: String, out: TemporaryDirectory) {
        let out = try TemporaryDirectory(prefix: "coffer-cli-out")
        chown(out.path, Self.nobody, gid_t(Self.nobody))
        let output = try shell(
            ["setpriv", "--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", "sh", "-c", script],
            box: box, out: out.path)
        return (output, out)
    }

    /// Runs `arguments` with `$BOX`, `$OUT` and `$COFFER` set; returns its standard output.
    private func shell(_ arguments: [String], box: Sandbox, out: String) throws -> String {
        var environment = box.baseEnvironment
        environment["BOX"] = box.path
        environment["OUT"] = out
        environment["COFFER"] = cofferPath
        return try HelperChild.run(
            arguments, executable: URL(fileURLWithPath: "/usr/bin/env"), environment: environment,
            inheritsEnvironment: false, standardError: .discard
        ).output
    }
}
