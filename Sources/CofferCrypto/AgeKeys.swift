#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// A public X25519 key in age's encoding (`age1…`, Bech32, lower case): what a machine or a
/// person hands out so that a vault can be opened by their ``X25519Identity``.
///
/// ```swift
/// let recipient = try X25519Recipient("age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p")
/// print(recipient)  // the same string
/// ```
///
/// The strings are age's own (`age-keygen` writes them), so people reuse the keys they have.
/// A vault is not an age file; only `coffer export --recipient` and `coffer import json` write
/// and read age v1 files (``AgeFile``), for exports (see SECURITY.md).
public struct X25519Recipient: Sendable, Hashable, CustomStringConvertible, LosslessStringConvertible {
    /// The 32-byte X25519 public key.
    public let publicKey: [UInt8]

    static let hrp: [UInt8] = Array("age".utf8)

    /// A recipient from its public key.
    /// - Throws: `.invalidLength` when `publicKey` is not 32 bytes.
    public init(publicKey: [UInt8]) throws {
        guard publicKey.count == X25519.keyLength else {
            throw CryptoError.invalidLength("an X25519 public key", expected: X25519.keyLength, actual: publicKey.count)
        }
        self.publicKey = publicKey
    }

    /// Parses `age1…`. Surrounding white space is ignored.
    /// - Throws: `.invalidParameter` for anything else: another prefix, upper or mixed case (age
    ///   refuses both), a bad checksum, or a key that is not 32 bytes.
    public init(parsing text: String) throws {
        let space: Set<UInt8> = [0x20, 0x09, 0x0d, 0x0a]
        let trimmed = Array(text.utf8).drop { space.contains($0) }.reversed().drop { space.contains($0) }.reversed()
        let decoded: (hrp: [UInt8], data: [UInt8])
        do {
            decoded = try Bech32.decode(Array(trimmed))
        } catch {
            throw CryptoError(code: .invalidParameter, message: "not an age recipient (age1…): \(Self.reason(error))")
        }
        guard decoded.hrp == Self.hrp else {
            throw CryptoError(code: .invalidParameter, message: "not an age recipient: it must start with age1, in lower case")
        }
        guard decoded.data.count == X25519.keyLength else {
            throw CryptoError(
                code: .invalidParameter,
                message: "not an X25519 age recipient: it holds \(decoded.data.count) bytes, not \(X25519.keyLength)")
        }
        self.publicKey = decoded.data
    }

    /// ``init(parsing:)``, `nil` when `description` is not a recipient.
    public init?(_ description: String) {
        guard let parsed = try? X25519Recipient(parsing: description) else { return nil }
        self = parsed
    }

    /// `age1…`.
    public var description: String {
        String(decoding: Bech32.encode(hrp: Self.hrp, data: publicKey), as: UTF8.self)
    }

    static func reason(_ failure: Bech32.Failure) -> String {
        switch failure {
        case .mixedCase: "it mixes upper and lower case"
        case .separator: "it has no Bech32 separator where one belongs"
        case .character: "it holds a character Bech32 does not use"
        case .checksum: "its checksum does not match (a character mistyped or missing?)"
        case .padding: "its last character has bits set that must be zero"
        }
    }
}

/// An X25519 secret key in age's encoding (`AGE-SECRET-KEY-1…`, Bech32, upper case), as
/// `age-keygen` writes it: what opens a vault's recipient key slot.
///
/// ```swift
/// let identity = try X25519Identity.generate()
/// print(identity.recipient)              // age1…: give this out
/// let file = try identity.fileContents() // age-keygen's format; store it 0600
/// ```
///
/// The secret stays in guarded memory (``SecureBytes``); `description`, `dump` and the debugger
/// show the recipient only.
public final class X25519Identity: Sendable, CustomStringConvertible, CustomReflectable {
    /// The 32-byte secret key.
    public let secretKey: SecureBytes
    /// The public half: what a vault is given to add a key slot for this identity.
    public let recipient: X25519Recipient

    static let hrp: [UInt8] = Array("AGE-SECRET-KEY-".utf8)

    /// The identity of a 32-byte secret key.
    /// - Throws: `.invalidLength` when `secretKey` is not 32 bytes.
    public init(secretKey: SecureBytes) throws {
        self.secretKey = secretKey
        self.recipient = try X25519Recipient(publicKey: try X25519.publicKey(for: secretKey))
    }

    /// A new random identity.
    public static func generate() throws -> X25519Identity {
        try X25519Identity(secretKey: try X25519.newSecretKey())
    }

    /// Parses one `AGE-SECRET-KEY-1…` (ASCII bytes; surrounding white space ignored).
    /// - Throws: `.invalidParameter` for anything else (the message never quotes it).
    public convenience init(parsing text: SecureBytes) throws {
        let key = try text.withUnsafeBytes { bytes -> SecureBytes in
            try Self.decode(Self.trimmed(bytes))
        }
        try self.init(secretKey: key)
    }

    /// Every identity in an identity file, as `age-keygen` writes one: lines of
    /// `AGE-SECRET-KEY-1…`; empty lines and lines starting with `#` (age-keygen's comments) are
    /// skipped.
    /// - Throws: `.invalidParameter` for a line that is neither (named by its number, never its
    ///   content), or a file with no identity at all.
    public static func parseFile(_ contents: SecureBytes) throws -> [X25519Identity] {
        var identities: [X25519Identity] = []
        try contents.withUnsafeBytes { bytes in
            var lineNumber = 0
            for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
                lineNumber += 1
                let content = trimmed(UnsafeRawBufferPointer(rebasing: line))
                if content.isEmpty || content.first == UInt8(ascii: "#") { continue }
                do {
                    identities.append(try X25519Identity(secretKey: try decode(content)))
                } catch let error as CryptoError {
                    throw CryptoError(code: error.code, message: "line \(lineNumber) of the identity file: \(error.message)")
                }
            }
        }
        guard !identities.isEmpty else {
            throw CryptoError(
                code: .invalidParameter, message: "the identity file holds no identity (a line AGE-SECRET-KEY-1…)")
        }
        return identities
    }

    /// `AGE-SECRET-KEY-1…` as ASCII bytes, in guarded memory.
    public func encoded() throws -> SecureBytes {
        var key = secretKey.withUnsafeBytes { Array($0) }
        defer { SecureMemory.zero(&key) }
        var text = Bech32.encode(hrp: Self.hrp, data: key)
        defer { SecureMemory.zero(&text) }
        return try SecureBytes(copying: text)
    }

    /// An identity file as `age-keygen` writes it (a creation comment, the public key, the
    /// secret), in guarded memory: `created` is the time written in the comment.
    public func fileContents(created: Date = Date()) throws -> SecureBytes {
        let stamp = created.ISO8601Format()
        var text = Array("# created: \(stamp)\n# public key: \(recipient)\n".utf8)
        text.reserveCapacity(text.count + 128)  // no reallocation leaves a copy of the secret behind
        defer { SecureMemory.zero(&text) }
        try encoded().withUnsafeBytes { text.append(contentsOf: $0) }
        text.append(UInt8(ascii: "\n"))
        return try SecureBytes(copying: text)
    }

    /// `X25519Identity(age1…)`: the recipient, never the secret.
    public var description: String { "X25519Identity(\(recipient))" }

    /// What `dump`, `Mirror` and debuggers show: the description, never the secret.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .class) }

    private static func trimmed(_ bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        var start = 0
        var end = bytes.count
        let space: Set<UInt8> = [0x20, 0x09, 0x0d, 0x0a]
        while start < end, space.contains(bytes[start]) { start += 1 }
        while end > start, space.contains(bytes[end - 1]) { end -= 1 }
        return UnsafeRawBufferPointer(rebasing: bytes[start..<end])
    }

    private static func decode(_ text: UnsafeRawBufferPointer) throws -> SecureBytes {
        var copy = Array(text)
        defer { SecureMemory.zero(&copy) }
        var decoded: (hrp: [UInt8], data: [UInt8])
        do {
            decoded = try Bech32.decode(copy)
        } catch {
            throw CryptoError(
                code: .invalidParameter, message: "not an age identity (AGE-SECRET-KEY-1…): \(X25519Recipient.reason(error))")
        }
        defer { SecureMemory.zero(&decoded.data) }
        guard decoded.hrp == hrp else {
            throw CryptoError(
                code: .invalidParameter, message: "not an age identity: it must start with AGE-SECRET-KEY-1, in upper case")
        }
        guard decoded.data.count == X25519.keyLength else {
            throw CryptoError(
                code: .invalidParameter,
                message: "not an X25519 age identity: it holds \(decoded.data.count) bytes, not \(X25519.keyLength)")
        }
        return try SecureBytes(copying: decoded.data)
    }
}
