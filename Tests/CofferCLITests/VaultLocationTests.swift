import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Which file is the vault when none is named (the former default name, both names), a
/// dangling symlink where `init` would create it, and vault paths that hold terminal escapes,
/// tried through the `coffer` binary.
@Suite("coffer: the default vault's name, a dangling link at the vault path, escapes in vault paths")
struct VaultLocationTests {
    /// The sandbox's default data directory (HOME is inside the sandbox).
    func dataDirectory(_ box: Sandbox) throws -> String {
        let directory = box.path + "/home/.local/share/coffer"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test("With only default.coffervault (the former name), the command opens it, and init does not make a second vault beside it")
    func theFormerDefaultNameIsFound() throws {
        let box = try Sandbox()
        let directory = try dataDirectory(box)
        let former = directory + "/default.coffervault"
        let secret = Array("former-\(UUID().uuidString)".utf8)
        #expect(try box.run(["--vault", former, "init"], vault: false).status == Exit.ok)
        #expect(try box.run(["--vault", former, "set", "svc", "acct"], stdin: secret, vault: false).status == Exit.ok)

        let got = try box.run(["get", "svc", "acct"], vault: false)
        #expect(got.status == Exit.ok && got.printed(secret), "\(got)")
        let made = try box.run(["init"], vault: false)
        #expect(made.status == Exit.failure && made.err.contains(former), "\(made)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/default.coffer"))
        let info = try box.run(["info"], vault: false)
        #expect(info.status == Exit.ok && info.out.contains(former), "\(info)")
    }

    @Test("With vaults under both default names, every command refuses, naming both; nothing is changed")
    func bothDefaultNamesAreRefused() throws {
        let box = try Sandbox()
        let directory = try dataDirectory(box)
        let current = directory + "/default.coffer", former = directory + "/default.coffervault"
        for path in [current, former] {
            #expect(try box.run(["--vault", path, "init"], vault: false).status == Exit.ok)
        }
        let sizes = try [current, former].map { try FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int }
        for arguments in [["list"], ["init"], ["info"], ["lock"]] {
            let refused = try box.run(arguments, vault: false)
            #expect(refused.status == Exit.failure, "\(arguments): \(refused)")
            #expect(refused.err.contains(current) && refused.err.contains(former), "\(arguments): \(refused)")
            #expect(refused.err.contains("--vault"), "\(arguments): \(refused)")
        }
        // Naming one explicitly still works.
        #expect(try box.run(["--vault", current, "list"], vault: false).status == Exit.ok)
        #expect(try [current, former].map { try FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int } == sizes)
    }

    @Test("init refuses a dangling symlink at the vault path, naming it, and creates nothing where it points")
    func initRefusesADanglingSymlink() throws {
        let box = try Sandbox()
        let target = box.path + "/elsewhere/v.coffer"
        let link = box.path + "/link.coffer"
        #expect(symlink(target, link) == 0)
        let refused = try box.run(["--vault", link, "init"], vault: false)
        #expect(refused.status == Exit.failure, "\(refused)")
        #expect(refused.err.contains(link) && refused.err.contains("symbolic link"), "\(refused)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == target)
        #expect(!FileManager.default.fileExists(atPath: target))
        #expect(!FileManager.default.fileExists(atPath: box.path + "/elsewhere"))

        // The same at the default path.
        let directory = try dataDirectory(box)
        #expect(symlink(target, directory + "/default.coffer") == 0)
        let defaulted = try box.run(["init"], vault: false)
        #expect(defaulted.status == Exit.failure && defaulted.err.contains("symbolic link"), "\(defaulted)")
        #expect(!FileManager.default.fileExists(atPath: target))
        #expect(!FileManager.default.fileExists(atPath: directory + "/default.coffervault"))
    }

    /// ESC (a CSI sequence), the 8-bit CSI U+009B and the right-to-left override U+202E.
    static let hostile = "repo\u{1B}[31mred\u{9B}2J\u{202E}txt"
    static let rawBytes: [[UInt8]] = [[0x1B], [0xC2, 0x9B], [0xE2, 0x80, 0xAE]]

    /// Whether `run` wrote none of ``rawBytes`` to either output.
    func isInert(_ run: Run) -> Bool {
        Self.rawBytes.allSatisfy { run.stdout.firstRange(of: $0) == nil && run.stderr.firstRange(of: $0) == nil }
    }

    @Test("A vault path holding ESC, U+009B or U+202E never reaches the terminal raw: init, info, errors")
    func escapesInVaultPathsAreInert() throws {
        let box = try Sandbox()
        let directory = box.path + "/" + Self.hostile
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let vault = directory + "/v.coffer"
        var runs: [Run] = []
        func coffer(_ arguments: [String], stdin: [UInt8]? = nil) throws -> Run {
            let run = try box.run(["--vault", vault] + arguments, stdin: stdin, vault: false)
            runs.append(run)
            return run
        }
        let made = try coffer(["init"])
        #expect(made.status == Exit.ok && made.out.contains("$'"), "\(made)")
        #expect(try coffer(["set", "svc", "acct"], stdin: Array("v".utf8)).status == Exit.ok)
        let info = try coffer(["info"])
        #expect(info.status == Exit.ok && info.out.contains("$'"), "\(info)")
        let json = try coffer(["info", "--json"])
        #expect(json.status == Exit.ok, "\(json)")
        // The JSON still names the real path: \u escapes are the same string to a JSON reader.
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
        #expect(decoded?["path"] as? String == vault)
        #expect(try coffer(["verify"]).status == Exit.ok)
        #expect(try coffer(["compact"]).status == Exit.ok)
        #expect(try coffer(["passwd", "--new-passphrase-file", box.newPassphraseFile]).status == Exit.ok)
        let exists = try coffer(["init"])
        #expect(exists.status == Exit.failure && exists.err.contains("already exists"), "\(exists)")

        // The errors: no vault there, and one the library reports with the path.
        let missing = try box.run(["--vault", directory + "/missing.coffer", "list"], vault: false)
        runs.append(missing)
        #expect(missing.status == Exit.failure && missing.err.contains("no vault at $'"), "\(missing)")
        try box.write(Array(repeating: 0x41, count: 8192), to: directory + "/bad.coffer")
        let damaged = try box.run(["--vault", directory + "/bad.coffer", "info"], vault: false)
        runs.append(damaged)
        #expect(damaged.status != Exit.ok, "\(damaged)")
        let gone = try box.run(["--vault", directory + "/missing.coffer", "lock"], vault: false)
        runs.append(gone)
        #expect(gone.status == Exit.failure, "\(gone)")
        let dangling = directory + "/link.coffer"
        #expect(symlink(directory + "/\u{1B}]0;title\u{07}", dangling) == 0)
        let linked = try box.run(["--vault", dangling, "init"], vault: false)
        runs.append(linked)
        #expect(linked.status == Exit.failure, "\(linked)")

        for run in runs { #expect(isInert(run), "\(run.arguments): an escape reached the terminal raw") }
    }
}
