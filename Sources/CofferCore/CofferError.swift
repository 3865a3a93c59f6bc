/// The error every Coffer module throws.
///
/// Match on ``code`` to react to a kind of failure; show ``description`` to a person. The
/// message is written by Coffer itself: it names paths, byte offsets and errno values, never a
/// stored value, a key's secret or a passphrase.
///
/// ```swift
/// do { _ = try vault.string(service: "api", account: "me") }
/// catch let error as CofferError where error.code == .wrongKey { askAgain() }
/// ```
public struct CofferError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What kind of failure this is. New codes may be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: String, Hashable, Sendable {
            case notFound = "not found"
            case alreadyExists = "already exists"
            case wrongKey = "wrong passphrase or key"
            case corrupted = "authentication failed or data corrupted"
            case unsupportedVersion = "unsupported format version"
            case locked = "locked"
            case busy = "busy"
            case io = "I/O error"
            case invalidArgument = "invalid argument"
            case encoding = "encoding failed"
            case decoding = "decoding failed"
            case cycle = "dependency cycle"
            case closed = "closed"
            case crypto = "cryptography failure"
            case limitExceeded = "limit exceeded"
            case rolledBack = "rolled back"
        }
        private let wrapped: Wrapped
        private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

        /// The item, key or file does not exist.
        public static let notFound = Code(.notFound)
        /// Creating something that must not already exist (a vault file, an item) found it there.
        public static let alreadyExists = Code(.alreadyExists)
        /// The passphrase or key does not open this vault. The file itself is intact.
        public static let wrongKey = Code(.wrongKey)
        /// A stored record is authentic but older than one this instance has already read: the
        /// database was rolled back. The server's own transaction counter did not go back with it
        /// (a restore from a backup or a failover, which Coffer accepts by itself, moves it back
        /// too), so this was done by someone with write access to the tables, or by a logical
        /// restore into a running cluster. `PostgresVault.acceptRollback()` (or a restart) accepts
        /// it once an operator has said it was theirs (SECURITY.md, "The fleet store").
        public static let rolledBack = Code(.rolledBack)
        /// Bytes failed a checksum or an authentication tag: the file was damaged or tampered with.
        public static let corrupted = Code(.corrupted)
        /// The file was written by a newer (or unknown) format version.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// The vault is locked: unlock it before reading or writing secrets.
        public static let locked = Code(.locked)
        /// Another process held the file's lock past the timeout.
        public static let busy = Code(.busy)
        /// A system call failed; ``CofferError/errno`` holds its errno.
        public static let io = Code(.io)
        /// A caller passed a value Coffer cannot accept (a length, a parameter, a name).
        public static let invalidArgument = Code(.invalidArgument)
        /// A value could not be encoded for storage.
        public static let encoding = Code(.encoding)
        /// Stored bytes could not be decoded as the requested type.
        public static let decoding = Code(.decoding)
        /// A computed value depends on itself.
        public static let cycle = Code(.cycle)
        /// The store was closed.
        public static let closed = Code(.closed)
        /// A cryptographic primitive failed for a reason other than authentication.
        public static let crypto = Code(.crypto)
        /// A file asks for more than one of Coffer's documented ceilings: a vault key slot's
        /// key-derivation cost (above `Vault.defaultKDFLimit` unless raised), a key file's size.
        /// Nothing was changed, and it says nothing about whether a passphrase or key is right.
        /// (A name that is too long is ``invalidArgument``, like any key a store refuses.)
        public static let limitExceeded = Code(.limitExceeded)

        public var description: String { wrapped.rawValue }
    }

    // Read-only to users (`package(set)`): Coffer's own modules add a path, an offset or a
    // hint to an error on its way up; a caller reads what Coffer said and cannot rewrite it.

    /// What kind of failure this is.
    public package(set) var code: Code
    /// A sentence a person can act on. Never contains a secret.
    public package(set) var message: String
    /// The file involved, when there is one.
    public package(set) var path: String?
    /// The errno of the failed system call, for ``Code/io`` and some ``Code/busy`` errors.
    public package(set) var errno: Int32?
    /// The byte offset in the file of a damaged record, when known.
    public package(set) var offset: Int64?
    /// The underlying error, when this one wraps another.
    public package(set) var cause: (any Error & Sendable)?

    public init(
        _ code: Code,
        _ message: String,
        path: String? = nil,
        errno: Int32? = nil,
        offset: Int64? = nil,
        cause: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
        self.offset = offset
        self.cause = cause
    }

    /// An I/O error for a failed system call, with the errno's name and text.
    public static func io(_ operation: String, path: String?, errno: Int32) -> CofferError {
        CofferError(.io, "\(operation) failed: \(CofferError.errnoText(errno))", path: path, errno: errno)
    }

    /// `ENOSPC (No space left on device)` for an errno value.
    package static func errnoText(_ value: Int32) -> String {
        let text = errnoDescription(value)
        return "errno \(value) (\(text))"
    }

    public var description: String {
        var text = "\(message)"
        if let path { text += " [path: \(path)]" }
        if let offset { text += " [at byte \(offset)]" }
        if let cause { text += " [cause: \(String(describing: cause))]" }
        return text
    }

    public var debugDescription: String { "CofferError(\(code): \(description))" }
}

extension CofferError.Code {
    /// Lets a `catch` clause match a code directly: `catch CofferError.Code.notFound { … }`.
    public static func ~= (code: CofferError.Code, error: any Error) -> Bool {
        (error as? CofferError)?.code == code
    }
}
