#if Logging
import CofferCore
import CofferTesting
import Foundation
import Testing

/// `CofferWarning.log(to:)` with a real `Logger` and a test `LogHandler`, in a child process
/// (the warning handler is process-wide, and other suites install their own).
@Suite("swift-log integration")
struct LoggingTests {
    @Test("Every warning reaches the Logger, with its kind and path, and never a secret")
    func warningsGoToTheLoggerWithoutSecrets() async throws {
        let scratch = try Scratch("log")
        let child = try HelperChild(
            ["log-warnings", scratch.path], environment: ["COFFER_WATCH": "poll"], standardError: .capture)
        let status = try await child.waitForExit()
        let lines = child.lines
        #expect(status == 0, "\(lines) \(child.standardError)")
        #expect(lines.last == "done", "\(lines)")
        let entries = lines.filter { $0.hasPrefix("log ") }
        for kind in ["shared directory", "secret memory not locked", "salvaged a damaged store",
            "watching falls back to polling"]
        {
            let entry = entries.first { $0.contains("coffer.warning=\(kind)") }
            #expect(entry != nil, "no \(kind) warning was logged: \(entries)")
            #expect(entry?.hasPrefix("log warning ") == true, "\(String(describing: entry))")
        }
        let salvage = try #require(entries.first { $0.contains("coffer.warning=salvaged") })
        #expect(salvage.contains("coffer.path=\(scratch.path)/kv/s.cofferkv"), "\(salvage)")
        #expect(salvage.contains("kept 5 intact record(s)"), "\(salvage)")
        let memory = try #require(entries.first { $0.contains("coffer.warning=secret memory not locked") })
        #expect(memory.contains("could not lock"), "\(memory)")
        // Nothing went to standard error: the Logger replaced it.
        #expect(!child.standardError.contains("coffer: warning:"), "\(child.standardError)")
        // No passphrase or secret anywhere: messages, metadata, or any other output.
        // Told by index: a failed #expect prints its operands, which must not be the secrets.
        let output = lines.joined(separator: "\n")
        let inOutput = IntegrationSecrets.all.indices.filter { output.contains(IntegrationSecrets.all[$0]) }
        let inStandardError = IntegrationSecrets.all.indices.filter { child.standardError.contains(IntegrationSecrets.all[$0]) }
        #expect(inOutput.isEmpty, "these secrets (by index in IntegrationSecrets.all) reached the output")
        #expect(inStandardError.isEmpty, "these secrets (by index in IntegrationSecrets.all) reached standard error")
    }
}
#endif
