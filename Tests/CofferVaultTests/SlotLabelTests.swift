import CofferCore
import CofferCrypto
import CofferJournal
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// Header version 3: slot labels and more slots (docs/FORMAT.md §2, "Vault header").
@Suite("Vault: slot labels and more slots (header version 3)")
struct SlotLabelTests {
    @Test("Labels name slots, are kept by rotation and passphrase changes, and open in the independent reader")
    func labelsRoundTrip() throws {
        let dir = try Scratch("labels")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("7331", service: "svc", account: "a", label: "La")
        #expect(try vault.info().formatVersion == 1)
        let web = try X25519Identity.generate()
        try vault.addRecipient(web.recipient, label: "web-1.prod")
        try vault.addKeySlot(.passphrase("ops"), kdf: fastKDF, label: "ops on-call — Zoë")
        var info = try vault.info()
        #expect(info.formatVersion == 3)
        #expect(info.keySlots.map(\.label) == [nil, "web-1.prod", "ops on-call — Zoë"])
        // Another instance reads them from the file; rotation and a passphrase change keep them.
        try vault.rotate(keeping: [.passphrase("ops")])
        try vault.changePassphrase(to: "pw2")
        let reopened = try Vault.open(at: url, unlock: .identities([web]))
        info = try reopened.info()
        #expect(info.keySlots.map(\.label) == [nil, "web-1.prod", "ops on-call — Zoë"])
        #expect(try reopened.string(service: "svc", account: "a") == "7331")
        // docs/FORMAT.md is enough to read version 3 (Tools/vault-reader.py).
        let identityURL = dir.url("identity")
        try Data(try web.fileContents().withUnsafeBytes { Array($0) }).write(to: identityURL)
        let (status, text) = try runVaultReader([url.path, "--identity", identityURL.path, "--show-secrets"])
        #expect(status == 0, "\(text)")
        #expect(text == "svc\ta\tLa\t37333331\n")
        // Without labels and with 8 slots or fewer, the header goes back to version 2.
        try vault.removeKeySlot(at: 2)
        try vault.removeRecipient(web.recipient)
        try vault.addRecipient(web.recipient)
        #expect(try vault.info().formatVersion == 2)
    }

    @Test("A file holds 10 slots (version 3); the 11th is refused, naming both limits; bad labels are refused and nothing changes")
    func limitsAndBadLabels() throws {
        let dir = try Scratch("labels-limit")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        var identities: [X25519Identity] = []
        for _ in 0..<9 {
            let identity = try X25519Identity.generate()
            identities.append(identity)
            try vault.addRecipient(identity.recipient)
        }
        #expect(try vault.info().keySlots.count == 10)
        #expect(try vault.info().formatVersion == 3)  // more than 8 slots, no label
        #expect(try Vault.open(at: url, unlock: .identities([identities[8]])).items().isEmpty)
        let full = expectError(.invalidArgument) { try vault.addRecipient(try X25519Identity.generate().recipient) }
        #expect("\(full.map { String(describing: $0) } ?? "")".contains("at most 10"))
        #expect("\(full.map { String(describing: $0) } ?? "")".contains("PostgreSQL vault holds 1000"))
        let before = try Data(contentsOf: url)
        try vault.removeKeySlot(at: 9)
        let after = try Data(contentsOf: url)
        expectError(.invalidArgument) { try vault.addRecipient(identities[8].recipient, label: String(repeating: "x", count: 65)) }
        expectError(.invalidArgument) { try vault.addRecipient(identities[8].recipient, label: "evil\u{1B}[2J") }
        expectError(.invalidArgument) { try vault.addRecipient(identities[8].recipient, label: "web\u{202E}1") }
        #expect(try Data(contentsOf: url) == after)
        #expect(before != after)
        // 64 bytes of UTF-8 exactly is fine.
        try vault.addRecipient(identities[8].recipient, label: String(repeating: "é", count: 32))
        #expect(try vault.info().keySlots[9].label == String(repeating: "é", count: 32))
    }

    @Test("At most 8 passphrase slots: each is an Argon2id run before the MAC can be checked")
    func passphraseSlotLimit() throws {
        let dir = try Scratch("labels-argon")
        let vault = try Vault.create(at: dir.url("v"), unlock: .passphrase("p0"), kdf: fastKDF)
        for i in 1..<8 { try vault.addKeySlot(.passphrase("p\(i)"), kdf: fastKDF) }
        let refused = expectError(.invalidArgument) { try vault.addKeySlot(.passphrase("p8"), kdf: fastKDF) }
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("8 passphrase slots"))
        try vault.addRecipient(try X25519Identity.generate().recipient)  // other kinds still fit
        #expect(try vault.info().keySlots.count == 9)
    }

    @Test("A label changed in the file fails the header MAC; a version-3 header that needs no version 3 is damaged")
    func tamperedLabel() throws {
        let dir = try Scratch("labels-tamper")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.addRecipient(try X25519Identity.generate().recipient, label: "web-1")
        vault.lock()
        var bytes = [UInt8](try Data(contentsOf: url))
        let area = Journal.fileHeaderSize
        // Both copies: the label of slot 1 (of 2) at 48 + 128 × 2 + 64, "web-1" → "web-2", CRC fixed.
        for copy in 0..<2 {
            let start = area + copy * VaultHeader.copySize
            bytes[start + 48 + 256 + 64 + 4] = UInt8(ascii: "2")
            let crc = CRC32C.checksum(Array(bytes[start..<(start + 2044)]))
            withUnsafeBytes(of: crc.littleEndian) { for (i, b) in $0.enumerated() { bytes[start + 2044 + i] = b } }
        }
        try Data(bytes).write(to: url)
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("pw")) }
        #expect("\(error.map { String(describing: $0) } ?? "")".contains("fails authentication"))
        // Labels cleared: a version-3 copy that needs no version 3 is not one Coffer writes.
        for copy in 0..<2 {
            let start = area + copy * VaultHeader.copySize
            for i in 0..<64 { bytes[start + 48 + 256 + 64 + i] = 0 }
            let crc = CRC32C.checksum(Array(bytes[start..<(start + 2044)]))
            withUnsafeBytes(of: crc.littleEndian) { for (i, b) in $0.enumerated() { bytes[start + 2044 + i] = b } }
            guard case .damaged(let why) = VaultHeader.parse(copy: bytes[start..<(start + VaultHeader.copySize)]) else {
                Issue.record("a version-3 copy with no label and 2 slots parsed")
                continue
            }
            #expect(why.contains("does not match"))
        }
    }

    @Test("A row store's version-3 copy holds hundreds of slots, unpadded, and parses back exactly")
    func rowCopy() throws {
        let recipients = try (0..<300).map { _ in try X25519Identity.generate().recipient }
        var slots = try recipients.map { recipient -> KeySlot in
            var slot = try KeySlotCrypto.makeRecipientSlot(
                wrapping: try SecureBytes.random(count: 32), recipient: recipient, vaultID: [UInt8](repeating: 7, count: 16))
            slot.label = "machine-\(recipient.description.suffix(6))"
            return slot
        }
        slots[0].label = ""
        var header = VaultHeader(
            sequence: 9, vaultID: [UInt8](repeating: 7, count: 16), epoch: [UInt8](repeating: 3, count: 16), slots: slots,
            mac: [UInt8](repeating: 0xAB, count: 32))
        #expect(header.version == 3)
        let row = header.rowBytes()
        #expect(row.count == 48 + 192 * 300 + 36)
        guard case .header(let parsed) = VaultHeader.parse(copy: row[...], inRow: true) else {
            Issue.record("the row copy did not parse")
            return
        }
        #expect(parsed == header)
        #expect(Array(VaultHeader.storedMAC(of: row[...])) == header.mac)
        // Truncated, or one byte longer: damaged, never misread.
        if case .header = VaultHeader.parse(copy: row.dropLast(), inRow: true) { Issue.record("a truncated row copy parsed") }
        if case .header = VaultHeader.parse(copy: (row + [0])[...], inRow: true) { Issue.record("a longer row copy parsed") }
        // In a row, version 3 is never padded: the same header padded to 2,048 bytes is damaged there.
        var small = header
        small.slots = Array(slots.prefix(3))
        if case .header = VaultHeader.parse(copy: small.copyBytes()[...], inRow: true) { Issue.record("a padded v3 row copy parsed") }
        if case .header = VaultHeader.parse(copy: small.rowBytes()[...], inRow: false) { Issue.record("an unpadded copy parsed as a file's") }
        // A newer version of another length is unsupported, never damaged (its CRC is its last 4 bytes).
        var newer = small.rowBytes() + [0, 0, 0, 0, 0, 0, 0, 0]
        newer[4] = 4
        newer.replaceSubrange((newer.count - 4)..<newer.count, with: withUnsafeBytes(of: CRC32C.checksum(Array(newer.dropLast(4))).littleEndian) { Array($0) })
        guard case .unsupported(4) = VaultHeader.parse(copy: newer[...], inRow: true) else {
            Issue.record("a version 4 row copy was not unsupported")
            return
        }
        // More than 8 passphrase slots (an Argon2id run each before the MAC can be checked): damaged.
        var argon = small
        argon.slots = (0..<9).map { _ in
            KeySlot(
                kind: .passphrase, opsLimit: 1, memLimitBytes: 8192, salt: SecureRandom.bytes(count: 16),
                nonce: SecureRandom.bytes(count: 24), wrappedKey: [UInt8](repeating: 1, count: 48), label: "p")
        }
        guard case .damaged(let why) = VaultHeader.parse(copy: argon.rowBytes()[...], inRow: true) else {
            Issue.record("9 passphrase slots parsed")
            return
        }
        #expect(why.contains("passphrase slots"))
        // A label with a bidirectional override (or any control) is damaged when read.
        var bidi = small
        bidi.slots[1].label = "web\u{202E}1"
        if case .header = VaultHeader.parse(copy: bidi.rowBytes()[...], inRow: true) { Issue.record("a bidi label parsed") }
        // Beyond 1,000 slots a row copy is damaged; a header of 8 slots without labels stays version 2.
        header.slots = Array(slots.prefix(8)).map { var s = $0; s.label = ""; return s }
        #expect(header.version == 2)
        #expect(header.rowBytes().count == VaultHeader.copySize)
        var full = VaultHeader(sequence: 1, vaultID: header.vaultID, epoch: header.epoch, slots: [], mac: header.mac)
        let keySlot = KeySlot(
            kind: .rawKey, salt: [UInt8](repeating: 1, count: 16), nonce: [UInt8](repeating: 2, count: 24),
            wrappedKey: [UInt8](repeating: 3, count: 48))
        try Vault.append(Array(repeating: keySlot, count: 1000), to: &full, limit: VaultHeader.maximumRowSlots)
        expectError(.invalidArgument) { try Vault.append([keySlot], to: &full, limit: VaultHeader.maximumRowSlots) }
    }
}
