// Bytes and text going out of Coffer's programs (`coffer`, `coffer-demo`, `coffer-bench`): one
// copy each, shared by the three executables.

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes every byte to `fd`, retrying partial writes and EINTR. Returns false on failure
/// (`errno` says why).
@discardableResult
package func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard var next = bytes.baseAddress else { return true }
    var left = bytes.count
    while left > 0 {
        let n = write(fd, next, left)
        if n < 0 {
            if errno == EINTR { continue }
            return false
        }
        next += n
        left -= n
    }
    return true
}

/// ``writeAll(_:_:)-(Int32,UnsafeRawBufferPointer)`` for an array.
@discardableResult
package func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { writeAll(fd, $0) }
}

/// `Argon2id, 2 passes, 64 MiB` for a key slot's Argon2id parameters; empty without them.
package func describeKDF(opsLimit: UInt64?, memLimitBytes: UInt64?) -> String {
    guard let opsLimit, let memLimitBytes else { return "" }
    let memory =
        memLimitBytes >= 1 << 20 && memLimitBytes % (1 << 20) == 0
        ? "\(memLimitBytes >> 20) MiB"
        : memLimitBytes % 1024 == 0 ? "\(memLimitBytes >> 10) KiB" : "\(memLimitBytes) bytes"
    return "Argon2id, \(opsLimit) pass\(opsLimit == 1 ? "" : "es"), \(memory)"
}
