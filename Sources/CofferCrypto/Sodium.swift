internal import CSodium

/// libsodium's process-wide initialisation, done once.
///
/// Every throwing CofferCrypto API calls ``initialize()`` first, so callers never have to; call it
/// yourself only to fail early (for example at launch) if the library cannot work at all.
package enum Sodium: Sendable {
    /// The result of the single `sodium_init()` call: 0 (initialised now), 1 (already), -1 (failed).
    /// A `static let` is initialised exactly once, thread-safely, on first use.
    private static let initializationStatus: Int32 = sodium_init()

    /// Initialises libsodium if that has not happened yet; cheap after the first call.
    ///
    /// - Throws: `CryptoError` with code `.initializationFailed` if `sodium_init()` failed.
    package static func initialize() throws {
        guard initializationStatus >= 0 else {
            throw CryptoError(code: .initializationFailed, message: "sodium_init() failed")
        }
    }

    /// Runs `sodium_init()` once for APIs that cannot throw (random bytes).
    ///
    /// If it failed, `randombytes_buf` still initialises its generator lazily, so those APIs keep
    /// working; every throwing API reports the failure.
    static func initializeForNonThrowingAPI() {
        _ = initializationStatus
    }

    /// The version of the libsodium that is linked, for example `"1.0.18"`.
    package static var versionString: String {
        String(cString: sodium_version_string())
    }
}

// MARK: - Helpers for passing Swift buffers to C

/// A libsodium `size_t` limit as an `Int`. Swift imports `size_t` as `Int`, so limits near
/// `SIZE_MAX` (for example `crypto_aead_xchacha20poly1305_ietf_messagebytes_max()`) arrive negative;
/// read them as unsigned and clamp to `Int.max`.
func sizeLimit(_ value: Int) -> Int {
    Int(clamping: UInt(bitPattern: value))
}

extension UnsafeRawBufferPointer {
    /// The start as `const unsigned char *`, or nil for an empty buffer without storage.
    var bytePointer: UnsafePointer<UInt8>? {
        baseAddress?.assumingMemoryBound(to: UInt8.self)
    }
}

extension UnsafeMutableRawBufferPointer {
    /// The start as `unsigned char *`, or nil for an empty buffer without storage.
    var mutableBytePointer: UnsafeMutablePointer<UInt8>? {
        baseAddress?.assumingMemoryBound(to: UInt8.self)
    }
}

/// Calls `body` with a pointer that is never null: the buffer's start, or a dummy byte when the
/// buffer is empty and has no storage (libsodium declares some zero-length inputs `nonnull`).
func withNonNullMutableBytes<R>(
    _ buffer: UnsafeMutableRawBufferPointer,
    _ body: (UnsafeMutablePointer<UInt8>) throws -> R
) rethrows -> R {
    if let start = buffer.mutableBytePointer {
        return try body(start)
    }
    var dummy: UInt8 = 0
    return try withUnsafeMutablePointer(to: &dummy) { try body($0) }
}

/// Like ``withNonNullMutableBytes(_:_:)`` for an input buffer: the same pointer, read-only
/// (`body` gets it as `const`, so nothing is written through it).
func withNonNullBytes<R>(
    _ buffer: UnsafeRawBufferPointer,
    _ body: (UnsafePointer<UInt8>) throws -> R
) rethrows -> R {
    try withNonNullMutableBytes(UnsafeMutableRawBufferPointer(mutating: buffer)) { try body(UnsafePointer($0)) }
}
