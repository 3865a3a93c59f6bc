#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// ChaCha20-Poly1305 (RFC 8439) AEAD: libsodium `crypto_aead_chacha20poly1305_ietf_*`, combined mode.
///
/// `seal` returns `ciphertext || tag`; `open` takes the same layout and throws
/// `.authenticationFailed` if anything (key, nonce, ciphertext, tag, associated data) differs.
/// Key and nonce lengths are checked before libsodium is called: libsodium takes no lengths for them.
///
/// Prefer `XChaCha20Poly1305` unless a format requires RFC 8439: its 12-byte nonce is too short
/// to pick at random for many messages under one key.
public enum ChaCha20Poly1305IETF {
    /// Key length in bytes (32).
    public static let keyLength = ChaCha20Poly1305IETFBinding.keyLength
    /// Nonce length in bytes (12). Too short for random nonces over many messages: use a counter.
    public static let nonceLength = ChaCha20Poly1305IETFBinding.nonceLength
    /// Authentication tag length in bytes (16), appended to the ciphertext.
    public static let tagLength = ChaCha20Poly1305IETFBinding.tagLength

    /// Encrypts and authenticates `plaintext`, binding `associatedData`; returns `ciphertext || tag`.
    ///
    /// - Parameters:
    ///   - plaintext: The bytes to encrypt.
    ///   - key: A 32-byte key.
    ///   - nonce: A 12-byte nonce, never reused with the same key.
    ///   - associatedData: Bytes that are authenticated but not encrypted (may be empty).
    /// - Throws: `.invalidLength` for a wrong key or nonce length.
    public static func seal(
        _ plaintext: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try AEAD<ChaCha20Poly1305IETFBinding>.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Encrypts `plaintext` straight into `output` (`plaintext.count + tagLength` bytes), without copies.
    ///
    /// `output` must not overlap `plaintext`, `nonce` or `associatedData`.
    /// - Throws: `.invalidLength` for a wrong key, nonce or output length.
    public static func seal(
        _ plaintext: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try AEAD<ChaCha20Poly1305IETFBinding>.seal(
            plaintext, key: key, nonce: nonce, associatedData: associatedData, into: output)
    }

    /// Encrypts and authenticates any contiguous bytes; returns `ciphertext || tag` as `Data`.
    ///
    /// ```swift
    /// let nonce = SecureRandom.bytes(count: ChaCha20Poly1305IETF.nonceLength)
    /// let sealed = try ChaCha20Poly1305IETF.seal(
    ///     Array("hello".utf8), key: key, nonce: nonce, associatedData: [UInt8]())
    /// ```
    /// - Throws: `.invalidLength` for a wrong key or nonce length.
    public static func seal<P: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ plaintext: P,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> Data {
        try AEAD<ChaCha20Poly1305IETFBinding>.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts `ciphertext || tag`; returns the plaintext.
    ///
    /// - Throws: `.authenticationFailed` if the data does not authenticate under this key, nonce and
    ///   associated data; `.invalidLength` for a wrong key or nonce length or `sealed` shorter than a tag.
    public static func open(
        _ sealed: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try AEAD<ChaCha20Poly1305IETFBinding>.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts `ciphertext || tag` straight into `output` (`sealed.count - tagLength` bytes).
    ///
    /// Nothing is decrypted unless the tag verifies. `output` must not overlap the inputs.
    /// - Throws: `.authenticationFailed`, or `.invalidLength` for a wrong key, nonce or output length.
    public static func open(
        _ sealed: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try AEAD<ChaCha20Poly1305IETFBinding>.open(
            sealed, key: key, nonce: nonce, associatedData: associatedData, into: output)
    }

    /// Verifies and decrypts any contiguous `ciphertext || tag`; returns the plaintext as `Data`.
    ///
    /// - Throws: `.authenticationFailed`, or `.invalidLength` for a wrong key or nonce length or
    ///   `sealed` shorter than a tag.
    public static func open<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> Data {
        try AEAD<ChaCha20Poly1305IETFBinding>.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts into guarded memory, for plaintexts that are secrets (wrapped keys).
    ///
    /// - Throws: `.authenticationFailed`, `.invalidLength`, or `.outOfMemory` if guarded memory
    ///   cannot be allocated.
    public static func openSecure<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S,
        key: SecureBytes,
        nonce: N,
        associatedData: A
    ) throws -> SecureBytes {
        try AEAD<ChaCha20Poly1305IETFBinding>.openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }
}
