import CKeyring
import Coffer
import CofferCrypto
import CofferInterchange
import CofferVault
import Foundation
#if Postgres
import CofferPostgres
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The Linux kernel's session keyring (keyrings(7)), where `coffer unlock` keeps a vault's
/// session key (``VaultSessionKey``: a slot's key-encryption key and salt) and `coffer lock`
/// removes it.
///
/// Each key is a "user" key described `coffer:` + the vault's identity (``description(forFile:)``),
/// with the kernel's own timeout and permissions for its possessor only: the processes whose
/// session keyring holds it (this login session's), and root. Nothing else of this user (no
/// user, group or other bit) can view, read or change it.
///
/// Only a session keyring of the process's own is used, never the user session keyring: every
/// process of the user can reach that one (KEY_SPEC_USER_SESSION_KEYRING, or by linking it into
/// its own session keyring), and the kernel counts a key found through it as possessed, so no
/// permission keeps a key there from another session, or from a command `coffer run` starts
/// (`keyctl search @us user coffer:… @s` then `keyctl pipe`). A key without the possessor's
/// search permission cannot be possessed at all, so not read by coffer either. `coffer lock`
/// still removes what an earlier coffer kept there.
enum SessionKeyring {
    /// What every description of a key coffer keeps begins with.
    static let descriptionPrefix = "coffer:"

    /// The kernel refuses a description of 4,096 bytes or more.
    static let maximumDescriptionLength = 4095

    /// The largest payload read back: a session key is a few dozen bytes.
    static let maximumPayload = 4096

    /// Where a key was stored.
    struct Stored {
        /// The key's serial number (as /proc/keys shows it, in hexadecimal).
        var serial: Int32
        /// The session keyring's serial.
        var keyring: Int32
    }

    /// What `coffer lock` removed: from this process's session keyring, and from the user
    /// session keyring (where an earlier coffer kept keys with `--user-keyring`).
    struct Removed {
        var session = 0
        var userSession = 0
        var total: Int { session + userSession }
    }

    /// A failed system call, named, with the kernel's reason.
    private static func failure(_ what: String, _ code: Int32 = errno) -> CLIError {
        let reason = String(cString: strerror(code))
        if code == ENOSYS {
            return CLIError(.failure, "\(what): this system has no kernel keyring (\(reason))")
        }
        if code == EDQUOT {
            return CLIError(.failure, "\(what): the kernel's key quota of this user is full (\(reason))")
        }
        return CLIError(.failure, "\(what): \(reason)")
    }

    /// What to do in a process without a session keyring of its own.
    static let startASessionKeyring =
        "start a session keyring first (`keyctl session` starts a shell in a new one, `keyctl new_session` gives "
        + "this shell one; both are in keyutils), or log in through pam_keyinit, then unlock"

    /// The description of the key kept for the file vault at `url`: `coffer:vault:` and the
    /// random id in its header (``Vault/storedID(at:fileSystem:)``), so every path that reaches
    /// the file (a symlinked or renamed directory) finds the same key, and a path that now
    /// reaches another vault does not. A copy of the file shares the id, and so the key (which
    /// opens it as it opens the original, as long as their key slots are the same).
    /// - Throws: when there is no vault file at `url`, or its header cannot be read.
    static func description(forFile url: URL) throws -> String {
        let id = try Vault.storedID(at: url)
        return try checked(descriptionPrefix + "vault:" + id.map { String(format: "%02x", $0) }.joined())
    }

    /// The description an earlier coffer gave the key of the file vault at `url`: `coffer:` and
    /// its real path. `coffer lock` removes such a key too; nothing else uses it.
    static func pathDescription(forFile url: URL) -> String? {
        let path = url.path
        let real: String
        if let resolved = realpath(path, nil) {
            real = String(cString: resolved)
            free(resolved)
        } else if let directory = realpath(url.deletingLastPathComponent().path, nil) {
            real = (String(cString: directory) as NSString).appendingPathComponent(url.lastPathComponent)
            free(directory)
        } else {
            real = url.standardizedFileURL.path
        }
        return try? checked(descriptionPrefix + real)
    }

    #if Postgres
    /// The description of the key kept for a PostgreSQL vault: `coffer:postgres:` and the
    /// user, server, database, schema and vault name (never a password).
    ///
    /// Each part is percent-encoded (every byte but letters, digits, `-`, `.` and `_`), so no
    /// two different vaults share a description: a schema `s?vault=x` with vault `y` and a schema
    /// `s` with vault `x?vault=y` would otherwise both read `…#s?vault=x?vault=y`.
    static func description(forStore configuration: PostgresConfiguration, vault: String) throws -> String {
        func part(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
                    out.append(Character(Unicode.Scalar(byte)))
                default: out += String(format: "%%%02X", byte)
                }
            }
            return out
        }
        let server =
            "\(part(configuration.user))@\(part(configuration.host)):\(configuration.port)/"
            + part(configuration.database ?? configuration.user)
        return try checked(
            descriptionPrefix + "postgres:" + server + "#" + part(configuration.schema) + "?vault=" + part(vault))
    }
    #endif

    private static func checked(_ description: String) throws -> String {
        guard description.utf8.count <= maximumDescriptionLength, !description.utf8.contains(0) else {
            throw CLIError.usage(
                "the vault's name is too long for a kernel key's description (at most \(maximumDescriptionLength) bytes)")
        }
        return description
    }

    /// Whether this process has a session keyring of its own (one a login session, `keyctl
    /// session` or `keyctl new_session` set up), rather than only the user session keyring
    /// the kernel gives a process without one.
    static func hasSessionKeyringOfItsOwn() -> Bool {
        // Asked without "create": a process without a session keyring is given the user session
        // keyring here, so the two ids compare equal exactly in that case.
        let keyring = coffer_key_keyring_id(COFFER_KEY_SPEC_SESSION_KEYRING, 0)
        guard keyring >= 0 else { return false }
        let userSession = coffer_key_keyring_id(COFFER_KEY_SPEC_USER_SESSION_KEYRING, 0)
        return !(userSession >= 0 && userSession == keyring)
    }

    /// The serial of this process's own session keyring; refuses (see ``store(_:description:seconds:)``)
    /// a process without one.
    @discardableResult
    static func checkSessionKeyring() throws -> Int32 {
        let keyring = coffer_key_keyring_id(COFFER_KEY_SPEC_SESSION_KEYRING, 0)
        guard keyring >= 0 else { throw failure("cannot find the session keyring") }
        guard hasSessionKeyringOfItsOwn() else {
            throw CLIError(
                .failure,
                "this process has no session keyring of its own (no login session set one up: a container, su or "
                    + "cron), and coffer keeps no key in the user session keyring it would get instead: every "
                    + "process of this user, in any session, can read a key there, whatever its permissions; "
                    + startASessionKeyring)
        }
        return keyring
    }

    /// Stores `payload` as the "user" key `description` in the session keyring (replacing the
    /// payload of one already there), makes it expire `seconds` from now and gives its possessor
    /// alone any permission. A key whose timeout or permissions cannot be set is removed again.
    ///
    /// A process without a session keyring of its own (no login session made one: a container,
    /// `su`, cron) is refused: the kernel would otherwise put the key in the user session keyring,
    /// where every process of this user can read it (see ``SessionKeyring``), or, asked to
    /// create one, in a new anonymous session keyring that ends with this process (the key with
    /// it, while `unlock` said it was kept).
    static func store(_ payload: SecureBytes, description: String, seconds: UInt32) throws -> Stored {
        let keyring = try checkSessionKeyring()
        // No signal may end this process between adding the key and setting its timeout: a key
        // left without one would stay for the whole session. Blocked for the three calls.
        var all = sigset_t()
        var previous = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let serial = payload.withUnsafeBytes { bytes in
            coffer_key_add_user(description, bytes.baseAddress, bytes.count, COFFER_KEY_SPEC_SESSION_KEYRING)
        }
        guard serial >= 0 else { throw failure("cannot add the key to the session keyring") }
        if coffer_key_set_permissions(serial, COFFER_KEY_POSSESSOR_ONLY) != 0 {
            let error = failure("cannot restrict the key's permissions to its possessor")
            _ = coffer_key_invalidate(serial)
            throw error
        }
        if coffer_key_set_timeout(serial, seconds) != 0 {
            let error = failure("cannot set the key's timeout")
            _ = coffer_key_invalidate(serial)
            throw error
        }
        return Stored(serial: serial, keyring: keyring)
    }

    /// The serial of the "user" key `description` this process's own session keyring holds,
    /// or `nil` when there is none (or it expired, was revoked, or there is no kernel keyring),
    /// and in a process without a session keyring of its own: a key in the user session keyring
    /// (an earlier coffer's, or one anybody of this user put there) is not used.
    static func find(_ description: String) -> Int32? {
        guard hasSessionKeyringOfItsOwn() else { return nil }
        let serial = coffer_key_search_user(COFFER_KEY_SPEC_SESSION_KEYRING, description)
        return serial >= 0 ? serial : nil
    }

    /// Removes every key described by one of `descriptions`: the one this process's own session
    /// keyring holds, and one an earlier coffer kept in the user session keyring.
    static func removeKept(_ descriptions: [String]) throws -> Removed {
        var removed = Removed()
        for description in descriptions {
            if let serial = find(description) {
                try remove(serial)
                removed.session += 1
            }
        }
        removed.userSession = try inUserSessionKeyring {
            var count = 0
            for description in descriptions {
                // The thread's session keyring holds only the user session keyring.
                let serial = coffer_key_search_user(COFFER_KEY_SPEC_SESSION_KEYRING, description)
                guard serial >= 0 else { continue }
                try remove(serial)
                count += 1
            }
            return count
        }
        return removed
    }

    /// Removes every key coffer keeps: in this process's own session keyring, and those an
    /// earlier coffer kept in the user session keyring.
    static func removeAllKept() throws -> Removed {
        var removed = Removed()
        if hasSessionKeyringOfItsOwn() {
            for key in try cofferKeys() {
                try remove(key.serial)
                removed.session += 1
            }
        }
        removed.userSession = try inUserSessionKeyring {
            let keys = try cofferKeys(in: COFFER_KEY_SPEC_USER_SESSION_KEYRING)
            for key in keys { try remove(key.serial) }
            return keys.count
        }
        return removed
    }

    /// Runs `body` on a thread of its own that joins a new anonymous session keyring and links
    /// the user session keyring into it, and returns what `body` returned. There the keys of the
    /// user session keyring are possessed, so possessor-only keys an earlier coffer kept in it
    /// can be described and invalidated; from a login session's own keyring they cannot (the
    /// kernel looks in the user session keyring only for a process without a session keyring).
    /// The thread's keyring, and that link, go with the thread: this process's keyrings, and
    /// the login session's, are not touched. Without kernel keyrings, `body` is not run: 0.
    private static func inUserSessionKeyring(_ body: @escaping @Sendable () throws -> Int) throws -> Int {
        // @unchecked Sendable: `result` is written by the thread before `done` is signalled, and
        // read only after `done` was waited for.
        final class Outcome: @unchecked Sendable { var result: Result<Int, any Error> = .success(0) }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            outcome.result = Result {
                guard coffer_key_join_session(nil) >= 0 else {
                    if errno == ENOSYS { return 0 }
                    throw failure("cannot start a keyring to reach the user session keyring")
                }
                let userSession = coffer_key_keyring_id(COFFER_KEY_SPEC_USER_SESSION_KEYRING, 0)
                guard userSession >= 0 else {
                    if errno == ENOKEY { return 0 }
                    throw failure("cannot find the user session keyring")
                }
                guard coffer_key_link(userSession, COFFER_KEY_SPEC_SESSION_KEYRING) == 0 else {
                    throw failure("cannot reach the user session keyring")
                }
                return try body()
            }
            done.signal()
        }
        thread.start()
        // The thread makes a few system calls and ends; no deadline is needed for it.
        done.wait()
        return try outcome.result.get()
    }

    /// The payload of key `serial`, in guarded memory; the buffer the kernel wrote it to is
    /// wiped before this returns.
    static func read(_ serial: Int32) throws -> SecureBytes {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maximumPayload, alignment: 16)
        defer {
            SecureMemory.zero(buffer)
            buffer.deallocate()
        }
        let length = coffer_key_read(serial, buffer.baseAddress, buffer.count)
        guard length >= 0 else { throw failure("cannot read the kept key") }
        guard length <= buffer.count else {
            throw CLIError(.failure, "the kept key is larger (\(length) bytes) than any key coffer keeps")
        }
        return try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: buffer[..<Int(length)]))
    }

    /// Removes key `serial` at once (KEYCTL_INVALIDATE: unusable from now on, unlinked from
    /// every keyring by the kernel's collector soon after).
    static func remove(_ serial: Int32) throws {
        guard coffer_key_invalidate(serial) == 0 else { throw failure("cannot remove the kept key") }
    }

    /// Every key coffer keeps in the session keyring (the user session keyring, in a process
    /// without one of its own): serials and descriptions.
    static func cofferKeys() throws -> [(serial: Int32, description: String)] {
        try cofferKeys(in: COFFER_KEY_SPEC_SESSION_KEYRING)
    }

    /// Every key of coffer's that `keyring` (a special keyring id) holds itself.
    private static func cofferKeys(in keyring: Int32) throws -> [(serial: Int32, description: String)] {
        var capacity = 64
        var serials: [Int32] = []
        while true {
            var buffer = [Int32](repeating: 0, count: capacity)
            let length = buffer.withUnsafeMutableBytes {
                coffer_key_read(keyring, $0.baseAddress, $0.count)
            }
            if length < 0 {
                if errno == ENOKEY { return [] }  // no such keyring: nothing kept
                throw failure("cannot list the session keyring")
            }
            let count = Int(length) / MemoryLayout<Int32>.size
            if count <= capacity {
                serials = Array(buffer[..<count])
                break
            }
            capacity = count
        }
        return serials.compactMap { serial in
            guard let (type, description) = describe(serial), type == "user",
                description.hasPrefix(descriptionPrefix)
            else { return nil }
            return (serial, description)
        }
    }

    /// The type and description of key `serial`, or `nil` when it cannot be viewed.
    private static func describe(_ serial: Int32) -> (String, String)? {
        var buffer = [CChar](repeating: 0, count: maximumDescriptionLength + 128)
        let length = buffer.withUnsafeMutableBufferPointer { coffer_key_describe(serial, $0.baseAddress, $0.count) }
        guard length > 0, length <= buffer.count else { return nil }
        // "type;uid;gid;perm;description": the description may itself hold ';'.
        let text = String(decoding: buffer[..<(Int(length) - 1)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let fields = text.split(separator: ";", maxSplits: 4, omittingEmptySubsequences: false)
        guard fields.count == 5 else { return nil }
        return (String(fields[0]), String(fields[4]))
    }
}

/// A session timeout: `30s`, `15m`, `2h` (a number alone is seconds), from 1 second to one day.
enum SessionTimeout {
    /// The longest a key is kept: one day (a login session's span; `coffer unlock` again renews it).
    static let maximumSeconds: UInt32 = 86_400
    /// The default: `15m`.
    static let standard = "15m"

    /// Parses `30s`, `15m`, `2h` or `90` into seconds; refuses 0, a negative value and more than
    /// one day with a usage error.
    static func parse(_ text: String) throws -> UInt32 {
        let shown = quotedName(text)
        if text.hasPrefix("-") { throw CLIError.usage("--timeout must be longer than 0, got \(shown)") }
        var digits = Substring(text)
        var unit: UInt64 = 1
        switch text.last {
        case "s": digits = digits.dropLast()
        case "m":
            digits = digits.dropLast()
            unit = 60
        case "h":
            digits = digits.dropLast()
            unit = 3600
        default: break
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let count = UInt64(digits) else {
            throw CLIError.usage("--timeout takes a duration such as 30s, 15m or 2h, got \(shown)")
        }
        guard count > 0 else { throw CLIError.usage("--timeout must be longer than 0, got \(shown)") }
        let (seconds, overflow) = count.multipliedReportingOverflow(by: unit)
        guard !overflow, seconds <= UInt64(maximumSeconds) else {
            throw CLIError.usage("--timeout must be at most 24h (one day), got \(shown)")
        }
        return UInt32(seconds)
    }

    /// `seconds` as `2h`, `15m` or `90s`.
    static func describe(_ seconds: UInt32) -> String {
        if seconds % 3600 == 0 { return "\(seconds / 3600)h" }
        if seconds % 60 == 0 { return "\(seconds / 60)m" }
        return "\(seconds)s"
    }
}
