@testable import CofferCrypto
import Foundation
import Testing

/// A Wycheproof AEAD file (`aead_test_schema_v1.json`): sizes in bits, `ct` without the tag.
struct WycheproofAEADFile: Decodable {
    struct Group: Decodable {
        let ivSize: Int
        let keySize: Int
        let tagSize: Int
        let tests: [Test]
    }

    struct Test: Decodable {
        let tcId: Int
        let comment: String
        let flags: [String]
        let key: Hex
        let iv: Hex
        let aad: Hex
        let msg: Hex
        let ct: Hex
        let tag: Hex
        let result: String
    }

    let algorithm: String
    let numberOfTests: Int
    let testGroups: [Group]
}

/// One Wycheproof test, flattened with its group's sizes.
struct WycheproofCase: Sendable, CustomTestStringConvertible {
    let kind: AEADKind
    let tcId: Int
    let flags: [String]
    let ivSizeBits: Int
    let keySizeBits: Int
    let tagSizeBits: Int
    let key: [UInt8]
    let nonce: [UInt8]
    let aad: [UInt8]
    let msg: [UInt8]
    let ct: [UInt8]
    let tag: [UInt8]
    let result: String

    var testDescription: String { "\(kind.rawValue) tcId \(tcId) \(result) \(flags.joined(separator: ","))" }

    static let files: [(AEADKind, String)] = [
        (.xchacha20Poly1305, "wycheproof_xchacha20_poly1305_test.json"),
        (.chacha20Poly1305IETF, "wycheproof_chacha20_poly1305_test.json"),
    ]

    static func load(_ kind: AEADKind) throws -> (file: WycheproofAEADFile, cases: [WycheproofCase]) {
        guard let name = files.first(where: { $0.0 == kind })?.1 else {
            throw VectorFormatError(description: "no Wycheproof file for \(kind)")
        }
        let file = try VectorFile.decode(WycheproofAEADFile.self, from: name)
        let cases = file.testGroups.flatMap { group in
            group.tests.map { test in
                WycheproofCase(
                    kind: kind, tcId: test.tcId, flags: test.flags, ivSizeBits: group.ivSize,
                    keySizeBits: group.keySize, tagSizeBits: group.tagSize, key: test.key.bytes,
                    nonce: test.iv.bytes, aad: test.aad.bytes, msg: test.msg.bytes, ct: test.ct.bytes,
                    tag: test.tag.bytes, result: test.result)
            }
        }
        return (file, cases)
    }

    static func all() throws -> [WycheproofCase] {
        try AEADKind.allCases.flatMap { try load($0).cases }
    }
}

@Suite("Wycheproof AEAD vectors")
struct WycheproofAEADTests {
    /// Guards the parameterised test below: every case of both files is loaded and classified.
    @Test(arguments: [
        (AEADKind.xchacha20Poly1305, "XCHACHA20-POLY1305", 315, 246, 60, 9),
        (AEADKind.chacha20Poly1305IETF, "CHACHA20-POLY1305", 325, 256, 60, 9),
    ])
    func fileIsCompleteAndClassified(
        kind: AEADKind, algorithm: String, total: Int, valid: Int, modifiedTag: Int, invalidNonce: Int
    ) throws {
        let (file, cases) = try WycheproofCase.load(kind)
        #expect(file.algorithm == algorithm)
        #expect(file.numberOfTests == total)
        #expect(cases.count == total)
        #expect(Set(cases.map(\.tcId)).count == total)
        #expect(cases.filter { $0.result == "valid" }.count == valid)
        #expect(cases.filter { $0.result == "invalid" && $0.flags.contains("ModifiedTag") }.count == modifiedTag)
        #expect(cases.filter { $0.result == "invalid" && $0.flags.contains("InvalidNonceSize") }.count == invalidNonce)
        #expect(valid + modifiedTag + invalidNonce == total)
        for testCase in cases {
            #expect(testCase.nonce.count * 8 == testCase.ivSizeBits, "tcId \(testCase.tcId)")
            #expect(testCase.key.count * 8 == testCase.keySizeBits, "tcId \(testCase.tcId)")
            #expect(testCase.ct.count == testCase.msg.count, "tcId \(testCase.tcId)")
            if testCase.flags.contains("InvalidNonceSize") {
                // No output exists for a wrong-size nonce: message, ciphertext and tag are empty.
                #expect(testCase.msg.isEmpty && testCase.tag.isEmpty, "tcId \(testCase.tcId)")
            } else {
                #expect(testCase.tag.count * 8 == testCase.tagSizeBits, "tcId \(testCase.tcId)")
            }
        }
    }

    @Test(arguments: try WycheproofCase.all())
    func wycheproofCase(_ testCase: WycheproofCase) throws {
        let kind = testCase.kind
        let key = try SecureBytes(copying: testCase.key)
        let sealed = testCase.ct + testCase.tag
        let (nonce, aad, msg) = (testCase.nonce, testCase.aad, testCase.msg)

        if testCase.result == "valid" {
            for (name, seal) in kind.sealEveryWay(msg, key: key, nonce: nonce, associatedData: aad) {
                #expect(try seal() == sealed, "\(name)")
            }
            for (name, open) in kind.openEveryWay(sealed, key: key, nonce: nonce, associatedData: aad) {
                #expect(try open() == msg, "\(name)")
            }
        } else if testCase.result == "invalid" && testCase.flags == ["InvalidNonceSize"] {
            // libsodium takes no nonce length; the wrapper must refuse before calling it. A C-side
            // failure would be .authenticationFailed (or a success reading a truncated nonce).
            #expect(nonce.count != kind.nonceLength)
            for (name, seal) in kind.sealEveryWay(msg, key: key, nonce: nonce, associatedData: aad) {
                expectCryptoError(.invalidLength, "\(name)") { try seal() }
            }
            // The file's sealed value is empty, which is refused for its length alone. So open a real
            // seal made with the nonce cut or zero-padded to the right size: without the Swift check,
            // libsodium would read that many bytes and authenticate (longer nonces) or fail with
            // .authenticationFailed (shorter ones); the right answer is .invalidLength.
            let fittedNonce = Array((nonce + [UInt8](repeating: 0, count: kind.nonceLength)).prefix(kind.nonceLength))
            let realSeal = try kind.sealRaw(msg, key: key, nonce: fittedNonce, associatedData: aad)
            #expect(try kind.openRaw(realSeal, key: key, nonce: fittedNonce, associatedData: aad) == msg)
            for (name, open) in kind.openEveryWay(realSeal, key: key, nonce: nonce, associatedData: aad) {
                expectCryptoError(.invalidLength, "\(name)") { try open() }
            }
            for (name, open) in kind.openEveryWay(sealed, key: key, nonce: nonce, associatedData: aad) {
                expectCryptoError(.invalidLength, "\(name)") { try open() }
            }
        } else if testCase.result == "invalid" && testCase.flags == ["ModifiedTag"] {
            #expect(nonce.count == kind.nonceLength)
            for (name, open) in kind.openEveryWay(sealed, key: key, nonce: nonce, associatedData: aad) {
                expectCryptoError(.authenticationFailed, "\(name)") { try open() }
            }
            // The ciphertext is genuine; only the tag was changed.
            let resealed = try kind.sealRaw(msg, key: key, nonce: nonce, associatedData: aad)
            #expect(Array(resealed.prefix(msg.count)) == testCase.ct)
            #expect(Array(resealed.suffix(kind.tagLength)) != testCase.tag)
        } else {
            Issue.record("unclassified Wycheproof case: \(testCase.testDescription)")
        }
    }
}

/// draft-irtf-cfrg-xchacha-03 A.3.1 and libsodium's XChaCha20-Poly1305 test, plus RFC 8439 §2.8.2.
@Suite("Published AEAD known answers")
struct PublishedAEADTests {
    struct File: Decodable {
        struct AEADVector: Decodable {
            let id: String
            let key: Hex
            let nonce: Hex
            let aad: Hex
            let plaintext: Hex
            let ciphertext: Hex
            let tag: Hex
        }

        let aead_xchacha20_poly1305: [AEADVector]?
        let tests: [AEADVector]?
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let kind: AEADKind
        let id: String
        let key: [UInt8]
        let nonce: [UInt8]
        let aad: [UInt8]
        let plaintext: [UInt8]
        let sealed: [UInt8]

        var testDescription: String { id }

        init(_ kind: AEADKind, _ vector: File.AEADVector) {
            self.kind = kind
            id = vector.id
            key = vector.key.bytes
            nonce = vector.nonce.bytes
            aad = vector.aad.bytes
            plaintext = vector.plaintext.bytes
            sealed = vector.ciphertext.bytes + vector.tag.bytes
        }

        static func xchachaDraft() throws -> [Case] {
            try VectorFile.decode(File.self, from: "xchacha20poly1305_draft_irtf_cfrg_xchacha_03.json")
                .aead_xchacha20_poly1305?.map { Case(.xchacha20Poly1305, $0) } ?? []
        }

        static func rfc8439() throws -> [Case] {
            try VectorFile.decode(File.self, from: "chacha20poly1305_rfc8439_2_8_2.json")
                .tests?.map { Case(.chacha20Poly1305IETF, $0) } ?? []
        }

        static func all() throws -> [Case] {
            try xchachaDraft() + rfc8439()
        }
    }

    @Test func filesHoldTheExpectedCases() throws {
        #expect(try Case.xchachaDraft().count == 3)
        #expect(try Case.rfc8439().count == 1)
    }

    @Test(arguments: try Case.all())
    func sealsAndOpens(_ vector: Case) throws {
        let key = try SecureBytes(copying: vector.key)
        for (name, seal) in vector.kind.sealEveryWay(
            vector.plaintext, key: key, nonce: vector.nonce, associatedData: vector.aad)
        {
            #expect(try seal() == vector.sealed, "\(name)")
        }
        for (name, open) in vector.kind.openEveryWay(
            vector.sealed, key: key, nonce: vector.nonce, associatedData: vector.aad)
        {
            #expect(try open() == vector.plaintext, "\(name)")
        }
    }

    /// Every single-bit change to the sealed bytes, the associated data, the nonce or the key fails.
    @Test(arguments: try Case.all())
    func everyBitFlipFailsToOpen(_ vector: Case) throws {
        let kind = vector.kind
        let key = try SecureBytes(copying: vector.key)
        func flipped(_ bytes: [UInt8], bit: Int) -> [UInt8] {
            var bytes = bytes
            bytes[bit / 8] ^= 1 << UInt8(bit % 8)
            return bytes
        }
        var rejected = 0
        func expectRejected(_ label: String, _ body: () throws -> [UInt8]) {
            do {
                _ = try body()
                Issue.record("\(label) opened")
            } catch CryptoError.Code.authenticationFailed {
                rejected += 1
            } catch {
                Issue.record("\(label): unexpected \(error)")
            }
        }
        for bit in 0..<(vector.sealed.count * 8) {
            expectRejected("sealed bit \(bit)") {
                try kind.openRaw(
                    flipped(vector.sealed, bit: bit), key: key, nonce: vector.nonce, associatedData: vector.aad)
            }
        }
        for bit in 0..<(vector.aad.count * 8) {
            expectRejected("aad bit \(bit)") {
                try kind.openRaw(
                    vector.sealed, key: key, nonce: vector.nonce, associatedData: flipped(vector.aad, bit: bit))
            }
        }
        for bit in 0..<(vector.nonce.count * 8) {
            expectRejected("nonce bit \(bit)") {
                try kind.openRaw(
                    vector.sealed, key: key, nonce: flipped(vector.nonce, bit: bit), associatedData: vector.aad)
            }
        }
        for bit in 0..<(vector.key.count * 8) {
            let otherKey = try SecureBytes(copying: flipped(vector.key, bit: bit))
            expectRejected("key bit \(bit)") {
                try kind.openRaw(vector.sealed, key: otherKey, nonce: vector.nonce, associatedData: vector.aad)
            }
        }
        #expect(rejected == (vector.sealed.count + vector.aad.count + vector.nonce.count + vector.key.count) * 8)
    }
}
