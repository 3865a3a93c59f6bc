import CofferCrypto
import Foundation
import Testing

/// `argon2id_libsodium_pwhash.json`: libsodium's pwhash_argon2id tests and the reference Argon2id cases.
struct LibsodiumArgon2idFile: Decodable {
    struct RawTest: Decodable, Sendable, CustomTestStringConvertible {
        let id: String
        let password: Hex
        let salt: Hex
        let outlen: Int
        let opslimit: UInt64
        let memlimit_bytes: UInt64
        let expected: String
        let output: Hex?

        var testDescription: String { "\(id) (t=\(opslimit), \(memlimit_bytes) bytes, \(expected))" }
    }

    struct VerifyTest: Decodable, Sendable, CustomTestStringConvertible {
        let id: String
        let password_utf8: String
        let encoded: String
        let expected_verify: String

        var testDescription: String { "\(id) (\(expected_verify))" }
    }

    struct ReferenceTest: Decodable, Sendable, CustomTestStringConvertible {
        let id: String
        let password_utf8: String
        let salt_utf8: String
        let parallelism: Int
        let encoded: String

        var testDescription: String { id }
    }

    struct Section<T: Decodable>: Decodable {
        let tests: [T]
    }

    let crypto_pwhash_raw: Section<RawTest>
    let crypto_pwhash_str_verify: Section<VerifyTest>
    let phc_reference_argon2id: Section<ReferenceTest>

    static func load() throws -> LibsodiumArgon2idFile {
        try VectorFile.decode(LibsodiumArgon2idFile.self, from: "argon2id_libsodium_pwhash.json")
    }
}

@Suite("Argon2id (crypto_pwhash)")
struct PasswordHashTests {
    @Test func fileHoldsTheExpectedCases() throws {
        let file = try LibsodiumArgon2idFile.load()
        #expect(file.crypto_pwhash_raw.tests.count == 10)
        #expect(file.crypto_pwhash_raw.tests.filter { $0.expected == "error" }.count == 1)
        #expect(file.crypto_pwhash_str_verify.tests.count == 16)
        #expect(file.crypto_pwhash_str_verify.tests.filter { $0.expected_verify == "ok" }.count == 4)
        #expect(file.phc_reference_argon2id.tests.count == 8)
    }

    @Test(arguments: try LibsodiumArgon2idFile.load().crypto_pwhash_raw.tests)
    func libsodiumRawVector(_ vector: LibsodiumArgon2idFile.RawTest) throws {
        let passphrase = try SecureBytes(copying: vector.password.bytes)
        let parameters = Argon2idParameters(opsLimit: vector.opslimit, memLimitBytes: vector.memlimit_bytes)
        switch vector.expected {
        case "ok":
            let output = try #require(vector.output)
            let key = try PasswordHash.deriveKey(
                length: vector.outlen, passphrase: passphrase, salt: vector.salt.bytes, parameters: parameters)
            #expect(key.count == vector.outlen)
            #expect(key.testCopy == output.bytes)
        case "error":
            // The one error case asks for 5 output bytes, below crypto_pwhash_BYTES_MIN (16).
            #expect(vector.outlen < PasswordHash.minimumKeyLength)
            expectCryptoError(.invalidLength) {
                try PasswordHash.deriveKey(
                    length: vector.outlen, passphrase: passphrase, salt: vector.salt.bytes, parameters: parameters)
            }
        default:
            Issue.record("unknown expectation \(vector.expected)")
        }
    }

    /// `fail` means "not accepted": `false`, or `.invalidParameter` for costs outside the accepted range.
    @Test(arguments: try LibsodiumArgon2idFile.load().crypto_pwhash_str_verify.tests)
    func libsodiumVerifyVector(_ vector: LibsodiumArgon2idFile.VerifyTest) throws {
        let passphrase = try SecureBytes(utf8: vector.password_utf8)
        switch vector.expected_verify {
        case "ok":
            #expect(try PasswordHash.verify(encoded: vector.encoded, passphrase: passphrase))
        case "fail":
            do {
                let accepted = try PasswordHash.verify(encoded: vector.encoded, passphrase: passphrase)
                #expect(!accepted)
            } catch CryptoError.Code.invalidParameter {
                // t=0 strings: below Argon2idParameters.minimum, refused before libsodium runs.
                #expect(vector.encoded.contains(",t=0,"))
            }
        default:
            Issue.record("unknown expectation \(vector.expected_verify)")
        }
    }

    /// Reference-implementation hashes (8-byte salts, one with p=2) verify; a wrong passphrase does not.
    @Test(arguments: try LibsodiumArgon2idFile.load().phc_reference_argon2id.tests)
    func referenceEncodedStringVerifies(_ vector: LibsodiumArgon2idFile.ReferenceTest) throws {
        #expect(try PasswordHash.verify(encoded: vector.encoded, passphrase: SecureBytes(utf8: vector.password_utf8)))
        #expect(
            try !PasswordHash.verify(encoded: vector.encoded, passphrase: SecureBytes(utf8: vector.password_utf8 + "x"))
        )
        // Their raw outputs are not reachable through crypto_pwhash: it takes only 16-byte salts.
        expectCryptoError(.invalidLength) {
            try PasswordHash.deriveKey(
                length: 32, passphrase: SecureBytes(utf8: vector.password_utf8), salt: Array(vector.salt_utf8.utf8),
                parameters: .minimum)
        }
    }

    @Test func presetsAreLibsodiumsValues() {
        #expect(Argon2idParameters.interactive == Argon2idParameters(opsLimit: 2, memLimitBytes: 64 << 20))
        #expect(Argon2idParameters.moderate == Argon2idParameters(opsLimit: 3, memLimitBytes: 256 << 20))
        #expect(Argon2idParameters.sensitive == Argon2idParameters(opsLimit: 4, memLimitBytes: 1 << 30))
        #expect(Argon2idParameters.minimum == Argon2idParameters(opsLimit: 1, memLimitBytes: 8192))
        #expect(Argon2idParameters.maximumAccepted == Argon2idParameters(opsLimit: 64, memLimitBytes: 4 << 30))
        #expect(PasswordHash.saltLength == 16)
        #expect(PasswordHash.minimumKeyLength == 16)
    }

    @Test(arguments: [
        Argon2idParameters.minimum, .interactive, .moderate, .sensitive, .maximumAccepted,
        Argon2idParameters(opsLimit: 64, memLimitBytes: 8192),
        Argon2idParameters(opsLimit: 1, memLimitBytes: 4 << 30),
    ])
    func parametersInsideTheBoundsAreAccepted(_ parameters: Argon2idParameters) throws {
        #expect(try parameters.validated() == parameters)
    }

    @Test(arguments: [
        Argon2idParameters(opsLimit: 0, memLimitBytes: 64 << 20),
        Argon2idParameters(opsLimit: 65, memLimitBytes: 8192),
        Argon2idParameters(opsLimit: .max, memLimitBytes: 8192),
        Argon2idParameters(opsLimit: 2, memLimitBytes: 8191),
        Argon2idParameters(opsLimit: 2, memLimitBytes: 0),
        Argon2idParameters(opsLimit: 2, memLimitBytes: (4 << 30) + 1),
        Argon2idParameters(opsLimit: 2, memLimitBytes: .max),
    ])
    func parametersOutsideTheBoundsAreRejectedBeforeAnyWork(_ parameters: Argon2idParameters) throws {
        expectCryptoError(.invalidParameter) { try parameters.validated() }
        // libsodium itself would run all of these except the zero and too-small ones: 65 passes over
        // 8 KiB succeeds and 4 GiB + 1 would be allocated. The wrapper must refuse first.
        let start = ContinuousClock.now
        expectCryptoError(.invalidParameter) {
            try PasswordHash.deriveKey(
                length: 32, passphrase: SecureBytes(utf8: "pw"), salt: [UInt8](repeating: 0, count: 16),
                parameters: parameters)
        }
        #expect(ContinuousClock.now - start < .seconds(1))
    }

    @Test func hostileEncodedStringCostsAreRejected() throws {
        let passphrase = try SecureBytes(utf8: "password")
        // 5 GiB and 100 passes: over maximumAccepted, refused before libsodium allocates.
        expectCryptoError(.invalidParameter) {
            try PasswordHash.verify(
                encoded: "$argon2id$v=19$m=5242880,t=1,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc",
                passphrase: passphrase)
        }
        expectCryptoError(.invalidParameter) {
            try PasswordHash.verify(
                encoded: "$argon2id$v=19$m=256,t=100,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc",
                passphrase: passphrase)
        }
        // Not an Argon2id string at all, or too long for libsodium's buffer: simply not a match.
        #expect(try !PasswordHash.verify(encoded: "", passphrase: passphrase))
        #expect(
            try !PasswordHash.verify(encoded: "$argon2i$v=19$m=256,t=3,p=1$MDEyMzQ1Njc$G5aj", passphrase: passphrase))
        let valid = "$argon2id$v=19$m=256,t=3,p=1$MDEyMzQ1Njc$G5ajKFCoUzaXRLdz7UJb5wGkb2Xt+X5/GQjUYtS2+TE"
        #expect(try PasswordHash.verify(encoded: valid, passphrase: passphrase))
        #expect(try !PasswordHash.verify(encoded: valid + String(repeating: "A", count: 128), passphrase: passphrase))
        #expect(try !PasswordHash.verify(encoded: valid + "\0", passphrase: passphrase))
    }

    @Test func wrongSaltAndOutputLengthsAreRejected() throws {
        let passphrase = try SecureBytes(utf8: "pw")
        for saltLength in [0, 8, 15, 17, 32] {
            expectCryptoError(.invalidLength, "salt \(saltLength)") {
                try PasswordHash.deriveKey(
                    length: 32, passphrase: passphrase, salt: [UInt8](repeating: 1, count: saltLength),
                    parameters: .minimum)
            }
        }
        for length in [-1, 0, 15] {
            expectCryptoError(.invalidLength, "length \(length)") {
                try PasswordHash.deriveKey(
                    length: length, passphrase: passphrase, salt: [UInt8](repeating: 1, count: 16),
                    parameters: .minimum)
            }
        }
    }

    @Test func derivationDependsOnEveryInputAndAcceptsAnEmptyPassphrase() throws {
        let salt = [UInt8](repeating: 7, count: 16)
        func derive(_ passphrase: String, salt: [UInt8], ops: UInt64 = 1) throws -> SecureBytes {
            try PasswordHash.deriveKey(
                length: 32, passphrase: SecureBytes(utf8: passphrase), salt: salt,
                parameters: Argon2idParameters(opsLimit: ops, memLimitBytes: 8192))
        }
        let base = try derive("correct horse", salt: salt)
        #expect(try derive("correct horse", salt: salt) == base)
        #expect(try derive("correct horsf", salt: salt) != base)
        #expect(try derive("correct horse", salt: [UInt8](repeating: 8, count: 16)) != base)
        #expect(try derive("correct horse", salt: salt, ops: 2) != base)
        let empty = try derive("", salt: salt)
        #expect(empty.count == 32)
        #expect(empty != base)
    }

    /// RFC 9106 §5.3 needs p=4, a secret K and associated data X, which crypto_pwhash cannot take
    /// (it fixes p=1 and has neither input), so its tag is not reproducible here. The runnable part is
    /// the pre-hashing digest H0, a BLAKE2b-512 over the encoded inputs, computed with `BLAKE2b`.
    @Test func rfc9106PreHashDigest() throws {
        struct File: Decodable {
            let version: UInt32
            let memory_kib: UInt32
            let passes_t: UInt32
            let parallelism_p: UInt32
            let tag_length: UInt32
            let password: Hex
            let salt: Hex
            let secret: Hex
            let associated_data: Hex
            let pre_hashing_digest_H0: Hex
            let tag: Hex
        }
        let file = try VectorFile.decode(File.self, from: "argon2id_rfc9106_5_3.json")
        func le32(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
        func field(_ bytes: [UInt8]) -> [UInt8] { le32(UInt32(bytes.count)) + bytes }
        let argon2idType: UInt32 = 2
        var input = le32(file.parallelism_p) + le32(file.tag_length) + le32(file.memory_kib)
        input += le32(file.passes_t) + le32(file.version) + le32(argon2idType)
        input += field(file.password.bytes) + field(file.salt.bytes)
        input += field(file.secret.bytes) + field(file.associated_data.bytes)
        #expect(try BLAKE2b.hash(input, outputLength: 64) == file.pre_hashing_digest_H0.bytes)
        #expect(file.tag.bytes.count == 32)
    }
}
