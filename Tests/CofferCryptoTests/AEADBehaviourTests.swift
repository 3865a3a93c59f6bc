@testable import CofferCrypto
import Foundation
import Testing

@Suite("AEAD behaviour")
struct AEADBehaviourTests {
    struct Fixture {
        let kind: AEADKind
        let key: SecureBytes
        let nonce: [UInt8]
        let aad: [UInt8] = Array("vault-id|record-7".utf8)
        let plaintext: [UInt8] = Array("a secret worth keeping".utf8)

        init(_ kind: AEADKind) throws {
            self.kind = kind
            key = try SecureBytes.random(count: kind.keyLength)
            nonce = SecureRandom.bytes(count: kind.nonceLength)
        }

        func seal() throws -> [UInt8] {
            try kind.sealRaw(plaintext, key: key, nonce: nonce, associatedData: aad)
        }
    }

    @Test func constants() {
        #expect(XChaCha20Poly1305.keyLength == 32)
        #expect(XChaCha20Poly1305.nonceLength == 24)
        #expect(XChaCha20Poly1305.tagLength == 16)
        #expect(ChaCha20Poly1305IETF.keyLength == 32)
        #expect(ChaCha20Poly1305IETF.nonceLength == 12)
        #expect(ChaCha20Poly1305IETF.tagLength == 16)
        // The literals are what libsodium reports.
        let x = XChaCha20Poly1305Binding.librarySizes
        #expect(x.key == XChaCha20Poly1305.keyLength && x.nonce == XChaCha20Poly1305.nonceLength)
        #expect(x.tag == XChaCha20Poly1305.tagLength)
        let c = ChaCha20Poly1305IETFBinding.librarySizes
        #expect(c.key == ChaCha20Poly1305IETF.keyLength && c.nonce == ChaCha20Poly1305IETF.nonceLength)
        #expect(c.tag == ChaCha20Poly1305IETF.tagLength)
    }

    @Test(arguments: AEADKind.allCases)
    func roundTripsEveryWay(_ kind: AEADKind) throws {
        let fixture = try Fixture(kind)
        let sealed = try fixture.seal()
        #expect(sealed.count == fixture.plaintext.count + kind.tagLength)
        #expect(Array(sealed.prefix(fixture.plaintext.count)) != fixture.plaintext)
        for (name, seal) in kind.sealEveryWay(
            fixture.plaintext, key: fixture.key, nonce: fixture.nonce, associatedData: fixture.aad)
        {
            #expect(try seal() == sealed, "\(name)")
        }
        for (name, open) in kind.openEveryWay(
            sealed, key: fixture.key, nonce: fixture.nonce, associatedData: fixture.aad)
        {
            #expect(try open() == fixture.plaintext, "\(name)")
        }
    }

    /// Sealing in place (the output starting where the plaintext does, as the vault seals its
    /// records) gives the same bytes as sealing into a separate buffer, at every length around
    /// ChaCha20's 64-byte blocks and Poly1305's 16-byte ones.
    @Test func xchachaSealsInPlace() throws {
        let key = try SecureBytes.random(count: XChaCha20Poly1305.keyLength)
        let nonce = SecureRandom.bytes(count: XChaCha20Poly1305.nonceLength)
        let aad = Array("CFVrec1 in place".utf8)
        for length in [0, 1, 15, 16, 17, 63, 64, 65, 86, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 4096] {
            let plaintext = SecureRandom.bytes(count: length)
            let separate = Array(try XChaCha20Poly1305.seal(plaintext, key: key, nonce: nonce, associatedData: aad) as Data)
            var buffer = plaintext + [UInt8](repeating: 0, count: XChaCha20Poly1305.tagLength)
            try buffer.withUnsafeMutableBytes { buffer in
                try nonce.withUnsafeBytes { nonce in
                    try aad.withUnsafeBytes { aad in
                        try XChaCha20Poly1305.seal(
                            UnsafeRawBufferPointer(rebasing: buffer[0..<length]), key: key, nonce: nonce,
                            associatedData: aad, into: buffer)
                    }
                }
            }
            #expect(buffer == separate, "length \(length)")
        }
    }

    @Test(arguments: AEADKind.allCases)
    func emptyPlaintextAndEmptyAssociatedData(_ kind: AEADKind) throws {
        let fixture = try Fixture(kind)
        for (name, seal) in kind.sealEveryWay([], key: fixture.key, nonce: fixture.nonce, associatedData: []) {
            let sealed = try seal()
            #expect(sealed.count == kind.tagLength, "\(name)")
            for (openName, open) in kind.openEveryWay(
                sealed, key: fixture.key, nonce: fixture.nonce, associatedData: [])
            {
                #expect(try open().isEmpty, "\(name) → \(openName)")
            }
            expectCryptoError(.authenticationFailed, "tag of an empty message still binds the AD") {
                try kind.openRaw(sealed, key: fixture.key, nonce: fixture.nonce, associatedData: [0])
            }
        }
        // Data() and nil-based buffers work as empty inputs too.
        let sealed = try XChaCha20Poly1305.seal(
            Data(), key: SecureBytes.random(count: 32), nonce: Data(count: 24), associatedData: Data())
        #expect(sealed.count == 16)
    }

    @Test(arguments: AEADKind.allCases)
    func tamperingFailsToOpen(_ kind: AEADKind) throws {
        let fixture = try Fixture(kind)
        let sealed = try fixture.seal()
        let (key, nonce, aad) = (fixture.key, fixture.nonce, fixture.aad)
        var ciphertextFlipped = sealed
        ciphertextFlipped[0] ^= 0x01
        var tagFlipped = sealed
        tagFlipped[sealed.count - 1] ^= 0x80
        var nonceFlipped = nonce
        nonceFlipped[nonce.count - 1] ^= 0x01
        let otherKey = try SecureBytes.random(count: kind.keyLength)
        let attempts: [(String, () throws -> [UInt8])] = [
            ("ciphertext", { try kind.openRaw(ciphertextFlipped, key: key, nonce: nonce, associatedData: aad) }),
            ("tag", { try kind.openRaw(tagFlipped, key: key, nonce: nonce, associatedData: aad) }),
            ("truncated", { try kind.openRaw(Array(sealed.dropLast()), key: key, nonce: nonce, associatedData: aad) }),
            ("extended", { try kind.openRaw(sealed + [0], key: key, nonce: nonce, associatedData: aad) }),
            ("associated data", { try kind.openRaw(sealed, key: key, nonce: nonce, associatedData: aad + [0]) }),
            ("no associated data", { try kind.openRaw(sealed, key: key, nonce: nonce, associatedData: []) }),
            ("nonce", { try kind.openRaw(sealed, key: key, nonce: nonceFlipped, associatedData: aad) }),
            ("key", { try kind.openRaw(sealed, key: otherKey, nonce: nonce, associatedData: aad) }),
            ("openSecure", { try kind.openSecure(tagFlipped, key: key, nonce: nonce, associatedData: aad).testCopy }),
            ("open (Data)", { try kind.open(tagFlipped, key: key, nonce: nonce, associatedData: aad) }),
        ]
        for (name, attempt) in attempts {
            expectCryptoError(.authenticationFailed, "\(name)") { try attempt() }
        }
    }

    @Test(arguments: AEADKind.allCases)
    func failedOpenIntoLeavesNoPlaintext(_ kind: AEADKind) throws {
        let fixture = try Fixture(kind)
        var sealed = try fixture.seal()
        sealed[sealed.count - 1] ^= 1
        let output = withOutput(count: fixture.plaintext.count) { output in
            withBuffers(sealed, fixture.nonce, fixture.aad) { sealed, nonce, aad in
                expectCryptoError(.authenticationFailed) {
                    try kind.construction.open(
                        sealed, key: fixture.key, nonce: nonce, associatedData: aad, into: output)
                }
            }
        }
        let leaked = zip(output, fixture.plaintext).contains { $0 == $1 && $0 != 0xAA }
        #expect(!leaked)
    }

    @Test(arguments: AEADKind.allCases)
    func wrongLengthsAreRejectedBeforeLibsodium(_ kind: AEADKind) throws {
        let fixture = try Fixture(kind)
        let sealed = try fixture.seal()
        for keyLength in [0, 16, kind.keyLength - 1, kind.keyLength + 1, 64] {
            let key = try SecureBytes.random(count: keyLength)
            for (name, seal) in kind.sealEveryWay(fixture.plaintext, key: key, nonce: fixture.nonce, associatedData: [])
            {
                expectCryptoError(.invalidLength, "\(name), key \(keyLength)") { try seal() }
            }
            for (name, open) in kind.openEveryWay(sealed, key: key, nonce: fixture.nonce, associatedData: fixture.aad) {
                expectCryptoError(.invalidLength, "\(name), key \(keyLength)") { try open() }
            }
        }
        for nonceLength in [0, 8, 12, 16, 24, 32] where nonceLength != kind.nonceLength {
            let nonce = [UInt8](repeating: 0, count: nonceLength)
            for (name, seal) in kind.sealEveryWay(fixture.plaintext, key: fixture.key, nonce: nonce, associatedData: [])
            {
                expectCryptoError(.invalidLength, "\(name), nonce \(nonceLength)") { try seal() }
            }
            for (name, open) in kind.openEveryWay(sealed, key: fixture.key, nonce: nonce, associatedData: fixture.aad) {
                expectCryptoError(.invalidLength, "\(name), nonce \(nonceLength)") { try open() }
            }
        }
        for sealedLength in [0, 1, kind.tagLength - 1] {
            for (name, open) in kind.openEveryWay(
                Array(sealed.prefix(sealedLength)), key: fixture.key, nonce: fixture.nonce, associatedData: fixture.aad)
            {
                expectCryptoError(.invalidLength, "\(name), sealed \(sealedLength)") { try open() }
            }
        }
        let (plaintext, key, nonce, aad) = (fixture.plaintext, fixture.key, fixture.nonce, fixture.aad)
        for outputLength in [
            0, plaintext.count, plaintext.count + kind.tagLength - 1, plaintext.count + kind.tagLength + 1,
        ] {
            expectCryptoError(.invalidLength, "seal output \(outputLength)") {
                try kind.sealInto(plaintext, key: key, nonce: nonce, associatedData: aad, outputLength: outputLength)
            }
        }
        for outputLength in [0, plaintext.count - 1, plaintext.count + 1, sealed.count] {
            expectCryptoError(.invalidLength, "open output \(outputLength)") {
                try kind.openInto(sealed, key: key, nonce: nonce, associatedData: aad, outputLength: outputLength)
            }
        }
    }
}
