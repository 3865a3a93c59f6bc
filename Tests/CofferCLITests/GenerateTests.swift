import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer generate`: a random secret stored without passing through a shell or a terminal.
@Suite("coffer generate")
struct GenerateTests {
    /// The list as checked in (the resource `coffer` embeds), read here independently of the binary.
    static let wordList: Set<String> = {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/coffer/EFFWordList.txt")
        let text = (try? String(contentsOf: source, encoding: .utf8)) ?? ""
        return Set(text.split(separator: "\n").map(String.init))
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

    @Test("Two generate --print of one new item at once: exactly one stores and prints its secret; the other fails, prints none, and replaces nothing", .timeLimit(.minutes(10)))
    func concurrentGeneratesOfOneItem() throws {
        // The existence check and the write were two steps: both processes found no item, both
        // stored a secret and printed it, and one of the printed secrets was silently replaced.
        let box = try Sandbox()
        try box.initVault()
        for pair in 0..<20 {
            let account = "pair-\(pair)"
            let children = try box.startTogether((0..<2).map { _ in ["generate", "race", account, "--print"] })
            let runs = children.map { box.expectClean($0.wait()) }
            let winners = runs.filter { $0.status == Exit.ok }
            // Statuses and standard error only: standard output holds a generated secret.
            #expect(winners.count == 1, "pair \(pair): exit \(runs.map(\.status)); \(runs.map(\.err))")
            for run in runs where run.status != Exit.ok {
                let refused = run.status == Exit.failure && run.err.contains("already has a secret") && run.stdout.isEmpty
                #expect(refused, "pair \(pair): exit \(run.status), \(run.stdout.count) bytes printed; \(run.err)")
            }
            let stored = try box.run(["get", "race", account])
            let kept = winners.count == 1 && stored.status == Exit.ok && stored.printed(winners[0].stdout)
            #expect(kept, "pair \(pair): the stored secret is not the one the successful generate printed")
        }
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

extension Sandbox {
    /// Starts `coffer` with each of `runs` while holding the vault's write lock (`<vault>.lock`),
    /// as another writer would, and releases it after `seconds`: every child waits for it to
    /// open the vault, and they go on together, so what each does between opening the vault and
    /// writing overlaps. (Children merely started at once mostly run one after the other.)
    func startTogether(_ runs: [[String]], seconds: Double = 0.5) throws -> [Child] {
        let lock = open(vault + ".lock", O_RDWR | O_CLOEXEC)
        guard lock >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw POSIXError(.EBUSY) }
        let children = try runs.map { try start($0) }
        usleep(useconds_t(seconds * 1_000_000))
        flock(lock, LOCK_UN)
        return children
    }
}
