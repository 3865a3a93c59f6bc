// Compiles the documents' Swift: at build time, CofferSnippetExtractor turns every ```swift block
// of README.md and Sources/Coffer/Coffer.docc/*.md into Swift files of the target this plugin is
// applied to (CofferSnippetTests; CofferIntegrationSnippetTests for the blocks that import an
// integration module). Each document is an input of the command, so editing one
// rebuilds its file; the placement rules are at the top of Sources/CofferSnippetExtractor/main.swift.
import Foundation
import PackagePlugin

@main
struct CofferSnippetPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) async throws -> [Command] {
        let root = context.package.directoryURL
        let articles = root.appending(path: "Sources/Coffer/Coffer.docc")
        let names = try FileManager.default.contentsOfDirectory(atPath: articles.path)
            .filter { $0.hasSuffix(".md") }
            .sorted()
        let documents = ["README.md"] + names.map { "Sources/Coffer/Coffer.docc/\($0)" }
        // CofferIntegrationSnippetTests gets the blocks that import an integration module.
        let integrations = target.name == "CofferIntegrationSnippetTests"
        let output = context.pluginWorkDirectoryURL.appending(path: "Snippets")
        let outputs =
            documents.map { document -> URL in
                let name = document.split(separator: "/").last.map(String.init) ?? document
                return output.appending(path: String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" }) + ".swift")
            } + (integrations ? [] : [output.appending(path: "SnippetIndex.swift")])
        return [
            .buildCommand(
                displayName: "Extracting the Swift snippets of \(documents.count) documents for \(target.name)",
                executable: try context.tool(named: "CofferSnippetExtractor").url,
                arguments: (integrations ? ["--integrations"] : []) + [output.path, root.path] + documents,
                inputFiles: documents.map { root.appending(path: $0) },
                outputFiles: outputs
            )
        ]
    }
}
