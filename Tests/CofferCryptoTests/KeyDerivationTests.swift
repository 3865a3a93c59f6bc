import CofferCrypto
import Testing

@Suite("crypto_kdf subkeys")
struct KeyDerivationTests {
    struct File: Decodable {
        struct Test: Decodable, Sendable, CustomTestStringConvertible {
            let subkey_id: UInt64
            let subkey_len: Int
            let expected: String
            let subkey: Hex?

            var testDescription: String { "id \(subkey_id) length \(subkey_len) \(expected)" }
        }

        let master_key: Hex
        let context_utf8: String
        let tests: [Test]

        static func load() throws -> File {
            try VectorFile.decode(File.self, from: "kdf_blake2b_libsodium.json")
        }
    }

    @Test func fileHoldsTheExpectedCases() throws {
        let file = try File.load()
        #expect(file.tests.count == 76)
        #expect(file.tests.filter { $0.expected == "ok" }.count == 59)
        #expect(file.tests.filter { $0.expected == "error" }.count == 17)
    }

    @Test(arguments: try File.load().tests)
    func libsodiumVector(_ vector: File.Test) throws {
        let file = try File.load()
        let master = try SecureBytes(copying: file.master_key.bytes)
        switch vector.expected {
        case "ok":
            let subkey = try KeyDerivation.deriveSubkey(
                from: master, id: vector.subkey_id, context: file.context_utf8, length: vector.subkey_len)
            #expect(subkey.testCopy == vector.subkey?.bytes)
        case "error":
            expectCryptoError(.invalidLength) {
                try KeyDerivation.deriveSubkey(
                    from: master, id: vector.subkey_id, context: file.context_utf8, length: vector.subkey_len)
            }
        default:
            Issue.record("unknown expectation \(vector.expected)")
        }
    }

    @Test func constantsAreLibsodiums() {
        #expect(KeyDerivation.contextLength == 8)
        #expect(KeyDerivation.masterKeyLength == 32)
        #expect(KeyDerivation.minimumSubkeyLength == 16)
        #expect(KeyDerivation.maximumSubkeyLength == 64)
    }

    @Test func badContextsAndMasterKeysAreRejected() throws {
        let master = try SecureBytes.random(count: 32)
        for context in ["", "short", "sevench", "ninechars", "KDF test "] {
            expectCryptoError(.invalidLength, "context \(context)") {
                try KeyDerivation.deriveSubkey(from: master, id: 0, context: context, length: 32)
            }
        }
        // 8 bytes, but not ASCII ("é" is two UTF-8 bytes).
        expectCryptoError(.invalidParameter) {
            try KeyDerivation.deriveSubkey(from: master, id: 0, context: "cafébar", length: 32)
        }
        for length in [0, 16 - 1, 31, 33, 64] {
            expectCryptoError(.invalidLength, "master key \(length)") {
                try KeyDerivation.deriveSubkey(
                    from: SecureBytes(count: length), id: 0, context: "KDF test", length: 32)
            }
        }
    }

    @Test func subkeysDifferByIdAndContext() throws {
        let master = try SecureBytes.random(count: 32)
        let a = try KeyDerivation.deriveSubkey(from: master, id: 1, context: "cofrrec1", length: 32)
        #expect(try KeyDerivation.deriveSubkey(from: master, id: 1, context: "cofrrec1", length: 32) == a)
        #expect(try KeyDerivation.deriveSubkey(from: master, id: 2, context: "cofrrec1", length: 32) != a)
        #expect(try KeyDerivation.deriveSubkey(from: master, id: 1, context: "cofrrec2", length: 32) != a)
    }
}
