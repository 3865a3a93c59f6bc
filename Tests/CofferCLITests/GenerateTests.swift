import Foundation
import Testing

/// `coffer generate`: a random secret stored without passing through a shell or a terminal.
@Suite("coffer generate")
struct GenerateTests {
    static let wordList: Set<String> = {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/coffer/EFFWordList.swift")
        let text = (try? String(contentsOf: source, encoding: .utf8)) ?? ""
        let body = text.components(separatedBy: "\"\"\"")
        return body.count >= 2 ? Set(body[1].split(separator: "\n").map(String.init)) : []
    }()

    @Test("generate stores 32 alnum characters and prints none of them; --print prints exactly them; an existing item needs --force", .timeLimit(.minutes(10)))
    func storesWithoutPrinting() throws {
        let box = try Sandbox()
        try box.initVault()
        let made = try box.run(["generate", "db.internal", "app", "--label", "DB"])
        #expect(made.status == Exit.ok && made.out.contains("32 characters from a set of 62, 190 bits"), "\(made)")
        let stored = try box.run(["get", "db.internal", "app"])
        #expect(stored.stdout.count == 32, "\(stored.stdout.count)")
        let alnum = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        #expect(stored.stdout.allSatisfy { alnum.contains($0) })
        #expect(!made.out.contains(stored.out) && !made.err.contains(stored.out))
        // An existing item is kept, unless --force.
        let again = try box.run(["generate", "db.internal", "app"])
        #expect(again.status == Exit.failure && again.err.contains("--force"), "\(again)")
        #expect(try box.run(["get", "db.internal", "app"]).stdout == stored.stdout)
        let printed = try box.run(["generate", "db.internal", "app", "--force", "--print", "--length", "48", "--charset", "symbols"])
        #expect(printed.status == Exit.ok && printed.stdout.count == 48, "\(printed)")
        #expect(printed.err.contains("48 characters from a set of 94"), "\(printed)")
        #expect(try box.run(["get", "db.internal", "app"]).stdout == printed.stdout)
        #expect(printed.stdout != stored.stdout)
    }

    @Test("Every character of a set can be drawn and nothing outside it is; words come from EFF's list", .timeLimit(.minutes(10)))
    func charactersAndWords() throws {
        let box = try Sandbox()
        try box.initVault()
        let digits = try box.run(["generate", "pin", "a", "--charset", "digits", "--length", "1000", "--print"])
        #expect(digits.status == Exit.ok, "\(digits)")
        // P(a digit never drawn in 1,000) ≈ 10 × 0.9¹⁰⁰⁰ ≈ 2e-45.
        #expect(Set(digits.stdout) == Set("0123456789".utf8))
        let own = try box.run(["generate", "pin", "b", "--characters", "xyzzy", "--length", "300", "--print"])
        #expect(Set(own.stdout) == Set("xyz".utf8), "\(own)")
        #expect(own.err.contains("a set of 3"), "\(own)")
        #expect(Self.wordList.count == 7776)
        let phrase = try box.run(["generate", "wifi", "home", "--words", "6", "--separator", " ", "--print"])
        #expect(phrase.status == Exit.ok && phrase.err.contains("6 words, 77 bits"), "\(phrase)")
        let words = phrase.out.split(separator: " ").map(String.init)
        #expect(words.count == 6 && words.allSatisfy { Self.wordList.contains($0) }, "\(words)")
    }

    @Test("Contradictory or absurd options are usage errors, before the vault is opened")
    func refusals() throws {
        let box = try Sandbox()
        for arguments in [
            ["--words", "4", "--length", "10"], ["--length", "0"], ["--length", "4097"], ["--words", "65"],
            ["--characters", "a b"], ["--characters", "aaaa"], ["--charset", "hex", "--characters", "ab"],
            ["--separator", "_"],
        ] {
            let run = try box.run(["generate", "s", "a"] + arguments)
            #expect(run.status == Exit.usage, "\(arguments): \(run)")
        }
    }
}
