@testable import CofferCrypto
import Foundation
import Testing

/// RFC 8439's construction has no public wrapper (no Coffer format uses it); its vectors run
/// through the generic code behind ``XChaCha20Poly1305``.
typealias ChaCha20Poly1305IETF = AEAD<ChaCha20Poly1305IETFBinding>

/// The two AEAD constructions, so one test body exercises every public overload of each.
enum AEADKind: String, Sendable, CaseIterable, CustomTestStringConvertible {
    case xchacha20Poly1305
    case chacha20Poly1305IETF

    var testDescription: String { rawValue }

    var keyLength: Int {
        switch self {
        case .xchacha20Poly1305: XChaCha20Poly1305.keyLength
        case .chacha20Poly1305IETF: ChaCha20Poly1305IETF.keyLength
        }
    }

    var nonceLength: Int {
        switch self {
        case .xchacha20Poly1305: XChaCha20Poly1305.nonceLength
        case .chacha20Poly1305IETF: ChaCha20Poly1305IETF.nonceLength
        }
    }

    var tagLength: Int {
        switch self {
        case .xchacha20Poly1305: XChaCha20Poly1305.tagLength
        case .chacha20Poly1305IETF: ChaCha20Poly1305IETF.tagLength
        }
    }

    /// The generic `ContiguousBytes` overload, returning `Data`.
    func seal(_ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        let sealed: Data =
            switch self {
            case .xchacha20Poly1305:
                try XChaCha20Poly1305.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
            case .chacha20Poly1305IETF:
                try ChaCha20Poly1305IETF.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
            }
        return Array(sealed)
    }

    /// The `UnsafeRawBufferPointer` overload, returning `[UInt8]`.
    func sealRaw(_ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { plaintext in
            try nonce.withUnsafeBytes { nonce in
                try associatedData.withUnsafeBytes { associatedData in
                    switch self {
                    case .xchacha20Poly1305:
                        try XChaCha20Poly1305.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
                    case .chacha20Poly1305IETF:
                        try ChaCha20Poly1305IETF.seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
                    }
                }
            }
        }
    }

    /// The `into:` overload, with an output buffer of `outputLength` (default: the correct length).
    func sealInto(
        _ plaintext: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8], outputLength: Int? = nil
    ) throws -> [UInt8] {
        var output = [UInt8](repeating: 0xAA, count: outputLength ?? plaintext.count + tagLength)
        try plaintext.withUnsafeBytes { plaintext in
            try nonce.withUnsafeBytes { nonce in
                try associatedData.withUnsafeBytes { associatedData in
                    try output.withUnsafeMutableBytes { output in
                        switch self {
                        case .xchacha20Poly1305:
                            try XChaCha20Poly1305.seal(
                                plaintext, key: key, nonce: nonce, associatedData: associatedData, into: output)
                        case .chacha20Poly1305IETF:
                            try ChaCha20Poly1305IETF.seal(
                                plaintext, key: key, nonce: nonce, associatedData: associatedData, into: output)
                        }
                    }
                }
            }
        }
        return output
    }

    /// The generic overload, returning `Data`.
    func open(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        let plaintext: Data =
            switch self {
            case .xchacha20Poly1305:
                try XChaCha20Poly1305.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
            case .chacha20Poly1305IETF:
                try ChaCha20Poly1305IETF.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
            }
        return Array(plaintext)
    }

    /// The `UnsafeRawBufferPointer` overload, returning `[UInt8]`.
    func openRaw(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try sealed.withUnsafeBytes { sealed in
            try nonce.withUnsafeBytes { nonce in
                try associatedData.withUnsafeBytes { associatedData in
                    switch self {
                    case .xchacha20Poly1305:
                        try XChaCha20Poly1305.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
                    case .chacha20Poly1305IETF:
                        try ChaCha20Poly1305IETF.open(sealed, key: key, nonce: nonce, associatedData: associatedData)
                    }
                }
            }
        }
    }

    /// The `into:` overload, with an output buffer of `outputLength` (default: the correct length).
    func openInto(
        _ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8], outputLength: Int? = nil
    ) throws -> [UInt8] {
        var output = [UInt8](repeating: 0xAA, count: outputLength ?? max(sealed.count - tagLength, 0))
        try sealed.withUnsafeBytes { sealed in
            try nonce.withUnsafeBytes { nonce in
                try associatedData.withUnsafeBytes { associatedData in
                    try output.withUnsafeMutableBytes { output in
                        switch self {
                        case .xchacha20Poly1305:
                            try XChaCha20Poly1305.open(
                                sealed, key: key, nonce: nonce, associatedData: associatedData, into: output)
                        case .chacha20Poly1305IETF:
                            try ChaCha20Poly1305IETF.open(
                                sealed, key: key, nonce: nonce, associatedData: associatedData, into: output)
                        }
                    }
                }
            }
        }
        return output
    }

    /// `openSecure`, returning guarded memory.
    func openSecure(_ sealed: [UInt8], key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> SecureBytes
    {
        switch self {
        case .xchacha20Poly1305:
            try XChaCha20Poly1305.openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData)
        case .chacha20Poly1305IETF:
            try ChaCha20Poly1305IETF.openSecure(sealed, key: key, nonce: nonce, associatedData: associatedData)
        }
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
