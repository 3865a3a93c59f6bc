import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Guard pages and wiping, observed from outside: child processes (CofferTestHelper) that
/// overrun a SecureBytes buffer, and one that scans its own memory after Vault.lock().
@Suite("Memory hygiene")
struct MemoryHygieneTests {
    static func helper(_ arguments: [String]) throws -> (reason: Process.TerminationReason, status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: VaultCrashLoopTests.helperPath())
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus, String(decoding: data, as: UTF8.self))
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
        #expect(scanned > 100_000)
        print("RELIABILITY memory scan after lock(): \(scanned) bytes of anonymous memory; found \(after)")
    }
}
