import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer run`: a program started with secrets in its environment, and nowhere else.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a command with secrets in its environment: variables set to coffer://SERVICE/ACCOUNT are filled in.",
        discussion: """
            The command gets coffer's environment, then the variables of each --env-file in \
            order, then each --env NAME=REF (a later one overrides an earlier one of the same \
            name). Every variable whose value is a reference, coffer://SERVICE/ACCOUNT, gets the \
            item's secret instead, exactly its bytes; every other variable is passed on \
            unchanged. In a reference, a / inside a name is written %2F and a % as %25 (any byte \
            may be %XX, UTF-8); a value that starts with coffer:// but is not a valid reference \
            is an error (exit 2) naming where it came from.

            Every secret is read before the command starts: a missing item fails with exit 3, \
            naming the reference, and the command is not run. The secrets are given to the \
            command in its environment only, never in its arguments or a file; coffer builds \
            that environment in memory it wipes once the command has started. Without --watch \
            the vault is closed before the command starts; to mask output or to watch, coffer \
            keeps the values while the command runs, in locked memory of their own. (A process's \
            environment can be read by processes of the same user, through /proc/PID/environ, \
            and by root.)

            An env file holds NAME=VALUE lines: blank lines and # comments are skipped, an \
            `export ` prefix is allowed, a value may be in '…' (taken as it is) or "…" (with the \
            escapes \\" \\\\ \\$ \\n \\r \\t), an unquoted value ends at a ` #` comment. There is \
            no space around the =, nothing is expanded, and a malformed line is an error naming \
            the file and the line.

            By default the command's standard output and error pass through coffer, which \
            replaces every secret value it gave the command by <concealed by coffer>, also when \
            it is written in pieces; a line is written as soon as the command writes it (only a \
            trailing fragment that could be the start of a secret waits for the next bytes). With \
            --watch, every value any run of the command was given stays concealed until coffer \
            exits. \
            --no-masking connects the command to coffer's own output directly. Standard input \
            is the command's either way.

            The signals INT, TERM, HUP, QUIT, USR1, USR2 and WINCH that coffer receives are \
            passed on to the command (one the terminal sends to the whole foreground process \
            group, such as Ctrl-C, already reaches it and is not sent twice). A signal that was \
            ignored when coffer started (nohup, a background job of a script) stays ignored, by \
            coffer and by the command. The command runs in a session keyring of its own, so it \
            cannot read the vault keys coffer unlock keeps. coffer exits with \
            the command's exit status, or 128 + N when signal N ended it; 127 when the command \
            is not found, 126 when it cannot be run.

            --watch keeps the vault open and watches the referenced items (a PostgreSQL vault \
            through LISTEN/NOTIFY). When one's value changes (a burst of changes counts once), \
            coffer asks the command to stop with SIGTERM, or the signal --restart-signal names \
            (HUP, INT, QUIT, TERM, USR1, USR2, WINCH or KILL), waits for it to exit, and starts it \
            again with the new values. The command is expected to exit on that signal: one that \
            is still running 10 seconds later is killed (SIGKILL). A command is always \
            restarted, never only signalled: the environment of a running process cannot be \
            changed, so only a new process can have the new secret. A TERM, INT or QUIT sent to \
            coffer during a restart stops it there (no new command is started); when the command exits on its own, coffer \
            exits with its status.

            Examples:
              DATABASE_PASSWORD=coffer://db.internal/app coffer run -- ./server
              coffer run --env-file .env -- npm start
              coffer run --env GITHUB_TOKEN=coffer://api.github.com/octocat -- gh repo list
              coffer run --watch --restart-signal INT --env-file prod.env -- ./worker
            """)

    @ParentCommand var root: CofferCommand

    @Option(
        name: .customLong("env-file"),
        help: ArgumentHelp("A file of NAME=VALUE lines to add (repeatable; later files override earlier ones).", valueName: "file"))
    var envFiles: [String] = []

    @Option(
        name: .customLong("env"),
        help: ArgumentHelp("A variable set to an item's secret: NAME=coffer://SERVICE/ACCOUNT (repeatable).", valueName: "name=ref"))
    var assignments: [String] = []

    @Flag(help: "Restart the command when a referenced item changes.")
    var watch = false

    @Option(
        name: .customLong("restart-signal"),
        help: ArgumentHelp(
            "With --watch: the signal that asks the command to stop before a restart (default TERM); it should exit on it, "
                + "or it is killed 10 seconds later.", valueName: "signal"))
    var restartSignal: String?

    @Flag(name: .customLong("no-masking"), help: "Do not conceal secrets in the command's output: connect it to coffer's output directly.")
    var noMasking = false

    @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments, after --.", valueName: "command"))
    var command: [String] = []

    /// The signals `--restart-signal` accepts, by name.
    static let signalNames: [String: Int32] = [
        "HUP": SIGHUP, "INT": SIGINT, "QUIT": SIGQUIT, "TERM": SIGTERM, "USR1": SIGUSR1, "USR2": SIGUSR2,
        "WINCH": SIGWINCH, "KILL": SIGKILL,
    ]

    /// `HUP`, `SIGHUP` or `hup`.
    static func signalNumber(_ name: String) -> Int32? {
        var upper = name.uppercased()
        if upper.hasPrefix("SIG") { upper.removeFirst(3) }
        return signalNames[upper]
    }

    func validate() throws {
        if command.isEmpty {
            throw ValidationError("no command given: put it after --, for example: coffer run -- env")
        }
        if let restartSignal {
            guard watch else { throw ValidationError("--restart-signal is for --watch") }
            // The value is not repeated: a stray argument may be a secret pasted in the wrong place.
            guard Self.signalNumber(restartSignal) != nil else {
                throw ValidationError(
                    "--restart-signal takes one of \(Self.signalNames.keys.sorted().joined(separator: ", ")) (with or without SIG)")
            }
        }
    }

    func run() throws {
        let status: Int32
        do {
            status = try launch()
        } catch let exit as RunExit {
            printError(exit.message)
            exitProcess(exit.status)
        }
        exitProcess(status)
    }

    /// Everything up to the child's end; returns the status to exit with.
    private func launch() throws -> Int32 {
        let environment = try ChildEnvironment.assemble(envFiles: envFiles, assignments: assignments)
        // The program is found before the vault is opened: a misspelt command costs no unlock.
        let executable = try RunSupervisor.resolve(command[0], path: environment.plainValue("PATH"))
        let references = environment.references
        if watch && references.isEmpty {
            throw CLIError.usage("--watch: no variable refers to an item (coffer://SERVICE/ACCOUNT), so there is nothing to watch")
        }
        var store: (any Keychain)?
        var values: [SecretReference: SecureBytes] = [:]
        if !references.isEmpty {
            let opened = try root.global.openKeychain()
            for (reference, origin) in references {
                guard let secret = try opened.secret(service: reference.service, account: reference.account) else {
                    throw CLIError(.notFound, "\(origin) refers to \(reference), which is not in \(quotedName(opened.location))")
                }
                if secret.withUnsafeBytes({ $0.contains(0) }) {
                    throw CLIError(
                        .failure, "the secret of \(reference) (\(origin)) holds a NUL byte, which an environment variable cannot hold")
                }
                values[reference] = secret
            }
            store = opened
        }
        let supervisor = RunSupervisor(
            .init(
                executable: executable, arguments: command, environment: environment, masking: !noMasking,
                restartSignal: watch ? Self.signalNumber(restartSignal ?? "TERM") : nil),
            store: store, values: values)
        store = nil
        values = [:]
        return try supervisor.run()
    }
}

/// Ends coffer with `status` (the child's, which need not be one of ``ExitStatus``'s).
private func exitProcess(_ status: Int32) -> Never { exit(status) }
