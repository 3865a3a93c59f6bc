import CofferCore
import CofferRuntime
import CofferTesting
import Foundation
import Testing

/// Error messages name what the user can act on: which key, which type was asked for, what is
/// stored there (never the stored content), and for the conformance suite, what differed.
@Suite("Error messages name the key, the type and what differed")
struct ErrorMessageTests {
    func decodingMessage<T: Decodable>(_ type: T.Type, _ data: Data, as encoding: ValueEncoding = .tagged) -> String? {
        do {
            _ = try ValueCodec.decode(type, from: data, as: encoding, source: "key \"timeout\"")
            return nil
        } catch let error as CofferError {
            #expect(error.code == .decoding)
            return error.message
        } catch {
            Issue.record("not a CofferError: \(error)")
            return nil
        }
    }

    struct Theme: Codable {
        struct Color: Codable { var red: Double }
        var name: String
        var accent: Color
    }

    @Test("A decoding failure names the key, the requested type and the kind of value stored")
    func decodingNamesKeyAndTypes() throws {
        let secret = "hunter2-secret"
        let message = try #require(decodingMessage(Double.self, try ValueCodec.encode(secret)))
        #expect(
            message == "cannot read key \"timeout\" as Double: the stored value is a String of 14 bytes, not a Double")
        #expect(!message.contains(secret))

        let intAsString = try #require(decodingMessage(String.self, try ValueCodec.encode(30)))
        #expect(intAsString.contains("key \"timeout\"") && intAsString.contains("an integer, not a String"))

        let json = try ValueCodec.encode(["name": "Solarized", "accent": "#b58900"])
        let theme = try #require(decodingMessage(Theme.self, json))
        #expect(theme.contains("key \"timeout\" as Theme"))
        #expect(theme.contains("a JSON object of \(json.count) bytes"))
        #expect(theme.contains("at .accent"))
        #expect(!theme.contains("b58900") && !theme.contains("Solarized"))

        let missing = try #require(decodingMessage(Theme.self, try ValueCodec.encode(["name": "x"])))
        #expect(missing.contains("missing member \"accent\""))

        let plain = try #require(decodingMessage(Int.self, Data("not a number".utf8), as: .plain))
        #expect(plain.contains("key \"timeout\" as Int"))
        #expect(!plain.contains("not a number"))

        let malformed = try #require(decodingMessage(Bool.self, Data([0x01, 0x07])))
        #expect(malformed.contains("key \"timeout\" as Bool") && malformed.contains("malformed"))
    }

    @Test("A strategy's typed get names its key")
    func strategyGetNamesKey() throws {
        let store = DictionaryStrategy()
        try store.set("light", for: "theme")
        #expect {
            _ = try store.get(Int.self, for: "theme")
        } throws: { error in
            let message = (error as? CofferError)?.message ?? ""
            return message.contains("key \"theme\"") && message.contains("as Int")
                && message.contains("a String of 5 bytes")
        }
    }

    @Test("The conformance suite says what differed: lengths, first differing byte and both values")
    func conformanceDifferences() {
        func difference(_ loaded: [UInt8]?, _ expected: [UInt8]?) -> String {
            StrategyConformance.difference(loaded.map { Data($0) }, expected.map { Data($0) })
        }
        #expect(
            difference([1], [2])
                == "returned 1 byte as expected: they differ at byte 0 (0x01, expected 0x02), 1 byte of the first 1 in all"
        )
        #expect(
            difference([0, 1, 2, 3], [0, 1, 9, 0xff])
                == "returned 4 bytes as expected: they differ at byte 2 (0x02, expected 0x09), 2 bytes of the first 4 in all"
        )
        #expect(
            difference([1, 2, 3], [1, 2])
                == "returned 3 bytes, expected 2: the first 2 bytes match, then 1 byte more starting with 0x03")
        #expect(
            difference([1], [1, 2, 3])
                == "returned 1 byte, expected 3: the first 1 byte match, then the value ends where 0x02 was expected (2 bytes missing)"
        )
        #expect(difference(nil, [1, 2]) == "returned no value (nil), expected 2 bytes; the value was lost")
        #expect(difference([], nil) == "returned 0 bytes, expected no value (the key should be absent)")
    }

    /// Stores every value with its last byte flipped.
    final class BitFlipStrategy: PersistenceStrategy {
        let inner = DictionaryStrategy()
        func load(_ key: String) throws -> Data? { try inner.load(key) }
        func save(_ data: Data, for key: String) throws {
            var flipped = data
            if let last = flipped.indices.last { flipped[last] ^= 0x01 }
            try inner.save(flipped, for: key)
        }
        func remove(_ key: String) throws { try inner.remove(key) }
        func keys() throws -> [String] { try inner.keys() }
    }

    @Test("A strategy that flips a bit fails with the offset and the two byte values, not 'N bytes, expected N bytes'")
    func conformanceFailureOfAFlippedBit() throws {
        let failures = StrategyConformance.failures(of: .init(make: { BitFlipStrategy() }), includingSlow: false)
        #expect(!failures.isEmpty)
        let texts = failures.map { String(describing: $0.error) }
        #expect(texts.contains { $0.contains("they differ at byte") && $0.contains("expected 0x") })
        for text in texts {
            #expect(!text.contains(#/returned (\d+) bytes?, expected \1 bytes?/#), "\(text)")
        }
    }

    @Test("Seconds print with at most two decimals: a lock wait of 9.999982 s reads 10 s")
    func secondsText() {
        #expect(9.999982.secondsText == "10")
        #expect(0.5.secondsText == "0.5")
        #expect(2.25.secondsText == "2.25")
        #expect(0.05.secondsText == "0.05")
        #expect(0.0.secondsText == "0")
        #expect((-1.5).secondsText == "-1.5")
    }

    @Test("A lock that stays busy names the wait in rounded seconds")
    func lockWaitMessage() throws {
        let directory = try TemporaryDirectory(prefix: "coffer-lock-message")
        let fs = LiveFileSystem()
        let path = directory.path("store.lock")
        let holder = try fs.open(path, create: true, exclusive: false, mode: 0o600)
        defer { fs.close(holder) }
        try fs.lock(holder, exclusive: true, timeout: .zero, path: path)
        let waiter = try fs.open(path, create: false, exclusive: false, mode: 0o600)
        defer { fs.close(waiter) }
        let error = #expect(throws: CofferError.self) {
            try fs.lock(waiter, exclusive: true, timeout: .milliseconds(250), path: path)
        }
        #expect(error?.code == .busy)
        #expect(error?.message.contains("(waited 0.25 s)") == true, "\(error?.message ?? "")")
    }
}
