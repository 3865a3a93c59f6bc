import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import CofferVault
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `--vault`, `--key-file`, `--passphrase-file`: accepted before or after the command name.
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The vault file (default: $COFFER_VAULT, else $XDG_DATA_HOME/coffer/default.coffer, else ~/.local/share/coffer/default.coffer).",
            valueName: "path"))
    var vault: String?

    @Option(
        name: .customLong("key-file"),
        help: ArgumentHelp(
            "Unlock with a key file (its whole content is the key: a regular file of 32 bytes to 64 KiB). '-' reads the key from standard input (a pipe or file).",
            valueName: "path"))
    var keyFile: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Unlock with an identity file (AGE-SECRET-KEY-1… lines, from `coffer identity new` or age-keygen): opens the vault's key slot for its recipient. Default: $COFFER_IDENTITY, when no key file or passphrase is given.",
            valueName: "path"))
    var identity: String?

    @Option(
        name: .customLong("passphrase-file"),
        help: ArgumentHelp(
            "Read the passphrase from a file (one trailing newline is removed). Default: $COFFER_PASSPHRASE, else a prompt on the terminal.",
            valueName: "path"))
    var passphraseFile: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A vault in PostgreSQL instead of the file (set, get, list, rm): postgres://user@host:port/db?vault=NAME (default: $COFFER_STORE). Needs the Postgres trait.",
            valueName: "url"))
    var store: String?

    func validate() throws {
        if [keyFile, passphraseFile, identity].compactMap({ $0 }).count > 1 {
            throw ValidationError("use one of --key-file, --passphrase-file and --identity, not several")
        }
    }

    /// The vault file: `--vault`, `$COFFER_VAULT`, `$XDG_DATA_HOME/coffer/default.coffer`,
    /// `~/.local/share/coffer/default.coffer`. In that default directory, a vault only under the
    /// name an earlier version gave it, `default.coffervault`, is the default vault; vaults
    /// under both names are refused (the library's rule, ``VaultConfiguration/defaultVault(in:)``).
    /// (The variables were checked to be UTF-8 at start-up, ``checkEnvironmentIsUTF8()``.)
    var vaultURL: URL {
        get throws {
            if let vault, !vault.isEmpty { return URL(fileURLWithPath: vault) }
            if let vault = environmentText("COFFER_VAULT"), !vault.isEmpty { return URL(fileURLWithPath: vault) }
            let directory: URL
            if let xdg = environmentText("XDG_DATA_HOME"), xdg.hasPrefix("/") {
                directory = URL(fileURLWithPath: xdg).appendingPathComponent("coffer")
            } else {
                let home = environmentText("HOME").flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
                directory = URL(fileURLWithPath: home).appendingPathComponent(".local/share/coffer")
            }
            switch try VaultConfiguration.defaultVault(in: directory) {
            case .current(let url), .former(let url): return url
            case .both(let current, let former):
                throw CLIError(
                    .failure,
                    "two default vaults: \(escapedName(current.path)) and \(escapedName(former.path)) (the name an "
                        + "earlier coffer gave it); keep one (move the other aside), or name the vault with --vault or "
                        + "COFFER_VAULT")
            }
        }
    }

    /// The longest `$COFFER_LOCK_TIMEOUT` accepted: one day. A larger value is a usage error
    /// rather than a number the library would have to convert to nanoseconds (1e10 s overflows
    /// `Int64` nanoseconds, which traps).
    static let maximumLockTimeout: Double = 86_400

    /// How long to wait for another process's lock: `$COFFER_LOCK_TIMEOUT` seconds, default the
    /// library's (`CofferContext.defaultLockTimeout`, 10 s), at most ``maximumLockTimeout``.
    func lockTimeout() throws -> Duration {
        .seconds(try Self.lockTimeout(environmentText("COFFER_LOCK_TIMEOUT")))
    }

    /// Parses a `$COFFER_LOCK_TIMEOUT` value (`nil`: unset, the library's default of 10 seconds).
    static func lockTimeout(_ text: String?) throws -> Double {
        guard let text else { return CofferContext.defaultLockTimeout.inSeconds }
        let shown = quotedName(text)
        guard let value = Double(text), value.isFinite, value >= 0 else {
            throw CLIError.usage("COFFER_LOCK_TIMEOUT must be a number of seconds, got \(shown)")
        }
        guard value <= maximumLockTimeout else {
            throw CLIError.usage(
                "COFFER_LOCK_TIMEOUT must be at most \(Int(maximumLockTimeout)) seconds (one day), got \(shown)")
        }
        return value
    }

    /// `--key-file -`: the key is read from standard input.
    static let standardInputKeyFile = "-"

    static let noPassphraseSource =
        "no passphrase given and no terminal to ask on: use --passphrase-file PATH, --key-file PATH or --identity PATH, "
        + "or set COFFER_PASSPHRASE or COFFER_IDENTITY"

    /// A usage error (exit 2) when the key or identity file at `path` does not exist or is not a
    /// regular file, said before anything is opened; `option` is the flag whose `-` form reads
    /// standard input instead.
    static func checkRegularFile(_ path: String, what: String, option: String) throws {
        var status = stat()
        guard stat(path, &status) == 0 else {
            if errno == ENOENT { throw CLIError.usage("the \(what) \(quotedName(path)) does not exist") }
            throw CLIError(.failure, "cannot use the \(what) \(quotedName(path)): \(String(cString: strerror(errno)))")
        }
        let type = status.st_mode & S_IFMT
        guard type == S_IFREG else {
            // `--key-file <(command)` lands here (/dev/fd/63 is a pipe): say what works.
            let kind = type == S_IFDIR ? "a directory" : type == S_IFIFO ? "a pipe or FIFO" : "not a regular file"
            throw CLIError.usage(
                "the \(what) \(quotedName(path)) is \(kind), which coffer does not read (it could wait forever): "
                    + "to give it through a pipe, use \(option) - and send it to standard input, "
                    + "for example: command | coffer \(option) - …")
        }
    }

    /// What unlocks the vault: `--key-file`, `--passphrase-file`, `$COFFER_PASSPHRASE`, or the
    /// terminal (asked twice when `confirm`).
    func unlock(prompt: String, confirm: Bool = false) throws -> VaultUnlock {
        if let keyFile {
            if keyFile == Self.standardInputKeyFile { return .keyFileContents(try Input.keyFromStandardInput()) }
            try Self.checkRegularFile(keyFile, what: "key file", option: "--key-file")
            return .keyFile(URL(fileURLWithPath: keyFile))
        }
        if let identity {
            if identity == Self.standardInputKeyFile {
                return .identities(try IdentityFile.parse(try Input.keyFromStandardInput()))
            }
            try Self.checkRegularFile(identity, what: "identity file", option: "--identity")
            return .identity(URL(fileURLWithPath: identity))
        }
        if let passphraseFile { return .passphrase(try Input.passphraseFile(passphraseFile)) }
        if let passphrase = try Input.environment("COFFER_PASSPHRASE") { return .passphrase(passphrase) }
        // Not for a new vault: a variable set for everyday use must not decide, unseen, who can
        // open the vault `init` makes (--identity says so explicitly).
        if !confirm, let identity = environmentText("COFFER_IDENTITY"), !identity.isEmpty {
            try Self.checkRegularFile(identity, what: "identity file (COFFER_IDENTITY)", option: "--identity")
            return .identity(URL(fileURLWithPath: identity))
        }
        return .passphrase(
            try Input.prompt(
                prompt, confirmation: confirm ? "Repeat the passphrase: " : nil, noSource: Self.noPassphraseSource))
    }

    /// Opens the vault for a command; a missing vault is explained, not reported as "not found".
    /// Without an explicit unlock source (``hasUnlockSource``), the key `coffer unlock` kept in
    /// the session keyring opens it without a prompt (`usingSessionKey: false`: never; `coffer
    /// unlock` itself asks for the secret again). `recovery` is `Vault.open`'s; `unlockedWith`
    /// is told what the vault is being opened with (before the open, which may fail on damage),
    /// so that `verify --salvage` can open it again without asking twice.
    func openVault(
        usingSessionKey: Bool = true, recovery: JournalRecovery = .strict, unlock given: VaultUnlock? = nil,
        unlockedWith: ((VaultUnlock) -> Void)? = nil
    ) throws -> Vault {
        // passwd, info and compact: a PostgreSQL vault named by --store must never be
        // answered for by the local file (passwd used to change the file and say so, exit 0).
        if try storeURL != nil {
            throw CLIError.usage(
                "this command works on a file vault only, and --store (or $COFFER_STORE) names a PostgreSQL vault; "
                    + "on one, coffer can init, set, get, list, rm and verify (leave --store out, or unset COFFER_STORE, "
                    + "for the file vault)")
        }
        let url = try vaultURL
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw CLIError(
                .failure,
                "no vault at \(escapedName(url.path)): create one with `coffer init` (or choose one with --vault or "
                    + "COFFER_VAULT)")
        }
        let open = { (unlock: VaultUnlock) throws -> Vault in
            unlockedWith?(unlock)
            return try Vault.open(at: url, unlock: unlock, lockTimeout: try lockTimeout(), recovery: recovery)
        }
        if let given { return try open(given) }
        // The header is read for the key's name only when a kept key could be used.
        if usingSessionKey, !hasUnlockSource, let description = try? SessionKeyring.description(forFile: url),
            let vault = try openWithSessionKey(description, place: escapedName(url.path), open)
        {
            return vault
        }
        return try open(try unlock(prompt: "Passphrase for \(escapedName(url.path)): "))
    }
}

/// The Argon2id presets `init` and `passwd` offer.
enum KDFPreset: String, ExpressibleByArgument, CaseIterable {
    case interactive, moderate, sensitive

    var parameters: Argon2idParameters {
        // Test builds only (COFFER_TEST_HOOKS: debug builds, Package.swift): COFFER_TEST_FAST_KDF=1
        // swaps every preset for libsodium's minimum (1 pass, 8 KiB) so the CLI integration tests
        // do not spend their time in Argon2id. Not in a release build: such a vault's passphrase
        // is cheap to guess. A warning is printed.
        #if COFFER_TEST_HOOKS
        if let fast = getenv("COFFER_TEST_FAST_KDF"), String(cString: fast) == "1" {
            writeError(
                "coffer: warning: COFFER_TEST_FAST_KDF=1: using the weakest Argon2id parameters (for tests only)\n")
            return .minimum
        }
        #endif
        switch self {
        case .interactive: return .interactive
        case .moderate: return .moderate
        case .sensitive: return .sensitive
        }
    }
}
