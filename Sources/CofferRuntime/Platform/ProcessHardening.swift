import CofferCore
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Process-wide measures that keep secrets in memory from leaking through crashes, core dumps
/// and the environment — what gpg-agent and KeePassXC do at start-up.
///
/// Coffer's own types keep secrets in guarded memory (`SecureBytes`: locked, excluded from core
/// dumps where the system allows it, wiped on release), but a process also holds copies it does
/// not control: the environment, buffers of the C library, registers. These calls are for a
/// program's `main`, early, before other threads start; a library never calls them by itself,
/// because they change the whole process (no core file for any crash, no debugger attaching
/// without privileges, no Swift crash report).
///
/// ```swift
/// try ProcessHardening.disableCoreDumps()
/// ProcessHardening.suppressCrashReports(message: "myapp: crashed; no report is printed\n")
/// let passphrase = try ProcessHardening.consumeEnvironmentVariable("MYAPP_PASSPHRASE") { bytes in
///     try bytes.map { try SecureBytes(copying: $0) }
/// }
/// ```
public enum ProcessHardening: Sendable {
    /// Makes this process write no core file and refuse to be read by other processes of the
    /// same user: `prctl(PR_SET_DUMPABLE, 0)` on Linux (no core dump, `/proc/<pid>/mem` and
    /// `ptrace` from the same user refused) and the core file size limit (`RLIMIT_CORE`) set to
    /// 0, soft and hard, so it cannot be raised again. On Darwin only the limit is set.
    ///
    /// Call it once, early in `main`. It is inherited across `fork`; `execve` makes a new
    /// program dumpable again (but keeps the limit).
    ///
    /// - Parameter keepingHardLimit: Lower only the soft limit, so a program this process
    ///   starts later may be given back the limit it would have had (`coffer run`); this process
    ///   stays without core files (not dumpable, soft limit 0).
    /// - Throws: ``CofferError`` with code ``CofferError/Code/io`` and the errno when a call fails.
    public static func disableCoreDumps(keepingHardLimit: Bool = false) throws {
        #if canImport(Glibc)
            let resource = __rlimit_resource_t(RLIMIT_CORE.rawValue)
        #else
            let resource = RLIMIT_CORE
        #endif
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        if keepingHardLimit {
            var current = rlimit()
            guard getrlimit(resource, &current) == 0 else {
                throw CofferError.io("getrlimit(RLIMIT_CORE)", path: nil, errno: errno)
            }
            none.rlim_max = current.rlim_max
        }
        guard setrlimit(resource, &none) == 0 else {
            throw CofferError.io("setrlimit(RLIMIT_CORE, 0)", path: nil, errno: errno)
        }
        #if os(Linux)
            guard c_prctl(prSetDumpable, 0, 0, 0, 0) == 0 else {
                throw CofferError.io("prctl(PR_SET_DUMPABLE, 0)", path: nil, errno: errno)
            }
        #endif
    }

    /// Whether this process is dumpable (`prctl(PR_GET_DUMPABLE)` on Linux): `false` after
    /// ``disableCoreDumps()``. Elsewhere the same as ``coreDumpsEnabled``.
    public static var isDumpable: Bool {
        #if os(Linux)
            return c_prctl(prGetDumpable, 0, 0, 0, 0) != 0
        #else
            return coreDumpsEnabled
        #endif
    }

    /// Whether the system would write a core file for this process: it is dumpable (Linux) and
    /// its core size limit is above 0.
    public static var coreDumpsEnabled: Bool {
        var limit = rlimit()
        #if canImport(Glibc)
            let resource = __rlimit_resource_t(RLIMIT_CORE.rawValue)
        #else
            let resource = RLIMIT_CORE
        #endif
        let limited = getrlimit(resource, &limit) == 0 && limit.rlim_cur == 0
        #if os(Linux)
            return c_prctl(prGetDumpable, 0, 0, 0, 0) != 0 && !limited
        #else
            return !limited
        #endif
    }

    /// Calls `body` with the bytes of environment variable `name` (`nil` when it is not set),
    /// then removes it from the environment — and, where that is safe, overwrites the original
    /// `NAME=value` bytes with zeros first, so `/proc/<pid>/environ`, a core file or a child's
    /// view of this process's memory no longer hold it.
    ///
    /// Copy what you need inside `body` (into `SecureBytes`): the bytes are gone afterwards.
    ///
    /// The bytes are overwritten only when they lie in the environment block the kernel gave the
    /// process at `execve` (on Linux, the range `/proc/self/stat` reports): that memory is
    /// always writable. A variable set later with `setenv` or `putenv` is only removed: its
    /// string may be the caller's, even a read-only literal. Not thread-safe (no environment
    /// call is): call it before other threads start.
    ///
    /// - Parameters:
    ///   - name: The variable's name.
    ///   - body: Receives the value's bytes (without a terminating NUL), or `nil`.
    public static func consumeEnvironmentVariable<R>(
        _ name: String, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) rethrows -> R {
        guard let value = getenv(name) else { return try body(nil) }
        let count = strlen(value)
        defer {
            // The entry is "NAME=value": its start is name.utf8.count + 1 bytes before the value.
            let prefix = name.utf8.count + 1
            let entry = UnsafeMutableRawPointer(value) - prefix
            let original = originalEnvironmentBlock()
            let inBlock =
                original.map {
                    UInt(bitPattern: entry) >= $0.lowerBound && UInt(bitPattern: value) + UInt(count) < $0.upperBound
                } ?? false
            unsetenv(name)
            if inBlock { memset(entry, 0, prefix + count) }
        }
        return try body(UnsafeRawBufferPointer(start: value, count: count))
    }

    /// Replaces the Swift runtime's crash report with `message` for the signals it reports
    /// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGQUIT); the process then dies of
    /// the same signal as before, so its exit status is unchanged.
    ///
    /// Swift's backtracer prints, for every register, the 16 bytes it points to: after a fault
    /// in code handling a secret, that shows bytes of the secret on standard error.
    /// Its `SWIFT_BACKTRACE` setting is read when the process starts, before `main`, so a
    /// program cannot turn it off for itself without re-executing; installing these handlers
    /// instead needs no `exec`, holds whatever `SWIFT_BACKTRACE` says, and also covers a stack
    /// overflow (the handler runs on its own stack). `message` is written with one `write(2)`
    /// to standard error; nothing else is printed.
    ///
    /// Call it once, early in `main`, after anything else that installs handlers for these
    /// signals. Handlers a program installs later for one of them replace it for that signal.
    public static func suppressCrashReports(message: String) {
        let bytes = Array(message.utf8)
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(bytes.count, 1))
        buffer.initialize(from: bytes, count: bytes.count)
        crashMessage = UnsafeRawPointer(buffer)
        crashMessageLength = bytes.count

        // Its own stack, so a stack overflow still reaches the handler.
        let stackSize = 64 * 1024
        var stack = stack_t()
        stack.ss_sp = UnsafeMutableRawPointer.allocate(byteCount: stackSize, alignment: 16)
        stack.ss_size = stackSize
        stack.ss_flags = 0
        sigaltstack(&stack, nil)

        for number in [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGQUIT] {
            SignalHandlers.install(
                crashHandler, for: number, flags: Int32(SA_ONSTACK) | Int32(bitPattern: UInt32(SA_RESETHAND)))
        }
    }
}

// Written once by suppressCrashReports before the handlers exist; only read by the handler.
nonisolated(unsafe) private var crashMessage: UnsafeRawPointer?
nonisolated(unsafe) private var crashMessageLength = 0

/// Async-signal-safe: one write, then the signal again with its default action (SA_RESETHAND
/// restored it); it is delivered as the handler returns, so the process dies of it.
private func crashHandler(_ number: Int32) {
    if let crashMessage { _ = write(STDERR_FILENO, crashMessage, crashMessageLength) }
    _ = signal(number, SIG_DFL)
    raise(number)
}

#if os(Linux)
    // prctl(2) is variadic in C, which Swift does not import; on Linux's ABIs (x86-64, AArch64)
    // a call with five integer arguments is the same as the variadic call.
    @_silgen_name("prctl") private func c_prctl(_ option: Int32, _ a: UInt, _ b: UInt, _ c: UInt, _ d: UInt) -> Int32
    private let prGetDumpable: Int32 = 3  // PR_GET_DUMPABLE, <linux/prctl.h>
    private let prSetDumpable: Int32 = 4  // PR_SET_DUMPABLE

    /// `[env_start, env_end)` from `/proc/self/stat` (fields 50 and 51, Linux 3.5 and later):
    /// where the kernel put the environment strings at `execve`.
    private func originalEnvironmentBlock() -> Range<UInt>? {
        let fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            count += n
        }
        // Fields after the command name (which may hold spaces) start after the last ')'.
        guard let paren = bytes[..<count].lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(paren + 1)..<count].split(separator: UInt8(ascii: " "))
        // fields[0] is field 3 (state), so field N is fields[N - 3].
        guard fields.count > 48,
            let start = UInt(String(decoding: fields[47], as: UTF8.self)),
            let end = UInt(String(decoding: fields[48].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)),
            start < end
        else { return nil }
        return start..<end
    }
#else
    private func originalEnvironmentBlock() -> Range<UInt>? { nil }
#endif
