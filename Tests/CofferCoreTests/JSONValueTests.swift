import CofferCore
import Foundation
import Testing

@Suite("JSONValue: a Codable, Sendable [String: Any]")
struct JSONValueTests {
    /// What a settings screen keeps in one loosely typed dictionary.
    let settings: JSONValue = [
        "fontSize": 14, "theme": "dark", "rulers": [80, 120], "wrap": true, "lineHeight": 1.5, "font": nil,
        "minimap": ["enabled": false, "side": "right"],
    ]

    @Test("Literals build every kind, and the accessors read them back")
    func literalsAndAccessors() {
        #expect(settings["fontSize"] == .int(14))
        #expect(settings["fontSize"]?.intValue == 14)
        #expect(settings["fontSize"]?.doubleValue == 14)
        #expect(settings["theme"]?.stringValue == "dark")
        #expect(settings["rulers"]?.arrayValue?.count == 2)
        #expect(settings["rulers"]?[0]?.intValue == 80)
        #expect(settings["rulers"]?[2] == nil)  // out of bounds reads as absent
        #expect(settings["wrap"]?.boolValue == true)
        #expect(settings["lineHeight"]?.doubleValue == 1.5)
        #expect(settings["lineHeight"]?.intValue == nil)  // not an integer
        #expect(settings["font"]?.isNull == true)
        #expect(settings["missing"] == nil)
        #expect(settings["minimap"]?["side"] == "right")
        #expect(settings.objectValue?.count == 7)
        #expect(settings["theme"]?.intValue == nil)
        #expect(settings["theme"]?["nested"] == nil)  // a member of a non-object is absent
        let interpolated: JSONValue = "size \(14)"
        #expect(interpolated == .string("size 14"))
    }

    @Test("Subscripts write members and elements; nil removes a member")
    func writingThroughSubscripts() {
        var value = settings
        value["fontSize"] = 16
        value["minimap"]?["enabled"] = true
        value["rulers"]?[1] = 100
        value["font"] = nil
        #expect(value["fontSize"] == 16)
        #expect(value["minimap"]?["enabled"] == true)
        #expect(value["rulers"] == [80, 100])
        #expect(value.objectValue?.keys.contains("font") == false)
        var scalar: JSONValue = 3
        scalar["becomes"] = "an object"
        #expect(scalar == ["becomes": "an object"])
    }

    @Test("Codable through ValueCodec: stored as JSON text, read back equal")
    func roundTripsThroughValueCodec() throws {
        let data = try ValueCodec.encode(settings)
        #expect(data.first == UInt8(ascii: "{"))  // plain JSON, not a binary tag
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"rulers\":[80,120]"))
        #expect(try ValueCodec.decode(JSONValue.self, from: data) == settings)
        for value: JSONValue in [
            nil, true, 0, -7, 2.5, "", "ünï \"q\"", [], [:], [nil, [1, [2]]], .int(.max), .int(.min),
        ] {
            #expect(try ValueCodec.decode(JSONValue.self, from: ValueCodec.encode(value)) == value)
            #expect(
                try ValueCodec.decode(JSONValue.self, from: ValueCodec.encode(value, as: .plain), as: .plain) == value)
        }
        // Any JSON another program wrote reads as a JSONValue.
        let foreign = Data(#"{"a": [1, 2.25, "x", null, {"b": false}], "c": -1e3}"#.utf8)
        let parsed = try ValueCodec.decode(JSONValue.self, from: foreign)
        #expect(parsed["a"]?[1] == 2.25)
        #expect(parsed["a"]?[4]?["b"] == false)
        #expect(parsed["c"] == -1000)
        // JSON has no spelling for nan: encoding says so instead of writing something unreadable.
        #expect { _ = try ValueCodec.encode(JSONValue.double(.nan)) } throws: {
            ($0 as? CofferError)?.code == .encoding
        }
    }

    @Test("An integral double is the same JSON value as the integer: equal, same hash")
    func numbersCompareByValue() {
        #expect(JSONValue.double(2) == .int(2))
        #expect(JSONValue.int(2) == .double(2))
        #expect(JSONValue.double(2).hashValue == JSONValue.int(2).hashValue)
        #expect(JSONValue.double(2.5) != .int(2))
        #expect(JSONValue.bool(true) != .int(1))
        #expect(JSONValue.string("1") != .int(1))
        let set: Set<JSONValue> = [1, 1.0, "1", true, nil, [1], ["a": 1]]
        #expect(set.count == 6)
        // Objects compare by members, whatever order they were written in.
        #expect(JSONValue(dictionaryLiteral: ("a", 1), ("b", 2)) == JSONValue(dictionaryLiteral: ("b", 2), ("a", 1)))
    }

    @Test("description is compact JSON with sorted keys; debugDescription names the type")
    func description() {
        #expect(
            settings.description
                == #"{"font":null,"fontSize":14,"lineHeight":1.5,"minimap":{"enabled":false,"side":"right"},"rulers":[80,120],"theme":"dark","wrap":true}"#
        )
        #expect(JSONValue.string("a\"b\\c\n\u{1}").description == #""a\"b\\c\n\u0001""#)
        #expect(JSONValue.int(-3).debugDescription == "JSONValue(-3)")
        #expect("\(JSONValue.array([]))" == "[]")
    }

    @Test("Converts to and from Foundation's JSON objects ([String: Any]); names the path of what is not JSON")
    func foundationObjects() throws {
        let any: [String: Any] = [
            "n": 1, "d": 0.5, "s": "x", "b": true, "null": NSNull(), "list": [1, "two"], "u8": UInt8(7),
        ]
        let value = try JSONValue(jsonObject: any)
        #expect(value == ["n": 1, "d": 0.5, "s": "x", "b": true, "null": nil, "list": [1, "two"], "u8": 7])
        let back = try #require(value.jsonObject as? [String: Any])
        #expect(back["s"] as? String == "x")
        #expect((back["list"] as? [Any])?.count == 2)
        #expect(back["null"] is NSNull)
        // JSONSerialization's output converts too.
        let serialized = try JSONSerialization.jsonObject(with: Data(#"{"k":[true,3]}"#.utf8))
        #expect(try JSONValue(jsonObject: serialized) == ["k": [true, 3]])

        #expect {
            _ = try JSONValue(jsonObject: ["window": ["frame": Date(timeIntervalSince1970: 0)]])
        } throws: { error in
            guard let error = error as? CofferError, error.code == .invalidArgument else { return false }
            return error.message.contains("at .window.frame") && error.message.contains("Date")
        }
        #expect { _ = try JSONValue(jsonObject: [UInt64.max]) } throws: {
            ($0 as? CofferError)?.message.contains("at [0]") == true
        }
    }
}
