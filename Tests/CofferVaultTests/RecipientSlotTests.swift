import CofferCore
import CofferCrypto
import CofferJournal
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// Key slots for a recipient (an X25519 identity's public key, `age1…`): docs/FORMAT.md §2,
/// "Recipient slot".
@Suite("Vault: recipient key slots")
struct RecipientSlotTests {
    @Test("An identity added by its recipient string opens every item; the file says version 2 and names the recipient")
    func addedRecipientOpens() throws {
        let dir = try Scratch("recipient")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        for i in 0..<20 { try vault.set("secret \(i)", service: "svc", account: "a\(i)") }
        #expect(try vault.info().formatVersion == 1)
        // The machine makes its identity and sends only the recipient string.
        let machine = try X25519Identity.generate()
        let sent = machine.recipient.description
        try vault.addRecipient(try X25519Recipient(parsing: sent))
        try vault.addRecipient(try X25519Recipient(parsing: sent))  // twice: one slot
        let info = try vault.info()
        #expect(info.formatVersion == 2)
        #expect(info.keySlots.map(\.kind) == ["passphrase", "recipient"])
        #expect(info.keySlots[1].recipient == sent)
        let opened = try Vault.open(at: url, unlock: .identities([machine]))
        #expect(try Snapshot(of: opened) == Snapshot(of: vault))
        // The passphrase still works; another identity does not, and is told why.
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).string(service: "svc", account: "a3") == "secret 3")
        let stranger = try X25519Identity.generate()
        let refused = expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .identities([stranger])) }
        #expect("\(refused.map { String(describing: $0) } ?? "")".contains("no key slot for its recipient"))
        // An identity file holding several identities: the one with a slot opens it.
        #expect(try Vault.open(at: url, unlock: .identities([stranger, machine])).string(service: "svc", account: "a0") == "secret 0")
    }

    @Test("A removed recipient opens nothing more; the header goes back to version 1")
    func removedRecipient() throws {
        let dir = try Scratch("recipient-rm")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.set("x", service: "s", account: "a")
        let machine = try X25519Identity.generate()
        try vault.addRecipient(machine.recipient)
        _ = try Vault.open(at: url, unlock: .identities([machine]))
        try vault.removeKeySlot(at: 1)
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .identities([machine])) }
        #expect(try vault.info().formatVersion == 1)
    }

    @Test("A vault made for an identity file opens with that file, in Coffer and in the independent reader")
    func createdForIdentityFile() throws {
        let dir = try Scratch("recipient-file")
        let url = dir.url("v")
        let identity = try X25519Identity.generate()
        let identityURL = dir.url("identity")
        try Data(try identity.fileContents().withUnsafeBytes { Array($0) }).write(to: identityURL)
        let vault = try Vault.create(at: url, unlock: .identity(identityURL))
        try vault.set("s1", service: "svc", account: "a", label: "La")
        try vault.flush()
        #expect(try vault.info().keySlots.map(\.recipient) == [identity.recipient.description])
        #expect(try Vault.open(at: url, unlock: .identity(identityURL)).string(service: "svc", account: "a") == "s1")
        #expect("\(VaultUnlock.identity(identityURL))" == "VaultUnlock.identity(\(identityURL.path))")
        #expect(!"\(VaultUnlock.identities([identity]))".contains("AGE-SECRET-KEY"))

        // docs/FORMAT.md is enough to open it: Tools/vault-reader.py (Python, PyNaCl).
        let (status, text) = try runVaultReader([url.path, "--identity", identityURL.path, "--show-secrets"])
        #expect(status == 0)
        #expect(text == "svc\ta\tLa\t7331\n")
    }

    @Test("A header whose version does not match its slots, or a recipient slot with stray bytes, is damaged")
    func headerRules() throws {
        let dir = try Scratch("recipient-header")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        try vault.addRecipient(try X25519Identity.generate().recipient)
        let bytes = try readBytes(url)
        let copy = Array(bytes[32..<(32 + VaultHeader.copySize)])
        guard case .header(let header) = VaultHeader.parse(copy: copy[...]) else {
            Issue.record("the written header does not parse")
            return
        }
        #expect(header.version == 2)
        // Re-encoded byte for byte.
        #expect(header.copyBytes() == copy)
        func resealed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var altered = copy
            change(&altered)
            let crc = CRC32C.checksum(Array(altered[0..<VaultHeader.crcOffset]))
            withUnsafeBytes(of: crc.littleEndian) { altered.replaceSubrange(VaultHeader.crcOffset..<(VaultHeader.crcOffset + 4), with: $0) }
            return altered
        }
        // Version 1 with a recipient slot: damaged, not silently read.
        guard case .damaged = VaultHeader.parse(copy: resealed { $0[4] = 1 }[...]) else {
            Issue.record("a version 1 header with a recipient slot was accepted")
            return
        }
        // Version 4: unsupported (a newer Coffer's), never damaged.
        guard case .unsupported(4) = VaultHeader.parse(copy: resealed { $0[4] = 4 }[...]) else {
            Issue.record("version 4 was not reported as unsupported")
            return
        }
        // Version 3 on a header laid out as version 2 (its zero slot places read as labels):
        // damaged, since it needs no version 3.
        guard case .damaged = VaultHeader.parse(copy: resealed { $0[4] = 3 }[...]) else {
            Issue.record("a version 3 header that needs no version 3 was accepted")
            return
        }
        // A byte set in the recipient slot's zero tail.
        let slot1 = VaultHeader.slotsOffset + KeySlot.size
        guard case .damaged = VaultHeader.parse(copy: resealed { $0[slot1 + 125] = 1 }[...]) else {
            Issue.record("a recipient slot with a non-zero tail was accepted")
            return
        }
    }

    @Test("A recipient slot's recipient changed in the file opens for nobody (the header MAC and the key derivation bind it)")
    func alteredRecipient() throws {
        let dir = try Scratch("recipient-altered")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        let machine = try X25519Identity.generate()
        let attacker = try X25519Identity.generate()
        try vault.addRecipient(machine.recipient)
        // Someone with write access puts their own public key in the slot (both copies, CRCs fixed).
        var bytes = try readBytes(url)
        for copy in 0..<2 {
            let base = 32 + copy * VaultHeader.copySize
            let field = base + VaultHeader.slotsOffset + KeySlot.size + 40
            bytes.replaceSubrange(field..<(field + 32), with: attacker.recipient.publicKey)
            let crc = CRC32C.checksum(Array(bytes[base..<(base + VaultHeader.crcOffset)]))
            withUnsafeBytes(of: crc.littleEndian) {
                bytes.replaceSubrange((base + VaultHeader.crcOffset)..<(base + VaultHeader.crcOffset + 4), with: $0)
            }
        }
        try writeBytes(bytes, to: url)
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .identities([attacker])) }
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .identities([machine])) }
    }

    @Test("removeRecipient removes every slot of the recipient under one lock; a repeated identity makes one slot")
    func removeRecipientEverywhere() throws {
        let dir = try Scratch("recipient-remove-all")
        let url = dir.url("v")
        let machine = try X25519Identity.generate()
        // An identity file naming one key twice: one slot.
        let vault = try Vault.create(at: url, unlock: .identities([machine, machine]))
        #expect(try vault.info().keySlots.count == 1)
        try vault.addKeySlot(.passphrase("pw"), kdf: fastKDF)
        try vault.addKeySlot(.identities([machine]))  // already there: nothing added
        #expect(try vault.info().keySlots.map(\.kind) == ["recipient", "passphrase"])
        #expect(try vault.addRecipient(machine.recipient) == false)
        #expect(try vault.removeRecipient(machine.recipient) == 1)
        #expect(try vault.info().keySlots.map(\.kind) == ["passphrase"])
        #expect(try vault.removeRecipient(machine.recipient) == 0)
        // The vault that opened by the removed slot still works in this process (its key is in
        // memory: removal is not revocation), and the passphrase opens it.
        try vault.set("after", service: "s", account: "a")
        #expect(try Vault.open(at: url, unlock: .passphrase("pw")).string(service: "s", account: "a") == "after")
        // The last slot is never removed.
        let only = try Vault.create(at: dir.url("w"), unlock: .identities([machine]))
        expectError(.invalidArgument) { try only.removeRecipient(machine.recipient) }
    }

    @Test("Ten slots at most in a file: the eleventh is refused and nothing changes")
    func slotLimit() throws {
        let dir = try Scratch("recipient-limit")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: fastKDF)
        for _ in 0..<9 { try vault.addRecipient(try X25519Identity.generate().recipient) }
        let before = try Data(contentsOf: url)
        expectError(.invalidArgument) { try vault.addRecipient(try X25519Identity.generate().recipient) }
        #expect(try vault.info().keySlots.count == 10)
        #expect(try Data(contentsOf: url) == before)
    }

    /// `Vectors/recipient_slot.json`, computed by `Vectors/recipient_slot.py` from docs/FORMAT.md
    /// with PyNaCl and hashlib (not from this code): the slot Coffer makes from the same inputs
    /// is byte for byte the vector's, and the vector's slot opens with its recipient's secret.
    @Test("Known answers for a recipient slot, computed independently from FORMAT.md")
    func knownAnswers() throws {
        struct Vectors: Decodable {
            struct Case: Decodable {
                let name: String
                let recipient_secret, recipient, ephemeral_secret, vault_id, master_key, slot: String
            }
            let cases: [Case]
        }
        func bytes(_ hex: String) -> [UInt8] {
            var out: [UInt8] = []
            var index = hex.startIndex
            while index < hex.endIndex {
                let next = hex.index(index, offsetBy: 2)
                out.append(UInt8(hex[index..<next], radix: 16)!)
                index = next
            }
            return out
        }
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Vectors/recipient_slot.json")
        let vectors = try JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url))
        #expect(vectors.cases.count == 2)
        for vector in vectors.cases {
            let identity = try X25519Identity(secretKey: try SecureBytes(copying: bytes(vector.recipient_secret)))
            #expect(identity.recipient.publicKey == bytes(vector.recipient), "\(vector.name)")
            let master = try SecureBytes(copying: bytes(vector.master_key))
            let made = try KeySlotCrypto.makeRecipientSlot(
                wrapping: master, recipient: identity.recipient, vaultID: bytes(vector.vault_id),
                ephemeralSecret: try SecureBytes(copying: bytes(vector.ephemeral_secret)))
            #expect(made.bytes() == bytes(vector.slot), "\(vector.name)")
            let parsed = try #require(KeySlot.parse(bytes(vector.slot)[...]), "\(vector.name)")
            let opened = try #require(try KeySlotCrypto.unwrapRecipient(parsed, identity: identity, vaultID: bytes(vector.vault_id)))
            #expect(opened.withUnsafeBytes { Array($0) } == bytes(vector.master_key), "\(vector.name)")
            // Another vault id (the associated data) and the slot does not open.
            #expect(try KeySlotCrypto.unwrapRecipient(parsed, identity: identity, vaultID: [UInt8](repeating: 0, count: 16)) == nil)
        }
    }
}
