internal import CSodium

/// Subkeys from a master key with libsodium `crypto_kdf` (BLAKE2b, keyed with the master key).
///
/// One master key yields independent subkeys per purpose: an 8-byte context names the purpose and a
/// 64-bit id numbers keys within it. Knowing a subkey reveals nothing about the master key or others.
///
/// ```swift
/// let recordKey = try KeyDerivation.deriveSubkey(from: master, id: 1, context: "cofrrec1", length: 32)
/// ```
package enum KeyDerivation: Sendable {
    /// Context length in bytes (8, `crypto_kdf_CONTEXTBYTES`).
    package static let contextLength = Int(crypto_kdf_contextbytes())
    /// Master key length in bytes (32, `crypto_kdf_KEYBYTES`).
    package static let masterKeyLength = Int(crypto_kdf_keybytes())
    /// Shortest subkey (16 bytes, `crypto_kdf_BYTES_MIN`).
    package static let minimumSubkeyLength = Int(crypto_kdf_bytes_min())
    /// Longest subkey (64 bytes, `crypto_kdf_BYTES_MAX`).
    package static let maximumSubkeyLength = Int(crypto_kdf_bytes_max())

    /// Derives subkey number `id` for `context` from `masterKey`, into guarded memory.
    ///
    /// - Parameters:
    ///   - masterKey: Exactly ``masterKeyLength`` bytes.
    ///   - id: The subkey's number within the context.
    ///   - context: Exactly ``contextLength`` ASCII characters naming the purpose, e.g. `"cofrrec1"`.
    ///   - length: Subkey length, ``minimumSubkeyLength`` ... ``maximumSubkeyLength``.
    /// - Throws: `.invalidLength` for a wrong master key, context or subkey length;
    ///   `.invalidParameter` for a non-ASCII context.
    package static func deriveSubkey(
        from masterKey: SecureBytes,
        id: UInt64,
        context: String,
        length: Int
    ) throws -> SecureBytes {
        try Sodium.initialize()
        guard masterKey.count == masterKeyLength else {
            throw CryptoError.invalidLength("crypto_kdf master key", expected: masterKeyLength, actual: masterKey.count)
        }
        let contextBytes = Array(context.utf8)
        guard contextBytes.allSatisfy({ $0 < 0x80 }) else {
            throw CryptoError(code: .invalidParameter, message: "crypto_kdf context must be ASCII")
        }
        guard contextBytes.count == contextLength else {
            throw CryptoError.invalidLength("crypto_kdf context", expected: contextLength, actual: contextBytes.count)
        }
        guard (minimumSubkeyLength...maximumSubkeyLength).contains(length) else {
            throw CryptoError.invalidLength(
                "crypto_kdf subkey", in: minimumSubkeyLength...maximumSubkeyLength, actual: length)
        }
        let contextChars = contextBytes.map { CChar(bitPattern: $0) }
        return try SecureBytes(count: length) { output in
            let status = masterKey.withUnsafeBytes { keyBytes in
                withNonNullBytes(keyBytes) { keyStart in
                    withNonNullMutableBytes(output) { outputStart in
                        crypto_kdf_derive_from_key(outputStart, output.count, id, contextChars, keyStart)
                    }
                }
            }
            guard status == 0 else {
                throw CryptoError.failed("crypto_kdf_derive_from_key")
            }
        }
    }
}
