import CofferCore
import Foundation
import Testing

@Suite("ValueCodec")
struct ValueCodecTests {
    func roundTrip<T: Codable & Equatable>(_ value: T) throws -> T {
        try ValueCodec.decode(T.self, from: ValueCodec.encode(value))
    }

    @Test func primitivesRoundTrip() throws {
        for value in [true, false] { #expect(try roundTrip(value) == value) }
        for value in [Int.min, -1, 0, 1, Int.max] { #expect(try roundTrip(value) == value) }
        for value in [Int8.min, 0, Int8.max] { #expect(try roundTrip(value) == value) }
        for value in [Int16.min, Int16.max] { #expect(try roundTrip(value) == value) }
        for value in [Int32.min, Int32.max] { #expect(try roundTrip(value) == value) }
        for value in [Int64.min, Int64.max] { #expect(try roundTrip(value) == value) }
        for value in [UInt.min, UInt.max] { #expect(try roundTrip(value) == value) }
        for value in [UInt16(UInt8.max), UInt16.max] { #expect(try roundTrip(value) == value) }
        for value in [UInt32.max] { #expect(try roundTrip(value) == value) }
        for value in [UInt64.min, UInt64.max] { #expect(try roundTrip(value) == value) }
        for value in [0.0, -0.0, .pi, -.infinity, .infinity, .leastNonzeroMagnitude, .greatestFiniteMagnitude] {
            #expect(try roundTrip(value).bitPattern == value.bitPattern)
        }
        for value: Float in [0, 1.5, -.infinity, .leastNonzeroMagnitude, .greatestFiniteMagnitude] {
            #expect(try roundTrip(value).bitPattern == value.bitPattern)
        }
        let nan = Double(nan: 0x5A5, signaling: false)
        #expect(try roundTrip(nan).bitPattern == nan.bitPattern)
        for value in ["", "a", "ünïcödé", "🔑👩‍👩‍👧", "e\u{301}", "\0nul\0"] {
            let back = try roundTrip(value)
            #expect(Array(back.utf8) == Array(value.utf8))  // byte-exact: NFD stays NFD
        }
        for value in [Data(), Data([0]), Data((0...255).map { UInt8($0) })] { #expect(try roundTrip(value) == value) }
        #expect(try roundTrip(Int?.some(3)) == 3)
    }

    @Test func compactBinaryLayout() throws {
        #expect(try ValueCodec.encode(true) == Data([0x01, 0x01]))
        #expect(try ValueCodec.encode(-1) == Data([0x02] + [UInt8](repeating: 0xFF, count: 8)))
        #expect(try ValueCodec.encode(UInt8(1)) == Data([0x03, 1, 0, 0, 0, 0, 0, 0, 0]))
        #expect(try ValueCodec.encode(1.0) == Data([0x04, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F]))
        #expect(try ValueCodec.encode("hi") == Data([0x05, 0x68, 0x69]))
        #expect(try ValueCodec.encode(Data([9])) == Data([0x06, 9]))
    }

    @Test func integersWidenAndNarrowOnlyWhenExact() throws {
        // Widening keeps the value.
        #expect(try ValueCodec.decode(Int64.self, from: ValueCodec.encode(Int8(-5))) == -5)
        #expect(try ValueCodec.decode(UInt64.self, from: ValueCodec.encode(UInt8(200))) == 200)
        #expect(try ValueCodec.decode(Int.self, from: ValueCodec.encode(UInt32.max)) == Int(UInt32.max))
        #expect(try ValueCodec.decode(Double.self, from: ValueCodec.encode(42)) == 42.0)
        #expect(try ValueCodec.decode(Int?.self, from: ValueCodec.encode(Int16(7))) == 7)
        // Narrowing works when the value fits.
        #expect(try ValueCodec.decode(Int8.self, from: ValueCodec.encode(127)) == 127)
        #expect(try ValueCodec.decode(UInt8.self, from: ValueCodec.encode(255)) == 255)
        #expect(try ValueCodec.decode(UInt.self, from: ValueCodec.encode(Int64(1) << 40)) == 1 << 40)

        // …and throws .decoding when it does not.
        func expectDecodingError<T: Decodable>(_ type: T.Type, _ data: Data) {
            #expect {
                _ = try ValueCodec.decode(type, from: data)
            } throws: { ($0 as? CofferError)?.code == .decoding }
        }
        expectDecodingError(Int8.self, try ValueCodec.encode(128))
        expectDecodingError(Int8.self, try ValueCodec.encode(-129))
        expectDecodingError(UInt8.self, try ValueCodec.encode(-1))
        expectDecodingError(UInt.self, try ValueCodec.encode(Int.min))
        expectDecodingError(Int.self, try ValueCodec.encode(UInt64.max))
        expectDecodingError(Int64.self, try ValueCodec.encode(UInt64(Int64.max) + 1))
        expectDecodingError(Double.self, try ValueCodec.encode((1 << 53) + 1))  // not exact in a Double
        expectDecodingError(Int.self, try ValueCodec.encode(1.0))  // a Double is not an integer
        expectDecodingError(String.self, try ValueCodec.encode(1))
        expectDecodingError(Bool.self, try ValueCodec.encode(1))
        expectDecodingError(Data.self, try ValueCodec.encode("text"))
    }

    @Test func malformedBinaryIsADecodingError() {
        let cases: [(String, Data)] = [
            ("empty", Data()),
            ("bool 2", Data([0x01, 0x02])),
            ("bool long", Data([0x01, 0x01, 0x00])),
            ("short int", Data([0x02, 1, 2, 3])),
            ("long uint", Data([0x03] + [UInt8](repeating: 0, count: 9))),
            ("short double", Data([0x04, 0])),
            ("bad utf8", Data([0x05, 0xFF, 0xFE])),
        ]
        for (name, data) in cases {
            #expect(throws: CofferError.self, "\(name)") { _ = try ValueCodec.decode(Bool.self, from: data) }
            #expect(throws: CofferError.self, "\(name)") { _ = try ValueCodec.decode(Int.self, from: data) }
            #expect(throws: CofferError.self, "\(name)") { _ = try ValueCodec.decode(Double.self, from: data) }
            #expect(throws: CofferError.self, "\(name)") { _ = try ValueCodec.decode(String.self, from: data) }
        }
    }

    struct Account: Codable, Equatable {
        var name: String
        var token: String
        var scopes: [String]
        var expires: Date?
    }

    @Test func codableUsesSortedJSON() throws {
        let value = Account(name: "octocat", token: "t", scopes: ["repo", "gist"], expires: nil)
        let data = try ValueCodec.encode(value)
        #expect(data.first == UInt8(ascii: "{"))
        #expect(String(decoding: data, as: UTF8.self) == #"{"name":"octocat","scopes":["repo","gist"],"token":"t"}"#)
        #expect(try ValueCodec.decode(Account.self, from: data) == value)
        #expect(try ValueCodec.decode([Int].self, from: ValueCodec.encode([1, 2, 3])) == [1, 2, 3])
        #expect(try ValueCodec.decode([String: Int].self, from: ValueCodec.encode(["a": 1])) == ["a": 1])
        #expect(try ValueCodec.encode([1]).first == UInt8(ascii: "["))
    }

    @Test func jsonErrorsNeverQuoteTheStoredValue() throws {
        // Distinctive characters that no error message would contain by chance.
        let secret = "Ж§¶ŒŸ⚷qZxQ"
        let secretCharacters = Set(secret)
        let stored = [
            try ValueCodec.encode(Account(name: secret, token: secret, scopes: [secret], expires: nil)),
            Data(#"{"name": "\#(secret)", "token": 12, "scopes": []}"#.utf8),  // type mismatch next to it
            Data(#"{"name": "\#(secret)"#.utf8),  // truncated JSON
            Data(#"["\#(secret)", \#(secret)]"#.utf8),  // invalid JSON right at the secret
            Data(#""\#(secret)""#.utf8),  // a JSON string where an object is expected
        ]
        for data in stored {
            do {
                _ = try ValueCodec.decode([String: Int].self, from: data)
                Issue.record("decoding succeeded unexpectedly")
            } catch let error as CofferError {
                #expect(error.code == .decoding)
                let text = error.description + error.debugDescription + error.message
                #expect(Set(text).intersection(secretCharacters).isEmpty, "error text quotes the stored value")
                #expect(error.cause == nil)
            }
        }
    }

    @Test func encodingErrorsNeverQuoteTheValue() {
        struct Reading: Codable { var value: Double }
        #expect {
            _ = try ValueCodec.encode(Reading(value: .nan))
        } throws: { error in
            guard let error = error as? CofferError else { return false }
            return error.code == .encoding && !error.description.lowercased().contains("nan")
                && error.description.contains("value")
        }
    }

    @Test func binaryTagsAndJSONAreUnambiguous() throws {
        // Every primitive starts with its tag 0x01…0x06; nothing JSON does.
        let primitives: [Data] = [
            try ValueCodec.encode(true), try ValueCodec.encode(1), try ValueCodec.encode(UInt(1)),
            try ValueCodec.encode(1.0), try ValueCodec.encode("{}"), try ValueCodec.encode(Data("[1]".utf8)),
        ]
        #expect(primitives.map { $0.first } == [1, 2, 3, 4, 5, 6])
        struct Wrapper: Codable { var x: Int }
        let jsonValues: [Data] = [
            try ValueCodec.encode(Wrapper(x: 1)), try ValueCodec.encode([true]), try ValueCodec.encode(["k": "v"]),
            try ValueCodec.encode(Int?.none), try ValueCodec.encode(Date(timeIntervalSinceReferenceDate: -5)),
            try ValueCodec.encode(URL(fileURLWithPath: "/x")), try ValueCodec.encode(Decimal(string: "1.5") ?? 0),
            try ValueCodec.encode(UUID()),
        ]
        for data in jsonValues {
            let first = try #require(data.first)
            #expect(!(1...6).contains(first))
        }
        // A String holding JSON text stays a String; Data holding JSON stays Data.
        #expect(try ValueCodec.decode(String.self, from: ValueCodec.encode("{}")) == "{}")
        #expect(try ValueCodec.decode(Data.self, from: ValueCodec.encode(Data("[1]".utf8))) == Data("[1]".utf8))
        #expect(throws: CofferError.self) { _ = try ValueCodec.decode([Int].self, from: ValueCodec.encode(Data("[1]".utf8))) }
        // A stored nil Optional is JSON null, present and nil.
        #expect(try ValueCodec.decode(Int?.self, from: ValueCodec.encode(Int?.none)) == nil)
    }
}
