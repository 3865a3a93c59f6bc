import Foundation

/// Any JSON value: the `Codable`, `Sendable` stand-in for a heterogeneous `[String: Any]`.
///
/// Settings code often keeps a loosely typed dictionary (`editorSettings: [String: Any]`) that
/// cannot be `Codable` or `Sendable`. `JSONValue` holds the same shapes — null, booleans,
/// numbers, strings, arrays and objects — written with ordinary literals, so it can be a
/// `@Stored` value, compared, hashed and printed:
///
/// ```swift
/// @Stored(backed: .keyValue(key: "editorSettings"))
/// var editorSettings: JSONValue = ["fontSize": 14, "theme": "dark", "rulers": [80, 120], "wrap": true]
///
/// editorSettings["fontSize"]?.intValue         // 14
/// editorSettings["rulers"]?[1]                 // 120
/// editorSettings["minimap"] = ["enabled": false]  // a write through the wrapper persists
/// ```
///
/// It is stored as JSON text (``ValueCodec`` gives it no binary form of its own), so another
/// program reading the store sees ordinary JSON.
///
/// - **Numbers.** Integers are kept exactly as ``int(_:)`` (64-bit); other numbers as
///   ``double(_:)``. An integral double equals, and hashes like, the integer of the same value
///   (`.double(2) == .int(2)`), because JSON itself does not tell `2` from `2.0`. Doubles that
///   JSON cannot spell (`nan`, `inf`) fail to encode with ``CofferError/Code/encoding``.
/// - **Objects** keep no key order: JSON text is written with sorted keys, and two objects with
///   the same members are equal.
public enum JSONValue: Sendable, Hashable, Codable, CustomStringConvertible, CustomDebugStringConvertible {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number with no fractional part that fits in 64 bits.
    case int(Int)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An ordered list of values.
    case array([JSONValue])
    /// Members by name.
    case object([String: JSONValue])

    // MARK: Reading

    /// Whether this is ``null``.
    public var isNull: Bool { self == .null }

    /// The boolean, if this is one.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The number as an `Int`, if it is one exactly (`.double(3)` gives 3, `.double(3.5)` nil).
    public var intValue: Int? {
        switch self {
        case .int(let value): return value
        case .double(let value): return Int(exactly: value)
        default: return nil
        }
    }

    /// The number as a `Double`, if this is a number.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    /// The string, if this is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members, if this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The member named `key` of an object; `nil` when absent or when this is not an object.
    ///
    /// Setting a member of a non-object turns this value into an object holding just that
    /// member (as a dictionary literal would); setting `nil` removes the member.
    public subscript(key: String) -> JSONValue? {
        get { objectValue?[key] }
        set {
            var members = objectValue ?? [:]
            members[key] = newValue
            self = .object(members)
        }
    }

    /// The element at `index` of an array; `nil` when out of bounds or when this is not an array.
    ///
    /// Setting an element requires an array and an index in bounds (setting `nil` there stores
    /// ``null``, keeping the other indices): anything else is a programmer error, as for `Array`.
    public subscript(index: Int) -> JSONValue? {
        get {
            guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
            return elements[index]
        }
        set {
            guard case .array(var elements) = self, elements.indices.contains(index) else {
                preconditionFailure("JSONValue: index \(index) is out of bounds of \(kindName)")
            }
            elements[index] = newValue ?? .null
            self = .array(elements)
        }
    }

    /// The name of this value's kind, for messages: `null`, `a boolean`, `an array of 3`, ….
    var kindName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int, .double: return "a number"
        case .string: return "a string"
        case .array(let elements): return "an array of \(elements.count)"
        case .object(let members): return "an object of \(members.count) members"
        }
    }

    // MARK: Foundation's JSON objects

    /// Converts what `JSONSerialization` produces (or a `[String: Any]` built by hand):
    /// `NSNull`, `Bool`, integers, `Double`, `String`, arrays and `[String: Any]` dictionaries.
    ///
    /// - Throws: ``CofferError`` with code ``CofferError/Code/invalidArgument`` naming the path
    ///   of the first value of another type (`at .window.frame: a CGRect is not JSON`).
    public init(jsonObject: Any) throws {
        self = try Self.convert(jsonObject, path: "")
    }

    /// The value as `JSONSerialization` would give it: `NSNull`, `Bool`, `Int`, `Double`,
    /// `String`, `[Any]`, `[String: Any]` — for code that still takes `[String: Any]`.
    public var jsonObject: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let value): return value
        case .int(let value): return value
        case .double(let value): return value
        case .string(let value): return value
        case .array(let elements): return elements.map(\.jsonObject)
        case .object(let members): return members.mapValues(\.jsonObject)
        }
    }

    private static func convert(_ object: Any, path: String) throws -> JSONValue {
        switch object {
        case let value as JSONValue: return value
        case is NSNull: return .null
        // Before `as Bool`: an NSNumber holding 0 or 1 (JSONSerialization's `0`, `1`, `1.0`)
        // casts to Bool, so only the boolean NSNumber's own class is read as one.
        case let number as NSNumber where type(of: object) is NSNumber.Type:
            if type(of: number) == type(of: NSNumber(value: true)) { return .bool(number.boolValue) }
            if let int = Int(exactly: number) { return .int(int) }
            return .double(number.doubleValue)
        case let value as Bool: return .bool(value)
        case let value as Int: return .int(value)
        case let value as Double: return Int(exactly: value).map(JSONValue.int) ?? .double(value)
        case let value as Float: return .double(Double(value))
        case let value as any BinaryInteger:
            guard let int = Int(exactly: value) else {
                throw CofferError(
                    .invalidArgument, "at \(path.isEmpty ? "the top level" : path): the integer does not fit in 64 bits"
                )
            }
            return .int(int)
        case let value as String: return .string(value)
        case let value as [Any]:
            return .array(try value.enumerated().map { try convert($1, path: "\(path)[\($0)]") })
        case let value as [String: Any]:
            var members: [String: JSONValue] = [:]
            for (key, member) in value { members[key] = try convert(member, path: "\(path).\(key)") }
            return .object(members)
        case Optional<Any>.none:
            return .null
        default:
            throw CofferError(
                .invalidArgument, "at \(path.isEmpty ? "the top level" : path): a \(type(of: object)) is not JSON")
        }
    }

    // MARK: Equality

    // `.int(2)` and `.double(2)` are one JSON value, so they are equal and hash alike.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)): return Int(exactly: b) == a
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(1); hasher.combine(value)
        case .int(let value): hasher.combine(2); hasher.combine(value)
        case .double(let value):
            if let int = Int(exactly: value) {
                hasher.combine(2); hasher.combine(int)
            } else {
                hasher.combine(3); hasher.combine(value)
            }
        case .string(let value): hasher.combine(4); hasher.combine(value)
        case .array(let elements): hasher.combine(5); hasher.combine(elements)
        case .object(let members): hasher.combine(6); hasher.combine(members)
        }
    }

    // MARK: Codable

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = Int(exactly: value).map(JSONValue.int) ?? .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let elements): try container.encode(elements)
        case .object(let members): try container.encode(members)
        }
    }

    // MARK: Text

    /// The value as compact JSON text with sorted keys: `{"fontSize":14,"theme":"dark"}`.
    public var description: String {
        var text = ""
        write(to: &text)
        return text
    }

    public var debugDescription: String { "JSONValue(\(description))" }

    private func write(to text: inout String) {
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .int(let value): text += String(value)
        case .double(let value):
            // Swift's spelling: "2.5", and "nan"/"inf", which JSON has none for (encoding them fails).
            text += "\(value)"
        case .string(let value): Self.quote(value, into: &text)
        case .array(let elements):
            text += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { text += "," }
                element.write(to: &text)
            }
            text += "]"
        case .object(let members):
            text += "{"
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { text += "," }
                Self.quote(key, into: &text)
                text += ":"
                members[key]!.write(to: &text)
            }
            text += "}"
        }
    }

    private static func quote(_ string: String, into text: inout String) {
        text += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case let c where c.value < 0x20:
                let hex = String(c.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}

// MARK: Literals

extension JSONValue: ExpressibleByNilLiteral {
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int) { self = .int(value) }
}

extension JSONValue: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByStringInterpolation {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension JSONValue: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
}

extension JSONValue: ExpressibleByDictionaryLiteral {
    /// An object; a key given twice keeps its last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
