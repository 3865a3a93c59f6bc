// What opened a vault's key slot, kept while the vault is unlocked, so a new master key (a
// rotation made elsewhere) is followed without asking for the secret again.
import CofferCore
import CofferCrypto

/// What opened the key slot of an unlocked vault (SECURITY.md, "Rotation and revocation").
///
/// A rotation keeps every remaining slot's kind, parameters and salt, and wraps the new master
/// key under the same key-encryption key (``KeySlotCrypto/rewrap(_:master:kek:vaultID:)``), or
/// to the same recipient. So an instance that keeps what opened its slot — the slot's
/// key-encryption key (the Argon2id output, for a passphrase), or its identities — opens the
/// rotated header with one AEAD (or one X25519) and no KDF. An instance whose slot was removed
/// finds nothing it opens: `.wrongKey`. It is as secret as the master key, and kept the same way
/// (``SecureBytes``, wiped when the vault is locked).
enum SlotOpener: Sendable {
    /// A passphrase, key-file or raw-key slot, found again by its kind and salt.
    case slotKey(kind: KeySlotKind, salt: [UInt8], kek: SecureBytes)
    /// Recipient slots, found by their recipient's public key.
    case identities([X25519Identity])

    /// Whether this opener opens `slot` (the same salt, or the recipient of an identity).
    func opens(_ slot: KeySlot) -> Bool {
        switch self {
        case .slotKey(let kind, let salt, _):
            return slot.kind == kind && SecureMemory.constantTimeEqual(slot.salt, salt)
        case .identities(let identities):
            return slot.kind == .recipient && identities.contains { $0.recipient.publicKey == slot.recipientKey }
        }
    }

    /// The master key of `header` and the slot that gave it, or `nil` when no slot of `header`
    /// is this opener's (its slot was removed) or none of them opens.
    func unwrap(_ header: VaultHeader) throws -> (key: SecureBytes, slot: Int)? {
        for index in header.slots.indices where opens(header.slots[index]) {
            let slot = header.slots[index]
            switch self {
            case .slotKey(_, _, let kek):
                if let key = try KeySlotCrypto.unwrap(slot, kek: kek, vaultID: header.vaultID) { return (key, index) }
            case .identities(let identities):
                for identity in identities where identity.recipient.publicKey == slot.recipientKey {
                    if let key = try KeySlotCrypto.unwrapRecipient(slot, identity: identity, vaultID: header.vaultID) {
                        return (key, index)
                    }
                }
            }
        }
        return nil
    }

    /// `slot`, wrapping `master` instead, when this opener holds its key-encryption key.
    func rewrap(_ slot: KeySlot, master: SecureBytes, vaultID: [UInt8]) throws -> KeySlot? {
        guard case .slotKey(_, _, let kek) = self, opens(slot) else { return nil }
        return try KeySlotCrypto.rewrap(slot, master: master, kek: kek, vaultID: vaultID)
    }
}
