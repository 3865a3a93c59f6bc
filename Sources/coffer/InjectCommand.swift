import ArgumentParser
import Coffer
import CofferCore
import CofferRuntime
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `coffer inject`: a template's `{{ coffer://SERVICE/ACCOUNT }}` placeholders replaced by secrets.
struct InjectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inject",
        abstract: "Fill {{ coffer://SERVICE/ACCOUNT }} placeholders of a template with secrets.",
        discussion: """
            Reads the template from -i (else standard input) and writes it with every \
            placeholder replaced by the item's secret, exactly its bytes, to -o (else standard \
            output). Spaces inside the braces are allowed; other {{ … }} are left as they are. \
            In a reference, a / inside a name is written %2F, a % as %25 and a } as %7D (any byte \
            may be %XX).

            Every reference is checked before anything is written: a missing item fails with \
            exit 3, naming the reference. The output file is created with mode 0600 and \
            replaces the old one atomically (a temporary file beside it, fsynced, renamed). The \
            secrets are never written anywhere else.

            Examples:
              coffer inject -i config.yml.tpl -o config.yml
              echo 'password: {{ coffer://db.internal/app }}' | coffer inject
            """)

    /// The largest template read.
    static let maximumTemplate = 16 * 1024 * 1024

    @ParentCommand var root: CofferCommand
    @Option(name: .customShort("i"), help: ArgumentHelp("The template (default: standard input).", valueName: "template"))
    var input: String?
    @Option(name: .customShort("o"), help: ArgumentHelp("Where to write (default: standard output); created 0600.", valueName: "file"))
    var output: String?

    /// A placeholder: where it lies in the template and what it names.
    struct Placeholder {
        let range: Range<Int>
        let reference: SecretReference
    }

    /// Finds every `{{ coffer://… }}` of `template`. A `{{` followed (after spaces) by
    /// `coffer://` must be a well-formed placeholder, else it is an error naming its line.
    static func placeholders(in template: [UInt8]) throws -> [Placeholder] {
        var found: [Placeholder] = []
        var index = 0
        let open = Array("{{".utf8), close = Array("}}".utf8), scheme = Array(SecretReference.scheme.utf8)
        func matches(_ pattern: [UInt8], at offset: Int) -> Bool {
            offset + pattern.count <= template.count && Array(template[offset..<(offset + pattern.count)]) == pattern
        }
        func line(of offset: Int) -> Int { template[..<offset].filter { $0 == UInt8(ascii: "\n") }.count + 1 }
        while index < template.count {
            guard matches(open, at: index) else {
                index += 1
                continue
            }
            var start = index + 2
            while start < template.count, template[start] == UInt8(ascii: " ") || template[start] == UInt8(ascii: "\t") { start += 1 }
            guard matches(scheme, at: start) else {
                index += 2
                continue
            }
            var end = start
            while end < template.count, template[end] != UInt8(ascii: "}"), template[end] != UInt8(ascii: "\n") { end += 1 }
            var text = end
            while text > start, template[text - 1] == UInt8(ascii: " ") || template[text - 1] == UInt8(ascii: "\t") { text -= 1 }
            guard matches(close, at: end) else {
                throw CLIError.usage("line \(line(of: index)) of the template: a {{ coffer://… placeholder has no }} on its line")
            }
            guard let body = String(validating: template[start..<text], as: UTF8.self) else {
                throw CLIError.usage("line \(line(of: index)) of the template: the reference is not UTF-8")
            }
            switch SecretReference.parse(body[...]) {
            case .success(let reference): found.append(Placeholder(range: index..<(end + 2), reference: reference))
            case .failure(let error):
                throw CLIError.usage("line \(line(of: index)) of the template: not a reference: \(error.reason)")
            }
            index = end + 2
        }
        return found
    }

    func run() throws {
        if input == nil, root.global.keyFile == GlobalOptions.standardInputKeyFile {
            throw CLIError.usage("the template is read from standard input, so the key cannot come from there too: give -i a file")
        }
        let template = WipingBuffer(capacity: 4096)
        if let input {
            let fd = open(input, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw CLIError(.failure, "cannot read the template \(quotedName(input)): \(String(cString: strerror(errno)))")
            }
            defer { close(fd) }
            try template.readToEnd(fd, limit: Self.maximumTemplate, what: "the template")
        } else {
            try template.readToEnd(STDIN_FILENO, limit: Self.maximumTemplate, what: "standard input")
        }
        let bytes = template.withUnsafeBytes { [UInt8]($0) }
        let found = try Self.placeholders(in: bytes)
        // Every secret first: a missing one fails before anything is written.
        let store = try root.global.openKeychain()
        var secrets: [SecretReference: SecureBytes] = [:]
        for placeholder in found where secrets[placeholder.reference] == nil {
            let reference = placeholder.reference
            guard let secret = try store.secret(service: reference.service, account: reference.account) else {
                throw CLIError(.notFound, "the template refers to \(reference), which is not in \(quotedName(store.location))")
            }
            secrets[reference] = secret
        }
        let result = WipingBuffer(capacity: bytes.count + 64)
        var cursor = 0
        for placeholder in found {
            for byte in bytes[cursor..<placeholder.range.lowerBound] { result.append(byte) }
            secrets[placeholder.reference]!.withUnsafeBytes { for byte in $0 { result.append(byte) } }
            cursor = placeholder.range.upperBound
        }
        for byte in bytes[cursor...] { result.append(byte) }
        if let output {
            do {
                try result.withUnsafeBytes { try DurableIO.atomicReplace(output, with: $0, fileSystem: LiveFileSystem()) }
            } catch let error as CofferError {
                throw CLIError(.failure, "cannot write \(quotedName(output)): \(error.message)")
            }
            writeError("wrote \(quotedName(output)) (mode 0600): \(found.count) placeholder\(found.count == 1 ? "" : "s") filled\n")
        } else {
            let written = result.withUnsafeBytes { writeAll(STDOUT_FILENO, $0) }
            if !written { throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))") }
        }
    }
}
