import CofferCrypto
import Foundation
import Testing

/// `SecureMemory.zero(_:)`, the one spelling for zeroing ordinary memory that held a secret:
/// each form zeroes in place, keeps the length, and leaves a copy held elsewhere as it was.
@Suite("SecureMemory.zero: every form zeroes in place")
struct ZeroingTests {
    /// Bytes that are not zero, so a zeroed value is told apart from an untouched one.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 | 0x80) } }

    @Test("A byte array, optional or not, keeps its length and holds zeros")
    func byteArrays() {
        var bytes = Self.pattern(40)
        SecureMemory.zero(&bytes)
        #expect(bytes == [UInt8](repeating: 0, count: 40))

        var optional: [UInt8]? = Self.pattern(40)
        SecureMemory.zero(&optional)
        #expect(optional == [UInt8](repeating: 0, count: 40))
        var none: [UInt8]? = nil
        SecureMemory.zero(&none)
        #expect(none == nil)
    }

    @Test("A Data, optional or not, inline or on the heap, keeps its length and holds zeros")
    func data() {
        for count in [0, 5, 14, 15, 64, 5000] {
            var data = Data(Self.pattern(count))
            SecureMemory.zero(&data)
            #expect(data == Data(count: count), "a Data of \(count) bytes")

            var optional: Data? = Data(Self.pattern(count))
            SecureMemory.zero(&optional)
            #expect(optional == Data(count: count), "a Data? of \(count) bytes")
        }
        var none: Data? = nil
        SecureMemory.zero(&none)
        #expect(none == nil)
    }

    @Test("A copy that shares the storage keeps its bytes: copy-on-write gives the zeroed one its own")
    func sharedStorage() {
        let original = Data(Self.pattern(64))
        var mine = original
        SecureMemory.zero(&mine)
        #expect(mine == Data(count: 64))
        #expect(original == Data(Self.pattern(64)))

        // A slice zeroes only its own range.
        let whole = Data(Self.pattern(64))
        var slice = whole[8..<40]
        SecureMemory.zero(&slice)
        #expect(slice.startIndex == 8 && slice.count == 32)
        #expect(slice.allSatisfy { $0 == 0 })
        #expect(whole == Data(Self.pattern(64)))
    }

    @Test("Raw and typed buffers: every byte zeroed, an empty buffer is fine")
    func buffers() {
        let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: 33, alignment: 16)
        defer { raw.deallocate() }
        raw.copyBytes(from: Self.pattern(33))
        SecureMemory.zero(raw)
        #expect(Array(raw) == [UInt8](repeating: 0, count: 33))

        let typed = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 33)
        defer { typed.deallocate() }
        _ = typed.initialize(from: Self.pattern(33))
        SecureMemory.zero(typed)
        #expect(Array(typed) == [UInt8](repeating: 0, count: 33))

        SecureMemory.zero(UnsafeMutableRawBufferPointer(start: nil, count: 0))
        SecureMemory.zero(UnsafeMutableBufferPointer<UInt8>(start: nil, count: 0))
    }
}
