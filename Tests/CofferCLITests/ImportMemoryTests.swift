import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer import json` holds a small multiple of its input in memory, never a tree of the
/// document: the reader that built one took ~33 bytes per byte read for small values (4 MB →
/// 152 MB), so the 256 MiB input cap allowed ~8 GiB. Each import's peak resident size
/// (`ru_maxrss` of that one child, from `wait4`) is measured against the same vault opened
/// without the input: an empty import, or, when the import added items, a `get` that opens the
/// vault holding them (the vault's own index of its items is not the import's cost).
@Suite("coffer import json: memory")
struct ImportMemoryTests {
    /// What `coffer import json` may hold, per byte of input, beyond what the vault holds (the
    /// README and `coffer import --help` say the same).
    static let bytesPerInputByte = 6

    /// Runs `coffer` on `vault`, its output to files; returns the exit status, the child's own
    /// peak resident size in bytes, and its standard error. Killed after 120 s.
    static func measured(_ box: Sandbox, vault: String, _ arguments: [String]) throws -> (status: Int32, peak: Int, err: String) {
        let outFile = box.path + "/measured.out", errFile = box.path + "/measured.err"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv = ([cofferPath, "--vault", vault, "--passphrase-file", box.passphraseFile] + arguments).map { strdup($0) } + [nil]
        let envp = box.baseEnvironment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, cofferPath, &actions, nil, argv, envp)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EIO) }
        var status: Int32 = 0
        var usage = rusage()
        let deadline = Date().addingTimeInterval(120)
        while true {
            let reaped = wait4(pid, &status, WNOHANG, &usage)
            if reaped == pid { break }
            if reaped < 0, errno != EINTR { throw POSIXError(.ECHILD) }
            if Date() > deadline {
                kill(pid, SIGKILL)
                while wait4(pid, &status, 0, &usage) < 0, errno == EINTR {}
                break
            }
            usleep(5000)
        }
        let err = String(decoding: FileManager.default.contents(atPath: errFile) ?? Data(), as: UTF8.self)
        let exited = status & 0x7F == 0
        return (exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), usage.ru_maxrss * 1024, err)
    }

    /// A Coffer export with `items` (JSON text of each) and `extra` members after them.
    static func export(items: [String], extra: String = "") -> String {
        #"{"format": "coffer-export", "version": 1, "exported": "2026-05-01T12:00:00.000Z", "items": ["#
            + items.joined(separator: ",\n") + "]" + extra + "}\n"
    }

    @Test("A 4 MB export of 16,000 items, a 4 MB array and a 4 MB object of unknown members: each import holds at most 6 bytes per input byte beyond what the vault holds", .timeLimit(.minutes(10)))
    func peakMemoryIsASmallMultipleOfTheInput() throws {
        let box = try Sandbox()
        let empty = box.path + "/empty.json"
        try box.write(Self.export(items: []), to: empty)
        let items = (0..<16_000).map { index in
            #"{"service": "service-\#(index).example.com", "account": "user-\#(index)@example.com", "label": "Label \#(index)", "comment": "", "#
                + #""created": "2026-05-01T12:00:00.000Z", "modified": "2026-05-01T12:00:00.000Z", "secretEncoding": "utf8", "secret": "s-\#(index)-\#(UUID().uuidString)"}"#
        }
        // Values of members the import does not read: the old reader kept a node for each
        // (the array took 16 bytes per input byte).
        let zeros = ", \"padding\": [" + Array(repeating: "0", count: 2_000_000).joined(separator: ",") + "]"
        let members = ", \"unknown\": {" + (0..<400_000).map { "\"m\($0)\":0" }.joined(separator: ",") + "}"
        let inputs = [
            ("items", Self.export(items: items)), ("array", Self.export(items: [], extra: zeros)),
            ("object", Self.export(items: [], extra: members)),
        ]

        for (name, text) in inputs {
            let vault = box.path + "/\(name).coffer"
            #expect(try box.run(["--vault", vault, "init"]).status == Exit.ok)
            let file = box.path + "/\(name).json"
            try box.write(text, to: file)
            let size = text.utf8.count
            #expect(size > 3_000_000, "\(name): \(size) bytes")
            let emptyRun = try Self.measured(box, vault: vault, ["import", "json", empty])
            #expect(emptyRun.status == Exit.ok, "\(name): \(emptyRun.err)")
            let run = try Self.measured(box, vault: vault, ["import", "json", file])
            #expect(run.status == Exit.ok, "\(name): \(run.err)")
            // The same vault without the input: as it is now (holding the items imported).
            let opened =
                name == "items"
                ? try Self.measured(box, vault: vault, ["get", "service-7.example.com", "user-7@example.com"])
                : emptyRun
            #expect(opened.status == Exit.ok, "\(name): \(opened.err)")
            let extra = run.peak - max(opened.peak, emptyRun.peak)
            #expect(
                extra <= Self.bytesPerInputByte * size,
                "\(name): the import of \(size) bytes peaked \(extra) bytes above the vault opened without it (\(Double(extra) / Double(size)) per input byte)")
        }
        #expect(try ImportExportTests.count(box, vault: box.path + "/items.coffer") == 16_000)
    }
}
