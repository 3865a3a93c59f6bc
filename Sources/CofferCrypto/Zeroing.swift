// Zeroing and constant-time comparison of ordinary memory, for the modules above CofferCrypto.
internal import CSodium

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

extension SecureMemory {
    /// Zeroes `buffer` with `sodium_memzero`, which the optimiser may not remove (it is
    /// `explicit_bzero` or `memset_s` underneath, whichever the platform has).
    ///
    /// This is for ordinary memory that briefly held a secret (a read buffer, a plaintext array);
    /// ``SecureBytes`` wipes its own pages. Best effort: copies made earlier (an array that grew,
    /// a `String`, a register) are beyond its reach (see SECURITY.md).
    public static func zero(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        sodium_memzero(base, buffer.count)
    }

    /// Zeroes the bytes of `bytes` in place (the array keeps its length).
    public static func zero(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { zero($0) }
    }

    /// Whether `a` and `b` hold the same bytes, in time that depends on their lengths only
    /// (`sodium_memcmp`). Different lengths are simply unequal.
    ///
    /// ```swift
    /// guard SecureMemory.constantTimeEqual(storedMAC, computedMAC) else { throw … }
    /// ```
    public static func constantTimeEqual(_ a: some ContiguousBytes, _ b: some ContiguousBytes) -> Bool {
        a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                guard a.count == b.count else { return false }
                guard let left = a.baseAddress, let right = b.baseAddress, a.count > 0 else { return true }
                return sodium_memcmp(left, right, a.count) == 0
            }
        }
    }
}
