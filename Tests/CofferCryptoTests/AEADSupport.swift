@testable import CofferCrypto
import Foundation
import Testing

/// RFC 8439's construction has no public wrapper (no Coffer format uses it); its vectors run
/// through the generic code behind ``XChaCha20Poly1305``.
typealias ChaCha20Poly1305IETF = AEAD<ChaCha20Poly1305IETFBinding>

/// Every overload a construction offers, as `XChaCha20Poly1305` declares them publicly and
/// `AEAD` (behind it, and behind ``ChaCha20Poly1305IETF``) internally: one protocol, so a test
/// calls the same overload of either construction without a switch per call.
protocol AEADConstruction {
    static var keyLength: Int { get }
    static var nonceLength: Int { get }
    static var tagLength: Int { get }
    static func seal(
        _ plaintext: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8]
    static func seal(
        _ plaintext: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) throws
    static func seal<P: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ plaintext: P, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> Data
    static func open(
        _ sealed: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8]
    static func open(
        _ sealed: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) throws
    static func open<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> Data
    static func openSecure<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> SecureBytes
}

extension XChaCha20Poly1305: AEADConstruction {}
extension AEAD: AEADConstruction {}

/// The two AEAD constructions, so one test body exercises every public overload of each.
enum AEADKind: String, Sendable, CaseIterable, CustomTestStringConvertible {
    case xchacha20Poly1305
    case chacha20Poly1305IETF

    var testDescription: String { rawValue }

    /// The type whose overloads the tests call: the public wrapper for XChaCha20-Poly1305.
    var construction: any AEADConstruction.Type {
        switch self {
        case .xchacha20Poly1305: XChaCha20Poly1305.self
        case .chacha20Poly1305IETF: ChaCha20Poly1305IETF.self
        }
    }

    var keyLength: Int { construction.keyLength }
    var nonceLength: Int { construction.nonceLength }
    var tagLength: Int { construction.tagLength }

    /// The generic `ContiguousBytes` overload, returning `Data`.
    func seal(_ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        Array(try construction.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData))
    }

    /// The `UnsafeRawBufferPointer` overload, returning `[UInt8]`.
    func sealRaw(_ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try withBuffers(plaintext, nonce, associatedData) {
            try construction.seal($0, key: key, nonce: $1, associatedData: $2)
        }
    }

    /// The `into:` overload, with an output buffer of `outputLength` (default: the correct length).
    func sealInto(
        _ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8], outputLength: Int? = nil
    ) throws -> [UInt8] {
        try withOutput(count: outputLength ?? plaintext.count + tagLength) { output in
            try withBuffers(plaintext, nonce, associatedData) {
                try construction.seal($0, key: key, nonce: $1, associatedData: $2, into: output)
            }
        }
    }

    /// The generic overload, returning `Data`.
    func open(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        Array(try construction.open(sealed, key: key, nonce: nonce, associatedData: associatedData))
    }

    /// The `UnsafeRawBufferPointer` overload, returning `[UInt8]`.
    func openRaw(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try withBuffers(sealed, nonce, associatedData) {
            try construction.open($0, key: key, nonce: $1, associatedData: $2)
        }
    }

    /// The `into:` overload, with an output buffer of `outputLength` (default: the correct length).
    func openInto(
        _ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8], outputLength: Int? = nil
    ) throws -> [UInt8] {
        try withOutput(count: outputLength ?? max(sealed.count - tagLength, 0)) { output in
            try withBuffers(sealed, nonce, associatedData) {
                try construction.open($0, key: key, nonce: $1, associatedData: $2, into: output)
            }
        }
    }

    /// `openSecure`, returning guarded memory.
    func openSecure(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> SecureBytes
    {
        try construction.openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Every open overload; each must agree.
    func openEveryWay(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8])
        -> [(String, () throws -> [UInt8])]
    {
        [
            ("open (Data)", { try open(sealed, key: key, nonce: nonce, associatedData: associatedData) }),
            ("open (raw)", { try openRaw(sealed, key: key, nonce: nonce, associatedData: associatedData) }),
            ("open (into)", { try openInto(sealed, key: key, nonce: nonce, associatedData: associatedData) }),
            ("openSecure", { try openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData).testCopy }),
        ]
    }

    /// Every seal overload; each must agree.
    func sealEveryWay(_ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8])
        -> [(String, () throws -> [UInt8])]
    {
        [
            ("seal (Data)", { try seal(plaintext, key: key, nonce: nonce, associatedData: associatedData) }),
            ("seal (raw)", { try sealRaw(plaintext, key: key, nonce: nonce, associatedData: associatedData) }),
            ("seal (into)", { try sealInto(plaintext, key: key, nonce: nonce, associatedData: associatedData) }),
        ]
    }
}

/// Calls `body` with the bytes of a message, a nonce and associated data.
func withBuffers<R>(
    _ message: [UInt8], _ nonce: [UInt8], _ associatedData: [UInt8],
    _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R
) rethrows -> R {
    try message.withUnsafeBytes { message in
        try nonce.withUnsafeBytes { nonce in
            try associatedData.withUnsafeBytes { associatedData in try body(message, nonce, associatedData) }
        }
    }
}

/// `count` bytes of 0xAA (so a test sees what an `into:` overload left unwritten), handed to
/// `fill`, then returned.
func withOutput(count: Int, _ fill: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows -> [UInt8] {
    var output = [UInt8](repeating: 0xAA, count: count)
    try output.withUnsafeMutableBytes { try fill($0) }
    return output
}
