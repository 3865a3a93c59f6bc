import CofferCrypto
import Foundation
import Testing

/// age v1 files in process: seal and open round trips (one and several recipients, every chunk
/// boundary), refusals with their reasons (another identity, any truncation, any flipped bit, a
/// passphrase file, a malformed header), the armored form, and files passing both ways with the
/// real `age` (which must be installed: the interop test fails without it, it does not skip).
@Suite("AgeFile: age v1 files")
struct AgeFileTests {
    static let agePath = "/usr/bin/age"
    static let versionLine = Array("age-encryption.org/v1\n".utf8)

    static func seal(_ plaintext: [UInt8], to recipients: [X25519Recipient]) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { try AgeFile.seal($0, to: recipients) }
    }

    static func open(_ file: [UInt8], with identities: [X25519Identity]) throws -> [UInt8] {
        try file.withUnsafeBytes { try AgeFile.open($0, identities: identities) { Array($0) } }
    }

    /// The error opening `file` throws; `nil`, with an issue recorded, when it opens or throws
    /// something else.
    static func refusal(
        _ file: [UInt8], with identities: [X25519Identity], sourceLocation: SourceLocation = #_sourceLocation
    ) -> AgeFileError? {
        do {
            _ = try open(file, with: identities)
        } catch let error as AgeFileError {
            return error
        } catch {
            Issue.record("expected an AgeFileError, got \(type(of: error)): \(error)", sourceLocation: sourceLocation)
            return nil
        }
        Issue.record("the file opened", sourceLocation: sourceLocation)
        return nil
    }

    static func isAgeFile(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { AgeFile.isAgeFile($0) } }

    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// The offset just after the header's `--- MAC` line: where the payload's nonce starts.
    static func headerEnd(_ file: [UInt8]) throws -> Int {
        let marker = try #require(file.firstRange(of: Array("\n--- ".utf8)))
        return try #require(file[marker.upperBound...].firstIndex(of: 0x0A)) + 1
    }

    /// How many times `needle` occurs in `haystack`.
    static func occurrences(of needle: [UInt8], in haystack: [UInt8]) -> Int {
        var count = 0
        var rest = haystack[...]
        while let range = rest.firstRange(of: needle) {
            count += 1
            rest = rest[range.upperBound...]
        }
        return count
    }

    /// `file` in `age -a`'s armor: padded base64 in lines of 64 columns between the BEGIN and END lines.
    static func armored(_ file: [UInt8], lineEnd: String = "\n") -> [UInt8] {
        let body = Data(file).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        let lines =
            ["-----BEGIN AGE ENCRYPTED FILE-----"] + body.split(whereSeparator: \.isNewline).map(String.init) + [
                "-----END AGE ENCRYPTED FILE-----"
            ]
        return Array((lines.joined(separator: lineEnd) + lineEnd).utf8)
    }

    // MARK: - Round trips

    @Test("seal then open returns the plaintext at every size around the 64 KiB chunks; the file has age's layout")
    func roundTrip() throws {
        let identity = try X25519Identity.generate()
        for count in [0, 1, 100, 65_535, 65_536, 65_537, 131_072, 200_000] {
            let plaintext = Self.randomBytes(count)
            let sealed = try Self.seal(plaintext, to: [identity.recipient])
            #expect(sealed.starts(with: Self.versionLine + Array("-> X25519 ".utf8)), "\(count) bytes")
            #expect(Self.isAgeFile(sealed))
            // Header, 16-byte nonce, then each chunk of at most 64 KiB with its 16-byte tag.
            let chunks = max(1, (count + 65_535) / 65_536)
            let header = try Self.headerEnd(sealed)
            #expect(sealed.count == header + 16 + count + 16 * chunks, "\(count) bytes")
            let opened = try Self.open(sealed, with: [identity])
            #expect(opened == plaintext, "\(count) bytes")
        }
        // Sealing twice gives different files (a new file key and nonce each time).
        let plaintext = Array("the same plaintext".utf8)
        #expect(try Self.seal(plaintext, to: [identity.recipient]) != Self.seal(plaintext, to: [identity.recipient]))
        // The plaintext does not appear in the file.
        let marker = Array("a-distinctive-plaintext-".utf8) + Array(UUID().uuidString.utf8)
        let sealed = try Self.seal(marker, to: [identity.recipient])
        #expect(sealed.firstRange(of: marker) == nil)
    }

    @Test("Sealed to several recipients: one X25519 stanza each, and each identity opens it alone")
    func severalRecipients() throws {
        let identities = try (0..<3).map { _ in try X25519Identity.generate() }
        let plaintext = Self.randomBytes(1000)
        let sealed = try Self.seal(plaintext, to: identities.map(\.recipient))
        #expect(Self.occurrences(of: Array("\n-> X25519 ".utf8), in: sealed) == 3)
        for identity in identities {
            #expect(try Self.open(sealed, with: [identity]) == plaintext)
        }
        // Among other identities, the one that matches is found.
        let stranger = try X25519Identity.generate()
        #expect(try Self.open(sealed, with: [stranger, identities[2]]) == plaintext)
    }

    @Test("An identity the file was not sealed to is refused: noMatchingIdentity, saying how many were tried")
    func wrongIdentity() throws {
        let recipient = try X25519Identity.generate()
        let sealed = try Self.seal(Array("secret".utf8), to: [recipient.recipient])
        let strangers = try (0..<2).map { _ in try X25519Identity.generate() }
        let one = try #require(Self.refusal(sealed, with: [strangers[0]]))
        #expect(one.reason == .noMatchingIdentity)
        #expect(one.message == "none of the 1 identity given opens this age file (it is sealed to other recipients)")
        let two = try #require(Self.refusal(sealed, with: strangers))
        #expect(two.reason == .noMatchingIdentity && two.message.hasPrefix("none of the 2 identities given"))
        let none = try #require(Self.refusal(sealed, with: []))
        #expect(none.reason == .noMatchingIdentity && none.message.hasPrefix("none of the 0 identities given"))
        #expect(one.description == one.message)
    }

    @Test("Sealing to no recipient, or to a public key of small order, is refused")
    func badRecipients() throws {
        let plaintext = Array("secret".utf8)
        do {
            _ = try Self.seal(plaintext, to: [])
            Issue.record("sealed to no recipient")
        } catch let error as CryptoError {
            #expect(error.code == .invalidParameter)
        }
        let smallOrder = try X25519Recipient(publicKey: [UInt8](repeating: 0, count: 32))
        do {
            _ = try Self.seal(plaintext, to: [smallOrder])
            Issue.record("sealed to a point of small order")
        } catch let error as CryptoError {
            #expect(error.code == .invalidParameter)
        }
    }

    // MARK: - Damage

    @Test(
        "Every truncation is refused: notAgeFile inside the first line, malformed inside the header, damaged after it")
    func truncations() throws {
        let identity = try X25519Identity.generate()
        let sealed = try Self.seal(Array("a small export, a few bytes long".utf8), to: [identity.recipient])
        let header = try Self.headerEnd(sealed)
        for length in 0..<sealed.count {
            let error = try #require(Self.refusal(Array(sealed[..<length]), with: [identity]), "cut to \(length) bytes")
            let expected: AgeFileError.Reason =
                length < Self.versionLine.count ? .notAgeFile : length < header ? .malformed : .damaged
            #expect(error.reason == expected, "cut to \(length) bytes: \(error)")
        }
        // A byte added at the end is refused too.
        #expect(Self.refusal(sealed + [0], with: [identity])?.reason == .damaged)
    }

    @Test("A file cut at a chunk boundary, or extended by an empty chunk, is refused as damaged")
    func chunkBoundaries() throws {
        let identity = try X25519Identity.generate()
        let sealed = try Self.seal(Self.randomBytes(2 * 65_536 + 10), to: [identity.recipient])
        let payload = try Self.headerEnd(sealed) + 16
        for length in [payload + 65_552, payload + 2 * 65_552, payload + 65_552 + 16] {
            let error = try #require(Self.refusal(Array(sealed[..<length]), with: [identity]))
            #expect(error.reason == .damaged, "cut to \(length) bytes: \(error)")
        }
        // One full chunk, then a bare tag: an empty last chunk after a full one, which age never writes.
        let full = try Self.seal(Self.randomBytes(65_536), to: [identity.recipient])
        let error = try #require(Self.refusal(full + Self.randomBytes(16), with: [identity]))
        #expect(error.reason == .damaged)
    }

    @Test("Any one flipped bit is refused; in the payload, as damaged")
    func bitFlips() throws {
        let identity = try X25519Identity.generate()
        let plaintext = Array("a small export, a few bytes long".utf8)
        let sealed = try Self.seal(plaintext, to: [identity.recipient])
        let header = try Self.headerEnd(sealed)
        for index in sealed.indices {
            for bit: UInt8 in [0x01, 0x80] {
                var flipped = sealed
                flipped[index] ^= bit
                let error = try #require(Self.refusal(flipped, with: [identity]), "byte \(index) bit \(bit)")
                if index >= header {
                    #expect(error.reason == .damaged, "byte \(index) bit \(bit): \(error)")
                }
            }
        }
    }

    // MARK: - Formats

    @Test("The armored form (age -a) opens too: LF or CRLF, blank lines around it; a broken armor is malformed")
    func armor() throws {
        let identity = try X25519Identity.generate()
        let plaintext = Self.randomBytes(1000)
        let sealed = try Self.seal(plaintext, to: [identity.recipient])
        for file in [
            Self.armored(sealed), Self.armored(sealed, lineEnd: "\r\n"),
            Array("\n\r\n  \t\n".utf8) + Self.armored(sealed) + Array("\n \n".utf8),
        ] {
            #expect(Self.isAgeFile(file))
            #expect(try Self.open(file, with: [identity]) == plaintext)
        }

        var lines = String(decoding: Self.armored(sealed), as: UTF8.self).split(
            separator: "\n", omittingEmptySubsequences: false
        ).map(String.init)
        #expect(lines.count > 5 && lines[1].count == 64)
        let withoutEnd = lines.filter { !$0.hasPrefix("-----END") }.joined(separator: "\n")
        let shortLine = lines.enumerated().map { $0.offset == 1 ? String($0.element.dropLast()) : $0.element }.joined(
            separator: "\n")
        lines[1] = "!" + String(lines[1].dropFirst())
        let notBase64 = lines.joined(separator: "\n")
        for (what, text) in [("no END line", withoutEnd), ("a short line", shortLine), ("not base64", notBase64)] {
            let error = try #require(Self.refusal(Array(text.utf8), with: [identity]), "\(what)")
            #expect(error.reason == .malformed, "\(what): \(error)")
        }
    }

    @Test("isAgeFile: the binary version line or the armor's BEGIN line, nothing else")
    func recognition() throws {
        #expect(Self.isAgeFile(Array("age-encryption.org/v1\n".utf8)))
        #expect(Self.isAgeFile(Array("\n  -----BEGIN AGE ENCRYPTED FILE-----\n".utf8)))
        for text in [
            "", "age-encryption.org/v1", "age-encryption.org/v2\n", "age-encryption.org/v1\r\n",
            #"{"format": "coffer-export"}"#, "-----BEGIN PGP MESSAGE-----\n",
        ] {
            #expect(!Self.isAgeFile(Array(text.utf8)), "\(text.debugDescription)")
        }
        let identity = try X25519Identity.generate()
        let json = try #require(
            Self.refusal(Array(#"{"format": "coffer-export", "version": 1, "items": []}"#.utf8), with: [identity]))
        #expect(json.reason == .notAgeFile)
        #expect(json.message == "not an age file: it does not start with the line age-encryption.org/v1")
    }

    @Test(
        "Crafted headers: a passphrase file is unsupported; bad lines, arguments, shares, MACs and too many stanzas are malformed"
    )
    func craftedHeaders() throws {
        let identity = try X25519Identity.generate()
        let zeros43 = String(repeating: "A", count: 43)  // 32 zero bytes in unpadded base64
        let payload = String(repeating: "\u{0}", count: 32)
        func file(_ header: String) -> [UInt8] { Array(("age-encryption.org/v1\n" + header + payload).utf8) }

        let passphrase = try #require(
            Self.refusal(file("-> scrypt AAAAAAAAAAAAAAAAAAAAAA 18\n\(zeros43)\n--- \(zeros43)\n"), with: [identity]))
        #expect(passphrase.reason == .unsupported && passphrase.message.contains("passphrase"), "\(passphrase)")

        let cases: [(String, String)] = [
            ("not a stanza\n--- \(zeros43)\n", "line 2 of the age header is neither a stanza nor the --- line"),
            ("-> X25519  x\n\(zeros43)\n--- \(zeros43)\n", "a stanza argument is empty or not printable ASCII"),
            ("-> X25519 AAAA\n\(zeros43)\n--- \(zeros43)\n", "an X25519 stanza of the age header is malformed"),
            ("-> X25519 \(zeros43)\n\(zeros43)\n--- \(zeros43)\n", "point of small order"),
            ("-> X25519 \(zeros43)\n\(zeros43)=\n--- \(zeros43)\n", "not a stanza body line"),
            ("--- AAAA\n", "the age header's MAC is not 32 bytes of canonical base64"),
            ("--- \(zeros43)=\n", "the age header's MAC is not 32 bytes of canonical base64"),
            (String(repeating: "-> grease\n\n", count: 1025) + "--- \(zeros43)\n", "more than 1024 stanzas"),
        ]
        for (header, said) in cases {
            let error = try #require(Self.refusal(file(header), with: [identity]), "\(said)")
            #expect(error.reason == .malformed && error.message.contains(said), "\(said): \(error)")
        }
        // No stanza for an X25519 identity (only unknown ones, which are skipped): no matching identity.
        let grease = try #require(
            Self.refusal(file("-> grease-\(UUID().uuidString) x\n\n--- \(zeros43)\n"), with: [identity]))
        #expect(grease.reason == .noMatchingIdentity)
    }

    // MARK: - The age tool

    /// Runs `age` with `arguments`: its exit status, standard output and standard error.
    static func age(_ arguments: [String]) throws -> (status: Int32, output: [UInt8], errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: agePath)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, [UInt8](out), String(decoding: err, as: UTF8.self))
    }

    /// Calls `body` with a new private directory, removed afterwards.
    static func withDirectory<R>(_ body: (String) throws -> R) throws -> R {
        let path = FileManager.default.temporaryDirectory.path + "/coffer-age-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(path)
    }

    static func write(_ bytes: [UInt8], to path: String) throws {
        guard
            FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600])
        else {
            throw CocoaError(.fileWriteUnknown)
        }
    }

    @Test(
        "The age tool opens what AgeFile seals, and AgeFile opens what age seals (binary and armored)",
        .timeLimit(.minutes(10)))
    func ageInterop() throws {
        #expect(FileManager.default.isExecutableFile(atPath: Self.agePath), "age must be installed at \(Self.agePath)")
        try Self.withDirectory { directory in
            let identity = try X25519Identity.generate()
            let other = try X25519Identity.generate()
            let keyFile = directory + "/key.txt", otherKeyFile = directory + "/other.txt"
            try Self.write(try identity.fileContents().withUnsafeBytes { Array($0) }, to: keyFile)
            try Self.write(try other.fileContents().withUnsafeBytes { Array($0) }, to: otherKeyFile)

            for count in [0, 1, 65_536, 150_000] {
                let plaintext = Self.randomBytes(count)

                // AgeFile → age, to two recipients; and to one only, which the other key does not open.
                let sealedPath = directory + "/sealed-\(count).age"
                try Self.write(try Self.seal(plaintext, to: [other.recipient, identity.recipient]), to: sealedPath)
                for key in [keyFile, otherKeyFile] {
                    let opened = try Self.age(["-d", "-i", key, sealedPath])
                    #expect(opened.status == 0, "age -d: \(opened.errors)")
                    #expect(opened.output == plaintext, "\(count) bytes")
                }
                try Self.write(try Self.seal(plaintext, to: [identity.recipient]), to: sealedPath)
                let refused = try Self.age(["-d", "-i", otherKeyFile, sealedPath])
                #expect(refused.status != 0 && refused.output.isEmpty)

                // age → AgeFile, binary and armored.
                let plainPath = directory + "/plain-\(count)"
                try Self.write(plaintext, to: plainPath)
                for armor in [false, true] {
                    let outPath = directory + "/from-age-\(count)-\(armor)"
                    let sealedByAge = try Self.age(
                        ["-r", identity.recipient.description, "-r", other.recipient.description]
                            + (armor ? ["-a"] : []) + ["-o", outPath, plainPath])
                    #expect(sealedByAge.status == 0, "age -r: \(sealedByAge.errors)")
                    let file = try #require(FileManager.default.contents(atPath: outPath).map { [UInt8]($0) })
                    #expect(Self.isAgeFile(file))
                    #expect(file.starts(with: Self.versionLine) != armor)
                    #expect(try Self.open(file, with: [identity]) == plaintext, "\(count) bytes, armor \(armor)")
                    #expect(try Self.open(file, with: [other]) == plaintext, "\(count) bytes, armor \(armor)")
                    let stranger = try X25519Identity.generate()
                    #expect(Self.refusal(file, with: [stranger])?.reason == .noMatchingIdentity)
                }
            }
        }
    }
}
