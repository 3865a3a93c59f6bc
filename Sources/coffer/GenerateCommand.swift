import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `coffer generate`: a random secret, made and stored without passing through a shell.
struct GenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Store a new random secret (characters or words), without printing it.",
        discussion: """
            Every character (or word) is drawn independently and uniformly with libsodium's \
            randombytes_uniform, which redraws instead of reducing modulo, so no character is \
            likelier than another. The secret is written to the vault only: standard output \
            gets it with --print alone (exactly its bytes, like `get`). An existing item is \
            kept unless --force.

            Character sets: alnum (A–Z, a–z, 0–9: the default, 5.95 bits each), symbols \
            (alnum and the 32 printable ASCII punctuation marks: 6.55 bits), letters, digits, \
            hex (lower case), base64url (A–Z a–z 0–9 - _). --characters gives your own set. \
            --words N draws N words from EFF's large wordlist (7,776 words: 12.9 bits each), \
            joined by --separator (default -).

            Examples:
              coffer generate db.internal app                    # 32 alnum characters, 190 bits
              coffer generate api.example.com deploy --length 48 --charset symbols
              coffer generate wifi home --words 6 --separator ' ' --print
            """)

    enum Charset: String, ExpressibleByArgument, CaseIterable {
        case alnum, symbols, letters, digits, hex, base64url

        var characters: String {
            let upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", lower = "abcdefghijklmnopqrstuvwxyz", digits = "0123456789"
            switch self {
            case .alnum: return upper + lower + digits
            case .symbols: return upper + lower + digits + "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
            case .letters: return upper + lower
            case .digits: return digits
            case .hex: return digits + "abcdef"
            case .base64url: return upper + lower + digits + "-_"
            }
        }
    }

    /// The longest secret, in characters, and the most words.
    static let maximumLength = 4096
    static let maximumWords = 64

    @ParentCommand var root: CofferCommand
    @Argument(help: "The service, for example a host name: api.github.com.") var service: String
    @Argument(help: "The account within the service.") var account: String
    @Option(help: "How many characters (1–4096; default 32).") var length: Int?
    @Option(help: "The character set: alnum, symbols, letters, digits, hex or base64url (default alnum).")
    var charset: Charset?
    @Option(help: ArgumentHelp("Your own character set: every distinct printable ASCII character given.", valueName: "set"))
    var characters: String?
    @Option(help: "A passphrase of this many words (1–64) from EFF's large wordlist, instead of characters.")
    var words: Int?
    @Option(help: "What joins the words (default -).") var separator: String?
    @Flag(help: "Also write the secret to standard output (exactly its bytes).") var print = false
    @Flag(help: "Replace an existing item.") var force = false
    @Option(help: "A readable name for the item.") var label: String?
    @Option(help: "A note kept with the item (not secret).") var comment: String?

    func validate() throws {
        try ItemName.check(service: service, account: account)
        if words != nil, length != nil || charset != nil || characters != nil {
            throw ValidationError("--words makes a passphrase of words: leave out --length, --charset and --characters")
        }
        if words == nil, separator != nil { throw ValidationError("--separator goes with --words") }
        if charset != nil, characters != nil { throw ValidationError("give --charset or --characters, not both") }
        if let length, !(1...Self.maximumLength).contains(length) {
            throw ValidationError("--length is 1 to \(Self.maximumLength)")
        }
        if let words, !(1...Self.maximumWords).contains(words) {
            throw ValidationError("--words is 1 to \(Self.maximumWords)")
        }
        if let characters {
            guard !characters.isEmpty, characters.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) }) else {
                throw ValidationError("--characters takes printable ASCII characters (no space, no control character)")
            }
            guard Set(characters).count >= 2 else { throw ValidationError("--characters needs at least 2 distinct characters") }
        }
    }

    /// The alphabet: each distinct character once, in the order given.
    var alphabet: [UInt8] {
        var seen = Set<UInt8>()
        return Array((characters ?? (charset ?? .alnum).characters).utf8).filter { seen.insert($0).inserted }
    }

    func run() throws {
        let store = try root.global.openKeychain()
        let buffer = WipingBuffer(capacity: 64)
        let bits: Double
        let what: String
        if let words {
            let list = effLargeWordList.split(separator: "\n")
            let separator = Array((separator ?? "-").utf8)
            for index in 0..<words {
                if index > 0 { for byte in separator { buffer.append(byte) } }
                for byte in list[Int(SecureRandom.uniform(below: UInt32(list.count)))].utf8 { buffer.append(byte) }
            }
            bits = Double(words) * log2(Double(list.count))
            what = "\(words) word\(words == 1 ? "" : "s")"
        } else {
            let alphabet = alphabet
            let length = length ?? 32
            for _ in 0..<length { buffer.append(alphabet[Int(SecureRandom.uniform(below: UInt32(alphabet.count)))]) }
            bits = Double(length) * log2(Double(alphabet.count))
            what = "\(length) character\(length == 1 ? "" : "s") from a set of \(alphabet.count)"
        }
        let secret = try buffer.secureCopy()
        if force {
            try store.set(secret, service: service, account: account, label: label, comment: comment)
        } else if try !add(secret, to: store) {
            // Decided under the vault's write lock with the write itself: of two `generate`s of
            // one new item at once, exactly one stores (and prints) its secret.
            throw CLIError(
                .failure,
                "\(escapedName(service)) / \(escapedName(account)) already has a secret: --force replaces it")
        }
        let said = "generated and stored \(escapedName(service)) / \(escapedName(account)): \(what), \(Int(bits)) bits\n"
        guard print else { return writeOut(said) }
        // The secret alone on standard output; the report goes to standard error.
        writeError(said)
        let written = secret.withUnsafeBytes { writeAll(STDOUT_FILENO, $0) }
        if !written {
            throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))")
        }
    }

    /// Stores `secret` unless the item exists (``Keychain/add(_:)``); returns whether it did. The
    /// array ``VaultChange`` holds is a copy made only for the commit, and zeroed once it is done.
    private func add(_ secret: SecureBytes, to store: any Keychain) throws -> Bool {
        var bytes = secret.withUnsafeBytes { [UInt8]($0) }
        // Runs after `commit`'s change is released, so the array is zeroed in place.
        defer { SecureMemory.zero(&bytes) }
        return try commit(bytes, to: store)
    }

    private func commit(_ bytes: [UInt8], to store: any Keychain) throws -> Bool {
        try store.add([.set(service: service, account: account, secret: bytes, label: label, comment: comment)]).isEmpty
    }
}
