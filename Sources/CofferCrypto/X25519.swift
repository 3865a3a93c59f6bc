internal import CSodium

/// X25519 (RFC 7748) with libsodium's `crypto_scalarmult`: the key agreement of age's
/// recipients and of a vault's recipient key slots.
///
/// ```swift
/// let secret = try X25519.newSecretKey()                  // 32 bytes, guarded memory
/// let publicKey = try X25519.publicKey(for: secret)       // 32 bytes, shareable
/// let shared = try X25519.sharedSecret(secret, publicKey: theirPublicKey)
/// ```
///
/// A secret key is any 32 bytes (X25519 clamps it itself). A shared secret of all zeros (the
/// other side's public key is a point of small order) is refused, as age and libsodium refuse it:
/// it would be the same for every secret key.
package enum X25519: Sendable {
    /// The length of secret keys, public keys and shared secrets: 32 bytes.
    package static let keyLength = 32

    /// A new random secret key, in guarded memory.
    package static func newSecretKey() throws -> SecureBytes {
        try SecureBytes.random(count: keyLength)
    }

    /// The public key of `secretKey` (32 bytes).
    /// - Throws: `.invalidLength` when `secretKey` is not 32 bytes.
    package static func publicKey(for secretKey: SecureBytes) throws -> [UInt8] {
        try Sodium.initialize()
        guard secretKey.count == keyLength else {
            throw CryptoError.invalidLength("X25519 secret key", expected: keyLength, actual: secretKey.count)
        }
        var output = [UInt8](repeating: 0, count: keyLength)
        let status = secretKey.withUnsafeBytes { secret in
            output.withUnsafeMutableBytes { out in
                crypto_scalarmult_base(out.mutableBytePointer!, secret.bytePointer!)
            }
        }
        guard status == 0 else { throw CryptoError.failed("crypto_scalarmult_base") }
        return output
    }

    /// The shared secret of `secretKey` and the other side's `publicKey`, in guarded memory.
    /// - Throws: `.invalidLength` for keys that are not 32 bytes; `.invalidParameter` when the
    ///   result is all zeros (a public key of small order: no secret is shared).
    package static func sharedSecret(_ secretKey: SecureBytes, publicKey: [UInt8]) throws -> SecureBytes {
        try Sodium.initialize()
        guard secretKey.count == keyLength else {
            throw CryptoError.invalidLength("X25519 secret key", expected: keyLength, actual: secretKey.count)
        }
        guard publicKey.count == keyLength else {
            throw CryptoError.invalidLength("X25519 public key", expected: keyLength, actual: publicKey.count)
        }
        return try SecureBytes(count: keyLength) { out in
            let status = secretKey.withUnsafeBytes { secret in
                publicKey.withUnsafeBytes { point in
                    crypto_scalarmult(out.mutableBytePointer!, secret.bytePointer!, point.bytePointer!)
                }
            }
            // libsodium returns -1 when the result is all zeros; checked here as well, so no
            // libsodium version can hand back a secret everyone shares.
            guard status == 0, !out.allSatisfy({ $0 == 0 }) else {
                throw CryptoError(
                    code: .invalidParameter,
                    message: "the X25519 public key is a point of small order: it shares no secret")
            }
        }
    }
}
