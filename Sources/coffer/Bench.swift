// `coffer bench` (issue 6). Another engineer replaces this file's contents; keep the interface:
//   func runBenchmarks(json: Bool, quick: Bool, svg: String?) throws

/// Runs the benchmark suite and prints its table (or JSON, and an SVG chart when asked).
func runBenchmarks(json: Bool, quick: Bool, svg: String?) throws {
    throw CLIError(.failure, "coffer bench is not built yet (see issue 6)")
}
