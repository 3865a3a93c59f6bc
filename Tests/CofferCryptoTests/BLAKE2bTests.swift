import CofferCrypto
import Foundation
import Testing

@Suite("BLAKE2b (crypto_generichash)")
struct BLAKE2bTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let source: String
        let input: [UInt8]
        let key: [UInt8]
        let output: [UInt8]

        var testDescription: String { "\(source) in \(input.count) bytes, key \(key.count) bytes" }
    }

    /// `blake2b_kat.json`: 256 unkeyed and 256 keyed cases.
    static func jsonCases() throws -> [Case] {
        struct File: Decodable {
            struct Test: Decodable {
                let hash: String
                let `in`: Hex
                let key: Hex
                let out: Hex
            }

            let tests: [Test]
        }
        return try VectorFile.decode(File.self, from: "blake2b_kat.json").tests.map {
            Case(source: "blake2b_kat.json (\($0.hash))", input: $0.in.bytes, key: $0.key.bytes, output: $0.out.bytes)
        }
    }

    /// `blake2b-kat.txt`: 256 keyed cases as `in:\t…`, `key:\t…`, `hash:\t…` lines.
    static func textCases() throws -> [Case] {
        let text = try #require(String(data: try VectorFile.data("blake2b-kat.txt"), encoding: .utf8))
        var cases: [Case] = []
        var fields: [String: [UInt8]] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let parts = line.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].hasSuffix(":") else {
                throw VectorFormatError(description: "unexpected line in blake2b-kat.txt")
            }
            let name = String(parts[0].dropLast())
            fields[name] = try bytes(hex: String(parts[1]))
            if name == "hash" {
                guard let input = fields["in"], let key = fields["key"], let hash = fields["hash"] else {
                    throw VectorFormatError(description: "incomplete case in blake2b-kat.txt")
                }
                cases.append(Case(source: "blake2b-kat.txt", input: input, key: key, output: hash))
                fields = [:]
            }
        }
        return cases
    }

    @Test func filesHoldTheExpectedCases() throws {
        let json = try Self.jsonCases()
        #expect(json.count == 512)
        #expect(json.filter { $0.key.isEmpty }.count == 256)
        #expect(json.filter { $0.key.count == 64 }.count == 256)
        #expect(json.allSatisfy { $0.source.hasSuffix("(blake2b)") && $0.output.count == 64 })
        let text = try Self.textCases()
        #expect(text.count == 256)
        #expect(text.allSatisfy { $0.key.count == 64 && $0.output.count == 64 })
        for (index, testCase) in text.enumerated() {
            #expect(testCase.input == (0..<index).map { UInt8($0) })
        }
    }

    /// Every KAT case lies within libsodium's bounds (64-byte output; no key or a 64-byte key), so
    /// every case runs: one-shot, and incrementally in uneven pieces.
    @Test(arguments: try jsonCases() + textCases())
    func knownAnswer(_ vector: Case) throws {
        let key = vector.key.isEmpty ? nil : try SecureBytes(copying: vector.key)
        let oneShot =
            if let key {
                try BLAKE2b.hash(vector.input, key: key, outputLength: 64)
            } else {
                try BLAKE2b.hash(vector.input, outputLength: 64)
            }
        #expect(oneShot == vector.output)

        var hasher = try BLAKE2b.Hasher(outputLength: 64, key: key)
        var rest = vector.input[...]
        var pieceLength = 0
        while !rest.isEmpty {
            hasher.update(Array(rest.prefix(pieceLength)))
            rest = rest.dropFirst(pieceLength)
            pieceLength += 7
        }
        #expect(hasher.finalize() == vector.output)
    }

    @Test func lengthsOutsideLibsodiumsBoundsAreRejected() throws {
        #expect(BLAKE2b.minimumOutputLength == 16)
        #expect(BLAKE2b.maximumOutputLength == 64)
        #expect(BLAKE2b.defaultOutputLength == 32)
        #expect(BLAKE2b.minimumKeyLength == 16)
        #expect(BLAKE2b.maximumKeyLength == 64)
        let data: [UInt8] = [1, 2, 3]
        for length in [-1, 0, 1, 15, 65, 128] {
            expectCryptoError(.invalidLength, "output \(length)") { try BLAKE2b.hash(data, outputLength: length) }
            expectCryptoError(.invalidLength, "hasher output \(length)") { try BLAKE2b.Hasher(outputLength: length) }
        }
        for length in [0, 1, 15, 65] {
            let key = try SecureBytes(count: length)
            expectCryptoError(.invalidLength, "key \(length)") { try BLAKE2b.hash(data, key: key) }
            expectCryptoError(.invalidLength, "hasher key \(length)") { try BLAKE2b.Hasher(key: key) }
        }
        for length in [16, 32, 64] {
            #expect(try BLAKE2b.hash(data, outputLength: length).count == length)
            #expect(try BLAKE2b.hash(data, key: SecureBytes(count: length), outputLength: length).count == length)
        }
        #expect(try BLAKE2b.hash(data).count == 32)
    }

    @Test func hasherIsAValueAndFinalizeDoesNotEndIt() throws {
        let key = try SecureBytes.random(count: 32)
        var hasher = try BLAKE2b.Hasher(key: key)
        hasher.update(Array("hello ".utf8))
        var copy = hasher
        hasher.update(Array("world".utf8))
        copy.update(Data("there".utf8))
        #expect(hasher.finalize() == (try BLAKE2b.hash(Array("hello world".utf8), key: key)))
        #expect(copy.finalize() == (try BLAKE2b.hash(Array("hello there".utf8), key: key)))
        // Finalising twice gives the same digest, and more input may follow.
        #expect(hasher.finalize() == (try BLAKE2b.hash(Array("hello world".utf8), key: key)))
        hasher.update(Array("!".utf8))
        #expect(hasher.finalize() == (try BLAKE2b.hash(Array("hello world!".utf8), key: key)))
        #expect(hasher.outputLength == 32)
    }
}
