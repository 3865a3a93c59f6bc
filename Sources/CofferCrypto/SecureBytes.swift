internal import CSodium

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// Secret bytes (keys, passphrases, unwrapped plaintext keys) in guarded memory.
///
/// The bytes live in guarded memory (``SecureMemory``): a mapping of their own with a guard page
/// on each side (the bytes end exactly at the second one), a canary before them, locked into RAM
/// (`mlock`; a failure is reported, see ``SecureMemory/lockPolicy``), kept out of core dumps, and
/// read-only once initialised. The pages are wiped when the last reference goes away. Bytes are reachable only through ``withUnsafeBytes(_:)``, equality
/// is constant time, and `description` prints `<redacted>`. Zeroing is best effort: copies a caller
/// makes (into an `Array`, a `String`, a register or swap) are outside this type's control.
///
/// ```swift
/// let key = try SecureBytes.random(count: XChaCha20Poly1305.keyLength)
/// let passphrase = try SecureBytes(utf8: "correct horse battery staple")
/// ```
// @unchecked Sendable: the buffer is written only inside an initialiser, before the instance can be
// shared, and is then made read-only (mprotect PROT_READ); afterwards it is immutable.
public final class SecureBytes: @unchecked Sendable {
    /// The guarded mapping, or nil when `count == 0` (nothing is allocated then).
    private let region: GuardedRegion?
    /// Start of the bytes, or nil when `count == 0`.
    private var pointer: UnsafeMutableRawPointer? { region?.bytes }

    /// The number of bytes.
    public let count: Int

    /// Allocates `count` zeroed guarded bytes, lets `initialize` fill them, then makes them read-only.
    ///
    /// This is the only place the bytes are writable; it is internal so only CofferCrypto (for
    /// example decrypting or deriving straight into guarded memory) can write.
    init(count: Int, initializingWith initialize: (UnsafeMutableRawBufferPointer) throws -> Void) throws {
        guard count >= 0 else {
            throw CryptoError(code: .invalidLength, message: "SecureBytes count must not be negative, got \(count)")
        }
        try Sodium.initialize()
        guard count > 0 else {
            // An empty secret needs no storage (and no guard pages).
            try initialize(UnsafeMutableRawBufferPointer(start: nil, count: 0))
            self.region = nil
            self.count = 0
            return
        }
        // Fresh anonymous pages are zero-filled.
        let region = try GuardedRegion.allocate(count: count)
        do {
            try initialize(UnsafeMutableRawBufferPointer(start: region.bytes, count: count))
            try region.protectReadOnly()
        } catch {
            region.free()
            throw error
        }
        self.region = region
        self.count = count
    }

    /// Creates `count` zero bytes in guarded memory.
    ///
    /// - Throws: `.invalidLength` if `count` is negative, `.outOfMemory` if the memory cannot be
    ///   mapped, `.memoryLockFailed` if it cannot be locked under ``SecureMemory/LockPolicy/require``.
    public convenience init(count: Int) throws {
        try self.init(count: count) { _ in }
    }

    /// Copies `bytes` into guarded memory. The source is not wiped; that is the caller's business.
    ///
    /// - Throws: `.outOfMemory` if the memory cannot be mapped (or `.memoryLockFailed`, see ``SecureMemory``).
    public convenience init(copying bytes: UnsafeRawBufferPointer) throws {
        try self.init(count: bytes.count) { destination in
            if bytes.count > 0 {
                destination.copyMemory(from: bytes)
            }
        }
    }

    /// Copies any contiguous bytes (`[UInt8]`, `Data`, …) into guarded memory.
    ///
    /// - Throws: `.outOfMemory` if the memory cannot be mapped (or `.memoryLockFailed`, see ``SecureMemory``).
    public convenience init<D: ContiguousBytes>(copying bytes: D) throws {
        let count = bytes.withUnsafeBytes { $0.count }
        try self.init(count: count) { destination in
            try bytes.withUnsafeBytes { source in
                guard source.count == destination.count else {
                    throw CryptoError.invalidLength("source", expected: destination.count, actual: source.count)
                }
                if source.count > 0 {
                    destination.copyMemory(from: source)
                }
            }
        }
    }

    /// Copies a string's UTF-8 bytes into guarded memory (for passphrases typed by a person).
    ///
    /// The `String` itself cannot be wiped; keep its lifetime short.
    /// - Throws: `.outOfMemory` if the memory cannot be mapped (or `.memoryLockFailed`, see ``SecureMemory``).
    public convenience init(utf8 string: String) throws {
        var string = string
        try self.init(count: string.utf8.count) { destination in
            string.withUTF8 { source in
                if source.count > 0 {
                    destination.copyMemory(from: UnsafeRawBufferPointer(source))
                }
            }
        }
    }

    /// Creates `count` bytes from libsodium's CSPRNG (`randombytes_buf`) in guarded memory.
    ///
    /// - Throws: `.invalidLength` if `count` is negative, `.outOfMemory` if the memory cannot be mapped (or `.memoryLockFailed`, see ``SecureMemory``).
    public static func random(count: Int) throws -> SecureBytes {
        try SecureBytes(count: count) { destination in
            if let start = destination.baseAddress, destination.count > 0 {
                randombytes_buf(start, destination.count)
            }
        }
    }

    deinit {
        // Makes the pages writable again, checks the canary, wipes, unlocks and unmaps them.
        region?.free()
    }

    /// Calls `body` with read-only access to the bytes; do not let the pointer escape `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

extension SecureBytes: ContiguousBytes {}

extension SecureBytes: Equatable {
    /// Compares contents in constant time (`sodium_memcmp`); different lengths are simply unequal.
    public static func == (lhs: SecureBytes, rhs: SecureBytes) -> Bool {
        guard lhs.count == rhs.count else {
            return false
        }
        if lhs === rhs || lhs.count == 0 {
            return true
        }
        guard let left = lhs.pointer, let right = rhs.pointer else {
            return false
        }
        return sodium_memcmp(left, right, lhs.count) == 0
    }
}

extension SecureBytes: CustomStringConvertible, CustomDebugStringConvertible {
    /// Always `<redacted>`: the bytes are never printed.
    public var description: String {
        "<redacted>"
    }

    /// `SecureBytes(<count> bytes, <redacted>)`: the length, never the bytes.
    public var debugDescription: String {
        "SecureBytes(\(count) bytes, <redacted>)"
    }
}

extension SecureBytes: CustomReflectable {
    /// Shows only `count` to `dump` and debuggers, never the storage address or bytes.
    public var customMirror: Mirror {
        Mirror(self, children: ["count": count], displayStyle: .class)
    }
}
