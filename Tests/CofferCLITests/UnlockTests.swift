import CKeyring
import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Isolation from the machine's keyrings: the session keyring is a property of each *thread*
// (its credentials, since Linux 3.8), inherited by the processes it spawns. Each test makes a
// `KeyringThread`: a thread of its own that joins a new anonymous session keyring
// (KEYCTL_JOIN_SESSION_KEYRING with a NULL name) before anything else, and every `coffer` child
// of the test is spawned from that thread, so it possesses that keyring and no other. The
// user's own session keyring is never touched (no other thread of the test process changes
// keyrings), parallel tests never see each other's keys, and the keyring and its keys go when
// the thread ends. /proc/keys lists only keys the reader may view (possessor-only keys: only to
// a reader that possesses them), so it is read from that thread too. Only the spawn and that
// read run there; every expectation runs in the test itself.

/// A thread in a new anonymous session keyring of its own, which runs what it is given.
final class KeyringThread: @unchecked Sendable {
    private let condition = NSCondition()
    private var job: (() -> Void)?
    private var finished = false
    private var stopping = false
    /// The serial of the thread's session keyring (negative when joining failed).
    private(set) var keyring: Int32 = 0

    /// `joining: false`: the thread keeps the session keyring the test process has, or none (so
    /// its children are given the user session keyring), for the one test of that case.
    init(joining: Bool = true) throws {
        let started = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            keyring = joining ? coffer_key_join_session(nil) : 1
            started.signal()
            loop()
        }
        thread.start()
        started.wait()
        guard keyring > 0 else {
            stop()
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ENOSYS)
        }
    }

    private func loop() {
        condition.lock()
        while true {
            while job == nil && !stopping { condition.wait() }
            guard let next = job else { break }
            job = nil
            condition.unlock()
            next()
            condition.lock()
            finished = true
            condition.broadcast()
        }
        condition.unlock()
    }

    /// Runs `body` on the thread and returns what it returned.
    func perform<T>(_ body: () throws -> T) throws -> T {
        var result: Result<T, any Error>?
        withoutActuallyEscaping(body) { body in
            condition.lock()
            job = { result = Result { try body() } }
            finished = false
            condition.broadcast()
            while !finished { condition.wait() }
            condition.unlock()
        }
        return try result!.get()
    }

    /// Ends the thread (and with it the keyring, once its children are gone).
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }
}

/// One line of /proc/keys.
struct ProcKey {
    var serial: String
    var flags: String
    /// `perm` for no timeout, `expd` once expired, else what is left (`14m`, `2s`).
    var timeout: String
    var permissions: String
    var type: String
}

// Serialized: `lock --all` now also clears coffer's keys from the user session keyring, which
// two tests here put there (as an earlier coffer did); run at once, one would clear the other's.
@Suite("coffer unlock and lock: the kernel session keyring", .serialized)
struct UnlockTests {
    /// `coffer` spawned from `ring`'s thread (so in its session keyring), checked as `box.run` checks.
    @discardableResult
    func run(
        _ ring: KeyringThread, _ box: Sandbox, _ arguments: [String], environment: [String: String] = [:],
        passphraseFile: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Run {
        let child = try ring.perform {
            try box.start(arguments, environment: environment, passphraseFile: passphraseFile)
        }
        return box.expectClean(child.wait(), sourceLocation: sourceLocation)
    }

    /// The description coffer gives the key of `box`'s vault.
    func description(_ box: Sandbox) -> String { description(vault: box.vault) }

    /// The description coffer gives the key of the vault file at `path`: `coffer:vault:` and the
    /// random vault id of its header, in hexadecimal (docs/FORMAT.md: the header area starts at
    /// byte 32, and its copy's vault id at byte 16 of it).
    func description(vault path: String) -> String {
        guard let bytes = FileManager.default.contents(atPath: path), bytes.count >= 64 else {
            return "coffer:vault:(no vault at \(path))"
        }
        return "coffer:vault:" + bytes[48..<64].map { String(format: "%02x", $0) }.joined()
    }

    /// The description an earlier coffer gave the key of `path`: `coffer:` and its real path.
    func pathDescription(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return "coffer:" + path }
        defer { free(resolved) }
        return "coffer:" + String(cString: resolved)
    }

    /// The /proc/keys line of the key of `box`'s vault, as `ring`'s thread sees it.
    func procKey(_ ring: KeyringThread, _ box: Sandbox) throws -> ProcKey? {
        try procKey(ring, description: description(box))
    }

    /// The /proc/keys line of the key described `description`, as `ring`'s thread sees it.
    func procKey(_ ring: KeyringThread, description: String) throws -> ProcKey? {
        let text = try ring.perform { () throws -> String in
            let fd = open("/proc/keys", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            defer { close(fd) }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(fd, &chunk, chunk.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                bytes += chunk[..<n]
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        let needle = " " + description + ":"
        guard let line = text.split(separator: "\n").first(where: { $0.contains(needle) }) else { return nil }
        let fields = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard fields.count >= 8 else { return nil }
        return ProcKey(serial: fields[0], flags: fields[1], timeout: fields[3], permissions: fields[4], type: fields[7])
    }

    /// Waits (polling, up to `seconds`) until `condition` holds; whether it did.
    func eventually(_ seconds: Double = 120, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(100_000)
        }
        return try condition()
    }

    /// Whether the key is no longer usable: gone from /proc/keys, or shown there expired or
    /// invalidated until the kernel's collector removes it.
    func isGone(_ key: ProcKey?) -> Bool {
        guard let key else { return true }
        return key.timeout == "expd" || key.flags.contains("i") || key.flags.contains("R") || key.flags.contains("D")
    }

    @Test(
        "unlock keeps a possessor-only key with a timeout; get then needs no passphrase; lock removes it at once",
        .timeLimit(.minutes(10)))
    func unlockGetLock() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        let secret = Array("s3cret-\(UUID().uuidString)".utf8)
        try box.set("db.internal", "app", secret)

        // Without a passphrase source and without unlock: the usage error coffer gives today.
        let before = try run(ring, box, ["get", "db.internal", "app"])
        #expect(before.status == Exit.usage && before.err.contains("no passphrase given"), "\(before)")

        let unlocked = try run(ring, box, ["unlock"], passphraseFile: true)
        #expect(unlocked.status == Exit.ok, "\(unlocked)")
        #expect(unlocked.out.contains("session keyring") && unlocked.out.contains("until"), "\(unlocked)")
        #expect(unlocked.out.contains("(15m)"), "\(unlocked)")
        #expect(unlocked.stdout.firstRange(of: secret) == nil)

        let key = try procKey(ring, box)
        #expect(key?.type == "user", "\(String(describing: key))")
        // Possessor: view, read, write, search, link, setattr; user, group, other: nothing.
        #expect(key?.permissions == "3f000000", "\(String(describing: key))")
        #expect(key.map { $0.timeout != "perm" && $0.timeout != "expd" } == true, "\(String(describing: key))")

        // No --passphrase-file, no COFFER_PASSPHRASE, no terminal: the kept key opens the vault.
        let got = try run(ring, box, ["get", "db.internal", "app"])
        #expect(got.status == Exit.ok && got.printed(secret), "\(got)")
        let listed = try run(ring, box, ["list"])
        #expect(listed.status == Exit.ok && listed.out.contains("db.internal"), "\(listed)")
        // A process outside this session keyring (the test's own keyring) does not have it.
        let outside = try box.run(["get", "db.internal", "app"], passphraseFile: false)
        #expect(outside.status == Exit.usage, "\(outside)")

        // An explicit source wins over the kept key: a wrong one is refused.
        let explicit = try run(ring, box, ["get", "db.internal", "app"], environment: ["COFFER_PASSPHRASE": "wrong"])
        #expect(explicit.status == Exit.wrongKey, "\(explicit)")

        let locked = try run(ring, box, ["lock"])
        #expect(locked.status == Exit.ok && locked.out.contains("locked"), "\(locked)")
        #expect(try eventually { try procKey(ring, box) == nil }, "the key is still in /proc/keys after lock")
        let after = try run(ring, box, ["get", "db.internal", "app"])
        #expect(after.status == Exit.usage && after.err.contains("no passphrase given"), "\(after)")
        let again = try run(ring, box, ["lock"])
        #expect(again.status == Exit.ok && again.out.contains("no key"), "\(again)")
    }

    @Test("--timeout 2s: the kernel expires the key, and get asks for a passphrase again", .timeLimit(.minutes(10)))
    func expires() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("value-\(UUID().uuidString)".utf8))
        let unlocked = try run(ring, box, ["unlock", "--timeout", "2s"], passphraseFile: true)
        #expect(unlocked.status == Exit.ok && unlocked.out.contains("(2s)"), "\(unlocked)")
        #expect(try procKey(ring, box) != nil)
        // Expiry is the kernel's: wait for it (generously), never assert how long it took.
        #expect(try eventually { isGone(try procKey(ring, box)) }, "the key did not expire")
        let after = try run(ring, box, ["get", "svc", "acct"])
        #expect(after.status == Exit.usage && after.err.contains("no passphrase given"), "\(after)")
    }

    @Test("A rotated vault still opens with the kept key; a changed passphrase drops it with a note", .timeLimit(.minutes(10)))
    func rotationAndPassphraseChange() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        let secret = Array("rotated-\(UUID().uuidString)".utf8)
        try box.set("svc", "acct", secret)
        #expect(try run(ring, box, ["unlock"], passphraseFile: true).status == Exit.ok)

        // Key management asks for the secret itself, even while a key is kept.
        for command in [["passwd", "--new-passphrase-file", box.newPassphraseFile], ["rotate"], ["slot", "list"]] {
            let refused = try run(ring, box, command)
            #expect(refused.status == Exit.usage && refused.err.contains("no passphrase given"), "\(command): \(refused)")
        }
        let rotated = try box.run(["rotate"])
        #expect(rotated.status == Exit.ok, "\(rotated)")
        let afterRotation = try run(ring, box, ["get", "svc", "acct"])
        #expect(afterRotation.status == Exit.ok && afterRotation.printed(secret), "\(afterRotation)")
        #expect(!afterRotation.err.contains("no longer opens"), "\(afterRotation)")

        let changed = try box.run(["passwd", "--new-passphrase-file", box.newPassphraseFile])
        #expect(changed.status == Exit.ok, "\(changed)")
        let stale = try run(ring, box, ["get", "svc", "acct"])
        #expect(stale.status == Exit.usage && stale.err.contains("no longer opens"), "\(stale)")
        #expect(stale.err.contains("no passphrase given"), "\(stale)")
        #expect(try eventually { try procKey(ring, box) == nil }, "the stale key is still in /proc/keys")
        let next = try run(ring, box, ["get", "svc", "acct"])
        #expect(next.status == Exit.usage && !next.err.contains("no longer opens"), "\(next)")
    }

    @Test("Without a session keyring of its own, unlock refuses, also with --user-keyring: nothing is kept in the user session keyring", .timeLimit(.minutes(10)))
    func userSessionKeyring() throws {
        // No keyring joined: the thread is what a process in a container, under su or cron is.
        let ring = try KeyringThread(joining: false)
        defer { ring.stop() }
        // Asked without "create", as coffer asks: equal ids mean "no session keyring of its own".
        let (session, user) = try ring.perform {
            (coffer_key_keyring_id(COFFER_KEY_SPEC_SESSION_KEYRING, 0), coffer_key_keyring_id(COFFER_KEY_SPEC_USER_SESSION_KEYRING, 0))
        }
        #expect(session > 0 && user > 0)
        let box = try Sandbox()
        try box.initVault()
        let secret = Array("user-session-\(UUID().uuidString)".utf8)
        try box.set("svc", "acct", secret)
        // --user-keyring is refused wherever it runs: a key in the user session keyring is
        // readable by every process of this user (see userKeyringAttack).
        let flag = try run(ring, box, ["unlock", "--user-keyring", "--timeout", "5m"], passphraseFile: true)
        #expect(flag.status == Exit.usage && flag.err.contains("--user-keyring") && flag.err.contains("keyctl"), "\(flag)")
        if session == user {
            // Refused before asking for the passphrase, and nothing kept (an earlier coffer said
            // the key was kept, while the kernel had put it in an anonymous keyring that ended
            // with the process; later, with --user-keyring, in the user session keyring).
            let refused = try run(ring, box, ["unlock"])
            #expect(refused.status == Exit.failure && refused.err.contains("no session keyring of its own"), "\(refused)")
            #expect(refused.err.contains("keyctl session"), "\(refused)")
            #expect(!refused.err.contains("no passphrase given"), "\(refused)")
            #expect(try procKey(ring, box) == nil)
            let read = try run(ring, box, ["get", "svc", "acct"])
            #expect(read.status == Exit.usage && read.err.contains("no passphrase given"), "\(read)")
        } else {
            // The test process runs in a login session with a session keyring of its own: unlock
            // keeps the key there, and never says "user session keyring".
            let unlocked = try run(ring, box, ["unlock"], passphraseFile: true)
            #expect(unlocked.status == Exit.ok && !unlocked.out.contains("user session keyring"), "\(unlocked)")
            let read = try run(ring, box, ["get", "svc", "acct"])
            #expect(read.status == Exit.ok && read.printed(secret), "\(read)")
            #expect(try run(ring, box, ["lock"]).status == Exit.ok)
        }
        #expect(try eventually { isGone(try procKey(ring, box)) })
    }

    @Test("lock --all removes the key of every vault of the session, and no other", .timeLimit(.minutes(10)))
    func lockAll() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let other = try KeyringThread()
        defer { other.stop() }
        let first = try Sandbox(), second = try Sandbox()
        for box in [first, second] {
            try box.initVault()
            #expect(try run(ring, box, ["unlock"], passphraseFile: true).status == Exit.ok)
        }
        #expect(try run(other, first, ["unlock"], passphraseFile: true).status == Exit.ok)
        let locked = try run(ring, first, ["lock", "--all"])
        #expect(locked.status == Exit.ok && locked.out.contains("removed 2 keys"), "\(locked)")
        #expect(try eventually { try procKey(ring, first) == nil && procKey(ring, second) == nil })
        // The other session keyring keeps its own.
        #expect(try procKey(other, first) != nil)
        #expect(try run(other, first, ["list"]).status == Exit.ok)
    }

    #if Postgres
    @Test("A PostgreSQL vault (--store): unlock, get without a passphrase, lock", .timeLimit(.minutes(10)))
    func postgresVault() throws {
        let cluster = try PostgresTestCluster.shared
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        let name = "unlock-\(UUID().uuidString.prefix(8))"
        let store = ["--store", cluster.url + "&vault=\(name)"]
        func coffer(_ arguments: [String], passphraseFile: Bool = false, stdin: [UInt8]? = nil) throws -> Run {
            let child = try ring.perform {
                try box.start(store + arguments, stdin: stdin, vault: false, passphraseFile: passphraseFile)
            }
            return box.expectClean(child.wait())
        }
        #expect(try coffer(["init"], passphraseFile: true).status == Exit.ok)
        let secret = Array("pg-\(UUID().uuidString)".utf8)
        #expect(try coffer(["set", "db.internal", "app"], passphraseFile: true, stdin: secret).status == Exit.ok)

        let unlocked = try coffer(["unlock", "--timeout", "10m"], passphraseFile: true)
        #expect(unlocked.status == Exit.ok && unlocked.out.contains("vault \(name) on"), "\(unlocked)")
        // Server, database, schema and vault name; no password (there is none in the URL either).
        let description = "coffer:postgres:coffer@127.0.0.1:\(cluster.port)/postgres#public?vault=\(name)"
        let key = try procKey(ring, description: description)
        #expect(key?.permissions == "3f000000" && key?.timeout != "perm", "\(String(describing: key))")

        let got = try coffer(["get", "db.internal", "app"])
        #expect(got.status == Exit.ok && got.printed(secret), "\(got)")
        let locked = try coffer(["lock"])
        #expect(locked.status == Exit.ok && locked.out.contains("locked vault \(name)"), "\(locked)")
        #expect(try eventually { try procKey(ring, description: description) == nil })
        let after = try coffer(["get", "db.internal", "app"])
        #expect(after.status == Exit.usage && after.err.contains("no passphrase given"), "\(after)")
    }
    #endif

    @Test("--timeout refuses 0, negative, malformed and absurd durations with exit 2")
    func refusals() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        for value in ["0", "0s", "--timeout=-5m", "25h", "99999999999999999999h", "abc", "15x", ""] {
            let arguments = value.hasPrefix("--") ? ["unlock", value] : ["unlock", "--timeout", value]
            let refused = try run(ring, box, arguments, passphraseFile: true)
            #expect(refused.status == Exit.usage && refused.err.contains("--timeout"), "\(refused)")
        }
        #expect(try procKey(ring, box) == nil)
        let accepted = try run(ring, box, ["unlock", "--timeout", "90"], passphraseFile: true)
        #expect(accepted.status == Exit.ok && accepted.out.contains("(90s)"), "\(accepted)")
    }

    // MARK: - Who else can reach a kept key

    /// keyutils' `keyctl`, the tool an attacker of the same user would use.
    static let keyctl = "/usr/bin/keyctl"

    /// Fails the test (never skips it) when keyctl is missing.
    func requireKeyctl() throws {
        try #require(
            access(Self.keyctl, X_OK) == 0, "these tests attack the keyring with keyutils' keyctl: apt-get install keyutils")
    }

    /// `keyctl ARGUMENTS` in a new anonymous session keyring of its own (`keyctl session -`):
    /// another session of this user, which possesses neither the test's keyrings nor coffer's.
    func fromAnotherSession(_ script: String, _ arguments: [String] = []) throws -> ProgramRun {
        try runProgram(Self.keyctl, ["session", "-", "/bin/sh", "-c", script, "sh"] + arguments)
    }

    /// Whether the user session keyring holds a "user" key `description` (looked up from
    /// another session, with the user session keyring linked into it).
    func userSessionKeyringHolds(_ description: String) throws -> Bool {
        let found = try fromAnotherSession(
            "keyctl link @us @s >/dev/null && keyctl search @s user \"$1\" >/dev/null", [description])
        return found.status == 0
    }

    /// Puts a key where an earlier coffer kept one with --user-keyring: a possessor-only "user"
    /// key `description` in the user session keyring (not a real session key; with a timeout, so
    /// a failed test leaves nothing for long).
    func keepInUserSessionKeyring(_ description: String) throws {
        let kept = try fromAnotherSession(
            "keyctl link @us @s >/dev/null && k=$(keyctl add user \"$1\" not-a-session-key @us) "
                + "&& keyctl setperm \"$k\" 0x3f000000 && keyctl timeout \"$k\" 300", [description])
        #expect(kept.status == 0, "\(kept)")
    }

    @Test(
        "A kept key cannot be found, linked or read from another session keyring of this user, nor by a command coffer run starts",
        .timeLimit(.minutes(10)))
    func keptKeyIsOutOfReach() throws {
        try requireKeyctl()
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()
        let secret = Array("reach-\(UUID().uuidString)".utf8)
        try box.set("svc", "acct", secret)
        #expect(try run(ring, box, ["unlock"], passphraseFile: true).status == Exit.ok)
        let description = description(box)
        let key = try #require(try procKey(ring, box))
        let serial = String(try #require(Int32(key.serial, radix: 16)))
        let keyring = String(ring.keyring)

        // The control: in the session keyring that holds it, keyctl reads it; so each refusal
        // below is the kernel's, not a mistyped command.
        let own = try ring.perform { try runProgram(Self.keyctl, ["pipe", serial]) }
        #expect(own.status == 0 && !own.stdout.isEmpty, "\(own)")

        // Another session of this user: every way to the key is closed.
        let attacks = [
            "k=$(keyctl search @us user \"$1\" @s) && keyctl pipe \"$k\"",
            "k=$(keyctl search @u user \"$1\" @s) && keyctl pipe \"$k\"",
            "keyctl search \"$2\" user \"$1\" @s",
            "keyctl link \"$2\" @s && keyctl pipe \"$3\"",
            "keyctl link \"$3\" @s && keyctl pipe \"$3\"",
            "keyctl pipe \"$3\"",
            "keyctl rdescribe \"$3\"",
        ]
        for attack in attacks {
            let outside = try fromAnotherSession(attack, [description, keyring, serial])
            #expect(outside.status != 0 && outside.stdout.isEmpty, "\(attack): \(outside)")
        }

        // A command coffer run starts (which coffer gave the item's value through the kept key).
        let script = attacks.enumerated().map { "(\($1)) >/dev/null 2>&1; echo \"attack \($0): $?\"" }
            .joined(separator: "; ")
        let child = try run(
            ring, box,
            ["run", "--env", "VALUE=coffer://svc/acct", "--", "/bin/sh", "-c",
             "test -n \"$VALUE\" && echo got-value; " + script, "sh", description, keyring, serial])
        #expect(child.status == Exit.ok && child.out.contains("got-value"), "\(child)")
        for index in attacks.indices {
            #expect(child.out.contains("attack \(index): ") && !child.out.contains("attack \(index): 0"), "\(child)")
        }
        // Still kept, and still opening the vault.
        let got = try run(ring, box, ["get", "svc", "acct"])
        #expect(got.status == Exit.ok && got.printed(secret), "\(got)")
    }

    @Test(
        "--user-keyring keeps nothing another session or a coffer run command could find in the user session keyring",
        .timeLimit(.minutes(10)))
    func userKeyringAttack() throws {
        try requireKeyctl()
        // Without a session keyring of its own (a container, su, cron): where an earlier coffer,
        // with --user-keyring, kept the key in the user session keyring, and anybody of this
        // user read it with `keyctl search @us … @s` and `keyctl pipe`.
        let bare = try KeyringThread(joining: false)
        defer { bare.stop() }
        let box = try Sandbox()
        try box.initVault()
        try box.set("svc", "acct", Array("user-keyring-\(UUID().uuidString)".utf8))
        let description = description(box)
        for arguments in [["unlock", "--user-keyring"], ["unlock", "--user-keyring", "--timeout", "24h"]] {
            let refused = try run(bare, box, arguments, passphraseFile: true)
            #expect(refused.status == Exit.usage && refused.err.contains("--user-keyring"), "\(refused)")
        }
        #expect(try !userSessionKeyringHolds(description))
        let attack = "k=$(keyctl search @us user \"$1\" @s) && keyctl pipe \"$k\""
        let outside = try fromAnotherSession(attack, [description])
        #expect(outside.status != 0 && outside.stdout.isEmpty, "\(outside)")
        let child = try run(
            bare, box, ["run", "--", "/bin/sh", "-c", attack + "; echo \"attack: $?\"", "sh", description],
            passphraseFile: true)
        #expect(child.status == Exit.ok && child.out.contains("attack: ") && !child.out.contains("attack: 0"), "\(child)")
    }

    @Test(
        "lock and lock --all, from a session keyring of its own, remove what an earlier coffer kept in the user session keyring",
        .timeLimit(.minutes(10)))
    func lockReachesTheUserSessionKeyring() throws {
        try requireKeyctl()
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        try box.initVault()

        // Named by the vault's id, as this coffer names keys: `lock` finds it.
        let byID = description(box)
        try keepInUserSessionKeyring(byID)
        #expect(try userSessionKeyringHolds(byID))
        let locked = try run(ring, box, ["lock"])
        #expect(locked.status == Exit.ok && locked.out.contains("locked") && locked.out.contains("user session keyring"), "\(locked)")
        #expect(try eventually { try !userSessionKeyringHolds(byID) }, "lock left the key in the user session keyring")

        // Named by the path, as an earlier coffer named keys: `lock` finds it too.
        let byPath = pathDescription(box.vault)
        try keepInUserSessionKeyring(byPath)
        #expect(try run(ring, box, ["lock"]).out.contains("locked"))
        #expect(try eventually { try !userSessionKeyringHolds(byPath) }, "lock left the path-named key")

        // lock --all: this session's keys and the user session keyring's.
        try keepInUserSessionKeyring(byPath)
        #expect(try run(ring, box, ["unlock"], passphraseFile: true).status == Exit.ok)
        let all = try run(ring, box, ["lock", "--all"])
        #expect(all.status == Exit.ok && all.out.contains("removed 2 keys"), "\(all)")
        #expect(all.out.contains("1 of them from the user session keyring"), "\(all)")
        #expect(try eventually { try !userSessionKeyringHolds(byPath) && isGone(try procKey(ring, box)) })
    }

    // MARK: - Keys follow the vault, not its path

    @Test("lock finds the key after the vault's directory was renamed, or reached through a retargeted symlink", .timeLimit(.minutes(10)))
    func lockFollowsTheVault() throws {
        let ring = try KeyringThread()
        defer { ring.stop() }
        let box = try Sandbox()
        let secret = Array("moved-\(UUID().uuidString)".utf8)
        func coffer(_ vault: String, _ arguments: [String], passphrase: Bool = false, stdin: [UInt8]? = nil) throws -> Run {
            let child = try ring.perform {
                try box.start(["--vault", vault] + arguments, stdin: stdin, vault: false, passphraseFile: passphrase)
            }
            return box.expectClean(child.wait())
        }
        let first = box.path + "/first", second = box.path + "/second", link = box.path + "/link"
        try FileManager.default.createDirectory(atPath: first, withIntermediateDirectories: false)
        #expect(try coffer(first + "/v.coffer", ["init"], passphrase: true).status == Exit.ok)
        #expect(try coffer(first + "/v.coffer", ["set", "svc", "acct"], passphrase: true, stdin: secret).status == Exit.ok)
        let description = description(vault: first + "/v.coffer")

        // A renamed directory: the key still opens the vault, and lock still finds it.
        #expect(try coffer(first + "/v.coffer", ["unlock"], passphrase: true).status == Exit.ok)
        try FileManager.default.moveItem(atPath: first, toPath: second)
        let moved = try coffer(second + "/v.coffer", ["get", "svc", "acct"])
        #expect(moved.status == Exit.ok && moved.printed(secret), "\(moved)")
        let locked = try coffer(second + "/v.coffer", ["lock"])
        #expect(locked.status == Exit.ok && locked.out.contains("locked"), "\(locked)")
        #expect(try eventually { isGone(try procKey(ring, description: description)) }, "the key is still kept")

        // A symlink retargeted to where the vault went.
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: second)
        #expect(try coffer(link + "/v.coffer", ["unlock"], passphrase: true).status == Exit.ok)
        try FileManager.default.moveItem(atPath: second, toPath: first)
        try FileManager.default.removeItem(atPath: link)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: first)
        let relocked = try coffer(link + "/v.coffer", ["lock"])
        #expect(relocked.status == Exit.ok && relocked.out.contains("locked"), "\(relocked)")
        #expect(try eventually { isGone(try procKey(ring, description: description)) }, "the key is still kept")

        // A path that now reaches another vault: not its key. That vault asks for its own
        // passphrase, and the first vault's key stays kept.
        #expect(try coffer(first + "/v.coffer", ["unlock"], passphrase: true).status == Exit.ok)
        try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: false)
        #expect(try coffer(second + "/v.coffer", ["init"], passphrase: true).status == Exit.ok)
        try FileManager.default.removeItem(atPath: link)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: second)
        let other = try coffer(link + "/v.coffer", ["list"])
        #expect(other.status == Exit.usage && other.err.contains("no passphrase given"), "\(other)")
        let notKept = try coffer(link + "/v.coffer", ["lock"])
        #expect(notKept.status == Exit.ok && notKept.out.contains("no key"), "\(notKept)")
        #expect(try procKey(ring, description: description) != nil)

        // A vault that is gone: which kept key was its cannot be told, and lock says so.
        let gone = try coffer(box.path + "/nowhere/v.coffer", ["lock"])
        #expect(gone.status == Exit.failure && gone.err.contains("lock --all"), "\(gone)")
        #expect(try procKey(ring, description: description) != nil)
    }
}

/// What a program other than coffer printed, and how it ended; its output is described by
/// size only (it may be a key the test failed to keep out of reach).
struct ProgramRun: CustomStringConvertible {
    var status: Int32
    var stdout: [UInt8]
    var stderr: [UInt8]
    var description: String {
        "exit \(status), \(stdout.count) bytes on stdout, stderr: \(String(decoding: stderr, as: UTF8.self))"
    }
}

/// Runs `path` with `arguments` from the calling thread (so in that thread's session keyring),
/// with standard input from /dev/null and an empty environment but PATH; killed after 30 s.
func runProgram(_ path: String, _ arguments: [String]) throws -> ProgramRun {
    let run = try Child(
        arguments, environment: ["PATH": "/usr/bin:/bin:/usr/sbin:/sbin"], stdin: nil, program: path, newSession: false
    ).wait()
    return ProgramRun(status: run.status, stdout: run.stdout, stderr: run.stderr)
}
