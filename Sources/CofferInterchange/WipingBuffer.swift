package import CofferCrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A growable byte buffer that wipes its memory when it grows and when it is released, so a
/// secret read in pieces leaves no copies behind in freed memory.
package final class WipingBuffer {
    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    package var count = 0

    package init(capacity: Int) {
        self.capacity = max(capacity, 16)
        storage = UnsafeMutableRawPointer.allocate(byteCount: self.capacity, alignment: 16)
    }

    deinit {
        SecureMemory.zero(UnsafeMutableRawBufferPointer(start: storage, count: capacity))
        storage.deallocate()
    }

    package var last: UInt8? { count > 0 ? storage.load(fromByteOffset: count - 1, as: UInt8.self) : nil }

    package func append(_ byte: UInt8) {
        reserve(count + 1)
        storage.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    private func reserve(_ needed: Int) {
        guard needed > capacity else { return }
        let bigger = max(needed, capacity * 2)
        let fresh = UnsafeMutableRawPointer.allocate(byteCount: bigger, alignment: 16)
        fresh.copyMemory(from: storage, byteCount: count)
        SecureMemory.zero(UnsafeMutableRawBufferPointer(start: storage, count: capacity))
        storage.deallocate()
        storage = fresh
        capacity = bigger
    }

    /// Appends everything `fd` yields until end of file; more than `limit` bytes is an error.
    package func readToEnd(_ fd: Int32, limit: Int, what: String) throws {
        while true {
            if capacity - count < 4096 { reserve(capacity + 4096) }
            let n = read(fd, storage + count, capacity - count)
            if n < 0 {
                if errno == EINTR { continue }
                throw InterchangeError(.failure, "cannot read \(what): \(String(cString: strerror(errno)))")
            }
            if n == 0 { return }
            count += n
            guard count <= limit else { throw InterchangeError.usage("\(what) holds more than \(limit) bytes") }
        }
    }

    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: storage, count: count))
    }

    package func secureCopy() throws -> SecureBytes {
        try withUnsafeBytes { try SecureBytes(copying: $0) }
    }
}
