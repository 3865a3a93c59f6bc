import Coffer
import CofferCrypto
import CofferRuntime

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What `coffer` does first, before parsing: no core dumps, no crash report
/// that prints memory, and the passphrase variables taken out of the environment.
enum Hardening {
    /// The line printed instead of Swift's crash report.
    /// (Also for SIGQUIT, Ctrl-Backslash, which is not a crash: hence "terminated".)
    static let crashMessage =
        "coffer: terminated by a fatal signal (a crash, or SIGQUIT); no crash report is printed, "
        + "as it could show secrets held in memory\n"

    /// The environment variables that may hold a passphrase: read once at start-up, then removed.
    static let secretVariables = ["COFFER_PASSPHRASE", "COFFER_NEW_PASSPHRASE"]

    /// A secret variable as it was at start-up.
    enum Captured {
        case unset
        case empty
        case value(SecureBytes)
    }

    // Written once, on the main thread, before parsing; read afterwards on the same thread.
    nonisolated(unsafe) private static var captured: [String: Captured] = [:]

    /// The soft core size limit coffer was started with (written once in ``apply()``, before any
    /// other thread starts; read afterwards).
    nonisolated(unsafe) private static var originalCoreLimit: rlim_t = 0

    #if canImport(Glibc)
        private static let coreResource = __rlimit_resource_t(RLIMIT_CORE.rawValue)
    #else
        private static let coreResource = RLIMIT_CORE
    #endif

    /// Runs `spawn` with the core size limit coffer was started with, then sets it back to 0:
    /// a program `coffer run` starts keeps the core files its user asked for (`ulimit -c`), and
    /// coffer, not dumpable, writes none meanwhile.
    static func withOriginalCoreLimit<T>(_ spawn: () throws -> T) rethrows -> T {
        var limit = rlimit()
        guard originalCoreLimit > 0, getrlimit(coreResource, &limit) == 0 else { return try spawn() }
        var restored = limit
        restored.rlim_cur = min(originalCoreLimit, limit.rlim_max)
        _ = setrlimit(coreResource, &restored)
        defer { _ = setrlimit(coreResource, &limit) }
        return try spawn()
    }

    /// Runs before anything else in `main`.
    ///
    /// The crash handlers replace Swift's backtracer (see ``ProcessHardening/suppressCrashReports(message:)``
    /// for why handlers, not `SWIFT_BACKTRACE` and a re-exec). Core dumps are disabled; if that
    /// fails coffer says so and goes on (it is not a reason to refuse the user's command).
    static func apply() throws {
        ProcessHardening.suppressCrashReports(message: crashMessage)
        do {
            var limit = rlimit()
            if getrlimit(coreResource, &limit) == 0 { originalCoreLimit = limit.rlim_cur }
            // The hard limit is kept, so `coffer run` can give its command the core size limit
            // coffer was started with; coffer itself stays non-dumpable with a soft limit of 0.
            try ProcessHardening.disableCoreDumps(keepingHardLimit: true)
        } catch {
            writeError("coffer: warning: cannot disable core dumps: \(error)\n")
        }
        for name in secretVariables {
            captured[name] = try ProcessHardening.consumeEnvironmentVariable(name) { bytes -> Captured in
                guard let bytes else { return .unset }
                guard bytes.count > 0 else { return .empty }
                return .value(try SecureBytes(copying: bytes))
            }
        }
        #if COFFER_TEST_HOOKS
        try testHook()
        #endif
    }

    /// The value `name` had at start-up, or `nil` when it was unset.
    static func secret(_ name: String) throws -> SecureBytes? {
        switch captured[name] ?? .unset {
        case .unset: return nil
        case .empty: throw CLIError.usage("\(name) is set but empty")
        case .value(let bytes): return bytes
        }
    }

    #if COFFER_TEST_HOOKS
    /// Test builds only (COFFER_TEST_HOOKS: debug builds, Package.swift), absent from --help:
    /// `COFFER_TEST_HOOK` makes coffer demonstrate its hardening to the CLI tests
    /// (Tests/CofferCLITests/HardeningTests.swift).
    ///
    /// - `report`: prints `coffer: test hook: dumpable=<0|1> coreDumps=<0|1>` on standard error
    ///   and goes on.
    /// - `crash-in-secret`: reads one byte past the end of `$COFFER_PASSPHRASE`'s guarded copy,
    ///   which faults on the guard page (SIGSEGV), as an off-by-one in code handling a secret
    ///   would.
    ///
    /// Harmless: it reveals nothing the process's owner could not see, and crashing only this
    /// process is no more than `kill -SEGV` does.
    private static func testHook() throws {
        guard let hook = getenv("COFFER_TEST_HOOK").map({ String(cString: $0) }) else { return }
        switch hook {
        case "report":
            writeError(
                "coffer: test hook: dumpable=\(ProcessHardening.isDumpable ? 1 : 0) coreDumps=\(ProcessHardening.coreDumpsEnabled ? 1 : 0)\n"
            )
        case "crash-in-secret":
            guard case .value(let secret) = captured["COFFER_PASSPHRASE"] ?? .unset else {
                throw CLIError.usage("COFFER_TEST_HOOK=crash-in-secret needs COFFER_PASSPHRASE")
            }
            let byte = secret.withUnsafeBytes { readPastTheEnd($0) }
            writeError("coffer: test hook: read past the end: \(byte)\n")  // never reached
        default:
            throw CLIError.usage("unknown COFFER_TEST_HOOK")
        }
    }

    /// Copies `buffer` and the byte after it, as an off-by-one `memcpy` would: the copy faults
    /// with the secret's address in a register, which Swift's crash report used to dump.
    @inline(never)
    private static func readPastTheEnd(_ buffer: UnsafeRawBufferPointer) -> UInt8 {
        guard let base = buffer.baseAddress else { return 0 }
        var copy = [UInt8](repeating: 0, count: buffer.count + 1)
        copy.withUnsafeMutableBytes { _ = memcpy($0.baseAddress!, base, buffer.count + 1) }
        return copy[buffer.count]
    }
    #endif
}
