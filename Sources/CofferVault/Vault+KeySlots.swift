// Key slots: which slot an unlock opens (within the KDF limit), and changing, adding and removing slots.
import CofferCore
import CofferRuntime
import CofferJournal
public import CofferCrypto

extension Vault {
    // MARK: - Key slots

    /// Replaces the passphrase that unlocked this vault (or its first passphrase slot) with a
    /// new one. Rewrites only the header, crash-safely: at every moment the old or the new
    /// passphrase works. The master key is unchanged (see SECURITY.md).
    ///
    /// The header is reread from the file under the write lock, so a change made meanwhile by
    /// another process (or `Vault` instance) is kept, and no process's later compaction undoes
    /// this one.
    /// - Parameter kdf: Argon2id parameters for the new slot; `nil` keeps the old slot's.
    ///   Above ``defaultKDFLimit``, every later open must pass a `kdfLimit` at least as high.
    public func changePassphrase(to new: VaultUnlock, kdf: Argon2idParameters? = nil) throws {
        try updateHeader { header, session in
            let material = try new.material(fileSystem: fs)
            guard case .passphrase = material else {
                throw CofferError(.invalidArgument, "changePassphrase takes a passphrase; use addKeySlot for keys")
            }
            let target: Int
            if header.slots.indices.contains(session.unlockedSlot),
                header.slots[session.unlockedSlot].kind == .passphrase
            {
                target = session.unlockedSlot
            } else if let first = header.slots.firstIndex(where: { $0.kind == .passphrase }) {
                target = first
            } else {
                throw CofferError(.invalidArgument, "this vault has no passphrase slot; add one with addKeySlot")
            }
            let old = header.slots[target]
            let parameters = kdf ?? Argon2idParameters(opsLimit: old.opsLimit, memLimitBytes: old.memLimitBytes)
            let (slot, kek) = try KeySlotCrypto.makeSlotKeepingKEK(
                wrapping: session.keys.master, source: material, kdf: parameters, vaultID: header.vaultID)
            header.slots[target] = slot
            header.slots[target].label = old.label
            // This session's own slot: what opens it now is the new passphrase's key (a rotation
            // made later, here or elsewhere, is followed with it).
            if session.opener?.opens(old) == true {
                session.opener = .slotKey(kind: slot.kind, salt: slot.salt, kek: kek)
            }
        }
    }

    /// Convenience for ``changePassphrase(to:kdf:)`` with a `String`.
    public func changePassphrase(to passphrase: String) throws {
        try changePassphrase(to: .passphrase(passphrase))
    }

    /// Adds a key slot, so `source` opens the vault too. Header-only, crash-safe.
    /// - Parameter kdf: Argon2id parameters for a passphrase slot. Above ``defaultKDFLimit``,
    ///   opening with that passphrase needs a `kdfLimit` at least as high.
    /// - Parameter label: what ``info()`` shows for the slot (who or what it is for), up to
    ///   ``maximumLabelLength`` bytes of UTF-8 without control characters; stored in the header,
    ///   authenticated with it (format version 3).
    public func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters = .moderate, label: String? = nil) throws {
        try Self.checkLabel(label)
        try updateHeader { header, session in
            let material = try source.material(fileSystem: fs)
            var added = try KeySlotCrypto.makeSlots(
                wrapping: session.keys.master, source: material, kdf: kdf, vaultID: header.vaultID)
            for index in added.indices { added[index].label = label ?? "" }
            try Self.append(added, to: &header, limit: VaultHeader.maximumFileSlots)
        }
    }

    /// The longest slot label, in bytes of UTF-8.
    public static let maximumLabelLength = VaultHeader.labelSize

    /// Refuses a label that the header cannot hold or a terminal should not print.
    static func checkLabel(_ label: String?) throws {
        guard let label else { return }
        guard label.utf8.count <= maximumLabelLength else {
            throw CofferError(
                .invalidArgument, "a key slot label is at most \(maximumLabelLength) bytes of UTF-8 (this one is \(label.utf8.count))")
        }
        guard VaultHeader.isPrintableLabel(label) else {
            throw CofferError(
                .invalidArgument, "a key slot label must not hold control characters (nor format or line-separator characters)")
        }
    }

    /// Adds a key slot that the identity of `recipient` opens (`age1…`, from `coffer identity
    /// new` or `age-keygen` on the machine that will open the vault): its secret never travels.
    /// Header-only, crash-safe. Adding a recipient that already has a slot changes nothing.
    /// - Returns: whether a slot was added (false: the recipient had one already).
    /// - Parameter label: what ``info()`` shows for the slot, as for ``addKeySlot(_:kdf:label:)``
    ///   (the machine's name, say).
    @discardableResult
    public func addRecipient(_ recipient: X25519Recipient, label: String? = nil) throws -> Bool {
        try Self.checkLabel(label)
        var added = false
        try updateHeader { header, session in
            guard !Self.hasSlot(for: recipient.publicKey, in: header) else { return }
            added = true
            var slot = try KeySlotCrypto.makeRecipientSlot(wrapping: session.keys.master, recipient: recipient, vaultID: header.vaultID)
            slot.label = label ?? ""
            try Self.append([slot], to: &header, limit: VaultHeader.maximumFileSlots)
        }
        return added
    }

    static func hasSlot(for recipientKey: [UInt8], in header: VaultHeader) -> Bool {
        header.slots.contains { $0.kind == .recipient && $0.recipientKey == recipientKey }
    }

    /// - Parameter limit: the most slots the header may hold where it is kept
    ///   (``VaultHeader/maximumFileSlots`` in a file, ``VaultHeader/maximumRowSlots`` in PostgreSQL).
    static func append(_ slots: [KeySlot], to header: inout VaultHeader, limit: Int) throws {
        // A recipient already named keeps its one slot (an identity file listing one key twice,
        // or a recipient added before): two slots for one identity would only confuse removal.
        var seen = Set(header.slots.filter { $0.kind == .recipient }.map(\.recipientKey))
        let slots = slots.filter { $0.kind != .recipient || seen.insert($0.recipientKey).inserted }
        let passphrases = (header.slots + slots).filter { $0.kind == .passphrase }.count
        guard passphrases <= VaultHeader.maximumPassphraseSlots else {
            throw CofferError(
                .invalidArgument,
                "a vault holds at most \(VaultHeader.maximumPassphraseSlots) passphrase slots (each is an Argon2id run "
                    + "when a passphrase is tried); use recipient or key-file slots for more")
        }
        guard header.slots.count + slots.count <= limit else {
            throw CofferError(
                .invalidArgument,
                "a \(limit == VaultHeader.maximumFileSlots ? "file " : "")vault holds at most \(limit) key slots "
                    + "(it has \(header.slots.count))"
                    + (limit == VaultHeader.maximumFileSlots ? "; a PostgreSQL vault holds \(VaultHeader.maximumRowSlots)" : ""))
        }
        header.slots += slots
    }

    /// Removes key slot `index` (see ``info()``). The last slot cannot be removed.
    public func removeKeySlot(at index: Int) throws {
        try updateHeader { header, session in
            guard header.slots.indices.contains(index) else {
                throw CofferError(.invalidArgument, "there is no key slot \(index)")
            }
            guard header.slots.count > 1 else {
                throw CofferError(.invalidArgument, "refusing to remove the last key slot: nothing could open the vault")
            }
            header.slots.remove(at: index)
            if session.unlockedSlot == index {
                session.unlockedSlot = 0
            } else if session.unlockedSlot > index {
                session.unlockedSlot -= 1
            }
        }
    }

    /// Removes every key slot for `recipient`, in one header change (so no slot change made
    /// meanwhile can make it remove another slot). The last slot is never removed.
    /// - Returns: how many slots were removed (0 when the vault has none for `recipient`).
    @discardableResult
    public func removeRecipient(_ recipient: X25519Recipient) throws -> Int {
        var removed = 0
        try updateHeader { header, session in
            let matching = header.slots.indices.filter {
                header.slots[$0].kind == .recipient && header.slots[$0].recipientKey == recipient.publicKey
            }
            guard !matching.isEmpty else { return }
            guard matching.count < header.slots.count else {
                throw CofferError(.invalidArgument, "refusing to remove the last key slot: nothing could open the vault")
            }
            let unlocked = session.unlockedSlot
            header.slots = header.slots.indices.filter { !matching.contains($0) }.map { header.slots[$0] }
            session.unlockedSlot =
                matching.contains(unlocked) ? 0 : unlocked - matching.filter { $0 < unlocked }.count
            removed = matching.count
        }
        return removed
    }

    /// The master key, when `unlock` opens a key slot of `header`.
    ///
    /// A passphrase slot whose Argon2id parameters exceed `kdfLimit` is not run (its cost is
    /// the file's choice, and the file may be hostile); the slots within the limit are tried.
    /// When none of them opens and some slot was passed over, the error is `.limitExceeded`:
    /// the passphrase may well be right, so it is never reported as wrong.
    static func unwrapMaster(
        _ header: VaultHeader, unlock: VaultUnlock, kdfLimit: Argon2idParameters, fileSystem: any FileSystem,
        path: String
    ) throws -> (key: SecureBytes, slot: Int, opener: SlotOpener) {
        try unwrapMaster(
            header, material: try unlock.material(fileSystem: fileSystem), kdfLimit: kdfLimit, path: path)
    }

    static func unwrapMaster(
        _ header: VaultHeader, material: UnlockMaterial, kdfLimit: Argon2idParameters, path: String
    ) throws -> (key: SecureBytes, slot: Int, opener: SlotOpener) {
        let candidates = header.slots.indices.filter { header.slots[$0].kind == material.kind }
        if case .identities(let identities) = material {
            // The slot names its recipient: each identity tries only its own slots (one X25519
            // each), whatever the number of slots.
            let opener = SlotOpener.identities(identities)
            if let (key, index) = try opener.unwrap(header) { return (key, index, opener) }
            let hint = candidates.isEmpty ? " (it has no recipient key slot)" : " (no key slot for its recipient opens)"
            throw CofferError(.wrongKey, "the identity does not open this vault" + hint, path: path)
        }
        if case .sessionKey(let kept) = material {
            // Its own slot only, found by kind and salt: one AEAD, no KDF (so no kdfLimit to weigh).
            let opener = kept.opener
            if let (key, index) = try opener.unwrap(header) { return (key, index, opener) }
            throw CofferError(
                .wrongKey,
                "the key kept for this session opens no key slot of this vault (its passphrase was changed, "
                    + "or its slot removed)",
                path: path)
        }
        // Parameters outside the format's own bounds are a malformed file, not a choice to
        // weigh against the limit: refused as before, whatever the other slots hold.
        for index in candidates where header.slots[index].kind == .passphrase {
            try KeySlotCrypto.checkFormatBounds(header.slots[index])
        }
        let tried = candidates.filter { header.slots[$0].isWithin(kdfLimit) }
        for index in tried {
            let slot = header.slots[index]
            let kek = try KeySlotCrypto.keyEncryptionKey(for: slot, source: material)
            if let key = try KeySlotCrypto.unwrap(slot, kek: kek, vaultID: header.vaultID) {
                return (key, index, .slotKey(kind: slot.kind, salt: slot.salt, kek: kek))
            }
        }
        if let over = candidates.first(where: { !header.slots[$0].isWithin(kdfLimit) }) {
            let slot = header.slots[over]
            let others =
                tried.isEmpty
                ? "" : " (the passphrase opens none of the \(tried.count) within the limit)"
            throw CofferError(
                .limitExceeded,
                "key slot \(over) of this vault asks for Argon2id with "
                    + "\(describeCost(slot.opsLimit, slot.memLimitBytes)), above the limit of "
                    + "\(describeCost(kdfLimit.opsLimit, kdfLimit.memLimitBytes))\(others); "
                    + "open it with a higher kdfLimit if you trust this file",
                path: path)
        }
        let what: String
        switch material {
        case .passphrase: what = "the passphrase does not open this vault"
        case .keyFile: what = "the key file does not open this vault"
        case .rawKey: what = "the key does not open this vault"
        case .identities: what = "the identity does not open this vault"
        case .sessionKey: what = "the key kept for this session does not open this vault"
        }
        let hint = candidates.isEmpty ? " (it has no key slot of that kind)" : ""
        throw CofferError(.wrongKey, what + hint, path: path)
    }

    private func updateHeader(_ change: (inout VaultHeader, inout Session) throws -> Void) throws {
        try withSession { live in
            try live.journal.withWriteLock { journalChanges in
                try live.apply(journalChanges)
                // The header as the file holds it now, under the lock: another process may have
                // changed it in place since this one last looked.
                let currentCopy = try live.reloadHeader()
                let current = live.header
                var next = current
                try change(&next, &live)
                next.sequence = current.sequence + 1
                next.mac = try live.keys.headerMAC(next)
                let bytes = next.copyBytes()
                // The copy that is not current first: until it is durable the current one stands.
                let first = 1 - currentCopy
                try live.journal.writeHeaderArea(bytes, at: first * VaultHeader.copySize)
                try live.journal.writeHeaderArea(bytes, at: currentCopy * VaultHeader.copySize)
                live.header = next
            }
        }
    }
}
