// An unlocked vault's session: the open journal, the keys, the index of sealed records, commits and compaction
// (the vault's side of the journal-store engine, JournalIndex).
import CofferCore
import CofferJournal
import CofferCrypto
import Foundation

/// An unlocked vault's state: the open journal, the keys and the index of sealed records.
///
/// The vault's index for the journal-store engine (``JournalIndex``, in `Session+Apply.swift`):
/// the engine catches it up with other writers, holds the write lock around its commits,
/// compacts it by the shared rule and collects the items other writers changed; the session
/// itself seals, opens and chains the records.
struct Session: Sendable {
    var journal: Journal
    /// The keys of the master key. They change only with a rotation (here or in another process).
    var keys: VaultKeys
    var header: VaultHeader
    var unlockedSlot: Int
    /// What opened ``unlockedSlot``: a rotation made elsewhere is followed with it. `nil` for a
    /// session that cannot follow one (a vault opened for `verify`).
    var opener: SlotOpener?
    var chain: ChainValue
    var entries: [ItemKey: Entry] = [:]
    var recordCount = 0
    var liveBytes = 0
    /// The items other writers changed since observers were last told (while observed).
    var outside = OutsideChanges<ItemKey>()
    /// Set when what other writers did could not be applied (the file was replaced by another
    /// vault, a record fails authentication): the journal has moved past it, so this session's
    /// items, keys and chain no longer describe the file. Every later call throws it — no stale
    /// read, no write sealed with the old chain — until the vault is locked and unlocked, or
    /// opened again.
    var failure: CofferError?

    init(journal: Journal, keys: VaultKeys, header: VaultHeader, unlockedSlot: Int, opener: SlotOpener?) throws {
        self.journal = journal
        self.keys = keys
        self.header = header
        self.unlockedSlot = unlockedSlot
        self.opener = opener
        self.chain = try keys.genesis(vaultID: header.vaultID, epoch: header.epoch)
    }

    /// Records a sealed body in the index and advances the chain past it.
    private mutating func index(_ body: IndexedBody, payload: [UInt8]) throws {
        let after = try keys.advance(chain, over: payload)
        index(body, payload: payload[...], chainBefore: chain, chainAfter: after)
    }

    mutating func index(
        _ body: consuming IndexedBody, payload: ArraySlice<UInt8>, chainBefore: ChainValue, chainAfter: ChainValue
    ) {
        let size = payload.count + Journal.frameHeaderSize
        switch consume body {
        case .put(let attributes, let key):
            // One probe: updateValue returns the entry it replaced.
            outside.note(key)
            let entry = Entry(attributes: attributes, payload: payload, chain: chainBefore)
            if let old = entries.updateValue(entry, forKey: key) {
                liveBytes -= old.payload.count + Journal.frameHeaderSize
            }
            liveBytes += size
        case .delete(let key):
            outside.note(key)
            if let old = entries.removeValue(forKey: key) {
                liveBytes -= old.payload.count + Journal.frameHeaderSize
            }
        }
        chain = chainAfter
        recordCount += 1
    }

    /// Seals and appends `changes` as one commit; returns how many changed something.
    ///
    /// All or nothing: every record is sealed (against the chain as it will be when it lands)
    /// before anything in `self` changes, and the index and chain are updated only after the
    /// append succeeded. Each record costs one allocation, its payload: the body is encoded into
    /// the payload where its ciphertext goes and encrypted there in place (wiped if sealing
    /// fails), and the associated data is built on the stack. A single set takes
    /// ``commitSet(service:account:secret:label:comment:)``.
    mutating func commit<Changes: Collection>(_ changes: Changes) throws -> Int where Changes.Element == VaultChange {
        let capacity = changes.count
        guard capacity > 0 else { return 0 }
        if capacity == 1, let change = changes.first, let (label, comment) = change.attributes {
            let (service, account) = change.identity
            try change.withSecret {
                try commitSet(service: service, account: account, secret: $0, label: label, comment: comment)
            }
            return 1
        }
        let now = Self.now()
        // Items' attributes as the earlier changes of this batch leave them (nil: removed), over
        // `entries`.
        // A single change needs none (an empty dictionary allocates nothing).
        let batch = capacity > 1
        var overlay: [ItemKey: ItemAttributes?] = [:]
        var payloads: [[UInt8]] = []
        payloads.reserveCapacity(capacity)
        return try withUnsafeTemporaryAllocation(of: Sealed.self, capacity: capacity) { sealed in
            let base = sealed.baseAddress!
            var count = 0
            defer { base.deinitialize(count: count) }
            var chain = self.chain
            for change in changes {
                let (service, account) = change.identity
                let key = ItemKey(service: service, account: account)
                let old = batch ? (overlay[key] ?? entries[key]?.attributes) : entries[key]?.attributes
                let body: IndexedBody
                let payload: [UInt8]
                if let (label, comment) = change.attributes {
                    let item = VaultItem(
                        service: service, account: account, label: label ?? old?.label ?? "",
                        comment: comment ?? old?.comment ?? "", created: old?.created ?? now, modified: now)
                    payload = try change.withSecret { secret in
                        try RecordCipher.sealPut(item, secret: secret, keys: keys, vaultID: header.vaultID, chain: chain)
                    }
                    body = .put(item)
                    if batch { overlay[key] = .some(ItemAttributes(item)) }
                } else {
                    guard old != nil else { continue }
                    payload = try RecordCipher.sealDelete(
                        service: service, account: account, keys: keys, vaultID: header.vaultID, chain: chain)
                    body = .delete(service: service, account: account)
                    if batch { overlay[key] = .some(nil) }
                }
                let after = try keys.advance(chain, over: payload)
                (base + count).initialize(to: Sealed(body: body, chainBefore: chain, chainAfter: after))
                count += 1
                payloads.append(payload)
                chain = after
            }
            guard count > 0 else { return 0 }
            try journal.appendCommit(payloads)
            for i in 0..<count {
                index(
                    base[i].body, payload: payloads[i][...], chainBefore: base[i].chainBefore,
                    chainAfter: base[i].chainAfter)
            }
            return count
        }
    }

    /// ``commit(_:)`` of one set, which is what every `Vault.set` is, with nothing allocated
    /// when the item is rewritten: the record is sealed into a buffer on the stack (on the heap
    /// only when large), the chain advanced over it, and it is framed into the journal from
    /// there; the item is looked up once and updated in place in the index, its record copied
    /// over the one it replaces when that buffer is the entry's own and the same size. The
    /// same record, file and index as the general path, and all or nothing in the same way:
    /// `self` changes only once the record has landed.
    mutating func commitSet(
        service: String, account: String, secret: UnsafeRawBufferPointer, label: String?, comment: String?
    ) throws {
        let now = Self.now()
        let key = ItemKey(service: service, account: account)
        let slot = entries.index(forKey: key)
        // What the record holds besides the secret: the attributes given, else the item's.
        var (labelText, commentText, created) = (label ?? "", comment ?? "", now)
        if let slot { (labelText, commentText, created) = entries.values[slot].kept(label: label, comment: comment) }
        let bodyLength = VaultRecordBody.putLength(
            service: service, account: account, label: labelText, comment: commentText, secretCount: secret.count)
        try RecordCipher.checkBodyLength(bodyLength)  // before anything is allocated
        try withUnsafeTemporaryAllocation(byteCount: RecordCipher.overhead + bodyLength, alignment: 8) { buffer in
            try RecordCipher.sealPut(
                service: service, account: account, label: labelText, comment: commentText,
                created: created, modified: now, secret: secret, keys: keys, vaultID: header.vaultID,
                chain: chain, into: buffer)
            let sealed = UnsafeRawBufferPointer(buffer)
            let after = try keys.advance(chain, tag: RecordCipher.tag(of: sealed))
            _ = try journal.appendRecord(count: sealed.count) { $0.copyMemory(from: sealed) }
            // Landed: the index follows.
            outside.note(key)
            if let slot {
                let replaced = entries.values[slot].resealed(
                    sealed, chain: chain, modified: now, label: label, comment: comment)
                liveBytes += sealed.count - replaced
            } else {
                let item = VaultItem(
                    service: service, account: account, label: labelText, comment: commentText, created: now,
                    modified: now)
                entries[key] = Entry(
                    attributes: ItemAttributes(item), payload: ArraySlice(sealed), chain: chain, ownsBuffer: true)
                liveBytes += sealed.count + Journal.frameHeaderSize
            }
            chain = after
            recordCount += 1
        }
    }

    /// Now, in milliseconds as stored: an item in memory equals the item read back from the file.
    private static func now() -> Date {
        Date(timeIntervalSince1970: (Date().timeIntervalSince1970 * 1000).rounded() / 1000)
    }

    /// A record of a commit, sealed but not yet appended.
    private struct Sealed {
        var body: IndexedBody
        var chainBefore: ChainValue
        var chainAfter: ChainValue
    }

    /// Rereads the header area from the file and adopts the header it holds; returns the
    /// current copy (0 or 1). Call under the write lock before writing a header, after applying
    /// the journal's changes.
    ///
    /// Why: a passphrase or key-slot change rewrites the header in place and appends no record,
    /// so the journal's catch-up (which follows records and file replacements) does not see it.
    /// A process that wrote the header it read at open — compaction raises the sequence and
    /// writes it — would silently bring back a passphrase another process rotated away.
    @discardableResult
    mutating func reloadHeader() throws -> Int {
        let area = try journal.reloadHeaderArea()
        let (current, copy) = try Vault.selectHeader(area, path: journal.path)
        try Vault.verifyMAC(area, copy: copy, keys: keys, path: journal.path)
        // The epoch changes only with a new file, which the catch-up has applied by now (its
        // records are chained from this epoch). Adopting another epoch here would seal the next
        // records against the wrong chain.
        guard current.vaultID == header.vaultID, current.epoch == header.epoch else {
            throw CofferError(
                .corrupted,
                "the vault header's id or epoch changed without the file being replaced: it was not written by Coffer",
                path: journal.path, offset: Int64(Journal.fileHeaderSize + copy * VaultHeader.copySize))
        }
        adopt(current)
        return copy
    }

    /// Takes `current` as the header, keeping `unlockedSlot` on the slot this session was
    /// unlocked with when that slot is still there (slots may have been removed before it).
    mutating func adopt(_ current: VaultHeader) {
        if current != header, header.slots.indices.contains(unlockedSlot),
            let same = current.slots.firstIndex(of: header.slots[unlockedSlot])
        {
            unlockedSlot = same
        }
        if !current.slots.indices.contains(unlockedSlot) { unlockedSlot = 0 }
        header = current
    }

    /// Re-seals every live item under a new epoch and rewrites the file, with the header the
    /// file holds now (reread: see ``reloadHeader()``) and its sequence + 1. Called by the
    /// engine (``JournalIndex``) under the write lock, after applying the journal's changes.
    mutating func rewriteLive() throws {
        try compact(rekeying: nil)
    }

    /// A new master key for a rotation: its keys, and the header's slots wrapping it (made from
    /// the header the file holds now, passed in).
    typealias Rekeying = (VaultHeader) throws -> (keys: VaultKeys, slots: [KeySlot], unlockedSlot: Int)

    /// ``rewriteLive()``, and with `rekeying` a rotation: every live item re-sealed under the new
    /// keys, the header's slots replaced, in the same one atomic rewrite of the file (so the
    /// old vault or the new one is on disk at every moment, never a mix).
    mutating func compact(rekeying: Rekeying?) throws {
        try reloadHeader()
        var header = self.header
        var newKeys = keys
        var newSlot = unlockedSlot
        if let rekeying {
            (newKeys, header.slots, newSlot) = try rekeying(header)
        }
        header.sequence += 1
        header.epoch = SecureRandom.bytes(count: 16)
        header.mac = try newKeys.headerMAC(header)
        var next = try Session(journal: journal, keys: newKeys, header: header, unlockedSlot: newSlot, opener: opener)
        var payloads: [Data] = []
        let sorted = entries.sorted {
            ($0.key.service.string, $0.key.account.string) < ($1.key.service.string, $1.key.account.string)
        }
        for (_, entry) in sorted {
            var plaintext = try RecordCipher.open(entry.payload, keys: keys, vaultID: header.vaultID, chain: entry.chain)
            defer { SecureMemory.zero(&plaintext) }
            guard let body = plaintext.withUnsafeBytes({ VaultRecordBody.indexed($0) }) else {
                let why = plaintext.withUnsafeBytes { VaultRecordBody.invalidity($0) }
                throw CofferError(.corrupted, "a vault record authenticated but \(why)", path: journal.path)
            }
            let payload = try RecordCipher.seal(plaintext, keys: newKeys, vaultID: header.vaultID, chain: next.chain)
            try next.index(body, payload: payload)
            payloads.append(Data(payload))
        }
        try journal.rewrite(payloads: payloads, headerArea: header.areaBytes())
        next.outside = outside
        self = next
    }
}
