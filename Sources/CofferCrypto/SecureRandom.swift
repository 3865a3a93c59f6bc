internal import CSodium

/// Cryptographically secure random bytes from libsodium (`randombytes_buf`: `getrandom(2)` on Linux).
package enum SecureRandom: Sendable {
    /// Returns `count` random bytes; an empty array when `count <= 0`.
    ///
    /// For nonces and salts. Keys belong in guarded memory: use ``SecureBytes/random(count:)``.
    package static func bytes(count: Int) -> [UInt8] {
        guard count > 0 else {
            return []
        }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(UnsafeMutableRawBufferPointer(buffer))
            initialized = count
        }
    }

    /// A uniformly distributed integer in `0..<upperBound` (libsodium's `randombytes_uniform`,
    /// which rejects and redraws rather than reducing modulo: no bias). 0 when `upperBound < 2`.
    package static func uniform(below upperBound: UInt32) -> UInt32 {
        Sodium.initializeForNonThrowingAPI()
        return randombytes_uniform(upperBound)
    }

    /// Overwrites every byte of `buffer` with random bytes.
    package static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let start = buffer.baseAddress, buffer.count > 0 else {
            return
        }
        Sodium.initializeForNonThrowingAPI()
        randombytes_buf(start, buffer.count)
    }
}
