internal import CSodium

#if canImport(FoundationEssentials)
    package import FoundationEssentials
#else
    package import Foundation
#endif

/// BLAKE2b hashing, plain or keyed (a MAC), with libsodium `crypto_generichash`.
///
/// Output lengths are 16...64 bytes and keys 16...64 bytes: libsodium's bounds
/// (`crypto_generichash_BYTES_MIN/MAX`, `KEYBYTES_MIN/MAX`), narrower than BLAKE2b's own 1...64.
///
/// ```swift
/// let digest = try BLAKE2b.hash(Array("abc".utf8))                 // 32 bytes
/// let mac = try BLAKE2b.hash(record, key: macKey, outputLength: 16)
/// ```
package enum BLAKE2b: Sendable {
    /// Shortest output libsodium produces (16 bytes).
    package static let minimumOutputLength = Int(crypto_generichash_bytes_min())
    /// Longest output (64 bytes).
    package static let maximumOutputLength = Int(crypto_generichash_bytes_max())
    /// Default output length (32 bytes).
    package static let defaultOutputLength = Int(crypto_generichash_bytes())
    /// Shortest key libsodium accepts (16 bytes).
    package static let minimumKeyLength = Int(crypto_generichash_keybytes_min())
    /// Longest key (64 bytes).
    package static let maximumKeyLength = Int(crypto_generichash_keybytes_max())

    /// Hashes `data`; returns `outputLength` bytes (16...64).
    ///
    /// - Throws: `.invalidLength` for an output length outside 16...64.
    package static func hash<D: ContiguousBytes>(_ data: D, outputLength: Int = 32) throws -> [UInt8] {
        try data.withUnsafeBytes { data in
            try hash(data, key: UnsafeRawBufferPointer(start: nil, count: 0), outputLength: outputLength)
        }
    }

    /// Hashes `data` keyed with `key` (16...64 bytes), a MAC; returns `outputLength` bytes (16...64).
    ///
    /// - Throws: `.invalidLength` for a key or output length outside 16...64.
    package static func hash<D: ContiguousBytes>(_ data: D, key: SecureBytes, outputLength: Int = 32) throws -> [UInt8] {
        try checkKeyLength(key.count)
        return try key.withUnsafeBytes { key in
            try data.withUnsafeBytes { data in
                try hash(data, key: key, outputLength: outputLength)
            }
        }
    }

    /// Hashes `data` keyed with `key` (16...64 bytes) straight into `output` (16...64 bytes, the
    /// digest length), allocating nothing: for hashes computed once per record.
    ///
    /// `output` may not overlap `data`.
    /// - Throws: `.invalidLength` for a key or output length outside 16...64.
    package static func hash(
        _ data: UnsafeRawBufferPointer, key: SecureBytes, into output: UnsafeMutableRawBufferPointer
    ) throws {
        try Sodium.initialize()
        try checkKeyLength(key.count)
        try checkOutputLength(output.count)
        let status = key.withUnsafeBytes { key in
            withNonNullMutableBytes(output) { outputStart in
                crypto_generichash(
                    outputStart, output.count, data.bytePointer, UInt64(data.count), key.bytePointer, key.count)
            }
        }
        guard status == 0 else {
            throw CryptoError.failed("crypto_generichash")
        }
    }

    private static func hash(
        _ data: UnsafeRawBufferPointer,
        key: UnsafeRawBufferPointer,
        outputLength: Int
    ) throws -> [UInt8] {
        try Sodium.initialize()
        try checkOutputLength(outputLength)
        return try [UInt8](unsafeUninitializedCapacity: outputLength) { output, initialized in
            let status = withNonNullMutableBytes(UnsafeMutableRawBufferPointer(output)) { outputStart in
                crypto_generichash(
                    outputStart, outputLength, data.bytePointer, UInt64(data.count), key.bytePointer, key.count)
            }
            guard status == 0 else {
                throw CryptoError.failed("crypto_generichash")
            }
            initialized = outputLength
        }
    }

    static func checkOutputLength(_ length: Int) throws {
        guard (minimumOutputLength...maximumOutputLength).contains(length) else {
            throw CryptoError.invalidLength(
                "BLAKE2b output", in: minimumOutputLength...maximumOutputLength, actual: length)
        }
    }

    static func checkKeyLength(_ length: Int) throws {
        guard (minimumKeyLength...maximumKeyLength).contains(length) else {
            throw CryptoError.invalidLength("BLAKE2b key", in: minimumKeyLength...maximumKeyLength, actual: length)
        }
    }

    /// Incremental BLAKE2b (`crypto_generichash_init/update/final`) for data that arrives in pieces.
    ///
    /// A value type: a copy continues independently of the original. ``finalize()`` does not end the
    /// hasher; it returns the digest of everything so far, and more input may follow.
    ///
    /// ```swift
    /// var hasher = try BLAKE2b.Hasher(outputLength: 32)
    /// hasher.update(header)
    /// hasher.update(body)
    /// let digest = hasher.finalize()
    /// ```
    package struct Hasher {
        private var state: State
        /// The digest length in bytes this hasher produces.
        package let outputLength: Int

        /// Starts a hash of `outputLength` bytes (16...64), keyed if `key` (16...64 bytes) is given.
        ///
        /// - Throws: `.invalidLength` for a key or output length outside 16...64.
        package init(outputLength: Int = 32, key: SecureBytes? = nil) throws {
            try Sodium.initialize()
            try BLAKE2b.checkOutputLength(outputLength)
            if let key {
                try BLAKE2b.checkKeyLength(key.count)
            }
            let state = State()
            let status: Int32
            if let key {
                status = key.withUnsafeBytes { key in
                    crypto_generichash_init(state.pointer, key.bytePointer, key.count, outputLength)
                }
            } else {
                status = crypto_generichash_init(state.pointer, nil, 0, outputLength)
            }
            guard status == 0 else {
                throw CryptoError.failed("crypto_generichash_init")
            }
            self.state = state
            self.outputLength = outputLength
        }

        /// Feeds `bytes` into the hash.
        package mutating func update(_ bytes: UnsafeRawBufferPointer) {
            if !isKnownUniquelyReferenced(&state) {
                state = state.copy()
            }
            // crypto_generichash_update cannot fail (libsodium 1.0.18 always returns 0 for it).
            _ = crypto_generichash_update(state.pointer, bytes.bytePointer, UInt64(bytes.count))
        }

        /// Feeds any contiguous bytes (`[UInt8]`, `Data`, …) into the hash.
        package mutating func update<D: ContiguousBytes>(_ data: D) {
            data.withUnsafeBytes { update($0) }
        }

        /// Returns the digest of everything fed so far (``outputLength`` bytes); the hasher stays usable.
        package mutating func finalize() -> [UInt8] {
            // crypto_generichash_final fails only for an output length outside 16...64 (checked by
            // init) or a state that was already finalised; it always gets a fresh copy here.
            state.withTemporaryCopy { copy in
                [UInt8](unsafeUninitializedCapacity: outputLength) { output, initialized in
                    if let outputStart = output.baseAddress,
                        crypto_generichash_final(copy, outputStart, outputLength) == 0
                    {
                        initialized = outputLength
                    }
                }
            }
        }
    }
}

// The hasher owns mutable C state without a lock; share a copy instead of the value.
@available(*, unavailable)
extension BLAKE2b.Hasher: Sendable {}

extension BLAKE2b.Hasher {
    /// Owner of one `crypto_generichash_state`, wiped on deinit.
    ///
    /// Ordinary (not `sodium_malloc`) memory, so copies for copy-on-write and `finalize` cannot fail;
    /// the state of a keyed hash is as sensitive as the key and is wiped with `sodium_memzero`.
    final class State {
        private static let byteCount = crypto_generichash_statebytes()
        // libsodium declares the state CRYPTO_ALIGN(64); Swift imports it only as an opaque pointer.
        private static let alignment = 64

        private let storage: UnsafeMutableRawPointer

        /// The state as libsodium's functions take it (`crypto_generichash_state *`).
        var pointer: OpaquePointer {
            OpaquePointer(storage)
        }

        init() {
            storage = UnsafeMutableRawPointer.allocate(byteCount: Self.byteCount, alignment: Self.alignment)
            storage.initializeMemory(as: UInt8.self, repeating: 0, count: Self.byteCount)
        }

        func copy() -> State {
            let copy = State()
            copy.storage.copyMemory(from: storage, byteCount: Self.byteCount)
            return copy
        }

        /// Calls `body` with a copy of the state (wiped when the copy is released), leaving this one intact.
        func withTemporaryCopy<R>(_ body: (OpaquePointer) -> R) -> R {
            let temporary = copy()
            return withExtendedLifetime(temporary) { body(temporary.pointer) }
        }

        deinit {
            sodium_memzero(storage, Self.byteCount)
            storage.deallocate()
        }
    }
}
