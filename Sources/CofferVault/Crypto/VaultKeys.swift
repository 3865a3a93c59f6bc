import CofferCore
import CofferCrypto
import Foundation

/// The master key and the subkeys derived from it, one per purpose (crypto_kdf, BLAKE2b).
///
/// Domain separation: a record key never authenticates a header, and a chain key never
/// encrypts. All live in guarded memory and are wiped when the vault locks.
struct VaultKeys: Sendable {
    let master: SecureBytes
    let record: SecureBytes
    let chain: SecureBytes
    let header: SecureBytes

    init(master: SecureBytes) throws {
        self.master = master
        record = try crypto { try KeyDerivation.deriveSubkey(from: master, id: 1, context: "CFVrecrd", length: 32) }
        chain = try crypto { try KeyDerivation.deriveSubkey(from: master, id: 2, context: "CFVchain", length: 32) }
        header = try crypto { try KeyDerivation.deriveSubkey(from: master, id: 3, context: "CFVheadr", length: 32) }
    }

    /// The header MAC: keyed BLAKE2b-256 over the header's authenticated bytes.
    func headerMAC(_ header: VaultHeader) throws -> [UInt8] {
        try crypto { try BLAKE2b.hash(header.authenticatedBytes(), key: self.header, outputLength: 32) }
    }

    /// The first chain value of a file: it binds the records to this vault and this file's epoch.
    func genesis(vaultID: [UInt8], epoch: [UInt8]) throws -> [UInt8] {
        try crypto { try BLAKE2b.hash(Array("coffer-chain-genesis-v1".utf8) + vaultID + epoch, key: chain, outputLength: 32) }
    }

    /// The chain value after a record: binds every record to all the records before it.
    func advance(_ chainValue: [UInt8], tag: ArraySlice<UInt8>) throws -> [UInt8] {
        try crypto { try BLAKE2b.hash(chainValue + tag, key: chain, outputLength: 32) }
    }
}

/// Seals and opens records (docs/FORMAT.md): payload = nonce (24) ‖ XChaCha20-Poly1305(body),
/// with associated data "CFVrec1\0" ‖ vault id ‖ chain value before this record.
enum RecordCipher {
    static let adPrefix: [UInt8] = Array("CFVrec1".utf8) + [0]
    static let overhead = XChaCha20Poly1305.nonceLength + XChaCha20Poly1305.tagLength

    static func associatedData(vaultID: [UInt8], chain: [UInt8]) -> [UInt8] { adPrefix + vaultID + chain }

    static func seal(_ body: [UInt8], keys: VaultKeys, vaultID: [UInt8], chain: [UInt8]) throws -> [UInt8] {
        let nonce = SecureRandom.bytes(count: XChaCha20Poly1305.nonceLength)
        let ad = associatedData(vaultID: vaultID, chain: chain)
        var payload = nonce
        payload += try crypto {
            try body.withUnsafeBytes { b in
                try nonce.withUnsafeBytes { n in
                    try ad.withUnsafeBytes { a in try XChaCha20Poly1305.seal(b, key: keys.record, nonce: n, associatedData: a) }
                }
            }
        }
        return payload
    }

    /// Opens a record's payload.
    /// - Throws: ``CofferError/Code/corrupted`` when it fails to authenticate.
    static func open(_ payload: [UInt8], keys: VaultKeys, vaultID: [UInt8], chain: [UInt8]) throws -> [UInt8] {
        guard payload.count > overhead else {
            throw CofferError(.corrupted, "a vault record is too short to be sealed")
        }
        let ad = associatedData(vaultID: vaultID, chain: chain)
        do {
            return try payload.withUnsafeBytes { p in
                try ad.withUnsafeBytes { a in
                    try XChaCha20Poly1305.open(
                        UnsafeRawBufferPointer(rebasing: p[XChaCha20Poly1305.nonceLength...]), key: keys.record,
                        nonce: UnsafeRawBufferPointer(rebasing: p[0..<XChaCha20Poly1305.nonceLength]), associatedData: a)
                }
            }
        } catch let error as CryptoError where error.code == .authenticationFailed {
            throw CofferError(
                .corrupted,
                "a vault record fails authentication: the file was damaged, or records were altered, reordered, "
                    + "replayed or moved from another vault")
        }
    }

    /// The tag of a sealed payload (its last 16 bytes), which the chain advances over.
    static func tag(of payload: [UInt8]) -> ArraySlice<UInt8> { payload.suffix(XChaCha20Poly1305.tagLength) }
}

/// Key slots: deriving a key-encryption key from an unlock source, wrapping and unwrapping the
/// master key.
enum KeySlotCrypto {
    static let adPrefix: [UInt8] = Array("coffer vault key slot v1".utf8)

    /// Derives the key-encryption key for `slot` from `source` (Argon2id for a passphrase).
    static func keyEncryptionKey(for slot: KeySlot, source: UnlockMaterial) throws -> SecureBytes {
        switch (slot.kind, source) {
        case (.passphrase, .passphrase(let passphrase)):
            let parameters = Argon2idParameters(opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
            do {
                _ = try parameters.validated()
            } catch {
                throw CofferError(
                    .corrupted,
                    "the vault header asks for Argon2id parameters outside the accepted range (\(parameters)); "
                        + "refusing to run them")
            }
            return try crypto {
                try PasswordHash.deriveKey(length: 32, passphrase: passphrase, salt: slot.salt, parameters: parameters)
            }
        case (.keyFile, .keyFile(let contents)):
            var hasher = try crypto { try BLAKE2b.Hasher(outputLength: 32) }
            hasher.update(Array("coffer-key-file-v1".utf8) + slot.salt)
            contents.withUnsafeBytes { hasher.update($0) }
            return try crypto { try SecureBytes(copying: hasher.finalize()) }
        case (.rawKey, .rawKey(let key)):
            return try crypto {
                try SecureBytes(copying: try BLAKE2b.hash(Array("coffer-raw-key-v1".utf8) + slot.salt, key: key, outputLength: 32))
            }
        default:
            throw CofferError(.wrongKey, "this key slot is for another kind of unlock")
        }
    }

    static func associatedData(vaultID: [UInt8], slot: KeySlot) -> [UInt8] {
        adPrefix + vaultID + slot.parameterBytes()
    }

    /// A new slot wrapping `master` under `source`.
    static func makeSlot(
        wrapping master: SecureBytes, source: UnlockMaterial, kdf: Argon2idParameters, vaultID: [UInt8]
    ) throws -> KeySlot {
        let kind: KeySlotKind
        switch source {
        case .passphrase: kind = .passphrase
        case .keyFile: kind = .keyFile
        case .rawKey: kind = .rawKey
        }
        let parameters = kind == .passphrase ? try crypto { try kdf.validated() } : Argon2idParameters(opsLimit: 0, memLimitBytes: 0)
        var slot = KeySlot(
            kind: kind, opsLimit: parameters.opsLimit, memLimitBytes: parameters.memLimitBytes,
            salt: SecureRandom.bytes(count: KeySlot.saltLength), nonce: SecureRandom.bytes(count: KeySlot.nonceLength),
            wrappedKey: [])
        let kek = try keyEncryptionKey(for: slot, source: source)
        let ad = associatedData(vaultID: vaultID, slot: slot)
        slot.wrappedKey = try crypto {
            try master.withUnsafeBytes { m in
                try slot.nonce.withUnsafeBytes { n in
                    try ad.withUnsafeBytes { a in try XChaCha20Poly1305.seal(m, key: kek, nonce: n, associatedData: a) }
                }
            }
        }
        return slot
    }

    /// The master key, when `source` opens `slot`; `nil` when it does not (a wrong passphrase or key).
    static func unwrap(_ slot: KeySlot, source: UnlockMaterial, vaultID: [UInt8]) throws -> SecureBytes? {
        let kek = try keyEncryptionKey(for: slot, source: source)
        let ad = associatedData(vaultID: vaultID, slot: slot)
        do {
            return try XChaCha20Poly1305.openSecure(slot.wrappedKey, key: kek, nonce: slot.nonce, associatedData: ad)
        } catch let error as CryptoError where error.code == .authenticationFailed {
            return nil
        } catch {
            throw translate(error)
        }
    }
}

/// An unlock source turned into bytes, ready for a key slot.
enum UnlockMaterial {
    case passphrase(SecureBytes)
    case keyFile(SecureBytes)
    case rawKey(SecureBytes)

    var kind: KeySlotKind {
        switch self {
        case .passphrase: .passphrase
        case .keyFile: .keyFile
        case .rawKey: .rawKey
        }
    }
}

/// Runs a CofferCrypto call, translating its error into a ``CofferError`` at this boundary.
func crypto<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch {
        throw translate(error)
    }
}

func translate(_ error: any Error) -> any Error {
    guard let error = error as? CryptoError else { return error }
    switch error.code {
    case .authenticationFailed: return CofferError(.corrupted, error.message)
    case .invalidLength, .invalidParameter: return CofferError(.invalidArgument, error.message)
    case .outOfMemory: return CofferError(.crypto, "out of memory for cryptography: \(error.message)")
    default: return CofferError(.crypto, error.message)
    }
}
