import CKeyring
import Coffer
import CofferCrypto
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
        /// Whether the session keyring is the user's session keyring: this process had no session
        /// keyring of its own (no login session set one up), so the key is shared by every
        /// process of this user without one.
        var isUserSessionKeyring: Bool
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

    /// The description of the key kept for the file vault at `url`: `coffer:` and its real path
    /// (links resolved), so every path that names the same file finds the same key. A vault file
    /// that no longer exists is named by its directory's real path and its name.
    static func description(forFile url: URL) throws -> String {
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
        return try checked(descriptionPrefix + real)
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

    /// Stores `payload` as the "user" key `description` in the session keyring (replacing the
    /// payload of one already there), makes it expire `seconds` from now and gives its possessor
    /// alone any permission. A key whose timeout or permissions cannot be set is removed again.
    ///
    /// A process without a session keyring of its own (no login session made one: a container,
    /// `su`, cron) is refused unless `userKeyring`: the kernel would otherwise give `add_key` a
    /// new anonymous session keyring that ends with this process (the key with it, while
    /// `unlock` said it was kept), and the one that lasts, the user session keyring, is shared by
    /// every process of this user without a session keyring, in any session.
    static func store(_ payload: SecureBytes, description: String, seconds: UInt32, userKeyring: Bool) throws
        -> Stored
    {
        // Asked without "create": a process without a session keyring is given the user session
        // keyring here, so the two ids compare equal exactly in that case.
        let keyring = coffer_key_keyring_id(COFFER_KEY_SPEC_SESSION_KEYRING, 0)
        guard keyring >= 0 else { throw failure("cannot find the session keyring") }
        let userSession = coffer_key_keyring_id(COFFER_KEY_SPEC_USER_SESSION_KEYRING, 0)
        let isUserSession = userSession >= 0 && userSession == keyring
        if isUserSession && !userKeyring {
            throw CLIError(
                .failure,
                "this process has no session keyring of its own (no login session set one up: a container, su or "
                    + "cron), so the key could only be kept in the user session keyring, which every process of this "
                    + "user without a session keyring shares, in any session: start a session keyring first "
                    + "(`keyctl new_session`, or a login through pam_keyinit), or pass --user-keyring to keep it there")
        }
        let target = isUserSession ? COFFER_KEY_SPEC_USER_SESSION_KEYRING : COFFER_KEY_SPEC_SESSION_KEYRING
        // No signal may end this process between adding the key and setting its timeout: a key
        // left without one would stay for the whole session. Blocked for the three calls.
        var all = sigset_t()
        var previous = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let serial = payload.withUnsafeBytes { bytes in
            coffer_key_add_user(description, bytes.baseAddress, bytes.count, target)
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
        return Stored(serial: serial, keyring: keyring, isUserSessionKeyring: isUserSession)
    }

    /// The serial of the "user" key `description` this process's session keyring holds, or
    /// `nil` when there is none (or it expired, was revoked, or there is no kernel keyring).
    static func find(_ description: String) -> Int32? {
        let serial = coffer_key_search_user(COFFER_KEY_SPEC_SESSION_KEYRING, description)
        return serial >= 0 ? serial : nil
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

    /// Every key coffer keeps in the session keyring: serials and descriptions.
    static func cofferKeys() throws -> [(serial: Int32, description: String)] {
        var capacity = 64
        var serials: [Int32] = []
        while true {
            var buffer = [Int32](repeating: 0, count: capacity)
            let length = buffer.withUnsafeMutableBytes {
                coffer_key_read(COFFER_KEY_SPEC_SESSION_KEYRING, $0.baseAddress, $0.count)
            }
            if length < 0 {
                if errno == ENOKEY { return [] }  // no session keyring: nothing kept
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
