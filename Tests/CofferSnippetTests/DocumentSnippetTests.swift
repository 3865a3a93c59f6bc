// The documents' Swift blocks are compiled into this target (Plugins/CofferSnippetPlugin): a
// snippet that no longer compiles against `import Coffer` fails the build of the tests. This
// test guards the extraction itself: every ```swift block of each document is either compiled or
// opted out with a reason, so a block the extractor misread cannot drop out unnoticed. (Blocks
// that import an integration module are compiled by CofferIntegrationSnippetTests.)
import Foundation
import Testing

@Suite struct DocumentSnippetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The first code line of each ```swift block in `path`, and whether it is opted out.
    static func swiftBlocks(_ path: String) throws -> [(line: Int, optedOut: Bool)] {
        let text = try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
        let lines = text.components(separatedBy: "\n")
        var blocks: [(Int, Bool)] = []
        var inFence = false
        for (index, line) in lines.enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("```") else { continue }
            if !inFence && trimmed == "```swift" {
                let above = index > 0 ? lines[index - 1].trimmingCharacters(in: .whitespaces) : ""
                blocks.append((index + 2, above.hasPrefix("<!-- snippet: not compiled,")))
            }
            inFence.toggle()
        }
        return blocks
    }

    @Test func everySwiftBlockIsCompiledOrOptedOut() throws {
        let articles = try FileManager.default.contentsOfDirectory(
            atPath: Self.root.appendingPathComponent("Sources/Coffer/Coffer.docc").path
        ).filter { $0.hasSuffix(".md") }
        let documents = ["README.md"] + articles.map { "Sources/Coffer/Coffer.docc/\($0)" }
        #expect(Set(SnippetIndex.compiled.keys) == Set(documents))
        var total = 0
        for document in documents {
            let blocks = try Self.swiftBlocks(document)
            let compiled = (SnippetIndex.compiled[document] ?? []) + (SnippetIndex.integrations[document] ?? [])
            #expect(compiled.sorted() == blocks.filter { !$0.optedOut }.map(\.line), "\(document)")
            #expect(SnippetIndex.optedOut[document] == blocks.filter(\.optedOut).map(\.line), "\(document)")
            total += blocks.count
        }
        // The README alone has more than ten: an extraction that found none would pass the rest.
        #expect(total > 10)
        #expect(SnippetIndex.compiled.values.map(\.count).reduce(0, +) > 10)
    }
}
