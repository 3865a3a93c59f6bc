import CofferCore
import CofferCrypto
import CofferJournal
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

// What docs/FORMAT.md states where an independent reader had to guess, each pinned to what the
// code does: the order of the journal header's checks, the KDF bounds of every passphrase slot,
// the KDF fields of key-file and raw-key slots, the characters a label may hold, identity files
// and the Bech32 variant of their keys. A change to any of these must change the document too.

@Suite("docs/FORMAT.md: the cases a reader of the document had to guess")
struct FormatSpecTests {
    /// The journal header: magic, then CRC, then version. A wrong magic is named as such even
    /// when the CRC is also wrong; a newer version is believed only when the CRC vouches for it
    /// (a damaged version byte is damage, not a newer format).
    @Test("journal header: magic, then CRC, then version")
    func journalHeaderChecksInOrder() throws {
        let dir = try Scratch("spec-journal")
        let url = dir.url("v")
        _ = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
        let original = try readBytes(url)
        func withCRC(_ bytes: [UInt8]) -> [UInt8] {
            var bytes = bytes
            let crc = CRC32C.checksum(Array(bytes[0..<28]))
            withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { bytes[28 + i] = $0[i] } }
            return bytes
        }
        // Wrong magic and a stale CRC: the magic is what is reported.
        var bytes = original
        bytes[0] ^= 0x20
        try writeBytes(bytes, to: url)
        var error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        #expect(error?.message.contains("wrong magic") == true, "\(error?.message ?? "")")
        // Version 2 with the CRC left as it was: damage.
        bytes = original
        bytes[8] = 2
        try writeBytes(bytes, to: url)
        error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        #expect(error?.message.contains("checksum") == true, "\(error?.message ?? "")")
        // Version 2 with a CRC that matches: a newer format.
        try writeBytes(withCRC(bytes), to: url)
        expectError(.unsupportedVersion) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        // The other flag bits and the reserved bytes are covered by the CRC only: not checked.
        bytes = original
        bytes[16] |= 0x80
        bytes[20] = 0xAA
        try writeBytes(withCRC(bytes), to: url)
        #expect(try Vault.open(at: url, unlock: .passphrase("p")).items().isEmpty)
    }

    /// A vault header copy: CRC first, then magic, then version. A copy whose version byte
    /// changed without its CRC is damaged, never "unsupported".
    @Test("vault header copy: CRC, then magic, then version")
    func vaultHeaderChecksInOrder() throws {
        let dir = try Scratch("spec-header")
        let url = dir.url("v")
        _ = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
        var bytes = try readBytes(url)
        for copy in 0..<2 { bytes[Journal.fileHeaderSize + copy * VaultHeader.copySize + 4] = 9 }
        try writeBytes(bytes, to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        #expect(error?.message.contains("checksum mismatch") == true, "\(error?.message ?? "")")
        // The same with the CRCs fixed: magic right, version 9 → unsupported (VaultTests has it);
        // magic wrong with the CRCs fixed → damaged, naming the magic.
        try editHeaderCopies(url) { bytes, base in
            bytes[base + 4] = 1
            bytes[base] ^= 0x20
        }
        let magic = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        #expect(magic?.message.contains("wrong magic bytes") == true, "\(magic?.message ?? "")")
    }

    /// Every passphrase slot's Argon2id parameters are checked against the format's bounds
    /// before any Argon2id runs: a header whose second passphrase slot is out of bounds is
    /// refused as malformed even though the first slot opens with the passphrase given, and
    /// every passphrase (right or wrong) gets that same answer.
    @Test("a later passphrase slot out of the format's bounds: refused before any Argon2id run")
    func everyPassphraseSlotIsBoundsCheckedFirst() throws {
        let dir = try Scratch("spec-bounds")
        let url = dir.url("v")
        do {
            let vault = try Vault.create(at: url, unlock: .passphrase("first"), kdf: fastKDF)
            try vault.addKeySlot(.passphrase("second"), kdf: fastKDF)
        }
        #expect(try Vault.open(at: url, unlock: .passphrase("first")).info().keySlots.count == 2)
        try editHeaderCopies(url) { bytes, base in
            storeLE64(65, at: base + VaultHeader.slotsOffset + KeySlot.size + 8, in: &bytes)  // slot 1: 65 passes
        }
        for passphrase in ["first", "second", "neither"] {
            let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase(passphrase)) }
            #expect(error?.message.contains("outside the accepted range") == true, "\(passphrase): \(error?.message ?? "")")
        }
    }

    /// Key-file and raw-key slots: Coffer writes zero in both KDF fields. A reader does not
    /// refuse other values when it parses the slot, but bytes 8..<40 are in the wrapping's
    /// associated data, so a slot whose fields were changed does not open: a wrong key.
    @Test("key-file and raw-key slots: KDF fields zero, bound into the slot's associated data")
    func keyFileAndRawKeySlotsCarryZeroKDFFields() throws {
        let dir = try Scratch("spec-kdf-fields")
        let url = dir.url("v")
        let keyFile = dir.url("key")
        try Data((0..<64).map { UInt8($0) }).write(to: keyFile)
        let raw = try SecureBytes.random(count: 32)
        do {
            let vault = try Vault.create(at: url, unlock: .keyFile(keyFile))
            try vault.addKeySlot(.key(raw))
        }
        let bytes = try readBytes(url)
        for slot in 0..<2 {
            let start = Journal.fileHeaderSize + VaultHeader.slotsOffset + slot * KeySlot.size
            #expect(bytes[start] == UInt8(slot == 0 ? 2 : 3))
            #expect(bytes[(start + 8)..<(start + 24)].allSatisfy { $0 == 0 }, "slot \(slot)")
        }
        try editHeaderCopies(url) { bytes, base in
            storeLE64(1, at: base + VaultHeader.slotsOffset + 8, in: &bytes)  // the key-file slot's "opslimit"
        }
        let start = Journal.fileHeaderSize
        guard case .header(let header) = VaultHeader.parse(copy: try readBytes(url)[start..<(start + VaultHeader.copySize)]) else {
            Issue.record("a key-file slot with a non-zero KDF field did not parse")
            return
        }
        #expect(header.slots[0].opsLimit == 1)
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .keyFile(keyFile)) }
        // The raw-key slot is untouched: it opens, and then the header MAC (which covers the
        // changed slot) fails.
        let altered = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .key(raw)) }
        #expect(altered?.message.contains("altered") == true, "\(altered?.message ?? "")")
    }

    /// Labels: general categories Cc, Cf, Zl and Zp are refused, from the Swift runtime's
    /// Unicode tables (Unicode 17.0 in Swift 6.3). A code point unassigned in those tables
    /// (category Cn) is accepted; a format character added in Unicode 15.0 is refused.
    @Test("labels: Cc, Cf, Zl, Zp refused by the runtime's Unicode tables; unassigned accepted")
    func labelCharacters() throws {
        #expect(VaultHeader.isPrintableLabel("web-1 — Zoë"))
        #expect(!VaultHeader.isPrintableLabel("a\u{7}b"))  // Cc
        #expect(!VaultHeader.isPrintableLabel("a\u{202E}b"))  // Cf: right-to-left override
        #expect(!VaultHeader.isPrintableLabel("a\u{2028}b"))  // Zl
        #expect(!VaultHeader.isPrintableLabel("a\u{2029}b"))  // Zp
        #expect(!VaultHeader.isPrintableLabel("a\u{1343F}b"))  // Cf since Unicode 15.0
        #expect(VaultHeader.isPrintableLabel("a\u{088F}b"))  // Lo, new in Unicode 17.0
        #expect(VaultHeader.isPrintableLabel("a\u{0378}b"))  // unassigned (Cn)
        let dir = try Scratch("spec-labels")
        let vault = try Vault.create(at: dir.url("v"), unlock: .passphrase("p"), kdf: fastKDF)
        expectError(.invalidArgument) { try vault.addKeySlot(.passphrase("q"), kdf: fastKDF, label: "a\u{1343F}b") }
        #expect(try vault.info().keySlots.count == 1)
    }

    /// Identity files: LF or CRLF lines; blank lines and lines whose first non-blank character
    /// is `#` skipped; every other line one identity (so a comment after a key is refused);
    /// several identities, each tried; a file with none (empty, blank, comments only) refused.
    @Test("identity files: comments, blank lines, CRLF, several identities, none")
    func identityFiles() throws {
        let a = try X25519Identity.generate()
        let b = try X25519Identity.generate()
        func text(_ identity: X25519Identity) throws -> String {
            String(decoding: try identity.encoded().withUnsafeBytes { Array($0) }, as: UTF8.self)
        }
        let file = "# created: 2026-11-29\r\n\r\n   # indented comment\r\n\t\(try text(a)) \r\n\n\(try text(b))"
        let parsed = try IdentityFile.parse(try SecureBytes(utf8: file))
        #expect(parsed.map(\.recipient) == [a.recipient, b.recipient])
        for none in ["", "\n\r\n  \n", "# only a comment\n"] {
            let error = expectError(.invalidArgument) { _ = try IdentityFile.parse(try SecureBytes(utf8: none)) }
            #expect(error?.message.contains("no identity") == true, "\(error?.message ?? "")")
        }
        for bad in ["\(try text(a)) # mine\n", "\u{FEFF}\(try text(a))\n", try text(a).lowercased()] {
            let error = expectError(.invalidArgument) { _ = try IdentityFile.parse(try SecureBytes(utf8: bad)) }
            #expect(error?.message.contains("line 1") == true, "\(error?.message ?? "")")
        }
        // Several identities: any of them opens the recipient slot made for it.
        let dir = try Scratch("spec-identities")
        let url = dir.url("v")
        do {
            let vault = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
            #expect(try vault.addRecipient(b.recipient))
            try vault.set("x", service: "s", account: "a")
        }
        let identityFile = dir.url("identity")
        try Data(file.utf8).write(to: identityFile)
        #expect(try Vault.open(at: url, unlock: .identity(identityFile)).string(service: "s", account: "a") == "x")
    }

    /// Keys are Bech32 (BIP 173), never bech32m (BIP 350): the same key with a bech32m checksum
    /// is refused. Recipients are lower case with the prefix `age`, identities upper case with
    /// `AGE-SECRET-KEY-`. (The strings: Vectors/age_keys.json's first pair, and that pair's key
    /// re-encoded with bech32m's constant 0x2bc830a3.)
    @Test("Bech32 prefixes, one case each, and bech32m refused")
    func bech32NotBech32m() throws {
        let recipient = "age1w4zk3lwfacucqx75adcl3ksywq5qywq0rtjtvafmj6dersm5w49smmwym9"
        let recipientM = "age1w4zk3lwfacucqx75adcl3ksywq5qywq0rtjtvafmj6dersm5w49sw87g78"
        let identity = "AGE-SECRET-KEY-1WACTLKP8SKSQ6KKVNQTJS0DGEMAQTFHS2JJJUSDRP80YGJ8KFR4Q5TWPEL"
        let identityM = "AGE-SECRET-KEY-1WACTLKP8SKSQ6KKVNQTJS0DGEMAQTFHS2JJJUSDRP80YGJ8KFR4QPH7DUA"
        let parsed = try X25519Identity(parsing: try SecureBytes(utf8: identity))
        #expect(parsed.recipient == (try X25519Recipient(parsing: recipient)))
        #expect(X25519Recipient(recipientM) == nil)
        #expect(X25519Recipient(recipient.uppercased()) == nil)
        for refused in [identityM, identity.lowercased()] {
            #expect(throws: CryptoError.self) { _ = try X25519Identity(parsing: try SecureBytes(utf8: refused)) }
        }
        do {
            _ = try X25519Recipient(parsing: recipientM)
            Issue.record("a bech32m recipient was accepted")
        } catch let error as CryptoError {
            #expect(error.message.contains("checksum"), "\(error.message)")
        }
    }
}
