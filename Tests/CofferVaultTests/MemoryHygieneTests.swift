import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Guard pages and wiping, observed from outside: child processes (CofferTestHelper) that
/// overrun a SecureBytes buffer, and one that scans its own memory after Vault.lock().
@Suite("Memory hygiene")
struct MemoryHygieneTests {
    /// Runs a helper that may die of a signal (no backtrace, standard error discarded).
    static func helper(_ arguments: [String]) throws -> HelperChild.Finished {
        try HelperChild.run(arguments, environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .discard)
    }

    @Test(arguments: [["secure-overread", "32"], ["secure-overread", "1"], ["secure-overread", "4096"], ["secure-underread"], ["secure-write"]])
    func touchingOutsideOrWritingASecretKillsTheProcess(_ arguments: [String]) throws {
        let result = try Self.helper(arguments)
        #expect(result.output.contains("allocated"))
        #expect(result.reason == .uncaughtSignal && result.status == SIGSEGV, "\(arguments): \(result)")
        #expect(!result.output.contains("read past") && !result.output.contains("wrote into"))
    }

    @Test func afterLockNoKeyIsLeftInAnonymousMemory() throws {
        let dir = try Scratch("memscan")
        let result = try Self.helper(["memscan", dir.path])
        #expect(result.reason == .exit && result.status == 0, "\(result.output)")
        var before: [String: Int] = [:]
        var after: [String: Int] = [:]
        var scanned = 0
        for line in result.output.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count >= 2 else { continue }
            if parts[0] == "scanned" { scanned = Int(parts[1]) ?? 0 }
            if parts.count >= 3, let count = Int(parts[2]) {
                if parts[0] == "before" { before[String(parts[1])] = count }
                if parts[0] == "after" { after[String(parts[1])] = count }
            }
        }
        // The control: while unlocked the scanner finds the master key and every subkey.
        for name in ["master_key", "record_key", "chain_key", "header_key"] {
            #expect((before[name] ?? 0) > 0, "the scan did not find the \(name) while unlocked: \(result.output)")
            #expect(after[name] == 0, "\(name) still in memory after lock(): \(result.output)")
        }
        #expect(after["key-encryption_key"] == 0, "\(result.output)")
        #expect(after["raw_unlock_key"] == 0, "\(result.output)")
        // Secrets: the one set and read as SecureBytes, and 20 more decrypted by a fresh open
        // (which authenticates every record) — no plaintext copy may outlive lock().
        #expect(after["item_secret_(set_and_read_as_SecureBytes)"] == 0, "\(result.output)")
        #expect(before["opened_item_secrets"] == 20, "the scan did not find the live secrets: \(result.output)")
        #expect(after["opened_item_secrets"] == 0, "\(result.output)")
        #expect(scanned > 100_000)
        print("RELIABILITY memory scan after lock(): \(scanned) bytes of anonymous memory; found \(after)")
    }

    /// Runs a helper and returns its exit, standard output and standard error.
    static func helperWithErrors(_ arguments: [String]) throws -> HelperChild.Finished {
        try HelperChild.run(arguments, standardError: .capture)
    }

    static func field(_ name: String, in line: Substring) -> Int? {
        let parts = line.split(separator: " ")
        guard let index = parts.firstIndex(of: Substring(name)), index + 1 < parts.count else { return nil }
        return Int(parts[index + 1])
    }

    @Test("Secrets are locked into RAM, and the locked bytes are accounted")
    func secretsAreLocked() throws {
        let result = try Self.helperWithErrors(["mlock-ok"])
        #expect(result.status == 0, "\(result)")
        let line = try #require(result.output.split(separator: "\n").first { $0.hasPrefix("locked") })
        #expect(Self.field("failures", in: line) == 0, "\(line)")
        #expect(Self.field("allocations", in: line) == 3, "\(line)")
        #expect((Self.field("locked", in: line) ?? 0) >= 3 * 4096, "\(line)")
    }

    @Test("Past the lock limit, mlock failures are counted, reported once, and refused under .require")
    func lockFailuresAreReported() throws {
        let result = try Self.helperWithErrors(["mlock-limit"])
        #expect(result.status == 0, "\(result)")
        let lines = result.output.split(separator: "\n")
        // The handler is told about the first failure only; all six are counted.
        let handled = lines.filter { $0.hasPrefix("handler ") }
        #expect(handled.count == 1, "\(result.output)")
        #expect(handled.first?.contains("could not lock 4 KiB of secret memory into RAM (mlock: ") == true, "\(handled)")
        #expect(handled.first?.contains("the lock limit (ulimit -l) is 0 bytes") == true, "\(handled)")
        let report = try #require(lines.first { $0.hasPrefix("report ok") }, "\(result.output)")
        #expect(Self.field("failures", in: report) == 6, "\(report)")
        #expect(Self.field("allocations", in: report) == 6, "\(report)")
        #expect((Self.field("unlocked", in: report) ?? 0) >= 6 * 4096, "\(report)")
        #expect(Self.field("locked", in: report) == 0, "\(report)")
        let require = try #require(lines.first { $0.hasPrefix("require ") }, "\(result.output)")
        #expect(require.hasPrefix("require threw memoryLockFailed: could not lock"), "\(require)")
        let released = try #require(lines.first { $0.hasPrefix("released") }, "\(result.output)")
        #expect(Self.field("allocations", in: released) == 0, "\(released)")
        #expect(Self.field("unlocked", in: released) == 0, "\(released)")
        // Replacing the handler released the old one (whose captures call SecureMemory) without
        // holding SecureMemory's lock.
        let tail = lines.drop { !$0.hasPrefix("released") }.dropFirst()
        #expect(Array(tail) == ["old handler released (allocations 0)", "replaced the handler"], "\(result.output)")
    }

    @Test("By default the first lock failure is one warning line on standard error")
    func defaultHandlerWarnsOnce() throws {
        let result = try Self.helperWithErrors(["mlock-limit", "default"])
        #expect(result.status == 0, "\(result)")
        let warnings = result.errors.split(separator: "\n").filter { $0.hasPrefix("coffer: warning: could not lock") }
        #expect(warnings.count == 1, "\(result.errors)")
        #expect(result.output.contains("report ok 6 failures 6"), "\(result.output)")
    }
}
