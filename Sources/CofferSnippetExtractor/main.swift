// Extracts the ```swift blocks of Coffer's documents into Swift files that the test target
// CofferSnippetTests compiles (run by the build-tool plugin Plugins/CofferSnippetPlugin at build
// time; each document is an input, so editing one rebuilds its file). A document whose snippet
// stops compiling fails the build of the tests, with the error at the document's own line.
//
// How blocks are placed (the convention the documents are written to):
// - Each document gets one namespace, an enum named after it (`README_md`, `TheVault_md`), so
//   blocks of one document see the declarations of its other blocks and documents never clash.
// - A declaration that starts at a block's first column (`class`, `struct`, `enum`, `actor`,
//   `protocol`, `func`, `typealias`, with their attributes, modifiers and the comments just
//   above them) goes into that namespace; a `func` becomes `static func`. An `extension` goes at
//   file scope.
// - Every other line is a statement: a block's statements form the body of one function of its
//   own, `static func snippet_<line>() throws`, made `async throws` only when the block says
//   `await` (so a synchronous call is checked as an app would write it outside `async` code).
//   Values a block's statements make are local to it (each `let`/`var` at the first column is
//   read once at the end, as `_ = name`, so a value shown but not used is no warning).
// - Each generated file says `import Coffer` and nothing else, plus the `import` lines of the
//   document's blocks (Foundation is the one other module a block may import; the test target
//   depends on Coffer alone): a snippet compiles against `import Coffer` alone.
// - A block that imports an integration module (CofferPostgres, CofferLogging, Hummingbird, …)
//   is compiled instead by CofferIntegrationSnippetTests (`--integrations`), under `#if` the
//   package traits that build those modules (`make test` enables them all); a module no trait
//   builds is an error.
// - What the prose takes as given (a `keyURL`, a `vault` made earlier on the page, an app's own
//   `Document` type) is declared by hand in Tests/CofferSnippetTests/Givens.swift (and
//   Tests/CofferIntegrationSnippetTests/Givens.swift), as static members of the document's
//   namespace: compiled, never run.
// - A block that is deliberately not compilable Swift (a fragment of Package.swift, a block that
//   needs a package this one does not depend on) carries, on the line just above its fence,
//   `<!-- snippet: not compiled, <reason> -->`. Output, shell and pseudo-code are not ```swift at
//   all (```sh, ```text).
//
// Usage: CofferSnippetExtractor [--integrations] <output-directory> <package-directory> <document>...
// (documents relative to the package directory). Writes one `<Namespace>.swift` per document and,
// without `--integrations`, `SnippetIndex.swift`, which lists the blocks compiled by each target
// and those opted out (the test checks it against the documents).

import Foundation

/// The marker, on the line above a ```swift fence, that keeps a block out of the compilation.
let optOutMarker = "<!-- snippet: not compiled,"

struct Block {
    /// 1-based line of the first line of code (the line after the fence).
    var line: Int
    var lines: [String]
}

struct Document {
    var path: String
    var blocks: [Block] = []
    var optedOut: [Int] = []
}

enum ExtractionError: Error, CustomStringConvertible {
    case unterminatedFence(String, Int)
    case optOutWithoutReason(String, Int)
    case unbalancedDeclaration(String, Int)
    case unknownModule(String, Int, String)

    var description: String {
        switch self {
        case .unterminatedFence(let path, let line): "\(path):\(line): a ```swift fence is never closed"
        case .optOutWithoutReason(let path, let line): "\(path):\(line): `\(optOutMarker)` needs a reason and `-->`"
        case .unbalancedDeclaration(let path, let line): "\(path):\(line): a declaration's braces do not balance"
        case .unknownModule(let path, let line, let module):
            "\(path):\(line): the block imports \(module), which no trait of this package builds (opt it out)"
        }
    }
}

func leadingSpaces(_ line: Substring) -> Int { line.prefix { $0 == " " }.count }

/// The ```swift blocks of a Markdown document, with the fence's indentation removed.
func blocks(of text: String, path: String) throws -> Document {
    var document = Document(path: path)
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    var index = 0
    while index < lines.count {
        let line = lines[index]
        let trimmed = line.drop { $0 == " " }
        guard trimmed.hasPrefix("```") else {
            index += 1
            continue
        }
        let info = trimmed.dropFirst(3).split(separator: " ").first.map(String.init) ?? ""
        let indent = leadingSpaces(line)
        // Find the closing fence whatever the language, so a fence inside another is not misread.
        var end = index + 1
        while end < lines.count, !lines[end].drop(while: { $0 == " " }).hasPrefix("```") { end += 1 }
        guard end < lines.count else { throw ExtractionError.unterminatedFence(path, index + 1) }
        if info == "swift" {
            let previous = index > 0 ? lines[index - 1].trimmingCharacters(in: .whitespaces) : ""
            if previous.hasPrefix(optOutMarker) {
                guard previous.hasSuffix("-->"),
                    previous.dropFirst(optOutMarker.count).dropLast(3).contains(where: { $0.isLetter })
                else { throw ExtractionError.optOutWithoutReason(path, index) }
                document.optedOut.append(index + 2)
            } else {
                let body = lines[(index + 1)..<end].map { line -> String in
                    String(line.dropFirst(min(indent, leadingSpaces(line))))
                }
                document.blocks.append(Block(line: index + 2, lines: body))
            }
        }
        index = end + 1
    }
    return document
}

let declarationKeywords: Set<String> = ["class", "struct", "enum", "actor", "protocol", "func", "typealias", "extension"]
let modifiers: Set<String> = [
    "final", "public", "package", "internal", "fileprivate", "private", "nonisolated", "indirect", "static",
]

/// The declaration keyword a line at the first column starts with, past attributes and modifiers.
func declarationKeyword(_ line: String) -> String? {
    guard let first = line.first, first != " " else { return nil }
    var words = Substring(line)
    while true {
        words = words.drop { $0 == " " }
        if words.hasPrefix("@") {
            // An attribute, with its arguments if any: `@MainActor`, `@available(macOS 15, *)`.
            var depth = 0
            var end = words.startIndex
            while end < words.endIndex {
                let c = words[end]
                if c == "(" { depth += 1 }
                if c == ")" { depth -= 1 }
                if c == " " && depth == 0 { break }
                end = words.index(after: end)
            }
            words = words[end...]
            continue
        }
        let word = words.prefix { $0.isLetter }
        if modifiers.contains(String(word)) {
            words = words.dropFirst(word.count)
            continue
        }
        return declarationKeywords.contains(String(word)) ? String(word) : nil
    }
}

/// The change in brace depth over a line, ignoring string literals and `//` comments.
func braceDelta(_ line: String) -> (delta: Int, opened: Bool) {
    var delta = 0
    var opened = false
    var inString = false
    var previous: Character = " "
    for c in line {
        if inString {
            if c == "\"" && previous != "\\" { inString = false }
        } else if c == "\"" {
            inString = true
        } else if c == "/" && previous == "/" {
            break
        } else if c == "{" {
            delta += 1
            opened = true
        } else if c == "}" {
            delta -= 1
        }
        previous = c
    }
    return (delta, opened)
}

struct Placed {
    var imports: [String] = []
    /// (first line, lines) of each declaration that goes into the namespace.
    var declarations: [(Int, [String])] = []
    /// (first line, lines) of each extension, at file scope.
    var extensions: [(Int, [String])] = []
    /// (line, text) of each statement line.
    var statements: [(Int, String)] = []
}

func place(_ block: Block, path: String) throws -> Placed {
    var placed = Placed()
    var pendingComments: [(Int, String)] = []
    var index = 0
    let lines = block.lines
    func flushComments() {
        placed.statements += pendingComments
        pendingComments = []
    }
    while index < lines.count {
        let line = lines[index]
        let number = block.line + index
        if line.hasPrefix("import ") {
            placed.imports.append(line)
            index += 1
            continue
        }
        if line.hasPrefix("//") {
            pendingComments.append((number, line))
            index += 1
            continue
        }
        guard let keyword = declarationKeyword(line) else {
            flushComments()
            placed.statements.append((number, line))
            index += 1
            continue
        }
        let first = pendingComments.first?.0 ?? number
        var declaration = pendingComments.map(\.1)
        pendingComments = []
        var depth = 0
        var opened = false
        repeat {
            let (delta, didOpen) = braceDelta(lines[index])
            depth += delta
            opened = opened || didOpen
            declaration.append(lines[index])
            index += 1
        } while index < lines.count && (depth > 0 || (!opened && keyword != "typealias" && !lines[index - 1].hasSuffix("}")))
        guard depth == 0 else { throw ExtractionError.unbalancedDeclaration(path, number) }
        if keyword == "extension" {
            placed.extensions.append((first, declaration))
        } else {
            if keyword == "func" {
                // The first line naming `func` gets `static` (a doc comment may come first).
                if let at = declaration.firstIndex(where: { declarationKeyword($0) == "func" }) {
                    declaration[at] = "static " + declaration[at]
                }
            }
            placed.declarations.append((first, declaration))
        }
    }
    flushComments()
    return placed
}

/// The name a statement at the first column binds (`let token = …`, `var count = …`), if one.
func boundName(_ line: String) -> String? {
    for keyword in ["let ", "var "] where line.hasPrefix(keyword) {
        let name = line.dropFirst(keyword.count).prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return name.isEmpty ? nil : String(name)
    }
    return nil
}

func namespace(for path: String) -> String {
    let name = path.split(separator: "/").last.map(String.init) ?? path
    return String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" })
}

func sourceLocation(_ file: String, _ line: Int) -> String {
    "#sourceLocation(file: \"\(file)\", line: \(line))"
}

/// The modules a block of the core target may import.
let coreModules: Set<String> = ["Coffer", "Foundation"]

/// The package trait that builds each module an integration block may import (an integration
/// module is empty without its trait, a package dependency not resolved).
let traitOf: [String: String] = [
    "CofferPostgres": "Postgres", "CofferLogging": "Logging", "CofferServiceLifecycle": "ServiceLifecycle",
    "CofferConfiguration": "Configuration", "CofferDependencies": "Dependencies", "Logging": "Logging",
    "ServiceLifecycle": "ServiceLifecycle", "UnixSignals": "ServiceLifecycle", "Configuration": "Configuration",
    "Hummingbird": "ExampleService",
]

func importedModule(_ line: String) -> String {
    String(line.dropFirst("import ".count).prefix { $0.isLetter || $0.isNumber || $0 == "_" })
}

/// The integration modules a block imports (none for a block of the core target).
func integrationModules(_ block: Block) -> [String] {
    block.lines.filter { $0.hasPrefix("import ") }.map(importedModule).filter { !coreModules.contains($0) }
}

/// The Swift file for `document`: its core blocks, or (`integrations`) the blocks that import an
/// integration module, each under `#if` its traits.
func generate(_ document: Document, absolutePath: String, integrations: Bool) throws -> String {
    let space = namespace(for: document.path)
    var imports = ["Coffer"].map { "import \($0)" }
    var body: [String] = []
    for block in document.blocks where integrationModules(block).isEmpty != integrations {
        let placed = try place(block, path: document.path)
        var condition: String? = nil
        if integrations {
            var traits: [String] = []
            for module in integrationModules(block) {
                guard let trait = traitOf[module] else {
                    throw ExtractionError.unknownModule(document.path, block.line, module)
                }
                if !traits.contains(trait) { traits.append(trait) }
            }
            condition = traits.joined(separator: " && ")
        }
        for line in placed.imports {
            let module = importedModule(line)
            let guarded = traitOf[module].map { "#if \($0)\n\(line)\n#endif" } ?? line
            if !imports.contains(guarded) { imports.append(guarded) }
        }
        body.append("")
        body.append("// \(document.path):\(block.line)")
        if let condition { body.append("#if \(condition)") }
        for (line, lines) in placed.extensions {
            body.append(sourceLocation(absolutePath, line))
            body += lines
            body.append("#sourceLocation()")
        }
        if !placed.declarations.isEmpty {
            body.append("extension \(space) {")
            for (line, lines) in placed.declarations {
                body.append(sourceLocation(absolutePath, line))
                body += lines
                body.append("#sourceLocation()")
            }
            body.append("}")
        }
        // Blank lines and comments before the first statement (an `import` above) are left out.
        let isCode = { (text: String) -> Bool in
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            return !trimmed.isEmpty && !trimmed.hasPrefix("//")
        }
        let statements = Array(placed.statements.drop { $0.1.trimmingCharacters(in: .whitespaces).isEmpty })
        if statements.contains(where: { isCode($0.1) }) {
            let isAsync = statements.contains { $0.1.contains("await ") || $0.1.contains("async let ") }
            body.append("extension \(space) {")
            body.append("    static func snippet_\(block.line)() \(isAsync ? "async " : "")throws {")
            body.append(sourceLocation(absolutePath, statements[0].0))
            var expected = statements[0].0
            for (line, text) in statements {
                if line != expected { body.append(sourceLocation(absolutePath, line)) }
                body.append(text)
                expected = line + 1
            }
            body.append("#sourceLocation()")
            // A value a snippet names to show it (`let token = try vault.string(…)`) is used.
            for name in statements.compactMap({ boundName($0.1) }) { body.append("        _ = \(name)") }
            body.append("    }")
            body.append("}")
        }
        if condition != nil { body.append("#endif") }
    }
    let header = [
        "// Generated by CofferSnippetExtractor from \(document.path): do not edit (edit the document).",
        "// swift-format-ignore-file",
    ]
    return (header + imports + ["", "enum \(space) {}"] + body).joined(separator: "\n") + "\n"
}

func index(_ documents: [Document]) -> String {
    var lines = [
        "// Generated by CofferSnippetExtractor: the ```swift blocks compiled from each document, and",
        "// those opted out (by the first line of their code).",
        "enum SnippetIndex {",
        "    static let compiled: [String: [Int]] = [",
    ]
    for document in documents {
        lines.append("        \"\(document.path)\": \(document.blocks.filter { integrationModules($0).isEmpty }.map(\.line)),")
    }
    lines.append("    ]")
    lines.append("    /// Compiled by CofferIntegrationSnippetTests, with the traits of the modules they import.")
    lines.append("    static let integrations: [String: [Int]] = [")
    for document in documents {
        lines.append("        \"\(document.path)\": \(document.blocks.filter { !integrationModules($0).isEmpty }.map(\.line)),")
    }
    lines.append("    ]")
    lines.append("    static let optedOut: [String: [Int]] = [")
    for document in documents { lines.append("        \"\(document.path)\": \(document.optedOut),") }
    lines.append("    ]")
    lines.append("}")
    return lines.joined(separator: "\n") + "\n"
}

func main() throws {
    var arguments = Array(CommandLine.arguments.dropFirst())
    let integrations = arguments.first == "--integrations"
    if integrations { arguments.removeFirst() }
    guard arguments.count >= 2 else {
        FileHandle.standardError.write(
            Data("usage: CofferSnippetExtractor [--integrations] <output-directory> <package-directory> <document>...\n".utf8))
        exit(2)
    }
    let output = URL(fileURLWithPath: arguments[0], isDirectory: true)
    let root = URL(fileURLWithPath: arguments[1], isDirectory: true)
    try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
    var documents: [Document] = []
    for path in arguments.dropFirst(2) {
        let url = root.appendingPathComponent(path)
        let text = try String(contentsOf: url, encoding: .utf8)
        let document = try blocks(of: text, path: path)
        documents.append(document)
        let swift = try generate(document, absolutePath: url.path, integrations: integrations)
        try Data(swift.utf8).write(to: output.appendingPathComponent(namespace(for: path) + ".swift"))
    }
    if !integrations {
        try Data(index(documents).utf8).write(to: output.appendingPathComponent("SnippetIndex.swift"))
    }
}

do {
    try main()
} catch {
    FileHandle.standardError.write(Data("error: \(error)\n".utf8))
    exit(1)
}
