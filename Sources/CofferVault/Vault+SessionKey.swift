// What `coffer unlock` keeps for a login session (the kernel keyring), and opening a file vault
// with it instead of its passphrase.
import CofferCore
package import CofferCrypto
import CofferJournal

/// The key-encryption key of one passphrase, key-file or raw-key slot, with the slot's kind and
/// salt: what ``SlotOpener/slotKey(kind:salt:kek:)`` keeps while a vault is unlocked, lent to
/// the CLI so `coffer unlock` can keep it for a login session and later commands skip the KDF.
///
/// Why this and not the passphrase or the master key:
/// - Not the passphrase: it is what a person types (and may reuse elsewhere), and it would
///   still cost one Argon2id run per command.
/// - Not the master key: a rotation (`coffer rotate`) replaces it, so a kept master key would
///   stop working, and it opens every record of the vault by itself even after the slot that
///   gave it was removed. A key-encryption key opens only its own slot's wrapping of the
///   current master key: a rotation re-wraps the kept slots under the same key-encryption key
///   and keeps each slot's salt, so it still opens the vault afterwards; a passphrase change
///   (a new slot, a new salt) or the slot's removal makes it open nothing, as it should.
///
/// Its bytes are as secret as the master key while the slot exists; they are held in
/// ``SecureBytes`` and ``serialized()`` returns guarded memory too.
package struct VaultSessionKey: Sendable {
    let kind: KeySlotKind
    let salt: [UInt8]
    let kek: SecureBytes

    /// The version byte that begins ``serialized()``.
    static let formatVersion: UInt8 = 1
    /// The longest salt and key-encryption key accepted when parsing (a slot's are 16 and 32).
    static let maximumPartLength = 64

    init?(opener: SlotOpener) {
        guard case .slotKey(let kind, let salt, let kek) = opener else { return nil }
        self.kind = kind
        self.salt = salt
        self.kek = kek
    }

    var opener: SlotOpener { .slotKey(kind: kind, salt: salt, kek: kek) }

    /// A readable name of the slot kind this key opens (`passphrase`, `keyFile`, `key`).
    package var slotKind: String { kind.name }

    /// `[version 1][slot kind][salt length][salt][key-encryption key]`, in guarded memory.
    package func serialized() throws -> SecureBytes {
        let count = 3 + salt.count + kek.count
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        defer {
            SecureMemory.zero(buffer)
            buffer.deallocate()
        }
        buffer[0] = Self.formatVersion
        buffer[1] = kind.rawValue
        buffer[2] = UInt8(salt.count)
        for (index, byte) in salt.enumerated() { buffer[3 + index] = byte }
        kek.withUnsafeBytes { key in
            UnsafeMutableRawBufferPointer(rebasing: buffer[(3 + salt.count)...]).copyMemory(from: key)
        }
        return try crypto { try SecureBytes(copying: UnsafeRawBufferPointer(buffer)) }
    }

    /// Parses ``serialized()``'s bytes.
    /// - Throws: ``CofferError/Code/invalidArgument`` when they are not such a key (another
    ///   version, a recipient slot's kind, a wrong length). The message holds no byte of them.
    package init(serialized bytes: SecureBytes) throws {
        let parsed = try bytes.withUnsafeBytes { bytes -> (KeySlotKind, [UInt8], SecureBytes) in
            let malformed = CofferError(.invalidArgument, "the kept session key is not one this coffer wrote")
            guard bytes.count >= 3, bytes[0] == Self.formatVersion,
                let kind = KeySlotKind(rawValue: bytes[1]), kind != .recipient
            else { throw malformed }
            let saltLength = Int(bytes[2])
            let kekLength = bytes.count - 3 - saltLength
            guard saltLength > 0, saltLength <= Self.maximumPartLength, kekLength > 0,
                kekLength <= Self.maximumPartLength
            else { throw malformed }
            let salt = Array(bytes[3..<(3 + saltLength)])
            let kek = try crypto { try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[(3 + saltLength)...])) }
            return (kind, salt, kek)
        }
        (kind, salt, kek) = parsed
    }
}

extension VaultUnlock {
    /// A key kept by `coffer unlock` (``Vault/sessionKey``, ``RowSealing/sessionKey``): opens
    /// the slot with its kind and salt with one AEAD and no KDF, then everything is
    /// authenticated as with any other source. It opens nothing else: given to `create` or
    /// `addKeySlot` it is refused (``CofferError/Code/invalidArgument``).
    ///
    /// Opening with it throws ``CofferError/Code/wrongKey`` when no slot of the vault has that
    /// kind and salt or the key does not open it (the passphrase was changed, the slot removed,
    /// or another vault is there now).
    package static func sessionKey(_ key: VaultSessionKey) -> VaultUnlock { VaultUnlock(source: .sessionKey(key)) }
}

extension Vault {
    /// The key-encryption key of the slot this vault was unlocked with, for `coffer unlock`;
    /// `nil` when locked, or unlocked with an identity (a recipient slot has no such key), or
    /// opened in a way that keeps none.
    package var sessionKey: VaultSessionKey? {
        store.withState { $0?.opener }.flatMap(VaultSessionKey.init(opener:))
    }
}

extension RowSealing {
    /// As ``Vault/sessionKey``, for a vault kept in rows (CofferPostgres).
    package var sessionKey: VaultSessionKey? { opener.flatMap(VaultSessionKey.init(opener:)) }
}
