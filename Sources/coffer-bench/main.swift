// `coffer-bench`: the developers' benchmark suite, an executable of its own (not a product, not
// installed): `swift run -c release coffer-bench [--json] [--quick] [--svg FILE]`, and
// `coffer-bench postgres` (`make bench-postgres`). `coffer bench`, in the shipped CLI, prints
// the few rows a user asks of a machine (CofferBenchHarness/UserBenchmarks.swift).

import ArgumentParser
import CofferBenchHarness

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct CofferBenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coffer-bench",
        abstract: "Coffer's benchmark suite: the hot paths, large stores and change latency, next to peers.",
        discussion: """
            Prints median ns/op and ops/s (with min and max over several runs) for stored and \
            computed reads, key-value and vault writes (coalesced and durable), vault reads, \
            sealing, opening large stores, keys chosen at run time, change latency, `coffer run`'s \
            overhead and Argon2id unlocks, next to peers measured in the same run. Works in a new \
            temporary directory. `cli.run.overhead` runs the `coffer` built beside this program.

            COFFER_BENCH_FILTER=vault.write,kdf. runs only the names with those prefixes \
            (vault.write$: that name alone); \
            COFFER_BENCH_KEYS_CURVE=1 measures the keys.* rows at 1k, 10k, 100k and 1M live entries.
            """,
        subcommands: [SuiteCommand.self, BenchPostgresCommand.self, BenchChangeWriterCommand.self],
        defaultSubcommand: SuiteCommand.self)
}

struct SuiteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suite", abstract: "Run the suite (the default).")

    @Flag(
        help:
            "Print JSON: {\"results\": [{\"name\", \"ns_per_op\", \"ops_per_sec\", \"min_ns\", \"max_ns\", \"runs\"}]}."
    )
    var json = false
    @Flag(help: "Fewer iterations: a smoke run, not the published figures.") var quick = false
    @Option(help: ArgumentHelp("Also draw the results as an SVG bar chart.", valueName: "file")) var svg: String?

    func run() throws {
        try runBenchmarks(json: json, quick: quick, svg: svg)
    }
}

// A failure is one line, `coffer-bench: …`, and exit 1; usage errors and --help as usual.
do {
    var command = try CofferBenchCommand.parseAsRoot()
    try command.run()
} catch where CofferBenchCommand.exitCode(for: error) != .failure {
    CofferBenchCommand.exit(withError: error)
} catch {
    writeError("coffer-bench: \(error)\n")
    exit(1)
}
