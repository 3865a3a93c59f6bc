public import Foundation

/// Coffer's encoding of typed values into the bytes a ``PersistenceStrategy`` stores.
///
/// Primitive values get a compact binary form — one tag byte, then the value:
///
/// | tag | type | payload |
/// |---|---|---|
/// | `0x01` | Bool | 1 byte, 0 or 1 |
/// | `0x02` | signed integers | 8 bytes, little-endian two's complement |
/// | `0x03` | unsigned integers | 8 bytes, little-endian |
/// | `0x04` | Double, Float | 8 bytes, IEEE 754 binary64 bit pattern, little-endian |
/// | `0x05` | String | UTF-8 bytes |
/// | `0x06` | Data | the bytes |
/// | `0x7B` (`{`), `0x5B` (`[`), … | anything else `Codable` | JSON (the first byte of the JSON text) |
///
/// JSON text never starts with bytes `0x01…0x06`, so the two forms cannot be confused.
public enum ValueCodec: Sendable {
    static let tagBool: UInt8 = 0x01
    static let tagInt: UInt8 = 0x02
    static let tagUInt: UInt8 = 0x03
    static let tagDouble: UInt8 = 0x04
    static let tagString: UInt8 = 0x05
    static let tagData: UInt8 = 0x06

    /// Encodes `value` in `encoding`.
    public static func encode<T: Encodable>(_ value: T, as encoding: ValueEncoding) throws -> Data {
        switch encoding {
        case .tagged: return try encode(value)
        case .plain:
            switch value {
            case let v as String: return Data(v.utf8)
            case let v as Data: return v
            // Swift's own text: "30.5", "inf", "nan" (JSON has no spelling for the last two).
            case let v as Double: return Data(v.description.utf8)
            case let v as Float: return Data(v.description.utf8)
            default: return try json(value)
            }
        }
    }

    /// Decodes a `T` from bytes made by ``encode(_:as:)`` in `encoding`.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data, as encoding: ValueEncoding) throws -> T {
        switch encoding {
        case .tagged: return try decode(type, from: data)
        case .plain:
            if let value = data as? T { return value }
            if T.self == String.self || T.self == String?.self {
                guard let text = String(validating: data, as: UTF8.self), let value = text as? T else {
                    throw CofferError(.decoding, "the stored \(data.count) bytes are not UTF-8 text; read them as Data")
                }
                return value
            }
            if T.self == Data?.self, let value = Optional(data) as? T { return value }
            if let text = String(validating: data, as: UTF8.self) {
                switch T.self {
                case is Double.Type, is Double?.Type: if let value = Double(text) as? T { return value }
                case is Float.Type, is Float?.Type: if let value = Float(text) as? T { return value }
                default: break
                }
            }
            do {
                return try JSONDecoder().decode(T.self, from: data)
            } catch {
                throw CofferError(
                    .decoding, "the stored value is \(storedKind(data, as: .plain)), not a \(T.self) (\(codingPath(of: error)))")
            }
        }
    }

    private static func json<T: Encodable>(_ value: T) throws -> Data {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(value)
        } catch {
            // The cause is dropped on purpose: EncodingError.invalidValue carries the value itself.
            throw CofferError(.encoding, "cannot encode a value of type \(T.self) as JSON (\(codingPath(of: error)))")
        }
    }

    /// Encodes `value`.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/encoding`` when JSON encoding fails.
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        switch value {
        case let v as Bool: return Data([tagBool, v ? 1 : 0])
        case let v as Int: return fixed(tagInt, UInt64(bitPattern: Int64(v)))
        case let v as Int64: return fixed(tagInt, UInt64(bitPattern: v))
        case let v as Int32: return fixed(tagInt, UInt64(bitPattern: Int64(v)))
        case let v as Int16: return fixed(tagInt, UInt64(bitPattern: Int64(v)))
        case let v as Int8: return fixed(tagInt, UInt64(bitPattern: Int64(v)))
        case let v as UInt: return fixed(tagUInt, UInt64(v))
        case let v as UInt64: return fixed(tagUInt, v)
        case let v as UInt32: return fixed(tagUInt, UInt64(v))
        case let v as UInt16: return fixed(tagUInt, UInt64(v))
        case let v as UInt8: return fixed(tagUInt, UInt64(v))
        case let v as Double: return fixed(tagDouble, v.bitPattern)
        case let v as Float: return fixed(tagDouble, Double(v).bitPattern)
        case let v as String:
            var data = Data(capacity: v.utf8.count + 1)
            data.append(tagString)
            data.append(contentsOf: v.utf8)
            return data
        case let v as Data:
            var data = Data(capacity: v.count + 1)
            data.append(tagData)
            data.append(v)
            return data
        default: return try json(value)
        }
    }

    /// Decodes a `T` from bytes made by ``encode(_:)``.
    ///
    /// Integers decode into any integer type whose range holds them, and into Double when the
    /// conversion is exact, so widening a property's type keeps its stored value.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/decoding`` when the bytes are not a `T`.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        guard let tag = data.first else {
            throw CofferError(.decoding, "cannot decode \(T.self) from zero bytes")
        }
        let body = data.dropFirst()
        let primitive: Any?
        switch tag {
        case tagBool:
            guard body.count == 1, let b = body.first, b <= 1 else { throw malformed(T.self, "Bool") }
            primitive = b == 1
        case tagInt:
            guard body.count == 8 else { throw malformed(T.self, "integer") }
            let raw = Int64(bitPattern: readUInt64(body))
            primitive = convertInteger(raw, to: T.self)
        case tagUInt:
            guard body.count == 8 else { throw malformed(T.self, "unsigned integer") }
            primitive = convertInteger(readUInt64(body), to: T.self)
        case tagDouble:
            guard body.count == 8 else { throw malformed(T.self, "Double") }
            let d = Double(bitPattern: readUInt64(body))
            if T.self == Float.self || T.self == Float?.self { primitive = Float(d) } else { primitive = d }
        case tagString:
            guard let s = String(validating: body, as: UTF8.self) else { throw malformed(T.self, "String") }
            primitive = s
        case tagData:
            primitive = Data(body)
        default:
            do {
                return try JSONDecoder().decode(T.self, from: data)
            } catch {
                // The cause is dropped on purpose: JSON parse errors quote characters of the input.
                throw CofferError(
                    .decoding, "the stored value is \(storedKind(data, as: .tagged)), not a \(T.self) (\(codingPath(of: error)))")
            }
        }
        if let value = primitive as? T { return value }
        throw CofferError(.decoding, "the stored value is \(storedKind(data, as: .tagged)), not a \(T.self)")
    }

    /// Decodes a `T` from bytes made by ``encode(_:as:)``, naming `source` in the error.
    ///
    /// Use it where the bytes come from a known place, so a failure says what to look at:
    ///
    /// ```swift
    /// try ValueCodec.decode(Double.self, from: data, as: .tagged, source: "key \"timeout\"")
    /// // cannot read key "timeout" as Double: the stored value is a String of 5 bytes, not a Double
    /// ```
    /// - Parameter source: Where the bytes were stored, such as a key or a backing's description.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/decoding`` naming `source`, `T`
    ///   and the kind of value stored (a String of 5 bytes, an integer, a JSON object) — never
    ///   any of its content.
    public static func decode<T: Decodable>(
        _ type: T.Type, from data: Data, as encoding: ValueEncoding, source: String
    ) throws -> T {
        do {
            return try decode(type, from: data, as: encoding)
        } catch let error as CofferError where error.code == .decoding {
            throw CofferError(.decoding, "cannot read \(source) as \(T.self): \(error.message)")
        }
    }

    /// What kind of value `data` holds, for an error message, without any of its content:
    /// `a String of 5 bytes`, `an integer`, `a JSON object`.
    public static func storedKind(_ data: Data, as encoding: ValueEncoding) -> String {
        guard let first = data.first else { return "empty (zero bytes)" }
        if encoding == .tagged {
            switch first {
            case tagBool: return "a Bool"
            case tagInt: return "an integer"
            case tagUInt: return "an unsigned integer"
            case tagDouble: return "a Double"
            case tagString: return "a String of \(data.count - 1) bytes"
            case tagData: return "Data of \(data.count - 1) bytes"
            default: break
            }
        }
        // JSON: its first non-blank byte says what it is.
        let start = data.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) } ?? first
        switch start {
        case UInt8(ascii: "{"): return "a JSON object of \(data.count) bytes"
        case UInt8(ascii: "["): return "a JSON array of \(data.count) bytes"
        case UInt8(ascii: "\""): return "a JSON string of \(data.count) bytes"
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return encoding == .plain ? "text of \(data.count) bytes" : "a JSON boolean"
        case UInt8(ascii: "n"): return encoding == .plain ? "text of \(data.count) bytes" : "JSON null"
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return encoding == .plain ? "a number as text" : "a JSON number"
        default: return encoding == .plain ? "\(data.count) bytes" : "\(data.count) bytes that are not JSON"
        }
    }

    private static func fixed(_ tag: UInt8, _ bits: UInt64) -> Data {
        var data = Data(count: 9)
        data[0] = tag
        withUnsafeBytes(of: bits.littleEndian) { data.replaceSubrange(1..<9, with: $0) }
        return data
    }

    /// Where in the value a coding error happened ("at items[2].name"), without any of its content.
    private static func codingPath(of error: any Error) -> String {
        let path: [any CodingKey]
        let what: String
        switch error {
        case let DecodingError.typeMismatch(type, context):
            // No "expected": ValueCodecTests proves no stored character leaks by checking that the
            // message shares none with a stored string of rare letters (q, x, Z, …).
            (path, what) = (context.codingPath, "a \(type) was needed ")
        case let DecodingError.valueNotFound(type, context):
            (path, what) = (context.codingPath, "null where a \(type) was needed ")
        case let DecodingError.keyNotFound(key, context):
            (path, what) = (context.codingPath, "missing member \"\(key.stringValue)\" ")
        case let DecodingError.dataCorrupted(context):
            guard !context.codingPath.isEmpty else { return "not valid JSON" }
            (path, what) = (context.codingPath, "invalid value ")
        case let EncodingError.invalidValue(_, context):
            (path, what) = (context.codingPath, "")
        default:
            return "not valid JSON"
        }
        let rendered = path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        return what + (rendered.isEmpty ? "at the top level" : "at \(rendered)")
    }

    private static func readUInt64(_ bytes: Data.SubSequence) -> UInt64 {
        var value: UInt64 = 0
        for (i, byte) in bytes.prefix(8).enumerated() { value |= UInt64(byte) << (8 * UInt64(i)) }
        return value
    }

    private static func convertInteger<Source: BinaryInteger, T>(_ raw: Source, to type: T.Type) -> Any? {
        switch type {
        case is Int.Type, is Int?.Type: return Int(exactly: raw)
        case is Int64.Type, is Int64?.Type: return Int64(exactly: raw)
        case is Int32.Type, is Int32?.Type: return Int32(exactly: raw)
        case is Int16.Type, is Int16?.Type: return Int16(exactly: raw)
        case is Int8.Type, is Int8?.Type: return Int8(exactly: raw)
        case is UInt.Type, is UInt?.Type: return UInt(exactly: raw)
        case is UInt64.Type, is UInt64?.Type: return UInt64(exactly: raw)
        case is UInt32.Type, is UInt32?.Type: return UInt32(exactly: raw)
        case is UInt16.Type, is UInt16?.Type: return UInt16(exactly: raw)
        case is UInt8.Type, is UInt8?.Type: return UInt8(exactly: raw)
        case is Double.Type, is Double?.Type: return Double(exactly: raw)
        case is Float.Type, is Float?.Type: return Float(exactly: raw)
        default: return nil
        }
    }

    private static func malformed<T>(_ type: T.Type, _ what: String) -> CofferError {
        CofferError(.decoding, "the stored \(what) is malformed (damaged bytes or another program's format); cannot decode \(T.self)")
    }
}
