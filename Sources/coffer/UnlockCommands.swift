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
#endif

/// `coffer unlock`: keeps the vault's session key in the kernel's session keyring, so later
/// commands of this login session open the vault without a prompt.
struct UnlockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock",
        abstract: "Unlock the vault for this login session (kept in the kernel keyring), like ssh-add.",
        discussion: """
            Asks for the passphrase once (or takes --passphrase-file, $COFFER_PASSPHRASE or \
            --key-file), then keeps the key that opens the vault's key slot — never the \
            passphrase, never the vault's master key — in the Linux kernel's session keyring, \
            with the kernel's own timeout (--timeout, default 15m, at most 24h). Until then, \
            every command of this login session that would ask for the passphrase (get, set, \
            list, rm, generate, inject, …) uses it instead; an explicit --key-file, --identity, \
            --passphrase-file or $COFFER_PASSPHRASE still wins. `coffer lock` removes it at once.

            The key is readable only by processes that possess this session keyring (this login \
            session's processes of this user) and by root: the trust ssh-agent asks for. \
            Commands `coffer run` starts get a session keyring of their own, without it. The key \
            is named by the vault's id, so it follows the vault file when its directory is \
            renamed or reached through another symlink. It survives `coffer rotate` (the slot \
            keeps its key) but not a passphrase change or the removal of its slot: a command then \
            drops it, says so in one line, and asks again. Running `coffer unlock` again replaces \
            it and its timeout. Where this process has no session keyring of its own (no login \
            session made one: a container, su, cron), unlock refuses: the user session keyring \
            it would get instead is readable by every process of this user, in any session. \
            Start one first (`keyctl session`, or `keyctl new_session` in this shell). A vault \
            unlocked with an identity needs no unlock: the identity file opens it without a \
            prompt.

            Examples:
              coffer unlock                      # 15 minutes
              coffer unlock --timeout 2h
              coffer get api.github.com octocat  # no prompt
              coffer lock
            """)

    @ParentCommand var root: CofferCommand
    @Option(help: ArgumentHelp("How long the key is kept: 30s, 15m, 2h (default 15m, at most 24h).", valueName: "duration"))
    var timeout: String = SessionTimeout.standard
    /// Refused: kept so that a script passing it is told why, rather than "unknown option".
    @Flag(help: .hidden) var userKeyring = false

    func run() throws {
        let seconds = try SessionTimeout.parse(timeout)
        if userKeyring {
            throw CLIError.usage(
                "--user-keyring is no longer offered: a key in the user session keyring can be found and read by "
                    + "every process of this user, in any session and whatever its permissions (`keyctl search @us "
                    + "user coffer:… @s`, then `keyctl pipe`), so also by any command `coffer run` starts; "
                    + SessionKeyring.startASessionKeyring)
        }
        // Refused before the passphrase is asked for: the key could not be kept anyway.
        try SessionKeyring.checkSessionKeyring()
        let store = try root.global.openKeychain(usingSessionKey: false)
        let (description, _) = try root.global.sessionKeyDescription()
        guard let lending = store as? any SessionKeyLending else {
            throw CLIError(.failure, "\(quotedName(store.location)) cannot lend its key to the session keyring")
        }
        guard let kept = lending.sessionKey else {
            throw CLIError.usage(
                "an identity opens the vault without a prompt already, so there is nothing to keep: "
                    + "unlock with the passphrase or key file instead")
        }
        let stored = try SessionKeyring.store(try kept.serialized(), description: description, seconds: seconds)
        let expiry = Date(timeIntervalSinceNow: TimeInterval(seconds))
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = .current
        formatter.formatOptions = [.withInternetDateTime]
        writeOut(
            "unlocked \(escapedName(store.location)): its key is kept in the session keyring as key \(String(stored.serial, radix: 16)) "
                + "(\(escapedName(description))) until \(formatter.string(from: expiry)) "
                + "(\(SessionTimeout.describe(seconds))); `coffer lock` removes it sooner\n")
    }
}

/// `coffer lock`: removes the key `coffer unlock` kept, at once.
struct LockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Remove the key `coffer unlock` kept for this session, at once.",
        discussion: """
            Invalidates the vault's key in the kernel's session keyring: the next command asks \
            for the passphrase again. --all removes the key of every vault unlocked in this \
            session. Both also remove what an earlier coffer kept in the user session keyring \
            (its --user-keyring). Nothing kept is not an error; a vault file that cannot be read \
            (moved away, deleted) is, since which kept key is its cannot be told: use --all.

            Examples:
              coffer lock
              coffer lock --all
            """)

    @ParentCommand var root: CofferCommand
    @Flag(help: "Remove the key of every vault unlocked in this session.") var all = false

    func run() throws {
        if all {
            let removed = try SessionKeyring.removeAllKept()
            let earlier =
                removed.userSession > 0
                ? ", \(removed.userSession) of them from the user session keyring (where an earlier coffer kept them)"
                : ""
            writeOut(
                "removed \(removed.total) key\(removed.total == 1 ? "" : "s") from the session keyring\(earlier)\n")
            return
        }
        var unidentified: String?
        let (descriptions, place): ([String], String)
        if try root.global.storeURL == nil {
            // The file vault: its key is named by the vault's id, read from the file wherever it
            // is reached from now; a key an earlier coffer named by the path is removed too.
            let url = try root.global.vaultURL
            var names: [String] = []
            do {
                names.append(try SessionKeyring.description(forFile: url))
            } catch let error as CofferError {
                unidentified = error.message
            }
            if let byPath = SessionKeyring.pathDescription(forFile: url) { names.append(byPath) }
            (descriptions, place) = (names, escapedName(url.path))
        } else {
            let (description, name) = try root.global.sessionKeyDescription()
            (descriptions, place) = ([description], name)
        }
        let removed = try SessionKeyring.removeKept(descriptions)
        if removed.total > 0 {
            let from =
                removed.session > 0 ? "the session keyring" : "the user session keyring (where an earlier coffer kept it)"
            writeOut("locked \(place): removed its key from \(from)\n")
            return
        }
        if let unidentified {
            // Nothing said "no key is kept" while one could be: which key is this vault's cannot be told.
            throw CLIError(
                .failure,
                "cannot tell which kept key opens \(place) (\(unidentified)): `coffer lock --all` removes every key "
                    + "coffer keeps")
        }
        writeOut("no key of \(place) is kept in this session\n")
    }
}

extension GlobalOptions {
    /// Whether the command was told how to unlock (--key-file, --identity, --passphrase-file,
    /// `$COFFER_PASSPHRASE`, `$COFFER_IDENTITY`): then that wins over a key kept by `coffer unlock`.
    var hasUnlockSource: Bool {
        if keyFile != nil || identity != nil || passphraseFile != nil { return true }
        do {
            if try Input.environment("COFFER_PASSPHRASE") != nil { return true }
        } catch {
            return true  // set but empty: ``unlock(prompt:confirm:)`` says so
        }
        if let identity = environmentText("COFFER_IDENTITY"), !identity.isEmpty { return true }
        return false
    }

    /// The description of the key `coffer unlock` keeps for the vault these options name (the
    /// file vault, or the PostgreSQL one of `--store`), and the vault as messages name it;
    /// nothing is opened.
    func sessionKeyDescription() throws -> (description: String, place: String) {
        guard let url = try storeURL else {
            let file = try vaultURL
            return (try SessionKeyring.description(forFile: file), escapedName(file.path))
        }
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw CLIError.usage("--store takes a postgres:// URL (the file vault is chosen with --vault)")
        }
        #if Postgres
        let (configuration, name) = try Self.postgresVault(url)
        return (
            try SessionKeyring.description(forStore: configuration, vault: name),
            "vault \(escapedName(name)) on \(configuration)"
        )
        #else
        throw CLIError(
            .failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }

    /// The vault `open` opens with the key `coffer unlock` kept as `description` in the session
    /// keyring (``VaultUnlock/sessionKey(_:)``); `nil` when none is kept, or when one was
    /// given (``hasUnlockSource``). A kept key that no longer opens the vault (its passphrase
    /// was changed, its slot removed) or cannot be read is removed, with a one-line note naming
    /// `place`, and `nil` returned: the caller asks for the passphrase as without it.
    func openWithSessionKey<Opened>(
        _ description: String, place: String, _ open: (VaultUnlock) throws -> Opened
    ) throws -> Opened? {
        guard !hasUnlockSource, let serial = SessionKeyring.find(description) else { return nil }
        let key: VaultSessionKey
        do {
            key = try VaultSessionKey(serialized: try SessionKeyring.read(serial))
        } catch {
            try? SessionKeyring.remove(serial)
            writeError("coffer: the key kept by `coffer unlock` for \(place) cannot be used: removed it\n")
            return nil
        }
        do {
            return try open(.sessionKey(key))
        } catch let error as CofferError where error.code == .wrongKey {
            try? SessionKeyring.remove(serial)
            writeError(
                "coffer: the key kept by `coffer unlock` no longer opens \(place) (its passphrase was changed or "
                    + "its key slot removed): removed it from the session keyring\n")
            return nil
        }
    }
}
