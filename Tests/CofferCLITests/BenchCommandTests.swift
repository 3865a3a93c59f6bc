import Foundation
import Testing

/// `coffer bench` (the rows a user asks of a machine) and `coffer-bench` (the developers' suite,
/// not installed): what they print, not how fast anything is (speed is the benchmark's job,
/// never a test's). One `--quick` run of each.
@Suite("coffer bench and coffer-bench")
struct BenchCommandTests {
    /// Every name `coffer bench --json` promises: what Argon2id costs an unlock, and how fast a
    /// vault writes and reads on this disk, beside the disk's own floor.
    static let userNames = [
        "vault.write", "vault.write.durable", "vault.read", "peer.fsync.floor", "kdf.interactive", "kdf.moderate",
    ]

    /// Every name `coffer-bench --json` promises (scripts and BENCHMARKS.md read them), with the
    /// peers and variants: the names `coffer bench` printed before it kept only the user's rows.
    static let suiteNames = [
        "stored.read", "computed.read", "peer.mutex.read", "peer.observable.read",
        "peer.userdefaults.read", "peer.userdefaults.write",
        "keyvalue.write", "keyvalue.write.durable", "keyvalue.write.exclusive", "keyvalue.write.durable.exclusive",
        "vault.write", "vault.write.durable", "vault.read", "peer.fsync.floor",
        "vault.seal.1MiB", "peer.libsodium.seal.1MiB", "keyvalue.open.10k", "vault.open.10k", "peer.crypto.open.10k",
        "vault.open.identity",
        "vault.rotate.10k",
        "kdf.interactive", "kdf.moderate", "keyvalue.change.latency", "vault.change.latency", "watch.idle.1000keys",
        "cli.run.overhead", "peer.env.true",
        "keys.create.1k", "keys.create.100k", "keys.read.100k", "peer.observable.read.100k", "keys.transient", "keys.release.100k",
        "keys.open.1M", "keys.compact.1M", "keys.change.latency.1M", "keys.change.cpu.1M",
    ]

    /// Runs `program` with `bench`-style arguments in a scratch TMPDIR; checks the JSON (the
    /// names, in order, and consistent figures), the chart, and that nothing was left behind.
    static func checkQuickRun(_ program: String, _ arguments: [String], names: [String]) throws {
        let box = try Sandbox()
        let chart = box.path + "/bench.svg"
        let scratch = box.path + "/tmp"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false)
        let run = try box.run(
            arguments + ["--quick", "--json", "--svg", chart], environment: ["TMPDIR": scratch], vault: false,
            passphraseFile: false, program: program,
            // A hang guard: the whole quick suite of a debug build, which on 2 busy cores took
            // over 30 s beside the PostgreSQL test process.
            timeout: 300)
        #expect(run.status == Exit.ok, "\(run)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout)) as? [String: Any], "\(run)")
        let results = try #require(object["results"] as? [[String: Any]], "\(run)")
        #expect(results.compactMap { $0["name"] as? String } == names, "\(run)")
        for result in results {
            let name = result["name"] as? String ?? "?"
            let median = try #require(result["ns_per_op"] as? Double, "\(name)")
            let low = try #require(result["min_ns"] as? Double, "\(name)")
            let high = try #require(result["max_ns"] as? Double, "\(name)")
            let perSecond = try #require(result["ops_per_sec"] as? Double, "\(name)")
            let runs = try #require(result["runs"] as? Int, "\(name)")
            #expect(median > 0 && low <= median && median <= high, "\(name): \(low) ≤ \(median) ≤ \(high)")
            // ops/s is the median's inverse (to the rounding of either).
            #expect(abs(perSecond * median / 1e9 - 1) < 0.01, "\(name): \(perSecond) ops/s for \(median) ns")
            #expect(runs >= 5, "\(name): \(runs) runs")
        }
        // The chart: an SVG document with one labelled bar per benchmark.
        let svg = try String(contentsOfFile: chart, encoding: .utf8)
        #expect(svg.hasPrefix("<svg") && svg.hasSuffix("</svg>\n"), "\(svg.prefix(200))")
        for name in names { #expect(svg.contains(">\(name)<"), "the chart has no bar for \(name)") }
        // It cleaned up after itself: its stores and vaults are gone from the temporary directory.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch) == [])
    }

    @Test("coffer bench --quick --json prints the KDF and vault rows with consistent figures, and --svg draws them")
    func userRows() throws {
        try Self.checkQuickRun(cofferPath, ["bench"], names: Self.userNames)
    }

    @Test("coffer-bench --quick --json prints every benchmark of the suite with consistent figures, and --svg draws them")
    func developerSuite() throws {
        try Self.checkQuickRun(cofferBenchPath, [], names: Self.suiteNames)
    }

    @Test("The shipped coffer has no developer commands: demo, bench-postgres and bench-change-writer are unknown")
    func developerCommandsAreNotInTheCLI() throws {
        let box = try Sandbox()
        let help = try box.run(["--help"], vault: false, passphraseFile: false)
        #expect(help.status == Exit.ok, "\(help)")
        for command in ["demo", "bench-postgres", "bench-change-writer"] {
            #expect(!help.out.contains("  \(command) "), "coffer --help lists \(command)")
            let run = try box.run([command], vault: false, passphraseFile: false)
            #expect(run.status == Exit.usage, "\(run)")
        }
        // Their own programs answer instead.
        for (program, command) in [(cofferBenchPath, ["postgres", "--help"]), (cofferBenchPath, ["--help"]), (cofferDemoPath, ["--help"])] {
            let run = try box.run(command, vault: false, passphraseFile: false, program: program)
            #expect(run.status == Exit.ok && run.out.contains("USAGE:"), "\(run)")
        }
    }
}
