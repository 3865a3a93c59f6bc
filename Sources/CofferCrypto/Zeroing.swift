// Zeroing and constant-time comparison of ordinary memory, for the modules above CofferCrypto.
internal import CSodium

#if canImport(FoundationEssentials)
    package import FoundationEssentials
#else
    package import Foundation
#endif

// One spelling for zeroing ordinary memory that held a secret, in every module above
// CofferCrypto: `SecureMemory.zero(_:)`, for a raw buffer, a typed byte buffer, a byte array or a
// `Data` (each optional or not). Every overload ends in `sodium_memzero`; no module keeps a
// zeroing function of its own, a `memset` or a `resetBytes` for a secret. (The one exception is
// below CofferCrypto: CofferRuntime's ProcessHardening clears an entry of the process's
// environment block, which outlives the call, so its `memset` cannot be dropped.)

extension SecureMemory {
    /// Zeroes `buffer` with `sodium_memzero`, which the optimiser may not remove (it is
    /// `explicit_bzero` or `memset_s` underneath, whichever the platform has).
    ///
    /// This is for ordinary memory that briefly held a secret (a read buffer, a plaintext array);
    /// ``SecureBytes`` wipes its own pages. Best effort: copies made earlier (an array that grew,
    /// a `String`, a register) are beyond its reach (see SECURITY.md).
    package static func zero(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        sodium_memzero(base, buffer.count)
    }

    /// Zeroes the bytes `buffer` points to, as the raw-buffer form does.
    package static func zero(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        zero(UnsafeMutableRawBufferPointer(buffer))
    }

    /// Zeroes the bytes of `bytes` in place (the array keeps its length).
    package static func zero(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { zero($0) }
    }

    /// Zeroes the bytes of `bytes`, when there is an array, in place (it stays non-`nil`, all zeros).
    package static func zero(_ bytes: inout [UInt8]?) {
        guard bytes != nil else { return }
        zero(&bytes!)
    }

    /// Zeroes the bytes of `data` in place (it keeps its length).
    ///
    /// If another `Data` shares this one's storage (a caller kept a copy), copy-on-write gives
    /// this one fresh storage first and the other copy is left as it was: zero the last copy
    /// that holds the secret. A `Data` of up to 14 bytes is stored inline, and the copies of it
    /// in registers or on the stack are beyond reach.
    package static func zero(_ data: inout Data) {
        data.withUnsafeMutableBytes { zero($0) }
    }

    /// Zeroes the bytes of `data`, when there is one, in place, as the `Data` form does (it stays
    /// non-`nil`, all zeros).
    package static func zero(_ data: inout Data?) {
        guard data != nil else { return }
        zero(&data!)
    }

    /// Whether `a` and `b` hold the same bytes, in time that depends on their lengths only
    /// (`sodium_memcmp`). Different lengths are simply unequal.
    ///
    /// ```swift
    /// guard SecureMemory.constantTimeEqual(storedMAC, computedMAC) else { throw … }
    /// ```
    package static func constantTimeEqual(_ a: some ContiguousBytes, _ b: some ContiguousBytes) -> Bool {
        a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                guard a.count == b.count else { return false }
                guard let left = a.baseAddress, let right = b.baseAddress, a.count > 0 else { return true }
                return sodium_memcmp(left, right, a.count) == 0
            }
        }
    }
}
