import CofferCore
import Foundation
import Testing

/// The platform layer's thread-local slot, which CofferState's batches and computations stand
/// on: a value set on one thread is that thread's alone, and two slots never share a value.
@Suite("ThreadLocalSlot")
struct ThreadLocalSlotTests {
    @Test func aValueBelongsToTheThreadThatSetItAndToItsSlot() throws {
        let slot = ThreadLocalSlot()
        let other = ThreadLocalSlot()
        let marker = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)
        defer { marker.deallocate() }
        #expect(slot.value == nil)
        slot.value = marker
        #expect(slot.value == marker)
        #expect(other.value == nil)

        // Addresses as integers: a pointer is not Sendable, and only its value is compared.
        let seen = Locked<(before: Int, after: Int)?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let before = Int(bitPattern: slot.value)
            slot.value = UnsafeMutableRawPointer(bitPattern: 0x10)
            let after = Int(bitPattern: slot.value)
            seen.withLock { $0 = (before, after) }
            slot.value = nil
            done.signal()
        }
        thread.start()
        done.wait()
        let result = try #require(seen.withLock { $0 })
        #expect(result.before == 0)
        #expect(result.after == 0x10)
        #expect(slot.value == marker)  // untouched by the other thread
        slot.value = nil
        #expect(slot.value == nil)
    }
}
