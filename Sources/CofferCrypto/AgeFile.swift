internal import CSodium

/// Files in age's v1 format (<https://age-encryption.org/v1>) for X25519 recipients: what
/// `coffer export --recipient age1…` writes and `coffer import json` opens, so that files pass
/// both ways between Coffer and the `age` tool (`age -d -i key.txt`, `age -r age1…`).
///
/// ```swift
/// let sealed = try plaintext.withUnsafeBytes { try AgeFile.seal($0, to: [recipient]) }
/// try sealed.withUnsafeBytes { file in
///     try AgeFile.open(file, identities: [identity]) { plaintext in use(plaintext) }
/// }
/// ```
///
/// The layout, as the specification gives it: the line `age-encryption.org/v1`; one stanza per
/// recipient (`-> X25519 <ephemeral share>` and the 16-byte file key wrapped with
/// ChaCha20-Poly1305 under HKDF-SHA-256(X25519 shared secret, salt: share ‖ recipient,
/// info: `age-encryption.org/v1/X25519`)); `--- <HMAC-SHA-256 of the header>` keyed with
/// HKDF-SHA-256(file key, info: `header`); then a 16-byte nonce and the payload in
/// ChaCha20-Poly1305 chunks of 64 KiB under HKDF-SHA-256(file key, salt: nonce, info:
/// `payload`), each chunk's nonce an 11-byte big-endian counter and a last-chunk flag. Base64 is
/// the standard alphabet without padding, in lines of 64 characters. Only X25519 stanzas are
/// opened; other stanza types (age writes random "grease" ones) are skipped, except a
/// passphrase (`scrypt`) stanza, which is refused by name. The ASCII-armored form (`age -a`)
/// is read too.
package enum AgeFile: Sendable {
    /// The first line of every age v1 file.
    static let version = Array("age-encryption.org/v1".utf8)
    static let armorBegin = Array("-----BEGIN AGE ENCRYPTED FILE-----".utf8)
    static let armorEnd = Array("-----END AGE ENCRYPTED FILE-----".utf8)
    static let x25519Info = Array("age-encryption.org/v1/X25519".utf8)
    static let fileKeyLength = 16
    static let payloadNonceLength = 16
    static let chunkLength = 64 * 1024
    static let tagLength = 16
    static let macLength = 32
    /// The most stanzas a header may hold (age itself has no limit; a file with more is not one
    /// Coffer or age wrote, and each X25519 stanza costs a scalar multiplication per identity).
    static let maximumStanzas = 1024

    typealias Cipher = AEAD<ChaCha20Poly1305IETFBinding>

    /// Whether `bytes` starts like an age file (binary or armored).
    package static func isAgeFile(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let binary = version + [0x0A]
        return bytes.starts(with: binary) || trimmingLeadingSpace(bytes).starts(with: armorBegin)
    }

    // MARK: - Sealing

    /// `plaintext` sealed to every one of `recipients` in age's binary format.
    ///
    /// The result holds no secret (only ciphertext); the file key and the keys derived from it
    /// live in guarded memory and are wiped.
    /// - Throws: ``CryptoError`` `.invalidParameter` for an empty `recipients`, or when a
    ///   recipient is a point of small order.
    package static func seal(_ plaintext: UnsafeRawBufferPointer, to recipients: [X25519Recipient]) throws -> [UInt8] {
        guard !recipients.isEmpty else {
            throw CryptoError(code: .invalidParameter, message: "an age file needs at least one recipient")
        }
        let fileKey = try SecureBytes.random(count: fileKeyLength)
        var header = version + [0x0A]
        for recipient in recipients {
            let ephemeral = try X25519.newSecretKey()
            let share = try X25519.publicKey(for: ephemeral)
            let shared = try X25519.sharedSecret(ephemeral, publicKey: recipient.publicKey)
            let wrapKey = try hkdf(ikm: shared, salt: share + recipient.publicKey, info: x25519Info)
            let body = try fileKey.withUnsafeBytes { try seal($0, key: wrapKey, nonce: zeroNonce) }
            header += Array("-> X25519 ".utf8) + base64(share) + [0x0A]
            header += wrappedBody(body)
        }
        header += Array("---".utf8)
        let mac = try headerMAC(header, fileKey: fileKey)
        header += [0x20] + base64(mac) + [0x0A]

        let nonce = SecureRandom.bytes(count: payloadNonceLength)
        let payloadKey = try hkdf(ikm: fileKey, salt: nonce, info: Array("payload".utf8))
        let chunks = max(1, (plaintext.count + chunkLength - 1) / chunkLength)
        var file = header + nonce
        file.reserveCapacity(file.count + plaintext.count + chunks * tagLength)
        for index in 0..<chunks {
            let start = index * chunkLength
            let chunk = UnsafeRawBufferPointer(rebasing: plaintext[start..<min(start + chunkLength, plaintext.count)])
            file += try seal(chunk, key: payloadKey, nonce: chunkNonce(UInt64(index), last: index == chunks - 1))
        }
        return file
    }

    // MARK: - Opening

    /// Opens an age file (binary or armored) with the first of `identities` that one of its
    /// X25519 stanzas was made for, and calls `body` with the plaintext, which is wiped when
    /// `body` returns. Every chunk is authenticated before `body` sees any of it.
    /// - Throws: ``AgeFileError`` — `.notAgeFile`, `.malformed` (a header that breaks the
    ///   format), `.unsupported` (a passphrase-sealed file), `.noMatchingIdentity`, `.damaged`
    ///   (the header's MAC or a chunk fails authentication: altered or cut short); whatever
    ///   `body` throws.
    package static func open<R>(
        _ file: UnsafeRawBufferPointer, identities: [X25519Identity], _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        if !file.starts(with: version + [0x0A]), trimmingLeadingSpace(file).starts(with: armorBegin) {
            let binary = try dearmor(file)
            return try binary.withUnsafeBytes { try open(binary: $0, identities: identities, body) }
        }
        return try open(binary: file, identities: identities, body)
    }

    private static func open<R>(
        binary file: UnsafeRawBufferPointer, identities: [X25519Identity], _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        var reader = HeaderReader(bytes: file)
        guard let first = reader.line(), first.elementsEqual(version) else {
            throw AgeFileError(.notAgeFile, "not an age file: it does not start with the line age-encryption.org/v1")
        }
        var stanzas: [Stanza] = []
        var macStart = 0
        var mac: [UInt8] = []
        while true {
            let lineStart = reader.offset
            guard let line = reader.line() else {
                throw AgeFileError(.malformed, "the age header ends before its --- line")
            }
            if line.starts(with: Array("--- ".utf8)) {
                macStart = lineStart + 3
                guard let decoded = decodeBase64(Array(line.dropFirst(4))), decoded.count == macLength else {
                    throw AgeFileError(.malformed, "the age header's MAC is not 32 bytes of canonical base64")
                }
                mac = decoded
                break
            }
            guard line.starts(with: Array("-> ".utf8)) else {
                throw AgeFileError(.malformed, "line \(reader.lineNumber) of the age header is neither a stanza nor the --- line")
            }
            let arguments = line.dropFirst(3).split(separator: 0x20, omittingEmptySubsequences: false).map { Array($0) }
            guard arguments.allSatisfy({ !$0.isEmpty && $0.allSatisfy { (0x21...0x7E).contains($0) } }) else {
                throw AgeFileError(.malformed, "line \(reader.lineNumber) of the age header: a stanza argument is empty or not printable ASCII")
            }
            var stanzaBody: [UInt8] = []
            while true {
                guard let bodyLine = reader.line() else {
                    throw AgeFileError(.malformed, "the age header ends inside a stanza")
                }
                guard bodyLine.count <= 64, let decoded = decodeBase64(Array(bodyLine)) else {
                    throw AgeFileError(.malformed, "line \(reader.lineNumber) of the age header is not a stanza body line (canonical base64, at most 64 columns)")
                }
                stanzaBody += decoded
                if bodyLine.count < 64 { break }
            }
            stanzas.append(Stanza(arguments: arguments, body: stanzaBody))
            guard stanzas.count <= maximumStanzas else {
                throw AgeFileError(.malformed, "the age header holds more than \(maximumStanzas) stanzas")
            }
        }
        if stanzas.contains(where: { $0.arguments.first == Array("scrypt".utf8) }) {
            throw AgeFileError(
                .unsupported,
                "this age file is sealed with a passphrase (age -p), which coffer does not open: decrypt it with age, or seal it to a recipient")
        }
        var fileKey: SecureBytes?
        search: for stanza in stanzas where stanza.arguments.first == Array("X25519".utf8) {
            guard stanza.arguments.count == 2, let share = decodeBase64(stanza.arguments[1]), share.count == X25519.keyLength,
                stanza.body.count == fileKeyLength + tagLength
            else {
                throw AgeFileError(.malformed, "an X25519 stanza of the age header is malformed")
            }
            for identity in identities {
                let shared: SecureBytes
                do {
                    shared = try X25519.sharedSecret(identity.secretKey, publicKey: share)
                } catch {
                    throw AgeFileError(.malformed, "an X25519 stanza of the age header holds a point of small order")
                }
                let wrapKey = try hkdf(ikm: shared, salt: share + identity.recipient.publicKey, info: x25519Info)
                if let key = try? Cipher.openSecure(stanza.body, key: wrapKey, nonce: zeroNonce, associatedData: [UInt8]()) {
                    fileKey = key
                    break search
                }
            }
        }
        guard let fileKey else {
            throw AgeFileError(
                .noMatchingIdentity,
                "none of the \(identities.count) identit\(identities.count == 1 ? "y" : "ies") given opens this age file (it is sealed to other recipients)")
        }
        let expected = try headerMAC(Array(file[..<macStart]), fileKey: fileKey)
        guard expected.count == mac.count, sodium_memcmp(expected, mac, mac.count) == 0 else {
            throw AgeFileError(.damaged, "the age header fails authentication: the file was altered")
        }
        let payload = UnsafeRawBufferPointer(rebasing: file[reader.offset...])
        guard payload.count >= payloadNonceLength + tagLength else {
            throw AgeFileError(.damaged, "the age file is cut short: its payload is missing")
        }
        let nonce = Array(payload[..<payloadNonceLength])
        let payloadKey = try hkdf(ikm: fileKey, salt: nonce, info: Array("payload".utf8))
        let sealed = UnsafeRawBufferPointer(rebasing: payload[payloadNonceLength...])
        let fullChunk = chunkLength + tagLength
        let chunks = max(1, (sealed.count + fullChunk - 1) / fullChunk)
        let plaintextLength = sealed.count - chunks * tagLength
        guard plaintextLength >= 0, sealed.count - (chunks - 1) * fullChunk >= tagLength else {
            throw AgeFileError(.damaged, "the age file's last chunk is cut short")
        }
        let plaintext = UnsafeMutableRawBufferPointer.allocate(byteCount: max(plaintextLength, 1), alignment: 16)
        defer {
            SecureMemory.zero(plaintext)
            plaintext.deallocate()
        }
        for index in 0..<chunks {
            let start = index * fullChunk
            let chunk = UnsafeRawBufferPointer(rebasing: sealed[start..<min(start + fullChunk, sealed.count)])
            let last = index == chunks - 1
            if last, index > 0, chunk.count == tagLength {
                throw AgeFileError(.damaged, "the age file ends in an empty chunk after a full one, which age never writes")
            }
            let output = UnsafeMutableRawBufferPointer(
                rebasing: plaintext[(index * chunkLength)..<(index * chunkLength + chunk.count - tagLength)])
            do {
                try chunkNonce(UInt64(index), last: last).withUnsafeBytes { nonce in
                    try Cipher.open(chunk, key: payloadKey, nonce: nonce, associatedData: empty, into: output)
                }
            } catch {
                throw AgeFileError(.damaged, "chunk \(index + 1) of the age file fails authentication: the file was altered or cut short")
            }
        }
        return try body(UnsafeRawBufferPointer(rebasing: plaintext[..<plaintextLength]))
    }

    // MARK: - Pieces

    private struct Stanza {
        var arguments: [[UInt8]]
        var body: [UInt8]
    }

    /// Reads the header line by line (`\n`-terminated; no `\r` allowed, as age requires).
    private struct HeaderReader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0
        var lineNumber = 0

        mutating func line() -> ArraySlice<UInt8>? {
            guard offset < bytes.count, let end = bytes[offset...].firstIndex(of: 0x0A) else { return nil }
            // A header line is short; one of more than 1 KiB means this is not a header.
            guard end - offset <= 1024 else { return nil }
            defer { offset = end + 1 }
            lineNumber += 1
            return Array(bytes[offset..<end])[...]
        }
    }

    private static var empty: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: nil, count: 0) }
    private static let zeroNonce = [UInt8](repeating: 0, count: 12)

    /// ChaCha20-Poly1305 of `plaintext` (no associated data): ciphertext and tag.
    private static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecureBytes, nonce: [UInt8]) throws -> [UInt8] {
        try nonce.withUnsafeBytes { try Cipher.seal(plaintext, key: key, nonce: $0, associatedData: empty) }
    }

    /// The nonce of payload chunk `counter`: the counter in 11 bytes, big-endian, then 1 for the
    /// last chunk and 0 for the others.
    private static func chunkNonce(_ counter: UInt64, last: Bool) -> [UInt8] {
        var nonce = [UInt8](repeating: 0, count: 12)
        for index in 0..<8 { nonce[10 - index] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(index))) }
        nonce[11] = last ? 1 : 0
        return nonce
    }

    /// A stanza body: base64 in lines of 64 columns, the last one shorter (possibly empty).
    private static func wrappedBody(_ body: [UInt8]) -> [UInt8] {
        let text = base64(body)
        var out: [UInt8] = []
        var index = 0
        while index + 64 <= text.count {
            out += text[index..<(index + 64)] + [0x0A]
            index += 64
        }
        return out + text[index...] + [0x0A]
    }

    private static func headerMAC(_ header: [UInt8], fileKey: SecureBytes) throws -> [UInt8] {
        let key = try hkdf(ikm: fileKey, salt: [], info: Array("header".utf8))
        return key.withUnsafeBytes { key in header.withUnsafeBytes { hmac(key: key, [$0]) } }
    }

    /// HMAC-SHA-256 (libsodium's, which takes a key of any length) of the concatenated `parts`.
    private static func hmac(key: UnsafeRawBufferPointer, _ parts: [UnsafeRawBufferPointer]) -> [UInt8] {
        var state = crypto_auth_hmacsha256_state()
        defer { withUnsafeMutableBytes(of: &state) { SecureMemory.zero($0) } }
        withNonNullBytes(key) { _ = crypto_auth_hmacsha256_init(&state, $0, key.count) }
        for part in parts where part.count > 0 {
            _ = crypto_auth_hmacsha256_update(&state, part.bytePointer, UInt64(part.count))
        }
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_auth_hmacsha256_final(&state, &out)
        return out
    }

    /// HKDF-SHA-256 (RFC 5869) with 32 bytes of output, in guarded memory. An empty salt is the
    /// same as 32 zero bytes (HMAC pads its key with zeros), as in age's Go implementation.
    static func hkdf(ikm: SecureBytes, salt: [UInt8], info: [UInt8]) throws -> SecureBytes {
        var prk = ikm.withUnsafeBytes { ikm in salt.withUnsafeBytes { hmac(key: $0, [ikm]) } }
        defer { SecureMemory.zero(&prk) }
        return try SecureBytes(count: 32) { out in
            var okm = prk.withUnsafeBytes { prk in
                info.withUnsafeBytes { info in [UInt8(1)].withUnsafeBytes { hmac(key: prk, [info, $0]) } }
            }
            defer { SecureMemory.zero(&okm) }
            out.copyBytes(from: okm)
        }
    }

    // MARK: - Base64

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Standard base64 without padding, as age writes it.
    static func base64(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let b0 = UInt32(bytes[index])
            let b1 = index + 1 < bytes.count ? UInt32(bytes[index + 1]) : 0
            let b2 = index + 2 < bytes.count ? UInt32(bytes[index + 2]) : 0
            let group = b0 << 16 | b1 << 8 | b2
            let characters = min(4, (bytes.count - index) * 4 / 3 + ((bytes.count - index) >= 3 ? 0 : 1))
            for position in 0..<characters { out.append(alphabet[Int(group >> (18 - 6 * UInt32(position)) & 63)]) }
            index += 3
        }
        return out
    }

    /// Strict standard base64 without padding: `nil` for padding, another character, a
    /// length no encoding has, or unused bits that are not zero (age accepts only the canonical
    /// encoding).
    static func decodeBase64(_ text: [UInt8]) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var values: [UInt32] = []
        values.reserveCapacity(text.count)
        for character in text {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            values.append(UInt32(value))
        }
        var out: [UInt8] = []
        var index = 0
        while index < values.count {
            let count = min(4, values.count - index)
            var group: UInt32 = 0
            for position in 0..<4 { group = group << 6 | (position < count ? values[index + position] : 0) }
            let bytes = count * 3 / 4
            for position in 0..<bytes { out.append(UInt8(truncatingIfNeeded: group >> (16 - 8 * UInt32(position)))) }
            // The bits after the last whole byte must be zero.
            if count < 4, group & ((1 << (8 * UInt32(3 - bytes))) - 1) != 0 { return nil }
            index += 4
        }
        return out
    }

    // MARK: - Armor

    private static func trimmingLeadingSpace(_ bytes: UnsafeRawBufferPointer) -> ArraySlice<UInt8> {
        let start = bytes.firstIndex { ![0x20, 0x09, 0x0D, 0x0A].contains($0) } ?? bytes.count
        return Array(bytes[start..<min(bytes.count, start + armorBegin.count)])[...]
    }

    /// The binary file inside `age -a`'s armor: standard base64 with padding, in lines of 64
    /// columns, between the BEGIN and END lines (white space around the armor is allowed).
    private static func dearmor(_ file: UnsafeRawBufferPointer) throws -> [UInt8] {
        let lines = file.split(separator: 0x0A, omittingEmptySubsequences: false).map { line -> [UInt8] in
            var line = Array(line)
            if line.last == 0x0D { line.removeLast() }
            return line
        }
        let trimmed = lines.drop { $0.allSatisfy { [0x20, 0x09].contains($0) } }.reversed()
            .drop { $0.allSatisfy { [0x20, 0x09].contains($0) } }.reversed()
        let body = Array(trimmed)
        guard body.count >= 2, body.first! == armorBegin, body.last! == armorEnd else {
            throw AgeFileError(.malformed, "the armored age file does not have its BEGIN and END lines")
        }
        var text: [UInt8] = []
        for (index, line) in body.dropFirst().dropLast().enumerated() {
            let isLast = index == body.count - 3
            guard line.count <= 64, isLast || line.count == 64 else {
                throw AgeFileError(.malformed, "line \(index + 2) of the armored age file is not 64 columns of base64")
            }
            text += line
        }
        var unpadded = text
        var padding = 0
        while unpadded.last == UInt8(ascii: "="), padding < 2 {
            unpadded.removeLast()
            padding += 1
        }
        guard text.count % 4 == 0, let binary = decodeBase64(unpadded) else {
            throw AgeFileError(.malformed, "the armored age file holds something other than padded base64")
        }
        return binary
    }
}

/// Why an age file could not be opened (``AgeFile/open(_:identities:_:)``). The message never
/// quotes the file.
package struct AgeFileError: Error, Sendable, CustomStringConvertible {
    package enum Reason: Sendable, Hashable {
        /// The bytes are not an age file at all.
        case notAgeFile
        /// The header breaks the format.
        case malformed
        /// A kind of age file Coffer does not open (sealed with a passphrase).
        case unsupported
        /// None of the identities given is a recipient of the file.
        case noMatchingIdentity
        /// Authentication failed: the file was altered or cut short.
        case damaged
    }

    package let reason: Reason
    package let message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    package var description: String { message }
}
