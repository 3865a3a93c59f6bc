import CofferCore
import Foundation
import Testing

/// `JSONValue(jsonObject:)` over what Foundation hands out: `JSONSerialization` gives numbers and
/// booleans as the same `NSNumber` class, so a 0 or 1 read as a Bool (or a Bool as a number)
/// would change a value's kind on its way through the store.
@Suite("JSONValue from Foundation objects: numbers stay numbers, booleans stay booleans")
struct JSONValueFoundationTests {
    @Test("JSONSerialization's numbers 0 and 1 stay numbers, and its booleans stay booleans")
    func serializedZeroAndOneAreNumbers() throws {
        let text = #"{"fontSize":1,"margin":0,"scale":1.0,"ratio":2.5,"wrap":true,"gutter":false,"list":[1,0,true]}"#
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8))
        let value = try JSONValue(jsonObject: object)
        #expect(value["fontSize"] == .int(1))
        #expect(value["margin"] == .int(0))
        #expect(value["scale"] == .int(1))
        #expect(value["ratio"] == .double(2.5))
        #expect(value["wrap"] == .bool(true))
        #expect(value["gutter"] == .bool(false))
        #expect(value["list"] == .array([.int(1), .int(0), .bool(true)]))
        // And back: the same JSON a program reading the store would see.
        let again = try JSONValue(jsonObject: value.jsonObject)
        #expect(again == value)
        #expect(again["fontSize"]?.boolValue == nil)
    }

    @Test("A JSONSerialization number beyond Int is a Double, as JSONDecoder reads it")
    func serializedHugeNumber() throws {
        let object = try JSONSerialization.jsonObject(with: Data("[18446744073709551615]".utf8))
        #expect(try JSONValue(jsonObject: object) == [.double(Double(UInt64.max))])
        let decoded = try JSONDecoder().decode(JSONValue.self, from: Data("[18446744073709551615]".utf8))
        #expect(decoded == [.double(Double(UInt64.max))])
    }

    @Test("Swift values built by hand keep their kinds too")
    func handBuiltValues() throws {
        let object: [String: Any] = ["one": 1, "zero": 0, "yes": true, "no": false, "half": 0.5, "small": Int8(1)]
        let value = try JSONValue(jsonObject: object)
        #expect(value == ["one": 1, "zero": 0, "yes": true, "no": false, "half": 0.5, "small": 1])
        #expect(value["one"]?.boolValue == nil)
        #expect(value["yes"]?.intValue == nil)
    }
}
