import ArgumentParser

/// `coffer`: a keychain for the terminal and for scripts.
///
/// This module only parses, prints and maps errors to exit codes (``ExitStatus``); what a
/// command does is one or two calls into `Vault`.
struct CofferCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coffer",
        abstract: "A keychain for the terminal and for scripts: secrets in an encrypted, authenticated file.",
        discussion: """
            The vault is --vault, else $COFFER_VAULT, else $XDG_DATA_HOME/coffer/default.coffer, \
            else ~/.local/share/coffer/default.coffer.

            It is unlocked with --key-file, else --identity, else --passphrase-file, else \
            $COFFER_PASSPHRASE, else $COFFER_IDENTITY (an identity file: see `coffer identity`), \
            else a passphrase typed on the terminal (without echo). With none of these and no terminal, \
            coffer stops with a usage error instead of waiting. A passphrase file may end with one \
            newline, which is not part of the passphrase. A key file must be a regular file of 32 \
            bytes to 64 KiB (a link to one is followed; a FIFO or a device is refused, never waited on); \
            --key-file - reads the key from standard input instead, for example from a pipe. \
            $COFFER_PASSPHRASE and $COFFER_NEW_PASSPHRASE are read at start-up and removed from \
            the environment (their bytes overwritten). coffer writes no core file and prints no \
            crash report (it could show memory), only one line.

            Every change (set, rm, passwd, compact) is on stable storage when coffer exits 0. \
            Another process using the same vault is waited for up to $COFFER_LOCK_TIMEOUT seconds \
            (default 10, at most 86400).

            --vault, --key-file, --identity and --passphrase-file may also follow the command name.

            Exit codes: 0 success, 1 other error, 2 usage (also a documented limit exceeded: a \
            name too long, a key file too large, a vault asking for more key-derivation work than \
            the ceiling), 3 item not found, 4 wrong passphrase or key, 5 integrity failure (the \
            file was damaged or tampered with), 6 busy.

            Examples:
              coffer init
              printf '%s' "$TOKEN" | coffer set api.github.com octocat --label GitHub
              curl -H "Authorization: Bearer $(coffer get api.github.com octocat)" …
              coffer list --json
              coffer --passphrase-file ~/.config/coffer/pass get db.internal app > db.key
            """,
        // `coffer --version`: printed to standard output, exit 0 (ExitStatus.swift's clean exit).
        version: cofferVersion,
        subcommands: [
            InitCommand.self, SetCommand.self, GetCommand.self, ListCommand.self, RemoveCommand.self,
            PasswdCommand.self, VerifyCommand.self, InfoCommand.self, CompactCommand.self, BenchCommand.self,
            GenerateCommand.self, InjectCommand.self, ImportCommand.self, ExportCommand.self, RunCommand.self, UnlockCommand.self, LockCommand.self, SlotCommand.self, RotateCommand.self, IdentityCommand.self,
        ]
    )

    @OptionGroup var global: GlobalOptions

    /// `coffer` alone: a usage error (exit 2), not the help with exit 0 a script would mistake for success.
    func run() throws {
        throw CLIError.usage("no command given: try `coffer init` or `coffer --help`")
    }
}
