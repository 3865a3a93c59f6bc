import Foundation
import Testing

/// A vault file bind-mounted on its own (`docker run -v ~/v.coffer:/data/v.coffer`) has a second
/// name in another directory, with a lock file of its own there: two writers, one through each
/// name, would not exclude each other, and an outside attack lost items and then damaged the
/// vault that way. So a store file that is a mount's root is refused, with a message saying to
/// mount its directory instead; the vault through its own name is untouched. The mount is made
/// in a private mount namespace (`unshare -rm`: no privilege needed where user namespaces are
/// allowed, and none is left behind).
@Suite("A vault file mounted on its own")
struct BindMountTests {
    @Test("is refused with a clear error, and the vault through its own name keeps every item", .timeLimit(.minutes(10)))
    func singleFileBindMountIsRefused() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("kept".utf8))
        let elsewhere = box.path + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        let mounted = elsewhere + "/vault.coffer"
        #expect(FileManager.default.createFile(atPath: mounted, contents: Data()))
        let script = #"mount --bind "$1" "$2" && exec "$3" --vault "$2" --passphrase-file "$4" list"#
        let run = try box.run(
            ["-rm", "sh", "-c", script, "sh", box.vault, mounted, cofferPath, box.passphraseFile],
            vault: false, passphraseFile: false, program: "/usr/bin/unshare")
        #expect(run.status == 2, "\(run)")
        #expect(run.err.contains("mounted on its own"), "\(run)")
        #expect(run.err.contains("mount the directory that holds it instead"), "\(run)")
        // Nothing was made beside the mounted name, and the vault itself is whole.
        #expect(!FileManager.default.fileExists(atPath: mounted + ".lock"))
        let get = try box.run(["get", "svc", "acct"])
        #expect(get.status == 0 && get.printed(Array("kept".utf8)), "\(get)")
    }
}
