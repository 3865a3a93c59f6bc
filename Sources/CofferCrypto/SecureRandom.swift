internal import CRandom
internal import CSodium

/// Cryptographically secure random bytes from the kernel: its generator through the vDSO where
/// the kernel has one (Linux 6.11 and later: no system call, about 0.1 µs for a nonce instead
/// of 0.6–1.2 µs), else `getrandom(2)`, else libsodium's `randombytes_buf`.
///
/// The vDSO's generator is the kernel's own, not a buffer of bytes drawn earlier: its state is
/// wiped in a child after `fork` and reseeded after a VM snapshot is restored, so a nonce drawn
/// here is as fresh as the system call's (a forked child never repeats its parent's nonces;
/// `SecureRandomTests` checks it).
package enum SecureRandom: Sendable {
    /// Whether the bytes come through the vDSO (no system call).
    package static var usesVDSO: Bool { coffer_random_uses_vdso() != 0 }

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
        if coffer_random_fill(start, buffer.count) == 0 { return }
        Sodium.initializeForNonThrowingAPI()
        randombytes_buf(start, buffer.count)
    }
}
