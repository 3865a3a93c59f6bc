// Rotation: a new master key, every item re-sealed, the kept key slots re-wrapped, in one atomic rewrite.
import CofferCore
import CofferRuntime
import CofferJournal
public import CofferCrypto
import Foundation

/// What ``Vault/rotate(removing:removingRecipients:keeping:)`` did.
public struct VaultRotation: Sendable, Codable, Equatable {
    /// Key slots that open the vault now (re-wrapped for the new master key).
    public var keptSlots: Int
    /// Key slots removed: their secrets open nothing written from now on.
    public var removedSlots: Int
    /// Items re-sealed under the new key.
    public var items: Int
    /// The slots removed, as ``Vault/info()`` listed them (the recipient of a recipient slot):
    /// what was revoked, to check against what was meant.
    public var removed: [KeySlotInfo]

    public init(keptSlots: Int, removedSlots: Int, items: Int, removed: [KeySlotInfo] = []) {
        self.keptSlots = keptSlots
        self.removedSlots = removedSlots
        self.items = items
        self.removed = removed
    }
}

extension Vault {
    /// Rotates the vault's master key: a new random key, every item re-sealed under it, every
    /// key slot that stays re-wrapped for it, and the slots named removed — all in one atomic
    /// rewrite of the file (as a compaction: the old vault or the new one is on disk at every
    /// moment, and a crash or a power loss never leaves a mix; SECURITY.md, "Rotation and revocation").
    ///
    /// This is revocation: a removed slot's secret opens nothing written after the rotation,
    /// even by someone who kept the old master key. (It still opens an old copy of the file, and
    /// every secret it could read before is as known as before: change those secrets too.)
    ///
    /// Recipient slots are re-wrapped with no secret (a recipient is public), and so is the slot
    /// this vault was unlocked with. Any other passphrase, key-file or raw-key slot needs its
    /// secret in `keeping`, or to be removed: without it the slot could not be re-wrapped, and
    /// the rotation is refused before anything changes, naming the slot. A kept slot keeps its
    /// salt and parameters, so every other process or `Vault` instance that has the vault open
    /// follows the rotation by itself (with what opened its slot: no KDF, no prompt); one whose
    /// slot was removed gets `.wrongKey` from its next call, keeping what it already returned.
    ///
    /// - Parameters:
    ///   - slots: indices of key slots to remove (as ``info()`` lists them).
    ///   - recipients: remove every slot of these recipients too.
    ///   - keeping: the secrets of passphrase, key-file and raw-key slots to keep (other than the
    ///     one that unlocked this vault). Each must open a slot, within this vault's KDF limit.
    /// - Throws: `.invalidArgument` (a slot that does not exist, one that cannot be re-wrapped,
    ///   or no slot left), `.wrongKey` (a secret in `keeping` that opens no slot), `.locked`,
    ///   and what a compaction throws (`.io`, `.busy`: the file is unchanged then).
    @discardableResult
    public func rotate(
        removing slots: Set<Int> = [], removingRecipients recipients: [X25519Recipient] = [],
        keeping secrets: [VaultUnlock] = []
    ) throws -> VaultRotation {
        // The secrets' slot keys first, with no lock held (a passphrase runs Argon2id), against
        // the header as the file holds it now (a slot added meanwhile by another process).
        let header = try withSession { live in
            let changes = try live.journal.refresh()
            if !changes.isEmpty { try live.apply(changes) }
            _ = try live.reloadHeader()
            return live.header
        }
        var openers: [SlotOpener] = []
        for secret in secrets {
            let material = try secret.material(fileSystem: fs)
            if case .identities = material { continue }  // recipient slots need no secret
            openers.append(try Self.unwrapMaster(header, material: material, kdfLimit: kdfLimit, path: url.path).opener)
        }
        var rotation = VaultRotation(keptSlots: 0, removedSlots: 0, items: 0)
        try withSession { live in
            let own = live.opener
            let path = url.path
            try live.journal.withWriteLock { changes in
                try live.apply(changes)
                try live.compact { current in
                    let plan = try Self.rotationPlan(
                        current, removing: slots, removingRecipients: recipients,
                        openers: (own.map { [$0] } ?? []) + openers, path: path)
                    rotation.keptSlots = plan.slots.count
                    rotation.removedSlots = current.slots.count - plan.slots.count
                    rotation.removed = current.slots.indices.filter { !plan.kept.contains($0) }.map { Self.slotInfo(current.slots[$0]) }
                    // The slot this session opened, found again by what opened it (indices of the
                    // header read under the lock may differ from those it was unlocked with).
                    let unlocked = own.flatMap { own in plan.slots.firstIndex { own.opens($0) } } ?? 0
                    return (plan.keys, plan.slots, unlocked)
                }
                rotation.items = live.entries.count
            }
        }
        return rotation
    }

    /// The new master key and the slots that wrap it: every slot of `header` but the removed
    /// ones, re-wrapped (recipients to their public key, the others with an opener's key).
    static func rotationPlan(
        _ header: VaultHeader, removing slots: Set<Int>, removingRecipients recipients: [X25519Recipient],
        openers: [SlotOpener], path: String
    ) throws -> (keys: VaultKeys, slots: [KeySlot], kept: [Int]) {
        if let missing = slots.sorted().first(where: { !header.slots.indices.contains($0) }) {
            throw CofferError(
                .invalidArgument, "there is no key slot \(missing) (the vault has \(header.slots.count))", path: path)
        }
        let removedKeys = Set(recipients.map(\.publicKey))
        let kept = header.slots.indices.filter {
            !slots.contains($0) && !(header.slots[$0].kind == .recipient && removedKeys.contains(header.slots[$0].recipientKey))
        }
        guard !kept.isEmpty else {
            throw CofferError(.invalidArgument, "refusing to remove every key slot: nothing could open the vault", path: path)
        }
        let unwrappable = kept.filter { index in
            header.slots[index].kind != .recipient && !openers.contains { $0.opens(header.slots[index]) }
        }
        guard unwrappable.isEmpty else {
            let named = unwrappable.map { "\($0) (\(header.slots[$0].kind.name))" }.joined(separator: ", ")
            throw CofferError(
                .invalidArgument,
                "key slot\(unwrappable.count == 1 ? "" : "s") \(named) cannot be re-wrapped for a new key without "
                    + "\(unwrappable.count == 1 ? "its" : "their") secret: remove \(unwrappable.count == 1 ? "it" : "them"), "
                    + "or give the secret to keep; nothing was changed",
                path: path)
        }
        let master = try crypto { try SecureBytes.random(count: 32) }
        let keys = try VaultKeys(master: master)
        var wrapped: [KeySlot] = []
        for index in kept {
            let slot = header.slots[index]
            if slot.kind == .recipient {
                var made = try KeySlotCrypto.makeRecipientSlot(
                    wrapping: master, recipient: try crypto { try X25519Recipient(publicKey: slot.recipientKey) },
                    vaultID: header.vaultID)
                made.label = slot.label
                wrapped.append(made)
            } else {
                var made: KeySlot?
                for opener in openers where made == nil {
                    made = try opener.rewrap(slot, master: master, vaultID: header.vaultID)
                }
                wrapped.append(made!)  // every kept symmetric slot has an opener (checked above)
            }
        }
        return (keys, wrapped, kept)
    }
}
