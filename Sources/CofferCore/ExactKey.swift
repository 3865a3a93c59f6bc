/// A string compared and hashed by its exact UTF-8 bytes.
///
/// Swift's `String` equality is canonical equivalence: "café" spelled with U+00E9 equals "café"
/// spelled with "e" + U+0301. File names, network services and other keychains treat those as
/// two different names, so Coffer's indexes do too: a key saved in one spelling is never
/// returned, overwritten or removed through the other.
@usableFromInline package struct ExactKey: Hashable, Sendable, CustomStringConvertible {
    /// The string, as given.
    @usableFromInline package let string: String

    @inlinable
    package init(_ string: String) { self.string = string }

    // Both are inlinable: every index lookup and insert calls them (an open of 10,000 keys
    // hashes each once and compares it with those already in its bucket's run), and a call
    // into this module for each was a tenth of a key-value suite's open.

    @inlinable
    package static func == (lhs: ExactKey, rhs: ExactKey) -> Bool {
        // Native strings are contiguous UTF-8 (a small one is copied to the stack): compare the
        // lengths, then the bytes.
        var a = lhs.string
        var b = rhs.string
        return a.withUTF8 { pa in
            b.withUTF8 { pb in
                pa.count == pb.count && bytesEqual(UnsafeRawBufferPointer(pa), UnsafeRawBufferPointer(pb))
            }
        }
    }

    /// Whether two buffers of the same length hold the same bytes: eight at a time for a short
    /// name, `memcmp` for a long one.
    @inlinable
    package static func bytesEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        let count = a.count
        guard count <= 32 else { return CofferCore.bytesEqual(a.baseAddress!, b.baseAddress!, count: count) }
        var offset = 0
        while count - offset >= 8 {
            guard a.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                == b.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            else { return false }
            offset += 8
        }
        while offset < count {
            guard a[offset] == b[offset] else { return false }
            offset += 1
        }
        return true
    }

    @inlinable
    package func hash(into hasher: inout Hasher) {
        var copy = string
        copy.withUTF8 { bytes in
            let raw = UnsafeRawBufferPointer(bytes)
            guard raw.count < 16 else {
                // The length too: two keys hashed one after the other (a vault item's service
                // and account) must not hash alike because their bytes run on alike.
                hasher.combine(bytes: raw)
                hasher.combine(raw.count)
                return
            }
            // A short name (the usual case) as two words, its length in the last byte (zero
            // until then, in either byte order): two rounds instead of the buffered byte-wise path.
            var words: (UInt64, UInt64) = (0, 0)
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: raw) }
            hasher.combine(words.0)
            hasher.combine(UInt64(littleEndian: words.1) | UInt64(raw.count) << 56)
        }
    }

    @usableFromInline package var description: String { string }
}
