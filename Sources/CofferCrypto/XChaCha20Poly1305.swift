#if canImport(FoundationEssentials)
    package import FoundationEssentials
#else
    package import Foundation
#endif

/// XChaCha20-Poly1305 (IETF) AEAD: libsodium `crypto_aead_xchacha20poly1305_ietf_*`, combined mode.
///
/// `seal` returns `ciphertext || tag`; `open` takes the same layout and throws
/// `.authenticationFailed` if anything (key, nonce, ciphertext, tag, associated data) differs.
/// Key and nonce lengths are checked before libsodium is called: libsodium takes no lengths for them.
///
/// This is the vault's record cipher: a fresh random 24-byte nonce per record is safe because the
/// collision probability of 192-bit random nonces is negligible.
package enum XChaCha20Poly1305: Sendable {
    /// Key length in bytes (32).
    package static let keyLength = XChaCha20Poly1305Binding.keyLength
    /// Nonce length in bytes (24). Long enough to be chosen at random for every message.
    package static let nonceLength = XChaCha20Poly1305Binding.nonceLength
    /// Authentication tag length in bytes (16), appended to the ciphertext.
    package static let tagLength = XChaCha20Poly1305Binding.tagLength

    /// Encrypts and authenticates `plaintext`, binding `associatedData`; returns `ciphertext || tag`.
    ///
    /// - Parameters:
    ///   - plaintext: The bytes to encrypt.
    ///   - key: A 32-byte key.
    ///   - nonce: A 24-byte nonce, never reused with the same key.
    ///   - associatedData: Bytes that are authenticated but not encrypted (may be empty).
    /// - Throws: `.invalidLength` for a wrong key or nonce length.
    package static func seal(
        _ plaintext: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try AEAD<XChaCha20Poly1305Binding>.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Encrypts `plaintext` straight into `output` (`plaintext.count + tagLength` bytes), without copies.
    ///
    /// `output` may start exactly where `plaintext` does (in place: the vault seals its records
    /// so, and a test checks the result is the same); otherwise it must not overlap `plaintext`,
    /// `nonce` or `associatedData`.
    /// - Throws: `.invalidLength` for a wrong key, nonce or output length.
    package static func seal(
        _ plaintext: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try AEAD<XChaCha20Poly1305Binding>.seal(
            plaintext, key: key, nonce: nonce, associatedData: associatedData, into: output)
    }

    /// Encrypts and authenticates any contiguous bytes; returns `ciphertext || tag` as `Data`.
    ///
    /// ```swift
    /// let nonce = SecureRandom.bytes(count: XChaCha20Poly1305.nonceLength)
    /// let sealed = try XChaCha20Poly1305.seal(Array("hello".utf8), key: key, nonce: nonce, associatedData: [UInt8]())
    /// ```
    /// - Throws: `.invalidLength` for a wrong key or nonce length.
    package static func seal<P: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ plaintext: P,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> Data {
        try AEAD<XChaCha20Poly1305Binding>.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts `ciphertext || tag`; returns the plaintext.
    ///
    /// - Throws: `.authenticationFailed` if the data does not authenticate under this key, nonce and
    ///   associated data; `.invalidLength` for a wrong key or nonce length or `sealed` shorter than a tag.
    package static func open(
        _ sealed: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try AEAD<XChaCha20Poly1305Binding>.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts `ciphertext || tag` straight into `output` (`sealed.count - tagLength` bytes).
    ///
    /// Nothing is decrypted unless the tag verifies. `output` must not overlap the inputs.
    /// - Throws: `.authenticationFailed`, or `.invalidLength` for a wrong key, nonce or output length.
    package static func open(
        _ sealed: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try AEAD<XChaCha20Poly1305Binding>.open(
            sealed, key: key, nonce: nonce, associatedData: associatedData, into: output)
    }

    /// Verifies and decrypts any contiguous `ciphertext || tag`; returns the plaintext as `Data`.
    ///
    /// - Throws: `.authenticationFailed`, or `.invalidLength` for a wrong key or nonce length or
    ///   `sealed` shorter than a tag.
    package static func open<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> Data {
        try AEAD<XChaCha20Poly1305Binding>.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts into guarded memory, for plaintexts that are secrets (wrapped keys).
    ///
    /// - Throws: `.authenticationFailed`, `.invalidLength`, or `.outOfMemory` if guarded memory
    ///   cannot be allocated.
    package static func openSecure<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> SecureBytes {
        try AEAD<XChaCha20Poly1305Binding>.openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }
}
