/// A string compared and hashed by its exact UTF-8 bytes.
///
/// Swift's `String` equality is canonical equivalence: "café" spelled with U+00E9 equals "café"
/// spelled with "e" + U+0301. File names, network services and other keychains treat those as
/// two different names, so Coffer's indexes do too: a key saved in one spelling is never
/// returned, overwritten or removed through the other.
package struct ExactKey: Hashable, Sendable, CustomStringConvertible {
    /// The string, as given.
    package let string: String

    package init(_ string: String) { self.string = string }

    package static func == (lhs: ExactKey, rhs: ExactKey) -> Bool {
        // Native strings are contiguous UTF-8: compare lengths, then the bytes in one call.
        guard lhs.string.utf8.count == rhs.string.utf8.count else { return false }
        var a = lhs.string
        var b = rhs.string
        return a.withUTF8 { pa in
            b.withUTF8 { pb in
                guard let x = pa.baseAddress, let y = pb.baseAddress else { return pa.count == pb.count }
                return bytesEqual(x, y, count: pa.count)
            }
        }
    }

    package func hash(into hasher: inout Hasher) {
        var copy = string
        copy.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    package var description: String { string }
}
