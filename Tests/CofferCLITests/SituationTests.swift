import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Every exit code, produced by the situation it names; several processes at once; the demo.
@Suite("coffer exit codes and situations")
struct SituationTests {
    @Test("a wrong passphrase is exit 4, and the file is left intact")
    func wrongPassphrase() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("s3cret".utf8))
        let wrong = box.path + "/wrong"
        try box.write("not-the-passphrase\n", to: wrong)
        for command in [["get", "svc", "acct"], ["list"], ["verify"], ["set", "svc", "other"]] {
            let run = try box.run(
                ["--passphrase-file", wrong] + command, stdin: Array("x".utf8), passphraseFile: false)
            #expect(run.status == Exit.wrongKey, "\(run)")
            #expect(run.err.contains("passphrase"), "\(run)")
        }
        let env = try box.run(
            ["get", "svc", "acct"], environment: ["COFFER_PASSPHRASE": "nope"], passphraseFile: false)
        #expect(env.status == Exit.wrongKey, "\(env)")
        #expect(try box.run(["verify"]).status == Exit.ok)
    }

    @Test("a flipped byte in a record is exit 5 for verify and get")
    func flippedByte() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "first", Array(repeating: UInt8(ascii: "a"), count: 300))
        let endOfFirst = try box.dataEnd()
        try box.set("svc", "second", Array("second secret".utf8))

        // Flip one bit inside the first record's ciphertext, with an intact record after it.
        try box.flipBits(at: endOfFirst - 40, mask: 0x04)

        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.integrity, "\(verify)")
        #expect(verify.err.hasPrefix("coffer: ") && verify.err.contains("byte"), "\(verify)")
        #expect(verify.stdout.isEmpty)
        let get = try box.run(["get", "svc", "second"])
        #expect(get.status == Exit.integrity, "\(get)")
        #expect(get.stdout.isEmpty)
        #expect(try box.run(["list"]).status == Exit.integrity)
    }

    @Test("a flipped byte in the last record is exit 5 too")
    func flippedLastRecord() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "only", Array(repeating: UInt8(ascii: "z"), count: 100))
        let end = try box.dataEnd()
        try box.flipBits(at: end - 30, mask: 0x80)
        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.integrity, "\(verify)")
        #expect(try box.run(["get", "svc", "only"]).status == Exit.integrity)
    }

    @Test("verify --salvage keeps the records before a damaged one, after asking; the hint names it")
    func salvageFromTheCommandLine() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "first", Array("first secret".utf8))
        try box.set("svc", "second", Array("second secret".utf8))
        let end = try box.dataEnd()
        // One bit flipped inside the last record: damage (not a torn write), so a strict open fails.
        try box.flipBits(at: end - 20, mask: 0x10)
        let damaged = try Data(contentsOf: URL(fileURLWithPath: box.vault))

        // The failure says what this command can do about it (the library's hint names an API).
        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.integrity, "\(verify)")
        #expect(verify.err.contains("coffer verify --salvage") && !verify.err.contains("recovery:"), "\(verify)")
        let get = try box.run(["get", "svc", "first"])
        #expect(get.status == Exit.integrity && get.err.contains("coffer verify --salvage"), "\(get)")

        // Without a terminal to ask on and without --yes: nothing changes.
        let refused = try box.run(["verify", "--salvage"])
        #expect(refused.status == Exit.usage && refused.err.contains("--yes"), "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.vault)) == damaged)

        // --repair is PostgreSQL's; it points a file vault to --salvage.
        let repair = try box.run(["verify", "--repair"])
        #expect(repair.status == Exit.usage && repair.err.contains("--salvage"), "\(repair)")

        let salvage = try box.run(["verify", "--salvage", "--yes"])
        #expect(salvage.status == Exit.ok, "\(salvage)")
        #expect(salvage.out.contains("salvaged") && salvage.out.contains("1 item"), "\(salvage)")
        #expect(salvage.err.contains("verification FAILED") && salvage.err.contains("kept at"), "\(salvage)")
        #expect(try box.run(["get", "svc", "first"]).printed(Array("first secret".utf8)))
        #expect(try box.run(["get", "svc", "second"]).status == Exit.notFound)
        #expect(try box.run(["verify"]).out.contains("1 record"))
        // The damaged file, byte for byte, kept beside the vault.
        let directory = URL(fileURLWithPath: box.vault).deletingLastPathComponent()
        let copies = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
            $0 != URL(fileURLWithPath: box.vault).lastPathComponent
                && (try? Data(contentsOf: directory.appendingPathComponent($0))) == damaged
        }
        #expect(copies.count >= 1, "no copy of the damaged file beside the vault")

        // A vault that verifies is left as it is.
        let before = try Data(contentsOf: URL(fileURLWithPath: box.vault))
        let intact = try box.run(["verify", "--salvage", "--yes"])
        #expect(intact.status == Exit.ok && intact.out.hasPrefix("ok: "), "\(intact)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.vault)) == before)
    }

    @Test("a damaged header is not offered salvage, which cannot open it either; nor is a salvage that failed")
    func damagedHeaderIsNotOfferedSalvage() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("secret".utf8))
        // Both copies of the vault header (the area after the 32-byte file header) altered.
        var image = try Data(contentsOf: URL(fileURLWithPath: box.vault))
        for offset in stride(from: 40, to: 4000, by: 7) { image[offset] ^= 0x55 }
        try image.write(to: URL(fileURLWithPath: box.vault))
        let get = try box.run(["get", "svc", "acct"])
        #expect(get.status == Exit.integrity && get.err.contains("header") && !get.err.contains("salvage"), "\(get)")
        let salvage = try box.run(["verify", "--salvage", "--yes"])
        #expect(salvage.status == Exit.integrity, "\(salvage)")
        #expect(salvage.err.contains("salvage cannot help") && !salvage.err.contains("verify --salvage"), "\(salvage)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.vault)) == image)
    }

    @Test("a warning's path is shown with its control characters escaped, on one line")
    func warningsEscapeControlCharacters() throws {
        let box = try Sandbox()
        let directory = box.path + "/we\nird\u{1B}[31mRED"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let vault = ["--vault", directory + "/v.coffer"]
        #expect(try box.run(vault + ["init"], vault: false).status == Exit.ok)
        #expect(try box.run(vault + ["set", "svc", "acct"], stdin: Array("s".utf8), vault: false).status == Exit.ok)
        var image = try Data(contentsOf: URL(fileURLWithPath: directory + "/v.coffer"))
        let end = try #require(image.lastIndex { $0 != 0 })
        image[end - 10] ^= 0x10
        try image.write(to: URL(fileURLWithPath: directory + "/v.coffer"))
        let salvage = try box.run(vault + ["verify", "--salvage", "--yes"], vault: false)
        #expect(salvage.status == Exit.ok, "\(salvage)")
        #expect(salvage.err.contains("warning: salvaged"), "\(salvage)")
        #expect(!salvage.stderr.contains(0x1B), "an escape character reached the terminal: \(salvage)")
        let lines = salvage.err.split(separator: "\n")
        #expect(lines.allSatisfy { $0.hasPrefix("coffer: ") }, "\(salvage)")
    }

    @Test("a record altered with its checksums fixed up (tampering, not bit rot) is exit 5")
    func tamperedRecord() throws {
        #expect(crc32c(ArraySlice(Array("123456789".utf8))) == 0xE306_9283)  // the check value in FORMAT.md
        let box = try Sandbox()
        try box.initVault()
        let start = try box.dataEnd()  // the first frame starts where the empty vault's data ends
        try box.set("svc", "acct", Array("attack at dawn".utf8))
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: box.vault)))
        // A frame (docs/FORMAT.md): u32 length, u32 CRC-32C(payload), u32 CRC-32C(bytes 0..<8), payload.
        let length = Int(readUInt32(bytes, at: start) & 0x7FFF_FFFF)
        #expect(length > 40 && start + 12 + length <= bytes.count)
        bytes[start + 12 + length / 2] ^= 0x01
        writeUInt32(crc32c(bytes[(start + 12)..<(start + 12 + length)]), into: &bytes, at: start + 4)
        writeUInt32(crc32c(bytes[start..<(start + 8)]), into: &bytes, at: start + 8)
        try Data(bytes).write(to: URL(fileURLWithPath: box.vault))

        let verify = try box.run(["verify"])
        #expect(verify.status == Exit.integrity, "\(verify)")
        let get = try box.run(["get", "svc", "acct"])
        #expect(get.status == Exit.integrity, "\(get)")
        #expect(get.stdout.isEmpty)
    }

    @Test("a vault locked by another process is exit 6 within the lock timeout", .timeLimit(.minutes(10)))
    func busy() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("v".utf8))
        // Hold the vault's write lock the way another coffer does while it writes.
        let fd = open(box.vault + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0)

        let quick = ["COFFER_LOCK_TIMEOUT": "0.5"]
        let set = try box.run(["set", "svc", "other"], stdin: Array("x".utf8), environment: quick)
        #expect(set.status == Exit.busy, "\(set)")
        #expect(set.seconds < 4, "\(set)")
        #expect(set.err.contains("another process"), "\(set)")
        let get = try box.run(["get", "svc", "acct"], environment: quick)
        #expect(get.status == Exit.busy, "\(get)")

        flock(fd, LOCK_UN)
        #expect(try box.run(["get", "svc", "acct"], environment: quick).status == Exit.ok)
    }

    @Test("bad arguments are exit 2")
    func badArguments() throws {
        let box = try Sandbox()
        try box.initVault()
        let cases: [[String]] = [
            ["frobnicate"],
            ["get"],
            ["get", "only-service"],
            ["get", "a", "b", "c"],
            ["set", "svc"],
            ["list", "--no-such-flag"],
            ["init", "--kdf", "extreme"],
            ["--key-file", box.path + "/k", "list"],  // with --passphrase-file: both given
            [],
        ]
        for arguments in cases {
            let run = try box.run(arguments)
            #expect(run.status == Exit.usage, "\(run)")
            #expect(run.err.hasPrefix("coffer: "), "\(run)")
        }
        let timeout = try box.run(["list"], environment: ["COFFER_LOCK_TIMEOUT": "soon"])
        #expect(timeout.status == Exit.usage, "\(timeout)")
    }

    @Test("no passphrase source and no terminal: exit 2 at once, never a wait")
    func noPassphraseSource() throws {
        let box = try Sandbox()
        try box.initVault()
        for command in [["get", "svc", "acct"], ["list"], ["init"]] {
            // The child runs in its own session (no controlling terminal) with stdin /dev/null.
            let arguments = command == ["init"] ? ["--vault", box.path + "/new.coffer", "init"] : command
            let run = try box.run(arguments, vault: command != ["init"], passphraseFile: false)
            #expect(run.status == Exit.usage, "\(run)")
            #expect(run.seconds < 5, "\(run)")
            #expect(run.err.contains("--passphrase-file") && run.err.contains("COFFER_PASSPHRASE"), "\(run)")
        }
        // passwd with no new passphrase source.
        let passwd = try box.run(["passwd"])
        #expect(passwd.status == Exit.usage, "\(passwd)")
        #expect(passwd.err.contains("COFFER_NEW_PASSPHRASE"), "\(passwd)")
        #expect(try box.run(["list"]).status == Exit.ok)
    }

    @Test("concurrent sets on one vault all land", .timeLimit(.minutes(10)))
    func concurrentSets() throws {
        let box = try Sandbox()
        try box.initVault()
        // Hold the lock while the writers start, so they really contend for it when it goes.
        let fd = open(box.vault + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0)
        let accounts = (0..<6).map { "writer-\($0)" }
        let children = try accounts.map { account in
            try box.start(["set", "concurrent", account], stdin: Array("secret of \(account)".utf8))
        }
        usleep(300_000)
        flock(fd, LOCK_UN)
        for child in children {
            let run = box.expectClean(child.wait())
            #expect(run.status == Exit.ok, "\(run)")
        }
        // And two without any help, started back to back.
        let pair = try ["a", "b"].map { try box.start(["set", "pair", $0], stdin: Array("pair \($0)".utf8)) }
        for child in pair { #expect(box.expectClean(child.wait()).status == Exit.ok) }

        let list = try box.run(["list", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout)) as? [[String: Any]])
        #expect(rows.count == accounts.count + 2, "\(list)")
        for account in accounts {
            #expect(try box.run(["get", "concurrent", account]).printed(Array("secret of \(account)".utf8)))
        }
        #expect(try box.run(["verify"]).status == Exit.ok)
    }

    @Test("coffer-demo runs on its own, checks its claims and exits 0", .timeLimit(.minutes(10)))
    func demo() throws {
        let box = try Sandbox()
        let directory = box.path + "/demo"
        let run = try box.run(["--dir", directory], vault: false, passphraseFile: false, program: cofferDemoPath)
        #expect(run.status == Exit.ok, "\(run)")
        #expect(run.seconds < 20, "\(run)")
        let lines = run.out.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count < 60, "\(lines.count) lines")
        #expect(run.out.contains("Summary") && !run.out.contains("✗") && !run.out.contains("FOUND"), "\(run)")
        #expect(FileManager.default.fileExists(atPath: directory + "/demo.coffer"))
        // The demo's passphrase is never printed.
        let passphrase = try Data(contentsOf: URL(fileURLWithPath: directory + "/passphrase"))
        #expect(passphrase.count >= 16)
        let leaked =
            run.stdout.firstRange(of: [UInt8](passphrase)) != nil
            || run.stderr.firstRange(of: [UInt8](passphrase)) != nil
        #expect(!leaked, "the demo printed its passphrase")
        // A second run into the same directory refuses.
        let again = try box.run(["--dir", directory], vault: false, passphraseFile: false, program: cofferDemoPath)
        #expect(again.status == Exit.failure, "\(again)")
    }
}

func readUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
    (0..<4).reduce(0) { $0 | UInt32(bytes[offset + $1]) << (8 * $1) }
}

func writeUInt32(_ value: UInt32, into bytes: inout [UInt8], at offset: Int) {
    for i in 0..<4 { bytes[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) }
}

/// CRC-32C (Castagnoli, reflected 0x82F63B78), bit by bit: slow, obviously right.
func crc32c(_ bytes: ArraySlice<UInt8>) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
    }
    return crc ^ 0xFFFF_FFFF
}
