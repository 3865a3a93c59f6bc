// The vault's short names for CofferCrypto's zeroing and constant-time comparison.
import CofferCrypto

/// Zeroes a byte array in place (``SecureMemory/zero(_:)-(inout [UInt8])``). Best effort: copies
/// the array made earlier are beyond its reach (see SECURITY.md).
func wipe(_ bytes: inout [UInt8]) {
    SecureMemory.zero(&bytes)
}

/// Zeroes memory in a way the optimiser may not remove.
func zeroMemory(_ buffer: UnsafeMutableRawBufferPointer) {
    SecureMemory.zero(buffer)
}

/// Whether two byte strings are equal, in time that depends on their lengths only.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    SecureMemory.constantTimeEqual(a, b)
}
