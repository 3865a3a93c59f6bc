import CofferTesting
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
        let run = try HelperChild.run(["replay", target, corpus], executable: builtProduct(named: "CofferFuzz"))
        #expect(run.reason == .exit && run.status == 0, "\(run.output)")
        #expect(run.output.contains("inputs ran without a crash"))
    }
}
