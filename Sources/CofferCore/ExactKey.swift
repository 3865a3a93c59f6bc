/// A string compared and hashed by its exact UTF-8 bytes.
///
/// Swift's `String` equality is canonical equivalence: "café" spelled with U+00E9 equals "café"
/// spelled with "e" + U+0301. File names, network services and other keychains treat those as
/// two different names, so Coffer's indexes do too: a key saved in one spelling is never
/// returned, overwritten or removed through the other.
public struct ExactKey: Hashable, Sendable, CustomStringConvertible {
    /// The string, as given.
    public let string: String

    public init(_ string: String) { self.string = string }

    public static func == (lhs: ExactKey, rhs: ExactKey) -> Bool {
        lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        var copy = string
        copy.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    public var description: String { string }
}
