import CofferCrypto
import Testing

@testable import coffer

/// ``OutputMasker`` on its own: what it writes, and when, for secrets that overlap, share a
/// prefix, or arrive split across reads.
@Suite("coffer run: the output masker")
struct OutputMaskerTests {
    /// The masker's output for `chunks` fed one after another and then finished, with what was
    /// written after each chunk (before the next one arrived).
    static func mask(_ chunks: [String], secrets: [String]) throws -> (output: String, afterEach: [String]) {
        let values = try secrets.map { secret in try Array(secret.utf8).withUnsafeBytes { try SecureBytes(copying: $0) } }
        let masker = OutputMasker()
        var output: [UInt8] = []
        var afterEach: [String] = []
        for chunk in chunks {
            Array(chunk.utf8).withUnsafeBytes { bytes in masker.feed(bytes, secrets: values) { output += $0 } }
            afterEach.append(String(decoding: output, as: UTF8.self))
        }
        masker.finish(secrets: values) { output += $0 }
        return (String(decoding: output, as: UTF8.self), afterEach)
    }

    static let hidden = "<concealed by coffer>"

    @Test("Overlapping secrets: the union of the matches is one replacement, whole or split at every byte")
    func overlapping() throws {
        let cases: [(String, [String], String)] = [
            ("abcdefgh", ["abc", "bcdefgh"], Self.hidden),
            ("xabcdefghy\n", ["abc", "bcdefgh"], "x\(Self.hidden)y\n"),
            ("xabcdefghy\n", ["bcdefgh", "abc"], "x\(Self.hidden)y\n"),
            ("abcdef", ["abcd", "cdef"], Self.hidden),
            ("abcabc", ["abc"], Self.hidden + Self.hidden),
            ("abcdefX", ["abc", "abcdef"], Self.hidden + "X"),
            ("abcdeX", ["abc", "abcdef"], Self.hidden + "deX"),
            ("aabc", ["abc", "aab"], Self.hidden),
            ("ab", ["abc"], "ab"),
            ("no secret here\n", ["abc"], "no secret here\n"),
        ]
        for (text, secrets, expected) in cases {
            #expect(try Self.mask([text], secrets: secrets).output == expected, "\(text) with \(secrets)")
            // The same bytes one at a time.
            let bytes = text.map { String($0) }
            #expect(try Self.mask(bytes, secrets: secrets).output == expected, "\(text) byte by byte with \(secrets)")
            // And split at every place.
            for cut in 1..<max(text.count, 1) {
                let parts = [String(text.prefix(cut)), String(text.dropFirst(cut))]
                #expect(try Self.mask(parts, secrets: secrets).output == expected, "\(parts) with \(secrets)")
            }
        }
    }

    @Test("A completed line is written at once; only a fragment that may begin or extend a secret waits")
    func streaming() throws {
        let line = try Self.mask(["a line\n", "more"], secrets: ["abc"])
        #expect(line.afterEach.first == "a line\n")
        // `ab` may begin `abc`: held until the next bytes show it does not.
        let fragment = try Self.mask(["see ab", "x\n"], secrets: ["abc"])
        #expect(fragment.afterEach == ["see ", "see abx\n"])
        // `abc` matched, and `abcdef` may still follow: the replacement is written at once (the
        // run starts there whatever follows), and no byte after it until the next bytes show
        // whether the run goes on; when it does, nothing more is written for it.
        let extended = try Self.mask(["1 abcd", "ef 2\n"], secrets: ["abc", "abcdef"])
        #expect(extended.afterEach == ["1 \(Self.hidden)", "1 \(Self.hidden) 2\n"])
        // `bcdefgh` overlaps `abc` and may still complete: one replacement either way.
        let overlap = try Self.mask(["1 abcde", "fgh 2\n"], secrets: ["abc", "bcdefgh"])
        #expect(overlap.afterEach == ["1 \(Self.hidden)", "1 \(Self.hidden) 2\n"])
        let notCompleted = try Self.mask(["1 abcde", "X 2\n"], secrets: ["abc", "bcdefgh"])
        #expect(notCompleted.afterEach == ["1 \(Self.hidden)", "1 \(Self.hidden)deX 2\n"])
        // `bc` matched, but `abcd` may still follow and begins earlier: nothing from `a` on is
        // written until that is known.
        let earlier = try Self.mask(["1 abc", "d 2\n"], secrets: ["bc", "abcd"])
        #expect(earlier.afterEach == ["1 ", "1 \(Self.hidden) 2\n"])
        let notEarlier = try Self.mask(["1 abc", "X 2\n"], secrets: ["bc", "abcd"])
        #expect(notEarlier.afterEach == ["1 ", "1 a\(Self.hidden)X 2\n"])
        // At the end of the stream, a fragment is written as it is.
        #expect(try Self.mask(["tail ab"], secrets: ["abc"]).output == "tail ab")
    }

    /// The masking of the whole stream at once, as the masker is specified: at each position the
    /// longest secret that starts there; matches that overlap form one run, one replacement.
    /// Quadratic, for short streams only.
    static func reference(_ text: [UInt8], secrets: [[UInt8]]) -> [UInt8] {
        var output: [UInt8] = []
        var written = 0
        var run: (start: Int, end: Int)?
        for index in text.indices {
            if let current = run, index >= current.end {
                output += text[written..<current.start] + Array(hidden.utf8)
                written = current.end
                run = nil
            }
            let longest = secrets.filter { !$0.isEmpty && text[index...].starts(with: $0) }.map(\.count).max() ?? 0
            guard longest > 0 else { continue }
            run = run.map { ($0.start, max($0.end, index + longest)) } ?? (index, index + longest)
        }
        if let current = run {
            output += text[written..<current.start] + Array(hidden.utf8)
            written = current.end
        }
        return output + text[written...]
    }

    @Test("Any stream, cut anywhere, is masked as the whole stream at once; fewer bytes than the longest secret are ever held")
    func matchesTheSpecification() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abc".utf8)
        for _ in 0..<3000 {
            let secrets = (0..<Int.random(in: 1...3, using: &generator)).map { _ in
                (0..<Int.random(in: 1...5, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            }
            let text = (0..<Int.random(in: 0...40, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            let values = try secrets.map { try SecureBytes(copying: $0) }
            let longest = secrets.map(\.count).max()!
            let masker = OutputMasker()
            var output: [UInt8] = []
            var offset = 0
            while offset < text.count {
                let cut = min(text.count, offset + Int.random(in: 1...6, using: &generator))
                Array(text[offset..<cut]).withUnsafeBytes { bytes in masker.feed(bytes, secrets: values) { output += $0 } }
                offset = cut
                #expect(masker.heldCount <= longest - 1, "\(masker.heldCount) held for secrets \(secrets)")
            }
            masker.finish(secrets: values) { output += $0 }
            let expected = Self.reference(text, secrets: secrets)
            #expect(output == expected, "\(String(decoding: text, as: UTF8.self)) with \(secrets.map { String(decoding: $0, as: UTF8.self) })")
            // Each byte costs at most a few steps: a transition and the failure links it follows
            // (fewer, over the stream, than its bytes), each looking at most at 3 children here.
            #expect(masker.steps <= 8 * text.count, "\(masker.steps) steps for \(text.count) bytes")
        }
    }

    @Test("A long run of a periodic secret costs work in proportion to its length, and its replacement is written at once")
    func periodicRun() throws {
        let value = try SecureBytes(copying: Array("aaaa".utf8))
        let masker = OutputMasker()
        var output: [UInt8] = []
        let piece = [UInt8](repeating: UInt8(ascii: "a"), count: 4096)
        var fed = 0
        for round in 0..<256 {
            piece.withUnsafeBytes { bytes in masker.feed(bytes, secrets: [value]) { output += $0 } }
            fed += piece.count
            // Never more than three bytes held: the run's replacement went out with the first
            // piece, and the rest of the run only extends it.
            #expect(masker.heldCount <= 3, "\(masker.heldCount) bytes held after \(fed)")
            #expect(output == Array(Self.hidden.utf8), "after piece \(round): \(output.count) bytes written")
            // A constant amount of work per byte (one transition, one child looked at, one
            // failure link followed), not one that grows with the run.
            #expect(masker.steps <= 4 * fed, "\(masker.steps) steps for \(fed) bytes")
            if masker.heldCount > 3 || masker.steps > 4 * fed { break }
        }
        Array("\nafter".utf8).withUnsafeBytes { bytes in masker.feed(bytes, secrets: [value]) { output += $0 } }
        masker.finish(secrets: [value]) { output += $0 }
        #expect(String(decoding: output, as: UTF8.self) == Self.hidden + "\nafter")
    }

    @Test("More secrets to conceal mid-stream (a --watch restart): a run in progress stays one replacement, no byte of it is written")
    func secretsAddedMidStream() throws {
        let first = try SecureBytes(copying: Array("aaaa".utf8))
        let second = try SecureBytes(copying: Array("zz".utf8))
        let masker = OutputMasker()
        var output: [UInt8] = []
        Array("xaaaaa".utf8).withUnsafeBytes { bytes in masker.feed(bytes, secrets: [first]) { output += $0 } }
        #expect(String(decoding: output, as: UTF8.self) == "x" + Self.hidden)
        // The old state was `aaaa`; the new automaton must know it, or the next `aa` would be
        // held as a mere beginning and then written.
        Array("aab zz aa".utf8).withUnsafeBytes { bytes in masker.feed(bytes, secrets: [first, second]) { output += $0 } }
        masker.finish(secrets: [first, second]) { output += $0 }
        #expect(String(decoding: output, as: UTF8.self) == "x\(Self.hidden)b \(Self.hidden) aa")
        // Bytes held under the old set (they may begin `aaaa`) that complete a new secret.
        let third = try SecureBytes(copying: Array("aab".utf8))
        let held = OutputMasker()
        output = []
        Array("1 aa".utf8).withUnsafeBytes { bytes in held.feed(bytes, secrets: [first]) { output += $0 } }
        #expect(String(decoding: output, as: UTF8.self) == "1 ")
        Array("b 2".utf8).withUnsafeBytes { bytes in held.feed(bytes, secrets: [first, third]) { output += $0 } }
        held.finish(secrets: [first, third]) { output += $0 }
        #expect(String(decoding: output, as: UTF8.self) == "1 \(Self.hidden) 2")
    }
}
