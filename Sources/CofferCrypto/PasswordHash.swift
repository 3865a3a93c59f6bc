internal import CSodium

#if canImport(FoundationEssentials)
    package import FoundationEssentials
#else
    package import Foundation
#endif
#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Argon2id password hashing (libsodium `crypto_pwhash`, `ALG_ARGON2ID13`, one lane).
///
/// ```swift
/// let salt = SecureRandom.bytes(count: PasswordHash.saltLength)
/// let kek = try PasswordHash.deriveKey(
///     length: 32, passphrase: try SecureBytes(utf8: entered), salt: salt, parameters: .moderate)
/// ```
package enum PasswordHash: Sendable {
    /// Salt length in bytes (16, `crypto_pwhash_SALTBYTES`).
    package static let saltLength = Int(crypto_pwhash_argon2id_saltbytes())
    /// Shortest key ``deriveKey(length:passphrase:salt:parameters:)`` produces (16 bytes).
    package static let minimumKeyLength = Int(crypto_pwhash_argon2id_bytes_min())
    /// Longest key it produces (2³²−1 bytes, `crypto_pwhash_BYTES_MAX` on 64-bit).
    package static let maximumKeyLength = sizeLimit(crypto_pwhash_argon2id_bytes_max())
    private static let maximumPassphraseLength = sizeLimit(crypto_pwhash_argon2id_passwd_max())
    /// Size of libsodium's encoded-string buffer, terminating NUL included (128).
    private static let encodedBufferLength = Int(crypto_pwhash_argon2id_strbytes())

    /// Derives a key from a passphrase with Argon2id, straight into guarded memory.
    ///
    /// - Parameters:
    ///   - length: Key length in bytes, ``minimumKeyLength`` ... ``maximumKeyLength``.
    ///   - passphrase: The passphrase bytes (any bytes; UTF-8 for typed passphrases).
    ///   - salt: Exactly ``saltLength`` random bytes, stored next to the parameters.
    ///   - parameters: Cost parameters; validated first (see ``Argon2idParameters/validated()``).
    /// - Throws: `.invalidParameter` for parameters outside the accepted range (before any
    ///   allocation), `.invalidLength` for a wrong salt or key length, `.outOfMemory` if the
    ///   memory Argon2id needs cannot be allocated, `.failed` for any other libsodium failure.
    package static func deriveKey(
        length: Int,
        passphrase: SecureBytes,
        salt: UnsafeRawBufferPointer,
        parameters: Argon2idParameters
    ) throws -> SecureBytes {
        try Sodium.initialize()
        let parameters = try parameters.validated()
        guard salt.count == saltLength else {
            throw CryptoError.invalidLength("Argon2id salt", expected: saltLength, actual: salt.count)
        }
        guard (minimumKeyLength...maximumKeyLength).contains(length) else {
            throw CryptoError.invalidLength("Argon2id output", in: minimumKeyLength...maximumKeyLength, actual: length)
        }
        guard passphrase.count <= maximumPassphraseLength else {
            throw CryptoError.invalidLength(
                "Argon2id passphrase", in: 0...maximumPassphraseLength, actual: passphrase.count)
        }
        guard let memLimit = Int(exactly: parameters.memLimitBytes) else {
            throw CryptoError(code: .invalidParameter, message: "Argon2id memLimitBytes does not fit in size_t")
        }
        return try SecureBytes(count: length) { output in
            let (status, error) = withPassphraseChars(passphrase) { passphraseChars, passphraseLength in
                withNonNullBytes(salt) { saltStart in
                    withNonNullMutableBytes(output) { outputStart in
                        errno = 0
                        let status = crypto_pwhash(
                            outputStart, UInt64(output.count), passphraseChars, passphraseLength,
                            saltStart, parameters.opsLimit, memLimit, crypto_pwhash_alg_argon2id13())
                        return (status, errno)
                    }
                }
            }
            guard status == 0 else {
                if error == ENOMEM {
                    throw CryptoError(
                        code: .outOfMemory,
                        message: "Argon2id could not allocate \(parameters.memLimitBytes) bytes")
                }
                throw CryptoError.failed("crypto_pwhash (Argon2id)")
            }
        }
    }

    /// Derives a key from a passphrase with Argon2id; `salt` as any contiguous bytes.
    ///
    /// - Throws: The same errors as the `UnsafeRawBufferPointer` overload.
    package static func deriveKey<Salt: ContiguousBytes>(
        length: Int,
        passphrase: SecureBytes,
        salt: Salt,
        parameters: Argon2idParameters
    ) throws -> SecureBytes {
        try salt.withUnsafeBytes { salt in
            try deriveKey(length: length, passphrase: passphrase, salt: salt, parameters: parameters)
        }
    }

    /// Checks a passphrase against an Argon2id encoded string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`).
    ///
    /// Uses `crypto_pwhash_argon2id_str_verify`, which also accepts strings with more than one lane
    /// from other Argon2 implementations. The string's costs are checked against
    /// ``Argon2idParameters/maximumAccepted`` first, so a hostile string cannot demand unbounded work.
    ///
    /// - Returns: `true` if the passphrase matches; `false` if it does not, or if the string is not a
    ///   well-formed Argon2id v1.3 string that fits libsodium's 128-byte buffer.
    /// - Throws: `.invalidParameter` if the string's `m` or `t` lie outside
    ///   ``Argon2idParameters/minimum`` ... ``Argon2idParameters/maximumAccepted``; `.outOfMemory`
    ///   if Argon2id's memory cannot be allocated.
    package static func verify(encoded: String, passphrase: SecureBytes) throws -> Bool {
        try Sodium.initialize()
        let encodedBytes = Array(encoded.utf8)
        guard encodedBytes.count < encodedBufferLength, !encodedBytes.contains(0),
            let costs = EncodedArgon2idCosts(encodedBytes)
        else {
            return false
        }
        _ = try Argon2idParameters(opsLimit: costs.passes, memLimitBytes: costs.memoryKiB * 1024).validated()
        guard passphrase.count <= maximumPassphraseLength else {
            return false
        }
        // libsodium declares the string as `char[STRBYTES]`: hand it a full, NUL-padded buffer.
        var buffer = [CChar](repeating: 0, count: encodedBufferLength)
        for (index, byte) in encodedBytes.enumerated() {
            buffer[index] = CChar(bitPattern: byte)
        }
        let (status, error) = withPassphraseChars(passphrase) { passphraseChars, passphraseLength in
            errno = 0
            let status = crypto_pwhash_argon2id_str_verify(buffer, passphraseChars, passphraseLength)
            return (status, errno)
        }
        if status == 0 {
            return true
        }
        if error == ENOMEM {
            throw CryptoError(code: .outOfMemory, message: "Argon2id could not allocate memory to verify")
        }
        return false
    }

    /// Calls `body` with the passphrase as libsodium's `const char *` (never null, even when
    /// empty: see ``withNonNullBytes(_:_:)``) and its length in bytes.
    private static func withPassphraseChars<R>(
        _ passphrase: SecureBytes, _ body: (UnsafePointer<CChar>, UInt64) throws -> R
    ) rethrows -> R {
        try passphrase.withUnsafeBytes { bytes in
            try withNonNullBytes(bytes) { start in
                try UnsafeRawPointer(start).withMemoryRebound(to: CChar.self, capacity: max(bytes.count, 1)) {
                    try body($0, UInt64(bytes.count))
                }
            }
        }
    }
}

/// The cost fields of `$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$…`, parsed strictly.
///
/// Only used to bound the work before libsodium runs; libsodium does the full parse and rejects
/// anything else malformed.
struct EncodedArgon2idCosts {
    var memoryKiB: UInt64
    var passes: UInt64
    var lanes: UInt64

    init?(_ bytes: [UInt8]) {
        var rest = bytes[...]
        func expect(_ literal: String) -> Bool {
            let literal = Array(literal.utf8)
            guard rest.starts(with: literal) else {
                return false
            }
            rest = rest.dropFirst(literal.count)
            return true
        }
        func number() -> UInt64? {
            let digits = rest.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
            guard (1...10).contains(digits.count) else {
                return nil
            }
            rest = rest.dropFirst(digits.count)
            return digits.reduce(UInt64(0)) { $0 * 10 + UInt64($1 - UInt8(ascii: "0")) }
        }
        guard expect("$argon2id$v=19$m="), let memoryKiB = number(),
            expect(",t="), let passes = number(),
            expect(",p="), let lanes = number(),
            expect("$")
        else {
            return nil
        }
        self.memoryKiB = memoryKiB
        self.passes = passes
        self.lanes = lanes
    }
}
