internal import CSodium
import CofferSync

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The memory that ``SecureBytes`` lives in, and what happens when it cannot be locked.
///
/// Every `SecureBytes` gets its own mapping: a guard page, the data pages (the bytes end exactly
/// at the second guard page, with a canary before them), and a guard page. The data pages are
/// locked into RAM (`mlock`), kept out of core dumps (`MADV_DONTDUMP` on Linux), made read-only
/// once filled, and wiped before they are unmapped.
///
/// Locking can fail: an unprivileged process may lock only `ulimit -l` bytes (8 MiB by default
/// on Linux), and each secret holds at least one page. libsodium's `sodium_malloc` ignores that
/// failure; Coffer does not:
///
/// - every failure is counted in ``statistics``;
/// - under ``LockPolicy/report`` (the default) the first failure of the process is passed to the
///   handler set with ``setLockFailureHandler(_:)`` — by default one line on standard error —
///   and the secret is kept in unlocked memory (it may be written to swap);
/// - under ``LockPolicy/require`` creating the `SecureBytes` throws
///   ``CryptoError/Code/memoryLockFailed`` instead.
///
/// ```swift
/// SecureMemory.lockPolicy = .require            // refuse to hold a secret in swappable memory
/// SecureMemory.setLockFailureHandler { failure in logger.warning("\(failure)") }
/// print(SecureMemory.statistics.lockFailures)
/// ```
public enum SecureMemory: Sendable {
    /// What to do when a secret's pages cannot be locked into RAM.
    public enum LockPolicy: Sendable, Hashable {
        /// Keep the secret in unlocked memory, count the failure, and tell the failure handler
        /// the first time it happens in the process.
        case report
        /// Fail: creating the `SecureBytes` throws ``CryptoError/Code/memoryLockFailed``.
        case require
    }

    /// One `mlock` that failed. Holds sizes and an `errno`, never the secret.
    public struct LockFailure: Sendable, Hashable, CustomStringConvertible {
        /// The bytes the failed `mlock` asked for (whole pages).
        public let bytes: Int
        /// The `errno` of `mlock`: `ENOMEM` past the limit, `EPERM` when locking is not allowed.
        public let errno: Int32
        /// The soft `RLIMIT_MEMLOCK` when it could be read (`nil`: unknown or unlimited).
        public let limit: Int?

        public var description: String {
            let reason = String(cString: strerror(errno))
            let limitText = limit.map { "; the lock limit (ulimit -l) is \(Self.size($0))" } ?? ""
            return "could not lock \(Self.size(bytes)) of secret memory into RAM (mlock: \(reason))\(limitText); "
                + "secrets may be written to swap: raise the limit or use encrypted swap"
        }

        static func size(_ bytes: Int) -> String {
            if bytes >= 1 << 20, bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
            if bytes >= 1 << 10, bytes % (1 << 10) == 0 { return "\(bytes >> 10) KiB" }
            return "\(bytes) bytes"
        }
    }

    /// Counts since the process started.
    public struct Statistics: Sendable, Hashable {
        /// Bytes of live secrets' pages that are locked into RAM.
        public var lockedBytes = 0
        /// Bytes of live secrets' pages that could not be locked.
        public var unlockedBytes = 0
        /// Live guarded allocations.
        public var allocations = 0
        /// Failed `mlock` calls so far (each one a secret that was, or would have been, swappable).
        public var lockFailures = 0
    }

    struct Settings {
        var policy = LockPolicy.report
        var handler: (@Sendable (LockFailure) -> Void)? = SecureMemory.defaultHandler
        /// Whether `handler` is still Coffer's own (the application never set one).
        var handlerIsDefault = true
        var reported = false
        var statistics = Statistics()
        /// Tests replace `mlock` to simulate a full lock budget (root ignores `RLIMIT_MEMLOCK`).
        var lock: @Sendable (UnsafeMutableRawPointer, Int) -> Int32 = { pointer, count in
            mlock(pointer, count) == 0 ? 0 : errno
        }
    }

    static let settings = Locked(Settings())

    /// What happens when locking fails. Default ``LockPolicy/report``.
    public static var lockPolicy: LockPolicy {
        get { settings.withLock { $0.policy } }
        set { settings.withLock { $0.policy = newValue } }
    }

    /// Replaces what is told about the first lock failure (under ``LockPolicy/report``); `nil`
    /// silences it. The default writes one line to standard error.
    ///
    /// The handler is called without Coffer's locks held, but on the thread that was creating a
    /// secret, which may be inside any Coffer call (unlocking a vault, reading an item). Keep it
    /// short and do not call back into Coffer from it: log, count, or set a flag.
    public static func setLockFailureHandler(_ handler: (@Sendable (LockFailure) -> Void)?) {
        // The old handler is released after the lock is let go: releasing the last reference to
        // a closure runs its captures' deinits, which must not run under our lock.
        let previous = settings.withLock { s in
            defer {
                s.handler = handler
                s.handlerIsDefault = false
            }
            return s.handler
        }
        withExtendedLifetime(previous) {}  // released here, after the lock
    }

    /// Replaces the default handler, never one the application set. CofferCrypto cannot import
    /// CofferCore, so the vault's module uses this to tell lock failures through `CofferWarning`.
    package static func replaceDefaultLockFailureHandler(_ handler: @escaping @Sendable (LockFailure) -> Void) {
        let previous = settings.withLock { s -> (@Sendable (LockFailure) -> Void)? in
            guard s.handlerIsDefault else { return nil }
            defer { s.handler = handler }
            return s.handler
        }
        withExtendedLifetime(previous) {}
    }

    /// The counts so far.
    public static var statistics: Statistics {
        settings.withLock { $0.statistics }
    }

    static let defaultHandler: @Sendable (LockFailure) -> Void = { failure in
        let line = "coffer: warning: \(failure)\n"
        _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    }

    /// Swaps in a lock function for a test; returns the previous one.
    package static func replaceLockFunction(
        _ lock: @escaping @Sendable (UnsafeMutableRawPointer, Int) -> Int32
    ) -> @Sendable (UnsafeMutableRawPointer, Int) -> Int32 {
        settings.withLock { s in
            let previous = s.lock
            s.lock = lock
            return previous
        }
    }

    /// Forgets that the first failure was reported, so a test can see the handler called again.
    package static func resetReporting() {
        settings.withLock { $0.reported = false }
    }

    static let pageSize: Int = {
        let size = sysconf(Int32(_SC_PAGESIZE))
        return size > 0 ? Int(size) : 4096
    }()

    /// 16 random bytes written before every buffer and checked when it is freed: a write that
    /// ran backwards over the start of a buffer is caught (one that runs forwards hits the guard
    /// page at once).
    static let canary: (UInt64, UInt64) = {
        var words: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &words) { randombytes_buf($0.baseAddress!, $0.count) }
        return words
    }()
    static let canarySize = 16

    static func memlockLimit() -> Int? {
        var limit = rlimit()
        #if canImport(Glibc)
            let resource = __rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue)
            let infinity = rlim_t.max  // RLIM_INFINITY, which Swift imports as a negative literal
        #elseif canImport(Musl)
            let resource = RLIMIT_MEMLOCK
            let infinity = rlim_t.max
        #else
            let resource = RLIMIT_MEMLOCK
            let infinity = RLIM_INFINITY
        #endif
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur != infinity else { return nil }
        return Int(clamping: limit.rlim_cur)
    }
}

/// One guarded mapping: `[guard page][data pages][guard page]`, the bytes right-aligned against
/// the second guard page, the canary just before them.
struct GuardedRegion {
    /// Start of the whole mapping (the first guard page).
    let base: UnsafeMutableRawPointer
    let mappedSize: Int
    /// Start and size of the data pages (between the guard pages).
    let data: UnsafeMutableRawPointer
    let dataSize: Int
    /// The caller's bytes.
    let bytes: UnsafeMutableRawPointer
    let count: Int
    let locked: Bool

    /// Maps, guards and locks a region for `count` (> 0) bytes, zero-filled and writable.
    static func allocate(count: Int) throws -> GuardedRegion {
        let page = SecureMemory.pageSize
        let (needed, overflow) = count.addingReportingOverflow(SecureMemory.canarySize + page - 1)
        guard !overflow, needed / page <= (Int.max / page) - 2 else {
            throw CryptoError(code: .outOfMemory, message: "cannot allocate \(count) guarded bytes")
        }
        let dataSize = needed / page * page
        let mappedSize = dataSize + 2 * page
        let mapped = mmap(nil, mappedSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        let mapError = errno  // read at once: anything in between may overwrite it
        guard let base = mapped, base != MAP_FAILED else {
            throw CryptoError(
                code: .outOfMemory,
                message: "could not map \(SecureMemory.LockFailure.size(mappedSize)) for \(count) guarded bytes "
                    + "(mmap: \(String(cString: strerror(mapError))))")
        }
        let data = base + page
        var guardStatus = mprotect(base, page, PROT_NONE)
        if guardStatus == 0 { guardStatus = mprotect(data + dataSize, page, PROT_NONE) }
        let guardError = errno  // read at once, before munmap can overwrite it
        guard guardStatus == 0 else {
            munmap(base, mappedSize)
            throw CryptoError(
                code: .failed, message: "mprotect of a guard page failed: \(String(cString: strerror(guardError)))")
        }
        #if os(Linux)
            // Keep secrets out of core dumps. Advisory: a kernel without it still works.
            // (Not MADV_WIPEONFORK: a child forked without exec would see zeroed keys and a
            // zeroed canary, and fail in confusing ways; Swift code does not fork without exec.)
            _ = madvise(data, dataSize, MADV_DONTDUMP)
        #endif
        let status = SecureMemory.settings.withLock { $0.lock }(data, dataSize)
        let locked = status == 0
        if !locked {
            let failure = SecureMemory.LockFailure(bytes: dataSize, errno: status, limit: SecureMemory.memlockLimit())
            let (policy, handler) = SecureMemory.settings.withLock { s -> (SecureMemory.LockPolicy, (@Sendable (SecureMemory.LockFailure) -> Void)?) in
                s.statistics.lockFailures += 1
                let first = !s.reported
                if s.policy == .report { s.reported = true }
                return (s.policy, first ? s.handler : nil)
            }
            if policy == .require {
                munmap(base, mappedSize)
                throw CryptoError(code: .memoryLockFailed, message: failure.description)
            }
            handler?(failure)
        }
        let bytes = data + dataSize - count
        withUnsafeBytes(of: SecureMemory.canary) { canary in
            (bytes - SecureMemory.canarySize).copyMemory(from: canary.baseAddress!, byteCount: canary.count)
        }
        SecureMemory.settings.withLock { s in
            s.statistics.allocations += 1
            if locked { s.statistics.lockedBytes += dataSize } else { s.statistics.unlockedBytes += dataSize }
        }
        return GuardedRegion(
            base: base, mappedSize: mappedSize, data: data, dataSize: dataSize, bytes: bytes, count: count, locked: locked)
    }

    /// Makes the data pages read-only.
    func protectReadOnly() throws {
        let status = mprotect(data, dataSize, PROT_READ)
        let code = errno  // read at once
        guard status == 0 else {
            throw CryptoError(code: .failed, message: "mprotect(PROT_READ) failed: \(String(cString: strerror(code)))")
        }
    }

    /// Checks the canary, wipes the data pages, unlocks and unmaps everything.
    func free() {
        if mprotect(data, dataSize, PROT_READ | PROT_WRITE) != 0 {
            fatalError("SecureBytes: cannot make guarded memory writable to wipe it (mprotect failed)")
        }
        let intact = withUnsafeBytes(of: SecureMemory.canary) { canary in
            sodium_memcmp(bytes - SecureMemory.canarySize, canary.baseAddress!, canary.count) == 0
        }
        sodium_memzero(data, dataSize)
        if locked { munlock(data, dataSize) }
        munmap(base, mappedSize)
        SecureMemory.settings.withLock { s in
            s.statistics.allocations -= 1
            if locked { s.statistics.lockedBytes -= dataSize } else { s.statistics.unlockedBytes -= dataSize }
        }
        // The region is already wiped and gone; a damaged canary means something wrote before
        // the start of a secret's buffer, which is memory corruption: stop, as libsodium does.
        if !intact { fatalError("SecureBytes: the canary before a guarded buffer was overwritten (memory corruption)") }
    }
}
