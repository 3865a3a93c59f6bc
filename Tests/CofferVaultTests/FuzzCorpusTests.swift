import Foundation
import Testing

/// Every input in Fuzz/corpus (the seeds, and every crash a fuzzer ever found, saved there)
/// runs through its target in the plain build of CofferFuzz, without a crash.
@Suite("Fuzz corpus replay")
struct FuzzCorpusTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test(arguments: ["frames", "header", "vault"])
    func corpusReplaysWithoutACrash(_ target: String) throws {
        let corpus = Self.repository.appendingPathComponent("Fuzz/corpus/\(target)").path
        let fuzz = URL(fileURLWithPath: VaultCrashLoopTests.helperPath()).deletingLastPathComponent()
            .appendingPathComponent("CofferFuzz").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: fuzz)
        process.arguments = ["replay", target, corpus]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(text)")
        #expect(text.contains("inputs ran without a crash"))
    }
}
