// `coffer-demo` (`make demo`): the guided tour, an executable of its own (not a product, not
// installed). It runs the `coffer` built beside it as its second process.

import ArgumentParser

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coffer-demo",
        abstract: "A guided tour: a vault, two credentials, a second process, a reactive model.",
        discussion: """
            Needs no set-up and asks nothing: it works in a new temporary directory (or --dir, \
            which must not already hold a demo) and never touches your own vault. The demo's \
            credentials are random, and never printed in full. Exits 1 if a claim it prints does \
            not hold.

            Examples:
              make demo
              swift run coffer-demo --dir /tmp/coffer-tour
            """)

    @Option(help: ArgumentHelp("Work in this directory instead of a new temporary one.", valueName: "dir"))
    var dir: String?

    func run() throws {
        try Demo(directory: dir).run()
    }
}

// A failure is one line, `coffer-demo: …`, and exit 1; usage errors and --help as usual.
do {
    var command = try DemoCommand.parseAsRoot()
    try command.run()
} catch let error as DemoError {
    writeError("coffer-demo: \(error)\n")
    exit(1)
} catch {
    DemoCommand.exit(withError: error)
}
