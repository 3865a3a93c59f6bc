// Creating, opening, salvaging, locking and unlocking a vault, and choosing and checking its header.
public import CofferCore
import CofferRuntime
import CofferJournal
public import CofferCrypto
public import Foundation

extension Vault {
    // MARK: - Creating and opening

    /// Creates a new vault file (and its directory, `0700`), refusing to overwrite one.
    ///
    /// - Parameters:
    ///   - unlock: the first key slot's source.
    ///   - kdf: Argon2id parameters for a passphrase slot (stored in the header). Parameters
    ///     above ``defaultKDFLimit`` work, but every later open must then pass a `kdfLimit` at
    ///     least as high (this `Vault`'s own ``unlock(_:kdfLimit:)`` allows them).
    ///   - durability: `.immediate` (default) or `.coalesced` (see ``Durability``).
    /// - Throws: ``CofferError`` — ``CofferError/Code/alreadyExists``, ``CofferError/Code/io``, …
    public static func create(
        at url: URL, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate, durability: Durability = .immediate,
        lockTimeout: Duration = CofferContext.defaultLockTimeout
    ) throws -> Vault {
        try create(
            at: url, unlock: unlock, kdf: kdf, durability: durability, lockTimeout: lockTimeout,
            fileSystem: LiveFileSystem())
    }

    /// ``create(at:unlock:kdf:durability:lockTimeout:)`` through `fileSystem` (a test's, to inject faults).
    package static func create(
        at url: URL, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate, durability: Durability = .immediate,
        lockTimeout: Duration = CofferContext.defaultLockTimeout, fileSystem: any FileSystem
    ) throws -> Vault {
        let (keys, header, opener) = try newKeys(unlock: unlock, kdf: kdf, fileSystem: fileSystem)
        try DurableIO.ensureDirectory(DurableIO.parentDirectory(of: url.path), fileSystem: fileSystem)
        let options = journalOptions(durability: durability, lockTimeout: lockTimeout)
        let (journal, _) = try Journal.open(
            path: url.path, options: options, fileSystem: fileSystem, create: .createNew,
            initialHeaderArea: header.areaBytes())
        let session = try Session(journal: journal, keys: keys, header: header, unlockedSlot: 0, opener: opener)
        return Vault(
            url: url, fileSystem: fileSystem, options: options, kdfLimit: defaultKDFLimit.raised(to: kdf),
            session: session)
    }

    /// A new vault's keys and first header: a random master key, vault id and epoch, the master
    /// key wrapped in one key slot for `unlock`, and the header's MAC. The file vault and the
    /// row store (``RowSealing``) both begin here.
    static func newKeys(
        unlock: VaultUnlock, kdf: Argon2idParameters, fileSystem: any FileSystem
    ) throws -> (VaultKeys, VaultHeader, SlotOpener) {
        let material = try unlock.material(fileSystem: fileSystem)
        let master = try crypto { try SecureBytes.random(count: 32) }
        let keys = try VaultKeys(master: master)
        let vaultID = SecureRandom.bytes(count: 16)
        let slots: [KeySlot]
        let opener: SlotOpener
        if case .identities(let identities) = material {
            slots = try KeySlotCrypto.makeSlots(wrapping: master, source: material, kdf: kdf, vaultID: vaultID)
            opener = .identities(identities)
        } else {
            let (slot, kek) = try KeySlotCrypto.makeSlotKeepingKEK(wrapping: master, source: material, kdf: kdf, vaultID: vaultID)
            slots = [slot]
            opener = .slotKey(kind: slot.kind, salt: slot.salt, kek: kek)
        }
        guard slots.count <= VaultHeader.maximumFileSlots else {
            throw CofferError(.invalidArgument, "a vault holds at most \(VaultHeader.maximumFileSlots) key slots")
        }
        var header = VaultHeader(
            sequence: 1, vaultID: vaultID, epoch: SecureRandom.bytes(count: 16), slots: slots, mac: [])
        header.mac = try keys.headerMAC(header)
        return (keys, header, opener)
    }

    /// Opens and unlocks an existing vault, authenticating every record.
    ///
    /// - Parameters:
    ///   - kdfLimit: the most Argon2id work a passphrase slot of this file may ask for, in
    ///     passes and in memory (each compared on its own); ``defaultKDFLimit`` unless given.
    ///     Slots above it are not tried. Raise it only for a file you trust.
    ///   - recovery: `.strict` (the default) refuses a damaged file and names the byte
    ///     offset of the damage. `.salvage` keeps every record that still authenticates, in
    ///     order, sets the damaged file aside as `<file>.damaged-<time>`, and rewrites the vault.
    ///     The passphrase or key is checked before anything is changed. What is dropped:
    ///     - a commit whose frames fail their checksums (bit rot, a lost sector) is dropped
    ///       whole, and because every record is chained to all the records before it, every
    ///       record after it fails to authenticate and is dropped too;
    ///     - a record altered with its checksums fixed up (so its frames pass) is dropped
    ///       alone: the chain goes on over its tag and the records after it are kept.
    ///
    ///     What a dropped record did is lost: an item it set keeps its earlier value, and an
    ///     item it removed comes back.
    ///
    /// ```swift
    /// // A vault created with `kdf: Argon2idParameters(opsLimit: 8, memLimitBytes: 2 << 30)`:
    /// let trusted = Argon2idParameters(opsLimit: 8, memLimitBytes: 2 << 30)
    /// let vault = try Vault.open(at: url, unlock: .passphrase(pass), kdfLimit: trusted)
    /// ```
    /// - Throws: ``CofferError`` — ``CofferError/Code/notFound`` (no file),
    ///   ``CofferError/Code/wrongKey`` (the source opens no key slot; the file is intact),
    ///   ``CofferError/Code/limitExceeded`` (no slot within `kdfLimit` opens, and a passphrase
    ///   slot asks for more: whether the passphrase is right is unknown),
    ///   ``CofferError/Code/corrupted`` (damage or tampering, with the byte offset when known),
    ///   ``CofferError/Code/unsupportedVersion``, ``CofferError/Code/busy``, ``CofferError/Code/io``.
    public static func open(
        at url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters = defaultKDFLimit,
        durability: Durability = .immediate, lockTimeout: Duration = CofferContext.defaultLockTimeout,
        recovery: JournalRecovery = .strict
    ) throws -> Vault {
        try open(
            at: url, unlock: unlock, kdfLimit: kdfLimit, durability: durability, lockTimeout: lockTimeout,
            recovery: recovery, fileSystem: LiveFileSystem())
    }

    /// ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:)`` through `fileSystem` (a
    /// test's, to inject faults).
    package static func open(
        at url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters = defaultKDFLimit,
        durability: Durability = .immediate, lockTimeout: Duration = CofferContext.defaultLockTimeout,
        recovery: JournalRecovery = .strict, fileSystem: any FileSystem
    ) throws -> Vault {
        let options = journalOptions(durability: durability, lockTimeout: lockTimeout)
        if recovery == .salvage {
            try salvage(url: url, unlock: unlock, kdfLimit: kdfLimit, options: options, fileSystem: fileSystem)
        }
        let session = try openSession(
            url: url, unlock: unlock, kdfLimit: kdfLimit, options: options, fileSystem: fileSystem)
        return Vault(url: url, fileSystem: fileSystem, options: options, kdfLimit: kdfLimit, session: session)
    }

    /// Whether a vault file exists at `url`.
    public static func exists(at url: URL) throws -> Bool {
        try exists(at: url, fileSystem: LiveFileSystem())
    }

    /// Whether a vault file exists at `url` in `fileSystem`.
    package static func exists(at url: URL, fileSystem: any FileSystem) throws -> Bool {
        try fileSystem.stat(url.path) != nil
    }

    private static func journalOptions(durability: Durability, lockTimeout: Duration) -> JournalOptions {
        JournalOptions(
            application: application, headerAreaSize: VaultHeader.areaSize, durability: durability,
            lockTimeout: lockTimeout)
    }

    /// Salvage: check the key against the header first (nothing is changed for a wrong one),
    /// then let the journal keep its intact frames, then keep the records that authenticate.
    private static func salvage(
        url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters, options: JournalOptions,
        fileSystem: any FileSystem
    ) throws {
        do {
            let session = try openSession(
                url: url, unlock: unlock, kdfLimit: kdfLimit, options: options, fileSystem: fileSystem)
            try session.journal.close()
            return  // nothing to salvage
        } catch let error as CofferError where error.code == .corrupted {
            // Damage: below.
        }
        // The file itself, not a symlink to it: reads never follow a link (FileSystem.openReadOnly).
        let realPath = try fileSystem.resolve(url.path)
        guard let original = try DurableIO.readFile(realPath, fileSystem: fileSystem) else {
            throw CofferError(.notFound, "no vault file exists here", path: url.path)
        }
        // The key must open a slot of the header before anything is rewritten.
        var image = [UInt8](original)
        guard image.count >= Journal.fileHeaderSize + VaultHeader.areaSize else {
            throw CofferError(.corrupted, "the file is too short to hold a vault header", path: url.path)
        }
        let area = Array(image[Journal.fileHeaderSize..<(Journal.fileHeaderSize + VaultHeader.areaSize)])
        let (header, copy) = try selectHeader(area, path: url.path)
        let unwrapped = try unwrapMaster(header, unlock: unlock, kdfLimit: kdfLimit, fileSystem: fileSystem, path: url.path)
        let keys = try VaultKeys(master: unwrapped.key)
        try verifyMAC(area, copy: copy, keys: keys, path: url.path)
        SecureMemory.zero(&image)
        // Frames: the journal keeps every intact commit (and sets the damaged file aside).
        let (journal, records) = try Journal.open(
            path: url.path, options: options, fileSystem: fileSystem, create: .openExisting, recovery: .salvage)
        defer { try? journal.close() }
        // The header of the file the journal opened (another process may have changed or
        // replaced it since the image above was read); the master key is the same.
        let (opened, openedCopy) = try selectHeader(journal.headerArea, path: url.path)
        try verifyMAC(journal.headerArea, copy: openedCopy, keys: keys, path: url.path)
        // Records: keep those that authenticate in chain order; a record that fails is skipped,
        // and the chain still advances over its tag, so an intact record after it verifies.
        let slot = opened.slots.firstIndex { unwrapped.opener.opens($0) } ?? 0
        var session = try Session(journal: journal, keys: keys, header: opened, unlockedSlot: slot, opener: unwrapped.opener)
        let skipped = try session.apply(records, skippingFailures: true)
        if skipped > 0 {
            let aside = try DurableIO.damagedCopyPath(for: realPath, suffix: "-records", fileSystem: fileSystem)
            try DurableIO.atomicReplace(aside, with: original, fileSystem: fileSystem)
            CofferWarning.warn(
                CofferWarning(
                    .salvaged,
                    "salvaged a damaged vault: dropped \(skipped) record(s) that failed to authenticate (or came "
                        + "after a record too short to be sealed, which ends what can be checked) and kept the rest; "
                        + "the damaged file is kept at \(aside)",
                    path: url.path))
        }
        // Under the lock: what other processes committed since the open first, then the
        // rewrite (which rereads the header, so a concurrent passphrase change is kept).
        try session.compactNow()
    }

    private static func openSession(
        url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters, options: JournalOptions,
        fileSystem: any FileSystem
    ) throws -> Session {
        let (journal, records) = try Journal.open(
            path: url.path, options: options, fileSystem: fileSystem, create: .openExisting)
        do {
            let (header, copy) = try selectHeader(journal.headerArea, path: url.path)
            let (master, unlockedSlot, opener) = try unwrapMaster(
                header, unlock: unlock, kdfLimit: kdfLimit, fileSystem: fileSystem, path: url.path)
            let keys = try VaultKeys(master: master)
            try verifyMAC(journal.headerArea, copy: copy, keys: keys, path: url.path)
            var session = try Session(
                journal: journal, keys: keys, header: header, unlockedSlot: unlockedSlot, opener: opener)
            do {
                try session.apply(records)
            } catch var error as CofferError where error.code == .corrupted && error.offset != nil {
                // A record, not the header (which salvage cannot open either): salvage helps.
                error.message += " — restore a backup, or open with `recovery: .salvage` to keep every record that"
                    + " still authenticates (the damaged file is kept aside)"
                throw error
            }
            return session
        } catch {
            try? journal.close()
            throw error
        }
    }

    // MARK: - Locking

    /// Whether the vault is locked (no keys in memory).
    public var isLocked: Bool { store.isClosed }

    /// Drops every key and cached attribute from memory (keys are wiped). Pending coalesced
    /// writes are flushed first.
    public func lock() {
        let session = store.close()
        try? session?.journal.close()  // its error can only concern coalesced writes, already in the kernel
    }

    /// Unlocks a locked vault (rereading and authenticating the file). Does nothing when unlocked.
    /// - Parameter kdfLimit: as for ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:fileSystem:)``;
    ///   `nil` keeps the limit this vault was opened with (for a vault this `Vault` created, at
    ///   least the parameters it was created with).
    /// - Throws: as ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:fileSystem:)``.
    public func unlock(_ source: VaultUnlock, kdfLimit: Argon2idParameters? = nil) throws {
        try store.checkNotHeldHere()
        if !isLocked { return }
        let session = try Self.openSession(
            url: url, unlock: source, kdfLimit: kdfLimit ?? self.kdfLimit, options: options, fileSystem: fs)
        // Whatever changed while it was locked: observers reread everything (from the watcher
        // thread, never from inside this call).
        store.open(session)
    }

    /// The current header: the intact copy with the highest sequence, and its index.
    static func selectHeader(_ area: [UInt8], path: String) throws -> (VaultHeader, Int) {
        guard area.count == VaultHeader.areaSize else {
            throw CofferError(.corrupted, "the vault header area has the wrong size", path: path, offset: 32)
        }
        var best: (VaultHeader, Int)?
        var unsupported: UInt16?
        var problems: [String] = []
        for copy in 0..<2 {
            let start = copy * VaultHeader.copySize
            switch VaultHeader.parse(copy: area[start..<(start + VaultHeader.copySize)]) {
            case .header(let header):
                if best == nil || header.sequence > best!.0.sequence { best = (header, copy) }
            case .unsupported(let version):
                unsupported = version
            case .damaged(let why):
                problems.append("copy \(copy + 1): \(why)")
            }
        }
        if let best { return best }
        if let unsupported {
            throw CofferError(
                .unsupportedVersion,
                "the vault has format version \(unsupported); this Coffer reads version \(VaultHeader.formatVersion)",
                path: path)
        }
        throw CofferError(
            .corrupted, "both copies of the vault header are damaged (\(problems.joined(separator: "; ")))",
            path: path, offset: Int64(Journal.fileHeaderSize))
    }

    /// Checks the MAC of copy `copy` (0 or 1, as ``selectHeader(_:path:)`` chose it) of the
    /// header `area`, over that copy's bytes as stored. The other copy's MAC is not checked: it
    /// is not used. An error names the file offset of the copy checked (32 or 2,080).
    static func verifyMAC(_ area: [UInt8], copy: Int, keys: VaultKeys, path: String) throws {
        let start = copy * VaultHeader.copySize
        try verifyMAC(stored: area[start..<(start + VaultHeader.copySize)], copy: copy, keys: keys, path: path)
    }

    /// Checks the MAC of one stored copy (a file's copy `copy`, or a row store's one copy).
    static func verifyMAC(stored: ArraySlice<UInt8>, copy: Int = 0, keys: VaultKeys, path: String) throws {
        let start = copy * VaultHeader.copySize
        let expected = try keys.headerMAC(stored: stored)
        guard SecureMemory.constantTimeEqual(expected, Array(VaultHeader.storedMAC(of: stored))) else {
            throw CofferError(
                .corrupted, "the vault header (copy \(copy + 1)) fails authentication: it was altered", path: path,
                offset: Int64(Journal.fileHeaderSize + start))
        }
    }
}
