import CofferCore
import CofferRuntime
package import CofferCrypto
package import Foundation

/// The file vault's keys and record sealing, lent to a store that keeps one sealed record per
/// row instead of a journal (CofferPostgres's vault). Nothing is re-implemented here: the key
/// slots are ``KeySlotCrypto``'s, the header is ``VaultHeader``'s, the body is
/// ``VaultRecordBody``'s and the sealing is ``RecordCipher``'s (XChaCha20-Poly1305 with the
/// record subkey). Only the 32 bytes that follow the vault id in the associated data differ: a
/// journal puts the chain value there, a row store puts its *row binding* — keyed BLAKE2b of the
/// vault's name, the row key and the row's version — so a record opens only in the row and
/// version it was sealed for, only in its own vault, and only under the name it was written
/// under (docs/FORMAT.md, "Vault rows").
package final class RowSealing: Sendable {
    /// The vault's random 16-byte id (in every record's associated data).
    package let vaultID: [UInt8]
    private let keys: VaultKeys
    /// Keys the row key (a keyed hash of service and account).
    private let rowKeyKey: SecureBytes
    /// Keys the row binding (name, row key and version).
    private let bindingKey: SecureBytes
    /// The vault's name as the database lists it, bound into every record written.
    private let name: [UInt8]
    /// The header these keys belong to.
    private let header: VaultHeader
    /// What opened this instance's key slot: a rotation made elsewhere is followed with it.
    let opener: SlotOpener?
    private let nameText: String

    /// The length of a row key.
    package static let rowKeyLength = 32

    /// The header's epoch (16 bytes, at ``epochRange`` of the header copy): a rotation gives the
    /// header a new one, so a different epoch in the database means new keys.
    package var epoch: [UInt8] { header.epoch }
    /// Where the epoch lies in a header copy (docs/FORMAT.md §2): bytes 32..<48.
    package static let epochRange = 32..<48

    private init(vaultID: [UInt8], keys: VaultKeys, name: String, header: VaultHeader, opener: SlotOpener?) throws {
        self.vaultID = vaultID
        self.keys = keys
        self.name = Array(name.utf8)
        self.nameText = name
        self.header = header
        self.opener = opener
        rowKeyKey = try crypto { try KeyDerivation.deriveSubkey(from: keys.master, id: 4, context: "CFVrowky", length: 32) }
        bindingKey = try crypto { try KeyDerivation.deriveSubkey(from: keys.master, id: 5, context: "CFVrowbd", length: 32) }
    }

    /// A new vault: a random master key wrapped in one key slot for `unlock`, and the header
    /// copy (2,048 bytes, the file vault's layout, MAC and checksum) that holds the slot.
    package static func create(unlock: VaultUnlock, kdf: Argon2idParameters, name: String) throws -> (RowSealing, header: [UInt8]) {
        let (keys, header, opener) = try Vault.newKeys(unlock: unlock, kdf: kdf, fileSystem: LiveFileSystem())
        return (
            try RowSealing(vaultID: header.vaultID, keys: keys, name: name, header: header, opener: opener),
            header.rowBytes()
        )
    }

    /// Unlocks a vault from its stored header copy, as `Vault.open` does: the slots within
    /// `kdfLimit` are tried, then the header's MAC is checked with the unwrapped key.
    /// - Throws: ``CofferError`` — `.wrongKey`, `.limitExceeded`, `.corrupted` (a damaged or
    ///   altered header), `.unsupportedVersion`.
    package static func unlock(
        header bytes: [UInt8], unlock: VaultUnlock, kdfLimit: Argon2idParameters, name: String
    ) throws -> RowSealing {
        let header = try parseHeader(bytes, name: name)
        let fileSystem = LiveFileSystem()
        let (master, _, opener) = try Vault.unwrapMaster(
            header, unlock: unlock, kdfLimit: kdfLimit, fileSystem: fileSystem, path: name)
        let keys = try VaultKeys(master: master)
        try Vault.verifyMAC(stored: bytes[...], keys: keys, path: name)
        return try RowSealing(vaultID: header.vaultID, keys: keys, name: name, header: header, opener: opener)
    }

    private static func parseHeader(_ bytes: [UInt8], name: String) throws -> VaultHeader {
        switch VaultHeader.parse(copy: bytes[...], inRow: true) {
        case .header(let parsed): return parsed
        case .unsupported(let version):
            throw CofferError(.unsupportedVersion, "the vault header has format version \(version)", path: name)
        case .damaged(let why): throw CofferError(.corrupted, "the vault header is damaged: \(why)", path: name)
        }
    }

    // MARK: Key slots and rotation

    /// The key slots, as ``Vault/info()`` lists them.
    package var keySlots: [KeySlotInfo] { header.slots.map(Vault.slotInfo) }

    /// The header version this header is written as (1; 2 with a recipient slot; 3 with a label
    /// or more than 8 slots).
    package var formatVersion: Int { Int(header.version) }

    /// The keys of `bytes`, the vault's header as the database holds it now: `self` (with that
    /// header) when these keys authenticate it — only its slots changed —, new keys when the
    /// master key was rotated and what opened this instance's slot opens one of the new header,
    /// `nil` when no slot of it does (this instance's slot was removed: it is revoked).
    /// - Throws: `.corrupted` when the header is damaged, is another vault's, or fails
    ///   authentication under the keys its slot gives.
    package func following(header bytes: [UInt8]) throws -> RowSealing? {
        let next = try Self.parseHeader(bytes, name: nameText)
        guard next.vaultID == vaultID else {
            throw CofferError(.corrupted, "the vault's header now belongs to another vault", path: nameText)
        }
        let macFailure: CofferError
        do {
            try Vault.verifyMAC(stored: bytes[...], keys: keys, path: nameText)
            return try RowSealing(vaultID: vaultID, keys: keys, name: nameText, header: next, opener: opener)
        } catch let error as CofferError where error.code == .corrupted {
            macFailure = error
        }
        guard let opener else { throw macFailure }
        // Only forward (see `Session.followRotation`): an older header put back may hold the
        // keys a rotation took away from a revoked party.
        guard next.sequence > header.sequence else {
            throw CofferError(
                .corrupted,
                "the vault's header was replaced by an older one (sequence \(next.sequence), after \(header.sequence) "
                    + "was read) under keys this vault no longer has: an old header put back, which would bring back "
                    + "keys a rotation removed; refusing it",
                path: nameText)
        }
        guard let (master, _) = try opener.unwrap(next) else { return nil }
        let rotated = try VaultKeys(master: master)
        try Vault.verifyMAC(stored: bytes[...], keys: rotated, path: nameText)
        return try RowSealing(vaultID: vaultID, keys: rotated, name: nameText, header: next, opener: opener)
    }

    /// What opens the slots `secrets` open in this header (a passphrase runs Argon2id: call it
    /// off the cooperative pool), for ``rotated(removing:removingRecipients:keeping:)``.
    package func slotKeys(for secrets: [VaultUnlock], kdfLimit: Argon2idParameters) throws -> [SlotKey] {
        var keys: [SlotKey] = []
        for secret in secrets {
            let material = try secret.material(fileSystem: LiveFileSystem())
            if case .identities = material { continue }
            keys.append(SlotKey(opener: try Vault.unwrapMaster(header, material: material, kdfLimit: kdfLimit, path: nameText).opener))
        }
        return keys
    }

    /// What opens one key slot (from ``slotKeys(for:kdfLimit:)``). Opaque.
    package struct SlotKey: Sendable {
        let opener: SlotOpener
    }

    /// A rotation of this header (see `Vault.rotate`): new keys, and the new header copy, whose
    /// slots are every slot but the removed ones, re-wrapped. Nothing is written here.
    package func rotated(
        removing slots: Set<Int>, removingRecipients recipients: [X25519Recipient], keeping: [SlotKey]
    ) throws -> (sealing: RowSealing, header: [UInt8], rotation: VaultRotation) {
        let plan = try Vault.rotationPlan(
            header, removing: slots, removingRecipients: recipients,
            openers: (opener.map { [$0] } ?? []) + keeping.map(\.opener), path: nameText)
        var next = header
        next.slots = plan.slots
        next.sequence += 1
        next.epoch = SecureRandom.bytes(count: 16)
        next.mac = try plan.keys.headerMAC(next)
        let sealing = try RowSealing(vaultID: vaultID, keys: plan.keys, name: nameText, header: next, opener: opener)
        let rotation = VaultRotation(
            keptSlots: plan.slots.count, removedSlots: header.slots.count - plan.slots.count, items: 0,
            removed: header.slots.indices.filter { !plan.kept.contains($0) }.map { Vault.slotInfo(header.slots[$0]) })
        return (sealing, next.rowBytes(), rotation)
    }

    /// The slots a change adds, made now (a passphrase runs Argon2id: call it off the cooperative
    /// pool, and before any row is locked), for ``changingSlots(_:)`` with the same keys.
    package func prepare(_ change: SlotChange) throws -> PreparedSlotChange {
        switch change {
        case .addRecipient(let recipient, let label):
            try Vault.checkLabel(label)
            var slot = try KeySlotCrypto.makeRecipientSlot(wrapping: keys.master, recipient: recipient, vaultID: vaultID)
            slot.label = label ?? ""
            return PreparedSlotChange(change: .add([slot]), epoch: header.epoch)
        case .add(let secret, let kdf, let label):
            try Vault.checkLabel(label)
            let material = try secret.material(fileSystem: LiveFileSystem())
            var slots = try KeySlotCrypto.makeSlots(wrapping: keys.master, source: material, kdf: kdf, vaultID: vaultID)
            for index in slots.indices { slots[index].label = label ?? "" }
            return PreparedSlotChange(change: .add(slots), epoch: header.epoch)
        case .remove(let index): return PreparedSlotChange(change: .remove(index), epoch: header.epoch)
        case .removeRecipient(let recipient): return PreparedSlotChange(change: .removeRecipient(recipient), epoch: header.epoch)
        }
    }

    /// A slot change with its new slots made (``prepare(_:)``). Opaque.
    package struct PreparedSlotChange: Sendable {
        enum Change {
            case add([KeySlot])
            case remove(Int)
            case removeRecipient(X25519Recipient)
        }
        let change: Change
        /// The epoch of the keys the slots wrap.
        let epoch: [UInt8]
    }

    /// The header with a prepared slot change (the same keys and epoch; the sequence + 1), and
    /// its keys. Cheap: no KDF.
    /// - Throws: `.invalidArgument` (no such slot, the last slot); `.wrongKey` when the change
    ///   was prepared under other keys (a rotation came between: prepare it again).
    package func changingSlots(_ prepared: PreparedSlotChange) throws -> (sealing: RowSealing, header: [UInt8], changed: Int) {
        guard prepared.epoch == header.epoch else {
            throw CofferError(.wrongKey, "the key slots were prepared under keys the vault no longer has", path: nameText)
        }
        var next = header
        var changed = 0
        switch prepared.change {
        case .add(let slots):
            try Vault.append(slots, to: &next, limit: VaultHeader.maximumRowSlots)
            changed = next.slots.count - header.slots.count
        case .remove(let index):
            guard next.slots.indices.contains(index) else {
                throw CofferError(.invalidArgument, "there is no key slot \(index)", path: nameText)
            }
            next.slots.remove(at: index)
            changed = 1
        case .removeRecipient(let recipient):
            let before = next.slots.count
            next.slots.removeAll { $0.kind == .recipient && $0.recipientKey == recipient.publicKey }
            changed = before - next.slots.count
        }
        guard !next.slots.isEmpty else {
            throw CofferError(.invalidArgument, "refusing to remove the last key slot: nothing could open the vault", path: nameText)
        }
        guard changed > 0 else { return (self, header.rowBytes(), 0) }
        next.sequence += 1
        next.mac = try keys.headerMAC(next)
        return (try RowSealing(vaultID: vaultID, keys: keys, name: nameText, header: next, opener: opener), next.rowBytes(), changed)
    }

    /// A change of the key slots (``changingSlots(_:)``).
    package enum SlotChange: Sendable {
        case addRecipient(X25519Recipient, label: String?)
        /// A passphrase, key-file, raw-key or identity-file slot.
        case add(VaultUnlock, kdf: Argon2idParameters, label: String?)
        case remove(Int)
        case removeRecipient(X25519Recipient)
    }

    /// `limit`, raised where `kdf` asks for more (what `VaultConfiguration` allows on open).
    package static func kdfLimit(_ limit: Argon2idParameters, raisedTo kdf: Argon2idParameters) -> Argon2idParameters {
        limit.raised(to: kdf)
    }

    /// The row key of an item: keyed BLAKE2b-256 over the length-prefixed service and account.
    /// The database sees this, never the names.
    package func rowKey(service: String, account: String) throws -> [UInt8] {
        var input: [UInt8] = []
        for text in [service, account] {
            appendLE(UInt32(text.utf8.count), to: &input)
            input += Array(text.utf8)
        }
        return try crypto { try BLAKE2b.hash(input, key: rowKeyKey, outputLength: Self.rowKeyLength) }
    }

    /// What stands in the associated data where a journal puts its chain value: version 2 binds
    /// the vault's name; version 1 (records written before November 2026) did not, and is only
    /// ever read.
    private func binding(rowKey: [UInt8], version: Int64, named: Bool = true) throws -> ChainValue {
        var input: [UInt8]
        if named {
            input = Array("coffer-row-binding-v2".utf8)
            appendLE(UInt32(name.count), to: &input)
            input += name
        } else {
            input = Array("coffer-row-binding-v1".utf8)
        }
        input += rowKey
        appendLE(UInt64(bitPattern: version), to: &input)
        var value = ChainValue()
        try crypto {
            try input.withUnsafeBytes { input in
                try value.withUnsafeMutableBytes { try BLAKE2b.hash(input, key: bindingKey, into: $0) }
            }
        }
        return value
    }

    /// Seals a `.put` record of the item for the row `rowKey` at `version`.
    package func sealPut(
        service: String, account: String, label: String, comment: String, created: Date, modified: Date,
        secret: UnsafeRawBufferPointer, rowKey: [UInt8], version: Int64
    ) throws -> [UInt8] {
        try Vault.checkLengths(service: service, account: account, label: label, comment: comment)
        let item = VaultItem(
            service: service, account: account, label: label, comment: comment, created: created, modified: modified)
        return try RecordCipher.sealPut(
            item, secret: secret, keys: keys, vaultID: vaultID, chain: binding(rowKey: rowKey, version: version))
    }

    /// Seals a `.delete` record (a tombstone that still names its item, sealed) for the row.
    package func sealDelete(service: String, account: String, rowKey: [UInt8], version: Int64) throws -> [UInt8] {
        try RecordCipher.sealDelete(
            service: service, account: account, keys: keys, vaultID: vaultID,
            chain: binding(rowKey: rowKey, version: version))
    }

    /// Opens a row's record sealed for `rowKey` at `version` under this vault's name. A record
    /// from before names were bound (binding version 1) opens too, and says so in `named`.
    /// - Throws: ``CofferError/Code/corrupted`` when it fails to authenticate (altered, moved
    ///   to another row or version, from another vault or another vault name) or its body is
    ///   malformed.
    package func open(_ record: [UInt8], rowKey: [UInt8], version: Int64) throws -> VaultRecordBody {
        try openReporting(record, rowKey: rowKey, version: version).body
    }

    /// ``open(_:rowKey:version:)``, saying whether the record binds the vault's name.
    package func openReporting(_ record: [UInt8], rowKey: [UInt8], version: Int64) throws -> (body: VaultRecordBody, named: Bool) {
        var plaintext: [UInt8]
        var named = true
        do {
            do {
                plaintext = try RecordCipher.open(
                    record[...], keys: keys, vaultID: vaultID, chain: binding(rowKey: rowKey, version: version))
            } catch let error as CofferError where error.code == .corrupted {
                named = false
                plaintext = try RecordCipher.open(
                    record[...], keys: keys, vaultID: vaultID, chain: binding(rowKey: rowKey, version: version, named: false))
            }
        } catch let error as CofferError where error.code == .corrupted {
            throw CofferError(
                .corrupted,
                "a vault row fails authentication: it was altered, copied from another row or another vault, "
                    + "its version was changed, or the vault's name was changed in the database")
        }
        defer { SecureMemory.zero(&plaintext) }
        guard let body = VaultRecordBody.decode(plaintext) else {
            throw CofferError(.corrupted, "a vault row authenticates but its body is malformed")
        }
        return (body, named)
    }
}
