import CofferCrypto
import Foundation
import Testing

/// Loads the known-answer files in the repository's `Vectors/` folder (see `Vectors/README.md`).
enum VectorFile {
    /// `<repo>/Vectors`, found from this source file's path so tests run from any directory.
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // CofferCryptoTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // repository root
        .appendingPathComponent("Vectors")

    static func data(_ name: String) throws -> Data {
        try Data(contentsOf: directory.appendingPathComponent(name))
    }

    static func decode<T: Decodable>(_ type: T.Type, from name: String) throws -> T {
        try JSONDecoder().decode(type, from: data(name))
    }
}

struct VectorFormatError: Error, CustomStringConvertible {
    var description: String
}

/// Decodes lowercase or uppercase hex; throws on odd length or a non-hex character.
func bytes(hex: String) throws -> [UInt8] {
    let digits = Array(hex.utf8)
    guard digits.count % 2 == 0 else {
        throw VectorFormatError(description: "odd-length hex string (\(digits.count) digits)")
    }
    func value(_ digit: UInt8) throws -> UInt8 {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: throw VectorFormatError(description: "non-hex character \(digit)")
        }
    }
    var result: [UInt8] = []
    result.reserveCapacity(digits.count / 2)
    var index = 0
    while index < digits.count {
        result.append(try value(digits[index]) << 4 | value(digits[index + 1]))
        index += 2
    }
    return result
}

/// A hex string field of a vector file, decoded to bytes.
struct Hex: Decodable, Sendable, Equatable {
    let bytes: [UInt8]

    init(from decoder: any Decoder) throws {
        bytes = try CofferCryptoTests.bytes(hex: decoder.singleValueContainer().decode(String.self))
    }
}

extension SecureBytes {
    /// A copy of the bytes, for comparing derived test keys with published vectors only.
    var testCopy: [UInt8] {
        withUnsafeBytes { Array($0) }
    }
}

/// Expects `body` to throw a `CryptoError` with `code`.
func expectCryptoError<R>(
    _ code: CryptoError.Code,
    _ comment: Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> R
) {
    do {
        _ = try body()
        Issue.record(
            "expected CryptoError.\(code), but nothing was thrown. \(comment?.rawValue ?? "")",
            sourceLocation: sourceLocation)
    } catch let error as CryptoError {
        #expect(error.code == code, comment, sourceLocation: sourceLocation)
    } catch {
        Issue.record(
            "expected CryptoError.\(code), got \(error). \(comment?.rawValue ?? "")",
            sourceLocation: sourceLocation)
    }
}
