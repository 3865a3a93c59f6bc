import CofferCrypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// `mlock-limit [default]`: lowers this process's lock limit to zero (and, when it runs as root,
// which ignores the limit, becomes `nobody` first so the limit applies), then allocates secrets
// under both lock policies and prints what SecureMemory reported:
//
//   privileges dropped|kept
//   handler <the failure's description>          (once: only the first failure is reported)
//   report ok <n> failures <f> unlocked <bytes> locked <bytes> allocations <a>
//   require threw <code>: <message>
//   released allocations <a> unlocked <bytes> locked <bytes>
//   old handler released (allocations <a>)       (its captures' deinit may call SecureMemory)
//   replaced the handler
//
// With `default`, the default handler (one line on standard error) is left in place.
//
// `mlock-ok`: no limit change; prints `locked <bytes> failures <f> allocations <a>`.

func memoryLockCommand(_ arguments: [String]) -> Never {
    let mode = arguments[1]
    do {
        if mode == "mlock-ok" {
            let secrets = try (0..<3).map { _ in try SecureBytes.random(count: 32) }
            let stats = SecureMemory.statistics
            say("locked \(stats.lockedBytes) failures \(stats.lockFailures) allocations \(stats.allocations)")
            withExtendedLifetime(secrets) {}
            exit(0)
        }
        var limit = rlimit(rlim_cur: 0, rlim_max: 0)
        guard setrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &limit) == 0 else {
            fail("setrlimit(RLIMIT_MEMLOCK, 0) failed: \(String(cString: strerror(errno)))")
        }
        if geteuid() == 0 {
            // Root has CAP_IPC_LOCK, which ignores RLIMIT_MEMLOCK; changing to an ordinary user
            // drops every capability.
            guard setgid(65534) == 0, setuid(65534) == 0 else {
                fail("cannot drop root privileges: \(String(cString: strerror(errno)))")
            }
            say("privileges dropped")
        } else {
            say("privileges kept")
        }
        if arguments.count < 3 || arguments[2] != "default" {
            SecureMemory.setLockFailureHandler { failure in say("handler \(failure)") }
        }
        SecureMemory.lockPolicy = .report
        let secrets = try (0..<3).map { _ in try SecureBytes.random(count: 32) }
        let copies = try secrets.map { secret in try SecureBytes(copying: secret) }
        guard zip(secrets, copies).allSatisfy({ $0 == $1 }) else { fail("an unlocked secret did not read back") }
        let stats = SecureMemory.statistics
        say(
            "report ok \(secrets.count + copies.count) failures \(stats.lockFailures) unlocked \(stats.unlockedBytes) "
                + "locked \(stats.lockedBytes) allocations \(stats.allocations)")
        SecureMemory.lockPolicy = .require
        do {
            _ = try SecureBytes.random(count: 32)
            say("require allocated")
        } catch let error as CryptoError {
            say("require threw \(error.code): \(error.message)")
        }
        withExtendedLifetime((secrets, copies)) {}
    } catch {
        fail("error: \(error)")
    }
    // Every secret above was released at the end of the `do` block.
    let stats = SecureMemory.statistics
    say("released allocations \(stats.allocations) unlocked \(stats.unlockedBytes) locked \(stats.lockedBytes)")
    // Replacing a handler releases the old one outside SecureMemory's lock: the probe's deinit
    // takes that lock, so releasing it under the lock would hang (the alarm turns a hang into a
    // failed test). The test runner starts children with most signals blocked: unblock SIGALRM.
    var alarmOnly = sigset_t()
    sigemptyset(&alarmOnly)
    sigaddset(&alarmOnly, SIGALRM)
    sigprocmask(SIG_UNBLOCK, &alarmOnly, nil)
    alarm(30)
    installProbeHandler()
    SecureMemory.setLockFailureHandler(nil)
    say("replaced the handler")
    exit(0)
}

/// Its deinit calls into SecureMemory, as a captured logger or model might.
private final class ReleaseProbe: Sendable {
    deinit {
        let allocations = SecureMemory.statistics.allocations
        say("old handler released (allocations \(allocations))")
    }
}

/// Installs a handler that is the only owner of a probe.
private func installProbeHandler() {
    let probe = ReleaseProbe()
    SecureMemory.setLockFailureHandler { _ in withExtendedLifetime(probe) {} }
}
