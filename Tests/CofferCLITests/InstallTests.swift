import Foundation
import Testing

/// `make install PREFIX=…` (scripts/install.sh): the binary, its manual page and its shell
/// completions, all generated from the command definitions of the binary installed.
@Suite("coffer install: manual page and completions")
struct InstallTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Runs `executable` with `arguments`; returns its status and standard output (standard
    /// error is kept in `errors`).
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Output read before waiting, so a large output never blocks the child (what these
        // programs write to standard error is a line or two, far below a pipe's capacity).
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (
            process.terminationStatus, String(decoding: outputData, as: UTF8.self),
            String(decoding: errorData, as: UTF8.self)
        )
    }

    /// The command names `coffer --experimental-dump-help` lists as shown, with their parents.
    static func shownCommands() throws -> [String] {
        let dump = try run(cofferPath, ["--experimental-dump-help"])
        #expect(dump.status == 0)
        let root = try #require(
            (try JSONSerialization.jsonObject(with: Data(dump.output.utf8)) as? [String: Any])?["command"] as? [String: Any])
        var names: [String] = []
        func walk(_ command: [String: Any], _ path: [String]) {
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                guard let name = sub["commandName"] as? String, name != "help",
                    sub["shouldDisplay"] as? Bool ?? true
                else { continue }
                names.append((path + [name]).joined(separator: " "))
                walk(sub, path + [name])
            }
        }
        walk(root, ["coffer"])
        return names
    }

    @Test("install.sh puts the binary, coffer.1 and three completion scripts under the prefix; the page covers every command", .timeLimit(.minutes(10)))
    func installs() throws {
        let box = try Sandbox()
        let prefix = box.path + "/prefix"
        let installed = try Self.run(Self.repository.appendingPathComponent("scripts/install.sh").path, [cofferPath, prefix])
        #expect(installed.status == 0, "\(installed.errors)")
        let files: [(String, mode_t)] = [
            ("bin/coffer", 0o755), ("share/man/man1/coffer.1", 0o644),
            ("share/bash-completion/completions/coffer", 0o644), ("share/zsh/site-functions/_coffer", 0o644),
            ("share/fish/vendor_completions.d/coffer.fish", 0o644),
        ]
        for (file, mode) in files {
            var status = stat()
            #expect(stat(prefix + "/" + file, &status) == 0 && status.st_size > 0, "\(file) missing or empty")
            #expect(status.st_mode & 0o777 == mode, "\(file): mode \(String(status.st_mode & 0o777, radix: 8))")
        }
        #expect(
            FileManager.default.contentsEqual(atPath: prefix + "/bin/coffer", andPath: cofferPath),
            "the installed binary is not the one given")

        // The page: a header, and a section for every command the binary shows (subcommands
        // too), so a command added later is documented without anyone editing the page.
        let page = try String(contentsOfFile: prefix + "/share/man/man1/coffer.1", encoding: .utf8)
        #expect(page.contains(".TH COFFER 1 "))
        #expect(page.contains(".SH GLOBAL OPTIONS") && page.contains("\\fB--vault\\fR"))
        let commands = try Self.shownCommands()
        #expect(commands.contains("coffer generate") && commands.contains("coffer slot add"), "\(commands)")
        for command in commands {
            #expect(page.contains(".SS \"\(command)\""), "the page has no section for \(command)")
        }
        #expect(!page.contains("bench-change-writer"), "a hidden command is on the page")
        // Plain roff: every line that starts with a dot or a quote is a request this generator
        // writes, so no help text can turn into one; no character outside ASCII.
        let requests: Set<Substring> = [".TH", ".SH", ".SS", ".PP", ".TP", ".B", ".RS", ".RE", ".nf", ".fi", ".\\\""]
        for line in page.split(separator: "\n") where line.hasPrefix(".") || line.hasPrefix("'") {
            let request = line.split(separator: " ", maxSplits: 1).first ?? line
            #expect(requests.contains(request), "unexpected roff request: \(line)")
        }
        #expect(page.utf8.allSatisfy { $0 < 0x80 })
    }

    @Test("The installed bash completion completes command names and a command's options", .timeLimit(.minutes(10)))
    func bashCompletes() throws {
        let box = try Sandbox()
        let prefix = box.path + "/prefix"
        let installed = try Self.run(Self.repository.appendingPathComponent("scripts/install.sh").path, [cofferPath, prefix])
        try #require(installed.status == 0, "\(installed.errors)")
        let script = prefix + "/share/bash-completion/completions/coffer"
        // What bash does on Tab: COMP_* set, the function called with the command, the word
        // and the word before it.
        func complete(_ words: [String]) throws -> [String] {
            let line = words.joined(separator: " ")
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let program = """
                source '\(script)'
                COMP_LINE='\(line)'; COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); COMP_POINT=${#COMP_LINE}
                _coffer coffer '\(words.last!)' '\(words[words.count - 2])'
                printf '%s\\n' "${COMPREPLY[@]}"
                """
            let run = try Self.run("/bin/bash", ["-c", program])
            #expect(run.status == 0, "\(run.errors)")
            return run.output.split(separator: "\n").map(String.init)
        }
        #expect(try complete(["coffer", "gen"]) == ["generate"])
        #expect(Set(try complete(["coffer", "generate", "db", "app", "--cha"])) == ["--charset", "--characters"])
        #expect(try complete(["coffer", "slot", "a"]) == ["add"])
    }
}
