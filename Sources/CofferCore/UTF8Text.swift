// Decoding names from stored bytes: the hot loop of opening a store.

/// UTF-8 text from stored bytes, validated.
package enum UTF8Text {
    /// The text `bytes` hold, or `nil` when they are not valid UTF-8. ASCII (the usual case) is
    /// recognised eight bytes at a time and needs no further validation; anything else goes
    /// through the standard library's validating initialiser. (`String(validating:as:)` alone
    /// is not specialised for raw buffers: it looked up generic metadata for every name, a
    /// seventh of a key-value suite's open.)
    @inlinable
    package static func decode(_ bytes: UnsafeRawBufferPointer) -> String? {
        let units = bytes.assumingMemoryBound(to: UInt8.self)
        if isASCII(bytes) { return String(decoding: units, as: UTF8.self) }
        return String(validating: units, as: UTF8.self)
    }

    /// Whether every byte is below 0x80.
    @inlinable
    package static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var bits: UInt64 = 0
        var offset = 0
        while bytes.count - offset >= 8 {
            bits |= bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        while offset < bytes.count {
            bits |= UInt64(bytes[offset])
            offset += 1
        }
        return bits & 0x8080_8080_8080_8080 == 0
    }
}
