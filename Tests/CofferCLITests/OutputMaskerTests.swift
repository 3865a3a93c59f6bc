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
        // `abc` matched, but `abcdef` may still follow: the whole run waits, and no part of it
        // is written before the replacement.
        let extended = try Self.mask(["1 abcd", "ef 2\n"], secrets: ["abc", "abcdef"])
        #expect(extended.afterEach == ["1 ", "1 \(Self.hidden) 2\n"])
        // `bcdefgh` overlaps `abc` and may still complete: held from the start of `abc`.
        let overlap = try Self.mask(["1 abcde", "fgh 2\n"], secrets: ["abc", "bcdefgh"])
        #expect(overlap.afterEach == ["1 ", "1 \(Self.hidden) 2\n"])
        let notCompleted = try Self.mask(["1 abcde", "X 2\n"], secrets: ["abc", "bcdefgh"])
        #expect(notCompleted.afterEach == ["1 ", "1 \(Self.hidden)deX 2\n"])
        // At the end of the stream, a fragment is written as it is.
        #expect(try Self.mask(["tail ab"], secrets: ["abc"]).output == "tail ab")
    }
}
