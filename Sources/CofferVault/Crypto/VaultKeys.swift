import CofferCore
import CofferJournal
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

    /// The MAC a stored header copy carries: keyed BLAKE2b-256 over the copy's bytes
    /// `[0, 1072)` exactly as stored (docs/FORMAT.md §2, "Subkeys"), never a re-encoding.
    func headerMAC(stored copy: ArraySlice<UInt8>) throws -> [UInt8] {
        try crypto {
            try BLAKE2b.hash(VaultHeader.storedAuthenticatedBytes(of: copy), key: self.header, outputLength: 32)
        }
    }

    /// The first chain value of a file: it binds the records to this vault and this file's epoch.
    func genesis(vaultID: [UInt8], epoch: [UInt8]) throws -> ChainValue {
        let input = Array("coffer-chain-genesis-v1".utf8) + vaultID + epoch
        var value = ChainValue()
        try crypto {
            try input.withUnsafeBytes { input in
                try value.withUnsafeMutableBytes { try BLAKE2b.hash(input, key: chain, into: $0) }
            }
        }
        return value
    }

    /// The chain value after a record: binds every record to all the records before it.
    /// BLAKE2b-256 keyed with the chain key over chain value (32) ‖ tag (16); allocates nothing.
    func advance(_ chainValue: ChainValue, tag: UnsafeRawBufferPointer) throws -> ChainValue {
        guard tag.count == XChaCha20Poly1305.tagLength else {
            throw CofferError(.corrupted, "a vault record is too short to hold a tag")
        }
        // The input (chain value ‖ tag, 48 bytes) in six words on the stack; only the chain key
        // is borrowed (no closure captures these keys: each capture retained all four).
        var input: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0)
        var next = ChainValue()
        let key = chain
        do {
            try withUnsafeMutableBytes(of: &input) { input in
                chainValue.withUnsafeBytes { input.copyMemory(from: $0) }
                UnsafeMutableRawBufferPointer(rebasing: input[ChainValue.count...]).copyMemory(from: tag)
                try next.withUnsafeMutableBytes { try BLAKE2b.hash(UnsafeRawBufferPointer(input), key: key, into: $0) }
            }
        } catch {
            throw translate(error)
        }
        return next
    }

    /// The chain value after the sealed `payload` (advanced over its tag, its last 16 bytes).
    func advance(_ chainValue: ChainValue, over payload: [UInt8]) throws -> ChainValue {
        try payload.withUnsafeBytes { try advance(chainValue, tag: RecordCipher.tag(of: $0)) }
    }
}

/// A chain value (32 bytes), held inline so that keeping one per item allocates nothing.
struct ChainValue: Sendable, Equatable {
    static let count = 32
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    init() {}

    static func == (a: ChainValue, b: ChainValue) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: words, body)
    }

    mutating func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeMutableBytes(of: &words, body)
    }
}

/// Seals and opens records (docs/FORMAT.md): payload = nonce (24) ‖ XChaCha20-Poly1305(body),
/// with associated data "CFVrec1\0" ‖ vault id ‖ chain value before this record.
enum RecordCipher {
    static let adPrefix: [UInt8] = Array("CFVrec1".utf8) + [0]
    static let overhead = XChaCha20Poly1305.nonceLength + XChaCha20Poly1305.tagLength
    /// The largest record body: what the journal accepts as a payload, less the nonce and tag.
    static let maximumBodyLength = JournalOptions(application: 0).maxPayload - overhead

    /// The length of the associated data: prefix (8) ‖ vault id ‖ chain value (32).
    static func associatedDataLength(vaultID: [UInt8]) -> Int { adPrefix.count + vaultID.count + ChainValue.count }

    /// Calls `body` with the associated data for a record sealed against `chain`, built on the
    /// stack (it is not secret, and allocates nothing).
    static func withAssociatedData<R>(
        vaultID: [UInt8], chain: ChainValue, _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R {
        try withUnsafeTemporaryAllocation(byteCount: associatedDataLength(vaultID: vaultID), alignment: 8) { ad in
            adPrefix.withUnsafeBytes { ad.copyMemory(from: $0) }
            vaultID.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(rebasing: ad[adPrefix.count...]).copyMemory(from: $0)
            }
            chain.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(rebasing: ad[(adPrefix.count + vaultID.count)...]).copyMemory(from: $0)
            }
            return try body(UnsafeRawBufferPointer(ad))
        }
    }

    static func seal(_ body: [UInt8], keys: VaultKeys, vaultID: [UInt8], chain: ChainValue) throws -> [UInt8] {
        try body.withUnsafeBytes { try seal($0, keys: keys, vaultID: vaultID, chain: chain) }
    }

    /// Seals `body` with a fresh random nonce straight into the payload (nonce ‖ ciphertext ‖
    /// tag): one allocation, the payload itself.
    static func seal(
        _ body: UnsafeRawBufferPointer, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue
    ) throws -> [UInt8] {
        let nonceLength = XChaCha20Poly1305.nonceLength
        return try [UInt8](unsafeUninitializedCapacity: overhead + body.count) { buffer, initialized in
            let payload = UnsafeMutableRawBufferPointer(buffer)
            let nonce = UnsafeMutableRawBufferPointer(rebasing: payload[0..<nonceLength])
            SecureRandom.fill(nonce)
            try withAssociatedData(vaultID: vaultID, chain: chain) { ad in
                try crypto {
                    try XChaCha20Poly1305.seal(
                        body, key: keys.record, nonce: UnsafeRawBufferPointer(nonce), associatedData: ad,
                        into: UnsafeMutableRawBufferPointer(rebasing: payload[nonceLength...]))
                }
            }
            initialized = buffer.count
        }
    }

    /// Seals a body of `length` bytes that `encode` writes into a new payload: the payload is
    /// the only allocation (see ``seal(length:keys:vaultID:chain:into:encode:)``).
    static func seal(
        length: Int, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue,
        encode: (UnsafeMutableRawBufferPointer) -> Void
    ) throws -> [UInt8] {
        // Checked before anything is allocated.
        try checkBodyLength(length)
        return try [UInt8](unsafeUninitializedCapacity: overhead + length) { buffer, initialized in
            try seal(
                length: length, keys: keys, vaultID: vaultID, chain: chain, into: UnsafeMutableRawBufferPointer(buffer),
                encode: encode)
            initialized = buffer.count
        }
    }

    /// Seals a body of `length` bytes that `encode` writes into `payload` (nonce ‖ ciphertext ‖
    /// tag, ``overhead`` + `length` bytes), with a fresh random nonce. The body is encoded where
    /// its ciphertext goes and encrypted there in place: the plaintext is never anywhere else,
    /// and it is wiped if sealing fails. The caller has checked `length` (``checkBodyLength(_:)``)
    /// before making the buffer.
    static func seal(
        length: Int, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue, into payload: UnsafeMutableRawBufferPointer,
        encode: (UnsafeMutableRawBufferPointer) -> Void
    ) throws {
        precondition(payload.count == overhead + length, "a vault record's payload buffer has the wrong size")
        let nonceLength = XChaCha20Poly1305.nonceLength
        let nonce = UnsafeMutableRawBufferPointer(rebasing: payload[0..<nonceLength])
        let body = UnsafeMutableRawBufferPointer(rebasing: payload[nonceLength..<(nonceLength + length)])
        encode(body)
        SecureRandom.fill(nonce)
        // Only the record key is borrowed, and no closure captures it: passing the whole
        // `VaultKeys` through nested closures retained and released its four keys on every write.
        let key = keys.record
        do {
            try withAssociatedData(vaultID: vaultID, chain: chain) { ad in
                try XChaCha20Poly1305.seal(
                    UnsafeRawBufferPointer(body), key: key, nonce: UnsafeRawBufferPointer(nonce), associatedData: ad,
                    into: UnsafeMutableRawBufferPointer(rebasing: payload[nonceLength...]))
            }
        } catch {
            SecureMemory.zero(payload)
            throw translate(error)
        }
    }

    /// A field's length is stored in 32 bits, and the journal takes records of at most
    /// `JournalOptions().maxPayload` bytes.
    static func checkBodyLength(_ length: Int) throws {
        guard length <= maximumBodyLength else {
            throw CofferError(
                .invalidArgument,
                "an item (its secret, names, label and comment) must fit in \(maximumBodyLength) bytes; "
                    + "this one needs \(length)")
        }
    }

    /// Seals a `.put` body for `item` and `secret`.
    static func sealPut(
        _ item: VaultItem, secret: UnsafeRawBufferPointer, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue
    ) throws -> [UInt8] {
        try seal(
            length: VaultRecordBody.putLength(item, secretCount: secret.count), keys: keys, vaultID: vaultID,
            chain: chain
        ) { VaultRecordBody.encodePut(item, secret: secret, into: $0) }
    }

    /// Seals a `.put` body from the item's fields (no item is built) into `payload`, which holds
    /// exactly ``overhead`` + ``VaultRecordBody/putLength(service:account:label:comment:secretCount:)``
    /// bytes.
    static func sealPut(
        service: String, account: String, label: String, comment: String, created: Date, modified: Date,
        secret: UnsafeRawBufferPointer, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue,
        into payload: UnsafeMutableRawBufferPointer
    ) throws {
        try seal(length: payload.count - overhead, keys: keys, vaultID: vaultID, chain: chain, into: payload) {
            VaultRecordBody.encodePut(
                service: service, account: account, label: label, comment: comment, created: created,
                modified: modified, secret: secret, into: $0)
        }
    }

    /// Seals a `.delete` body.
    static func sealDelete(
        service: String, account: String, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue
    ) throws -> [UInt8] {
        try seal(
            length: VaultRecordBody.deleteLength(service: service, account: account), keys: keys, vaultID: vaultID,
            chain: chain
        ) { VaultRecordBody.encodeDelete(service: service, account: account, into: $0) }
    }

    /// Opens a record's payload (the caller wipes the plaintext).
    /// - Throws: ``CofferError/Code/corrupted`` when it fails to authenticate.
    static func open(_ payload: ArraySlice<UInt8>, keys: VaultKeys, vaultID: [UInt8], chain: ChainValue) throws -> [UInt8] {
        var opener = RecordOpener(keys: keys, vaultID: vaultID)
        return try payload.withUnsafeBytes { payload in
            try opener.open(payload, chain: chain) { Array($0) }
        }
    }

    static func authenticationFailure() -> CofferError {
        CofferError(
            .corrupted,
            "a vault record fails authentication: the file was damaged, or records were altered, reordered, "
                + "replayed or moved from another vault")
    }

    /// The tag of a sealed payload (its last 16 bytes), which the chain advances over.
    static func tag(of payload: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: payload.suffix(XChaCha20Poly1305.tagLength))
    }
}

/// Opens records one after another without allocating per record: the associated data is
/// built once (only its chain value changes) and every plaintext is decrypted into one scratch
/// buffer, which is wiped after each record and again before it is freed. A noncopyable
/// struct, not a class: a class's `var scratch` costs a dynamic exclusivity check per access.
struct RecordOpener: ~Copyable {
    private let keys: VaultKeys
    /// "CFVrec1\0" ‖ vault id ‖ chain value.
    private let associatedData: UnsafeMutableRawBufferPointer
    private let chainOffset: Int
    private var scratch: UnsafeMutableRawBufferPointer

    init(keys: VaultKeys, vaultID: [UInt8]) {
        self.keys = keys
        let chainOffset = RecordCipher.adPrefix.count + vaultID.count
        let associatedData = UnsafeMutableRawBufferPointer.allocate(
            byteCount: chainOffset + ChainValue.count, alignment: 8)
        RecordCipher.adPrefix.withUnsafeBytes { associatedData.copyMemory(from: $0) }
        vaultID.withUnsafeBytes {
            UnsafeMutableRawBufferPointer(rebasing: associatedData[RecordCipher.adPrefix.count...]).copyMemory(from: $0)
        }
        self.chainOffset = chainOffset
        self.associatedData = associatedData
        scratch = .allocate(byteCount: 256, alignment: 8)
    }

    deinit {
        SecureMemory.zero(scratch)
        scratch.deallocate()
        associatedData.deallocate()
    }

    /// Authenticates and decrypts `payload` (nonce ‖ ciphertext ‖ tag) sealed against `chain`,
    /// and calls `body` with the plaintext, which is wiped when `body` returns. Do not let the
    /// buffer escape `body`.
    /// - Throws: ``CofferError/Code/corrupted`` when it is too short or fails to authenticate;
    ///   whatever `body` throws.
    mutating func open<R>(
        _ payload: UnsafeRawBufferPointer, chain: ChainValue, _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R
    {
        guard payload.count > RecordCipher.overhead else {
            throw CofferError(.corrupted, "a vault record is too short to be sealed")
        }
        let length = payload.count - RecordCipher.overhead
        if scratch.count < length {
            SecureMemory.zero(scratch)
            scratch.deallocate()
            scratch = .allocate(byteCount: max(length, 2 * scratch.count), alignment: 8)
        }
        chain.withUnsafeBytes {
            UnsafeMutableRawBufferPointer(rebasing: associatedData[chainOffset...]).copyMemory(from: $0)
        }
        let plaintext = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<length])
        defer { SecureMemory.zero(plaintext) }
        do {
            try XChaCha20Poly1305.open(
                UnsafeRawBufferPointer(rebasing: payload[XChaCha20Poly1305.nonceLength...]), key: keys.record,
                nonce: UnsafeRawBufferPointer(rebasing: payload[0..<XChaCha20Poly1305.nonceLength]),
                associatedData: UnsafeRawBufferPointer(associatedData), into: plaintext)
        } catch let error as CryptoError where error.code == .authenticationFailed {
            throw RecordCipher.authenticationFailure()
        }
        return try body(UnsafeRawBufferPointer(plaintext))
    }
}

/// Key slots: deriving a key-encryption key from an unlock source, wrapping and unwrapping the
/// master key.
enum KeySlotCrypto {
    static let adPrefix: [UInt8] = Array("coffer vault key slot v1".utf8)

    /// Derives the key-encryption key for `slot` from `source` (Argon2id for a passphrase).
    static func keyEncryptionKey(for slot: KeySlot, source: UnlockMaterial) throws -> SecureBytes {
        switch (slot.kind, source) {
        case (.passphrase, .passphrase(let passphrase)):
            try checkFormatBounds(slot)
            let parameters = Argon2idParameters(opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
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

    /// Refuses a passphrase slot whose Argon2id parameters lie outside the format's bounds
    /// (``Argon2idParameters/maximumAccepted``), as a malformed header. The caller's lower
    /// ceiling (`kdfLimit`) is applied by `Vault.unwrapMaster`.
    static func checkFormatBounds(_ slot: KeySlot) throws {
        let parameters = Argon2idParameters(opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
        do {
            _ = try parameters.validated()
        } catch {
            throw CofferError(
                .corrupted,
                "the vault header asks for Argon2id parameters outside the accepted range (\(parameters)); "
                    + "refusing to run them")
        }
    }

    static func associatedData(vaultID: [UInt8], slot: KeySlot) -> [UInt8] {
        adPrefix + vaultID + slot.parameterBytes()
    }

    /// New slots wrapping `master` under `source`: one, or one per identity of an identity file.
    static func makeSlots(
        wrapping master: SecureBytes, source: UnlockMaterial, kdf: Argon2idParameters, vaultID: [UInt8]
    ) throws -> [KeySlot] {
        if case .identities(let identities) = source {
            var seen = Set<[UInt8]>()
            return try identities.filter { seen.insert($0.recipient.publicKey).inserted }.map {
                try makeRecipientSlot(wrapping: master, recipient: $0.recipient, vaultID: vaultID)
            }
        }
        return [try makeSlot(wrapping: master, source: source, kdf: kdf, vaultID: vaultID)]
    }

    /// A new slot wrapping `master` under `source` (a passphrase, key file or raw key).
    static func makeSlot(
        wrapping master: SecureBytes, source: UnlockMaterial, kdf: Argon2idParameters, vaultID: [UInt8]
    ) throws -> KeySlot {
        try makeSlotKeepingKEK(wrapping: master, source: source, kdf: kdf, vaultID: vaultID).slot
    }

    /// ``makeSlot(wrapping:source:kdf:vaultID:)``, and the slot's key-encryption key (for a
    /// ``SlotOpener``: a new vault follows a rotation made elsewhere without asking again).
    static func makeSlotKeepingKEK(
        wrapping master: SecureBytes, source: UnlockMaterial, kdf: Argon2idParameters, vaultID: [UInt8]
    ) throws -> (slot: KeySlot, kek: SecureBytes) {
        let kind: KeySlotKind
        switch source {
        case .passphrase: kind = .passphrase
        case .keyFile: kind = .keyFile
        case .rawKey: kind = .rawKey
        case .identities: throw CofferError(.invalidArgument, "a recipient slot is made from a recipient")
        case .sessionKey: throw CofferError(.invalidArgument, "a key kept for a session cannot make a key slot")
        }
        let parameters = kind == .passphrase ? try crypto { try kdf.validated() } : Argon2idParameters(opsLimit: 0, memLimitBytes: 0)
        var slot = KeySlot(
            kind: kind, opsLimit: parameters.opsLimit, memLimitBytes: parameters.memLimitBytes,
            salt: SecureRandom.bytes(count: KeySlot.saltLength), nonce: SecureRandom.bytes(count: KeySlot.nonceLength),
            wrappedKey: [])
        let kek = try keyEncryptionKey(for: slot, source: source)
        slot.wrappedKey = try wrap(master, key: kek, nonce: slot.nonce, associatedData: associatedData(vaultID: vaultID, slot: slot))
        return (slot, kek)
    }

    /// `slot` (a passphrase, key-file or raw-key slot) wrapping `master` instead: the same kind,
    /// parameters and salt, so the same secret opens it with the same key-encryption key
    /// `kek`, and a new nonce. A rotation re-wraps the slots it keeps this way.
    static func rewrap(_ slot: KeySlot, master: SecureBytes, kek: SecureBytes, vaultID: [UInt8]) throws -> KeySlot {
        var next = slot
        next.nonce = SecureRandom.bytes(count: KeySlot.nonceLength)
        next.wrappedKey = try wrap(master, key: kek, nonce: next.nonce, associatedData: associatedData(vaultID: vaultID, slot: next))
        return next
    }

    private static func wrap(_ master: SecureBytes, key: SecureBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try crypto {
            try master.withUnsafeBytes { m in
                try nonce.withUnsafeBytes { n in
                    try associatedData.withUnsafeBytes { a in try XChaCha20Poly1305.seal(m, key: key, nonce: n, associatedData: a) }
                }
            }
        }
    }

    // MARK: Recipient slots (kind 4)

    static let recipientContext: [UInt8] = Array("coffer-x25519-v1".utf8)

    /// The key-encryption key (32 bytes) and nonce (24 bytes) of a recipient slot:
    /// `BLAKE2b-448(key = X25519 shared secret, "coffer-x25519-v1" ‖ ephemeral ‖ recipient)`,
    /// split 32 ‖ 24. Each slot has a fresh ephemeral key, so no key and nonce serve twice.
    static func recipientWrapping(shared: SecureBytes, ephemeral: [UInt8], recipient: [UInt8]) throws
        -> (key: SecureBytes, nonce: [UInt8])
    {
        var output = try crypto { try BLAKE2b.hash(recipientContext + ephemeral + recipient, key: shared, outputLength: 56) }
        defer { SecureMemory.zero(&output) }
        let key = try output.withUnsafeBytes { bytes in
            try crypto { try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[0..<32])) }
        }
        return (key, Array(output[32..<56]))
    }

    /// A new slot wrapping `master` to `recipient`: an ephemeral X25519 key pair, made for this
    /// slot and forgotten after, agrees a secret with the recipient's public key.
    static func makeRecipientSlot(wrapping master: SecureBytes, recipient: X25519Recipient, vaultID: [UInt8]) throws
        -> KeySlot
    {
        try makeRecipientSlot(
            wrapping: master, recipient: recipient, vaultID: vaultID,
            ephemeralSecret: try crypto { try X25519.newSecretKey() })
    }

    /// ``makeRecipientSlot(wrapping:recipient:vaultID:)`` with a given ephemeral secret: for the
    /// known-answer test (`Vectors/recipient_slot.json`) only. A slot must never reuse one.
    static func makeRecipientSlot(
        wrapping master: SecureBytes, recipient: X25519Recipient, vaultID: [UInt8], ephemeralSecret: SecureBytes
    ) throws -> KeySlot {
        let ephemeral = try crypto { try X25519.publicKey(for: ephemeralSecret) }
        let shared = try crypto { try X25519.sharedSecret(ephemeralSecret, publicKey: recipient.publicKey) }
        let (kek, nonce) = try recipientWrapping(shared: shared, ephemeral: ephemeral, recipient: recipient.publicKey)
        var slot = KeySlot(kind: .recipient, wrappedKey: [], ephemeralKey: ephemeral, recipientKey: recipient.publicKey)
        slot.wrappedKey = try wrap(master, key: kek, nonce: nonce, associatedData: associatedData(vaultID: vaultID, slot: slot))
        return slot
    }

    /// The master key, when `identity` opens recipient slot `slot`; `nil` when it does not.
    static func unwrapRecipient(_ slot: KeySlot, identity: X25519Identity, vaultID: [UInt8]) throws -> SecureBytes? {
        let shared: SecureBytes
        do {
            shared = try X25519.sharedSecret(identity.secretKey, publicKey: slot.ephemeralKey)
        } catch let error as CryptoError where error.code == .invalidParameter {
            return nil  // an ephemeral key of small order: a slot no identity opens
        } catch {
            throw translate(error)
        }
        let (kek, nonce) = try recipientWrapping(shared: shared, ephemeral: slot.ephemeralKey, recipient: slot.recipientKey)
        do {
            return try XChaCha20Poly1305.openSecure(
                slot.wrappedKey, key: kek, nonce: nonce, associatedData: associatedData(vaultID: vaultID, slot: slot))
        } catch let error as CryptoError where error.code == .authenticationFailed {
            return nil
        } catch {
            throw translate(error)
        }
    }

    /// The master key, when `source` opens `slot`; `nil` when it does not (a wrong passphrase or key).
    static func unwrap(_ slot: KeySlot, source: UnlockMaterial, vaultID: [UInt8]) throws -> SecureBytes? {
        try unwrap(slot, kek: try keyEncryptionKey(for: slot, source: source), vaultID: vaultID)
    }

    /// The master key, when the key-encryption key `kek` opens `slot` (kinds 1–3).
    static func unwrap(_ slot: KeySlot, kek: SecureBytes, vaultID: [UInt8]) throws -> SecureBytes? {
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
    case identities([X25519Identity])
    /// An already derived key-encryption key, with its slot's kind and salt (no KDF is run).
    case sessionKey(VaultSessionKey)

    var kind: KeySlotKind {
        switch self {
        case .passphrase: .passphrase
        case .keyFile: .keyFile
        case .rawKey: .rawKey
        case .identities: .recipient
        case .sessionKey(let key): key.kind
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
