// `coffer bench`: what a user asks of this machine before choosing settings, as `cryptsetup
// benchmark` answers: how long a passphrase unlock's Argon2id takes at each preset, and how fast
// a vault writes (coalesced and durable) and reads on this disk, next to the disk's own floor.
// The rows are in CofferBenchHarness (UserBenchmarks.swift); the developers' suite (reads of
// the reactive layer, peers, large stores, change latency, PostgreSQL) is `coffer-bench`, which
// is not installed.

import ArgumentParser
import CofferBenchHarness
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure the KDF presets and vault writes and reads on this machine and disk.",
        discussion: """
            Prints median ns/op and ops/s (with min and max over several runs) for a passphrase \
            unlock's Argon2id at the interactive and moderate presets (kdf.*), vault writes, \
            coalesced and durable (fdatasync before returning), vault reads, and the disk's own \
            floor (peer.fsync.floor: 100 bytes written and synced). Works in a new temporary \
            directory and touches no existing vault.

            Examples:
              coffer bench --quick
              coffer bench --json > bench.json
              coffer bench --svg bench.svg
            """)

    @Flag(
        help:
            "Print JSON: {\"results\": [{\"name\", \"ns_per_op\", \"ops_per_sec\", \"min_ns\", \"max_ns\", \"runs\"}]}."
    )
    var json = false
    @Flag(help: "Fewer iterations: under 10 seconds in all.") var quick = false
    @Option(help: ArgumentHelp("Also draw the results as an SVG bar chart.", valueName: "file")) var svg: String?

    func run() throws {
        let directory: BenchDirectory
        do { directory = try BenchDirectory() } catch { throw CLIError(.failure, "\(error)") }
        defer { directory.remove() }
        let progress = isatty(STDERR_FILENO) == 1
        let started = monotonicNanoseconds()
        let results: [BenchResult]
        do {
            results = try UserBenchmarks(runner: BenchRunner(quick: quick), directory: directory.url).run { names in
                if progress { writeError("\r\u{1B}[K  running \(names)…") }
            }
        } catch let error as BenchError {
            throw CLIError(.failure, error.description)
        }
        if progress { writeError("\r\u{1B}[K") }
        let seconds = Double(monotonicNanoseconds() - started) / 1e9
        writeOut(json ? BenchReport.json(results) : BenchReport.table(results, title: "coffer bench", quick: quick, seconds: seconds))
        if let svg {
            do {
                try Data(BenchReport.svg(results, title: "coffer bench").utf8).write(to: URL(fileURLWithPath: svg), options: .atomic)
            } catch {
                throw CLIError(.failure, "cannot write the chart to \(svg): \(error.localizedDescription)")
            }
            if !json { writeOut("chart written to \(svg)\n") }
        }
    }
}
