@testable import CofferCrypto
import Foundation
import Testing

@Suite("X25519")
struct X25519Tests {
    struct WycheproofFile: Decodable {
        struct Group: Decodable {
            let curve: String
            let tests: [Case]
        }

        struct Case: Decodable, Sendable, CustomTestStringConvertible {
            let tcId: Int
            let comment: String
            let flags: [String]
            let `public`: Hex
            let `private`: Hex
            let shared: Hex
            let result: String

            var testDescription: String { "tcId \(tcId): \(comment)" }
        }

        let numberOfTests: Int
        let testGroups: [Group]

        static func load() throws -> WycheproofFile {
            try VectorFile.decode(WycheproofFile.self, from: "wycheproof_x25519_test.json")
        }

        static func cases() throws -> [Case] { try load().testGroups.flatMap(\.tests) }
    }

    @Test func wycheproofFileHoldsTheExpectedCases() throws {
        let file = try WycheproofFile.load()
        let cases = file.testGroups.flatMap(\.tests)
        #expect(file.testGroups.allSatisfy { $0.curve == "curve25519" })
        #expect(cases.count == 518 && file.numberOfTests == 518)
        #expect(cases.filter { $0.shared.bytes.allSatisfy { $0 == 0 } }.count == 31)
    }

    /// Every case: the shared secret matches; a zero shared secret (a public key of small order)
    /// is refused rather than returned. Wycheproof marks twist points and non-canonical keys
    /// "acceptable": X25519 as RFC 7748 defines it computes them, and so does libsodium.
    @Test(arguments: try WycheproofFile.cases())
    func wycheproof(_ vector: WycheproofFile.Case) throws {
        let secret = try SecureBytes(copying: vector.private.bytes)
        if vector.shared.bytes.allSatisfy({ $0 == 0 }) {
            #expect(vector.flags.contains("ZeroSharedSecret"))
            expectCryptoError(.invalidParameter) { try X25519.sharedSecret(secret, publicKey: vector.public.bytes) }
        } else {
            #expect(try X25519.sharedSecret(secret, publicKey: vector.public.bytes).testCopy == vector.shared.bytes)
        }
    }

    /// RFC 7748 §6.1: both public keys from their secrets, and the shared secret both ways.
    @Test func rfc7748DiffieHellman() throws {
        let alice = try SecureBytes(copying: try bytes(hex: "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"))
        let bob = try SecureBytes(copying: try bytes(hex: "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"))
        let alicePublic = try X25519.publicKey(for: alice)
        let bobPublic = try X25519.publicKey(for: bob)
        #expect(alicePublic == (try bytes(hex: "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")))
        #expect(bobPublic == (try bytes(hex: "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")))
        let shared = try bytes(hex: "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        #expect(try X25519.sharedSecret(alice, publicKey: bobPublic).testCopy == shared)
        #expect(try X25519.sharedSecret(bob, publicKey: alicePublic).testCopy == shared)
    }

    @Test func wrongLengthsAreRefused() throws {
        let secret = try X25519.newSecretKey()
        expectCryptoError(.invalidLength) { try X25519.publicKey(for: try SecureBytes(count: 31)) }
        expectCryptoError(.invalidLength) { try X25519.sharedSecret(secret, publicKey: [UInt8](repeating: 9, count: 33)) }
        expectCryptoError(.invalidLength) { try X25519.sharedSecret(try SecureBytes(count: 16), publicKey: [UInt8](repeating: 9, count: 32)) }
    }
}

@Suite("Bech32 and age's key strings")
struct AgeKeyTests {
    struct AgeFile: Decodable {
        struct Pair: Decodable, Sendable, CustomTestStringConvertible {
            let identity: String
            let recipient: String
            let file: String
            var testDescription: String { recipient }
        }

        let pairs: [Pair]
        let refused_identities: [String: String]
        let refused_recipients: [String: String]

        static func load() throws -> AgeFile { try VectorFile.decode(AgeFile.self, from: "age_keys.json") }
    }

    /// BIP 173's valid strings (all but the one longer than 90 characters' counterpart: age has
    /// no length limit) decode, and encode back to themselves.
    @Test(arguments: [
        "A12UEL5L", "a12uel5l",
        "an83characterlonghumanreadablepartthatcontainsthenumber1andtheexcludedcharactersbio1tt5tgs",
        "abcdef1qpzry9x8gf2tvdw0s3jn54khce6mua7lmqqqxw",
        "split1checkupstagehandshakeupstreamerranterredcaperred2y9e3w", "?1ezyfcl",
    ])
    func bip173Valid(_ text: String) throws {
        let (hrp, data) = try Bech32.decode(Array(text.utf8))
        #expect(Bech32.encode(hrp: hrp, data: data) == Array(text.utf8))
    }

    /// BIP 173's invalid strings: a character outside the range, no separator, an empty
    /// human-readable part, a character outside the charset, a checksum too short, a checksum
    /// computed over the upper-case part.
    @Test(arguments: [
        "\u{20}1nwldj5", "\u{7f}1axkwrx", "pzry9x0s0muk", "1pzry9x0s0muk", "x1b4n0q5v", "li1dgmt3",
        "de1lg7wt\u{ff}", "A1G7SGD8", "10a06t8", "1qzzfhee",
    ])
    func bip173Invalid(_ text: String) {
        #expect(throws: Bech32.Failure.self) { try Bech32.decode(Array(text.utf8)) }
    }

    /// Identities made by age-keygen parse, give age's recipient, and encode back byte for byte;
    /// the identity file age-keygen wrote parses too.
    @Test(arguments: try AgeFile.load().pairs)
    func ageKeygenPairs(_ pair: AgeFile.Pair) throws {
        let identity = try X25519Identity(parsing: try SecureBytes(utf8: pair.identity))
        #expect(identity.recipient.description == pair.recipient)
        #expect(String(decoding: try identity.encoded().testCopy, as: UTF8.self) == pair.identity)
        let recipient = try X25519Recipient(parsing: pair.recipient)
        #expect(recipient == identity.recipient)
        #expect(X25519Recipient(pair.recipient) == recipient)
        let fromFile = try X25519Identity.parseFile(try SecureBytes(utf8: pair.file))
        #expect(fromFile.map(\.recipient) == [recipient])
        // What Coffer writes is what age-keygen writes, but for the time.
        let written = String(decoding: try identity.fileContents(created: Date(timeIntervalSince1970: 0)).testCopy, as: UTF8.self)
        #expect(written == "# created: 1970-01-01T00:00:00Z\n# public key: \(pair.recipient)\n\(pair.identity)\n")
    }

    @Test func refusedAsAgeRefusesThem() throws {
        let file = try AgeFile.load()
        #expect(file.refused_identities.count == 6 && file.refused_recipients.count == 5)
        for (why, text) in file.refused_identities {
            do {
                _ = try X25519Identity(parsing: try SecureBytes(utf8: text))
                Issue.record("an identity with \(why) was accepted")
            } catch let error as CryptoError {
                #expect(error.code == .invalidParameter, "\(why)")
                // The message never quotes what it was given (it may be a secret).
                #expect(!error.message.contains(String(text.dropFirst(16).prefix(12))), "\(why): \(error.message)")
            }
        }
        for (why, text) in file.refused_recipients {
            #expect(throws: CryptoError.self, "\(why)") { try X25519Recipient(parsing: text) }
            #expect(X25519Recipient(text) == nil)
        }
    }

    @Test func identityFiles() throws {
        let a = try X25519Identity.generate()
        let b = try X25519Identity.generate()
        let text = "# two keys\r\n\n\(String(decoding: try a.encoded().testCopy, as: UTF8.self))\r\n  \n"
            + "\(String(decoding: try b.encoded().testCopy, as: UTF8.self))"
        #expect(try X25519Identity.parseFile(try SecureBytes(utf8: text)).map(\.recipient) == [a.recipient, b.recipient])
        // Empty, comments only, or a bad line (named by number, never quoted).
        expectCryptoError(.invalidParameter) { try X25519Identity.parseFile(try SecureBytes(utf8: "")) }
        expectCryptoError(.invalidParameter) { try X25519Identity.parseFile(try SecureBytes(utf8: "# nothing\n")) }
        let bad = "# one\nAGE-SECRET-KEY-1NOTAKEY\n"
        do {
            _ = try X25519Identity.parseFile(try SecureBytes(utf8: bad))
            Issue.record("a bad line was accepted")
        } catch let error as CryptoError {
            #expect(error.message.contains("line 2") && !error.message.contains("NOTAKEY"), "\(error.message)")
        }
    }

    @Test func descriptionsShowNoSecret() throws {
        let identity = try X25519Identity.generate()
        let secretText = String(decoding: try identity.encoded().testCopy, as: UTF8.self)
        var dumped = ""
        dump(identity, to: &dumped)
        for shown in ["\(identity)", String(reflecting: identity), dumped] {
            #expect(!shown.contains(String(secretText.dropFirst(16).prefix(20))))
            #expect(shown.contains(identity.recipient.description) || shown == dumped)
        }
        // Generated identities differ, and each one's recipient is its public key.
        let other = try X25519Identity.generate()
        #expect(other.recipient != identity.recipient)
        #expect(identity.recipient.publicKey == (try X25519.publicKey(for: identity.secretKey)))
    }
}
