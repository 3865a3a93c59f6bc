public import CofferCore
import CofferJournal
public import CofferCrypto
public import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An encrypted, keychain-style store of credentials in one file.
///
/// Items are identified by a service and an account, carry a label, a comment and dates, and
/// hold a secret. Everything in the file except record sizes is encrypted and authenticated
/// (XChaCha20-Poly1305 under keys derived from a random master key, which each key slot wraps
/// under a passphrase, key file or raw key). See SECURITY.md for the threat model and
/// docs/FORMAT.md for the bytes.
///
/// ```swift
/// let vault = try Vault.create(at: url, unlock: .passphrase("correct horse battery staple"))
/// try vault.set("ghp_…", service: "api.github.com", account: "octocat", label: "GitHub token")
/// let token = try vault.string(service: "api.github.com", account: "octocat")
/// vault.lock()
/// ```
///
/// Rules:
/// 1. Open one `Vault` per file per process and share it; it is thread-safe.
/// 2. Every write is durable when it returns (`.immediate`, the default): it survives power loss.
/// 3. Several processes may use one vault file: writes are serialised by `<file>.lock`, and
///    each process sees the others' writes on its next call. ``update(service:account:_:)``
///    is an atomic read-modify-write across processes.
/// 4. After ``lock()`` no key stays in memory; calls throw ``CofferError/Code/locked`` until
///    ``unlock(_:kdfLimit:)``.
public final class Vault: Sendable {
    /// The vault file.
    public let url: URL
    private let fs: any FileSystem
    private let options: JournalOptions
    /// The most ``unlock(_:kdfLimit:)`` lets a passphrase slot ask for, unless told otherwise.
    private let kdfLimit: Argon2idParameters
    private let state: Locked<Session?>

    /// Who is told about changes made by other processes, and the directory watch that tells.
    private let observers = WatchedObservers<Set<VaultItemID>?>()

    static let application: UInt16 = 2

    /// The most Argon2id work a vault file may ask of an unlock unless the caller allows more:
    /// libsodium's strongest preset, ``Argon2idParameters/sensitive`` (4 passes over 1 GiB).
    ///
    /// A vault's key slots store their own Argon2id parameters, and whoever can write the file
    /// chooses them: without a ceiling a crafted header could make every unlock attempt run for
    /// minutes over gigabytes before failing. A passphrase slot asking for more passes *or* more
    /// memory than the limit is not run; when no slot within the limit opens, the error is
    /// ``CofferError/Code/limitExceeded`` (never ``CofferError/Code/wrongKey``). Pass a higher
    /// `kdfLimit` to ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:fileSystem:)`` for
    /// a vault you trust that was created with more; the format's own bounds,
    /// ``Argon2idParameters/maximumAccepted``, still apply.
    public static let defaultKDFLimit = Argon2idParameters.sensitive

    /// The longest service or account name ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``
    /// and the other writes accept: 1,024 bytes of UTF-8.
    ///
    /// Names are listed, sorted and printed whole; a bound keeps one item from making every
    /// listing slow. Longer names are refused with ``CofferError/Code/invalidArgument`` before
    /// anything is written — the code every ``PersistenceStrategy`` uses for a key it cannot
    /// store, so ``VaultStrategy`` passes it on unchanged. Reading is not limited: a vault
    /// written before the limit existed stays readable, and an item with a longer name can
    /// still be read and removed.
    public static let maximumNameLength = 1024

    /// The longest label or comment the writes accept: 4,096 bytes of UTF-8 (as
    /// ``maximumNameLength``).
    public static let maximumTextLength = 4096

    private init(
        url: URL, fileSystem: any FileSystem, options: JournalOptions, kdfLimit: Argon2idParameters,
        session: sending Session
    ) {
        self.url = url
        self.fs = fileSystem
        self.options = options
        self.kdfLimit = kdfLimit
        self.state = Locked(session)
    }

    deinit {
        state.withLock { session in try? session?.journal.close() }
    }

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
        lockTimeout: Duration = .seconds(10), fileSystem: any FileSystem = LiveFileSystem()
    ) throws -> Vault {
        let material = try unlock.material(fileSystem: fileSystem)
        let master = try crypto { try SecureBytes.random(count: 32) }
        let keys = try VaultKeys(master: master)
        let vaultID = SecureRandom.bytes(count: 16)
        let slot = try KeySlotCrypto.makeSlot(wrapping: master, source: material, kdf: kdf, vaultID: vaultID)
        var header = VaultHeader(
            sequence: 1, vaultID: vaultID, epoch: SecureRandom.bytes(count: 16), slots: [slot], mac: [])
        header.mac = try keys.headerMAC(header)
        try DurableIO.ensureDirectory(DurableIO.parentDirectory(of: url.path), fileSystem: fileSystem)
        let options = journalOptions(durability: durability, lockTimeout: lockTimeout)
        let (journal, _) = try Journal.open(
            path: url.path, options: options, fileSystem: fileSystem, create: .createNew,
            initialHeaderArea: header.areaBytes())
        let session = try Session(journal: journal, keys: keys, header: header, unlockedSlot: 0)
        return Vault(
            url: url, fileSystem: fileSystem, options: options, kdfLimit: defaultKDFLimit.raised(to: kdf),
            session: session)
    }

    /// Opens and unlocks an existing vault, authenticating every record.
    ///
    /// - Parameters:
    ///   - kdfLimit: the most Argon2id work a passphrase slot of this file may ask for, in
    ///     passes and in memory (each compared on its own); ``defaultKDFLimit`` unless given.
    ///     Slots above it are not tried. Raise it only for a file you trust.
    ///   - recovery: `.strict` (the default) refuses a damaged file and names the byte
    ///     offset of the damage. `.salvage` keeps every record that still authenticates in order
    ///     — every commit before the damage, and after it when the damage was to a frame's bytes
    ///     only — sets the damaged file aside as `<file>.damaged-<time>`, and rewrites the vault.
    ///     The passphrase or key is checked before anything is changed.
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
        durability: Durability = .immediate, lockTimeout: Duration = .seconds(10), recovery: JournalRecovery = .strict,
        fileSystem: any FileSystem = LiveFileSystem()
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
    public static func exists(at url: URL, fileSystem: any FileSystem = LiveFileSystem()) throws -> Bool {
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
        let keys = try VaultKeys(
            master: try unwrapMaster(header, unlock: unlock, kdfLimit: kdfLimit, fileSystem: fileSystem, path: url.path)
                .key)
        try verifyMAC(area, copy: copy, keys: keys, path: url.path)
        wipe(&image)
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
        var session = try Session(journal: journal, keys: keys, header: opened, unlockedSlot: 0)
        let skipped = try session.apply(records, skippingFailures: true)
        if skipped > 0 {
            let aside = realPath + ".damaged-\(Int(Date().timeIntervalSince1970))-records"
            try DurableIO.atomicReplace(aside, with: original, fileSystem: fileSystem)
            CofferWarnings.warn(
                CofferWarning(
                    .salvaged,
                    "salvaged a damaged vault: dropped \(skipped) record(s) that failed to authenticate and kept "
                        + "the rest; the damaged file is kept at \(aside)",
                    path: url.path))
        }
        // Under the lock: what other processes committed since the open first, then the
        // rewrite (which rereads the header, so a concurrent passphrase change is kept).
        try journal.withWriteLock { changes in
            try session.apply(changes)
            try session.compact()
        }
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
    ) throws -> (key: SecureBytes, slot: Int) {
        let material = try unlock.material(fileSystem: fileSystem)
        let candidates = header.slots.indices.filter { header.slots[$0].kind == material.kind }
        // Parameters outside the format's own bounds are a malformed file, not a choice to
        // weigh against the limit: refused as before, whatever the other slots hold.
        for index in candidates where header.slots[index].kind == .passphrase {
            try KeySlotCrypto.checkFormatBounds(header.slots[index])
        }
        let tried = candidates.filter { header.slots[$0].isWithin(kdfLimit) }
        for index in tried {
            if let key = try KeySlotCrypto.unwrap(header.slots[index], source: material, vaultID: header.vaultID) {
                return (key, index)
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
        }
        let hint = candidates.isEmpty ? " (it has no key slot of that kind)" : ""
        throw CofferError(.wrongKey, what + hint, path: path)
    }

    private static func openSession(
        url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters, options: JournalOptions,
        fileSystem: any FileSystem
    ) throws -> Session {
        let (journal, records) = try Journal.open(
            path: url.path, options: options, fileSystem: fileSystem, create: .openExisting)
        do {
            let (header, copy) = try selectHeader(journal.headerArea, path: url.path)
            let (master, unlockedSlot) = try unwrapMaster(
                header, unlock: unlock, kdfLimit: kdfLimit, fileSystem: fileSystem, path: url.path)
            let keys = try VaultKeys(master: master)
            try verifyMAC(journal.headerArea, copy: copy, keys: keys, path: url.path)
            var session = try Session(journal: journal, keys: keys, header: header, unlockedSlot: unlockedSlot)
            try session.apply(records)
            return session
        } catch var error as CofferError where error.code == .corrupted && error.offset != nil {
            try? journal.close()
            error.message += " — restore a backup, or open with `recovery: .salvage` to keep every record that"
                + " still authenticates (the damaged file is kept aside)"
            throw error
        } catch {
            try? journal.close()
            throw error
        }
    }

    // MARK: - Locking

    /// Whether the vault is locked (no keys in memory).
    public var isLocked: Bool { state.withLock { $0 == nil } }

    /// Drops every key and cached attribute from memory (keys are wiped). Pending coalesced
    /// writes are flushed first.
    public func lock() {
        let session = state.withLock { session -> Session? in
            defer { session = nil }
            return session
        }
        try? session?.journal.close()  // its error can only concern coalesced writes, already in the kernel
    }

    /// Unlocks a locked vault (rereading and authenticating the file). Does nothing when unlocked.
    /// - Parameter kdfLimit: as for ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:fileSystem:)``;
    ///   `nil` keeps the limit this vault was opened with (for a vault this `Vault` created, at
    ///   least the parameters it was created with).
    /// - Throws: as ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:fileSystem:)``.
    public func unlock(_ source: VaultUnlock, kdfLimit: Argon2idParameters? = nil) throws {
        if !isLocked { return }
        var session = try Self.openSession(
            url: url, unlock: source, kdfLimit: kdfLimit ?? self.kdfLimit, options: options, fileSystem: fs)
        let watch = observers.watch
        session.outside.tracking = watch != nil
        state.withLock { $0 = session }
        // Whatever changed while it was locked: observers reread everything (from the watcher
        // thread, never from inside this call).
        if let watch {
            state.withLock { $0?.outside.all = true }
            FileWatcher.shared.schedule(watch)
        }
    }

    // MARK: - Changes from elsewhere

    /// Starts telling `handler` which items other processes (the `coffer` command, another
    /// `Vault` on the same file) change: their identities, or `nil` when anything may have (the
    /// file was compacted elsewhere, the vault was unlocked after being locked). The vault's
    /// directory is watched while at least one observation is alive (`FileWatcher`: inotify,
    /// else polling). Changes that arrive while the vault is locked are reported as `nil` once
    /// it can tell: a reader then gets ``CofferError/Code/locked`` until it is unlocked, and
    /// everything is reported again at ``unlock(_:kdfLimit:)``.
    public func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation {
        observers.add(handler) {
            let path = (try? fs.resolve(url.path)) ?? url.path
            state.withLock { session in
                session?.outside = OutsideChanges()
                session?.outside.tracking = true
            }
            let name = DurableIO.lastComponent(of: path)
            return FileWatcher.shared.watch(directory: DurableIO.parentDirectory(of: path)) { [weak self] names in
                if let names, !names.isEmpty, !names.contains(name) { return }
                self?.deliverOutsideChanges(checkingPath: names != nil && !names!.isEmpty)
            }
        } stopped: { [weak self] in
            self?.state.withLock { $0?.outside = OutsideChanges() }
        }
    }

    /// Catches up with the file and tells the observers which items other writers changed.
    private func deliverOutsideChanges(checkingPath: Bool) {
        let change: Set<VaultItemID>??
        do {
            change = try state.withLock { session -> Set<VaultItemID>?? in
                // Locked: nothing can be read, and every reader will say so.
                guard session != nil else { return .some(nil) }
                let changes = try session!.journal.refresh(checkingPath: checkingPath)
                if !changes.isEmpty { try session!.apply(changes) }
                return session!.outside.take()
            }
        } catch {
            change = .some(nil)  // removed or damaged: every observer rereads and reports the error
        }
        guard case .some(let items) = change else { return }
        observers.notify(items)
    }

    // MARK: - Items

    /// Stores a secret under `service` and `account`, replacing any earlier one.
    ///
    /// - Parameters:
    ///   - service: non-empty, at most ``maximumNameLength`` bytes of UTF-8.
    ///   - account: non-empty, at most ``maximumNameLength`` bytes of UTF-8.
    ///   - label: a readable name (at most ``maximumTextLength`` bytes); `nil` keeps the current
    ///     one (empty for a new item).
    ///   - comment: a note (at most ``maximumTextLength`` bytes); `nil` keeps the current one.
    /// - Throws: ``CofferError`` — ``CofferError/Code/locked``, ``CofferError/Code/invalidArgument``
    ///   (an empty service or account, or a name, label or comment above its limit; nothing is
    ///   written), ``CofferError/Code/io``, …
    public func set(_ secret: Data, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        try secret.withUnsafeBytes { secret in
            _ = try write(CollectionOfOne(BorrowedSet(service: service, account: account, secret: secret, label: label, comment: comment)))
        }
    }

    /// Stores a UTF-8 string secret. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        var secret = secret
        try secret.withUTF8 { secret in
            _ = try write(
                CollectionOfOne(
                    BorrowedSet(
                        service: service, account: account, secret: UnsafeRawBufferPointer(secret), label: label,
                        comment: comment)))
        }
    }

    /// Stores a secret held in guarded memory.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) throws {
        try secret.withUnsafeBytes { secret in
            _ = try write(CollectionOfOne(BorrowedSet(service: service, account: account, secret: secret, label: label, comment: comment)))
        }
    }

    /// The secret of an item as bytes, or `nil` when there is no such item.
    /// - Throws: ``CofferError`` — ``CofferError/Code/locked``, ``CofferError/Code/corrupted``, …
    public func data(service: String, account: String) throws -> Data? {
        try withSecret(service: service, account: account) { Data($0) }
    }

    /// The secret of an item as a UTF-8 string, or `nil` when there is no such item.
    /// - Throws: ``CofferError/Code/decoding`` when the secret is not UTF-8.
    public func string(service: String, account: String) throws -> String? {
        try withSecret(service: service, account: account) { bytes in
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw CofferError(.decoding, "the secret is not UTF-8 text; read it with data(service:account:)")
            }
            return text
        }
    }

    /// The secret of an item in guarded memory, or `nil` when there is no such item.
    public func secret(service: String, account: String) throws -> SecureBytes? {
        try withSecret(service: service, account: account) { bytes in try crypto { try SecureBytes(copying: bytes) } }
    }

    /// An item's attributes (never its secret), or `nil` when there is no such item.
    public func item(service: String, account: String) throws -> VaultItem? {
        try read { $0.entries[ItemKey(service: service, account: account)]?.item }
    }

    /// The attributes of every item (of one service when given), sorted by service then account.
    public func items(service: String? = nil) throws -> [VaultItem] {
        try read { session in
            session.entries.values.map(\.item).filter { item in service.map { item.service.utf8.elementsEqual($0.utf8) } ?? true }
                .sorted { ($0.service, $0.account) < ($1.service, $1.account) }
        }
    }

    /// Removes an item. Returns whether it existed.
    @discardableResult
    public func remove(service: String, account: String) throws -> Bool {
        try write(CollectionOfOne(VaultChange.remove(service: service, account: account))) > 0
    }

    /// Applies several changes as one commit (one append, one fsync): all survive a crash or none.
    public func apply(_ changes: [VaultChange]) throws {
        try write(changes)
    }

    /// Reads, transforms and writes one item's secret atomically with respect to every thread and
    /// process: the vault's write lock (`<file>.lock`) is held from the read to the write, after
    /// catching up with the other writers, so concurrent increments are never lost.
    ///
    /// ```swift
    /// try vault.update(service: "app", account: "launches") { (old: Data?) in
    ///     let count = old.flatMap { $0.count == 8 ? UInt64(littleEndian: $0.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }) : nil } ?? 0
    ///     return withUnsafeBytes(of: (count + 1).littleEndian) { Data($0) }
    /// }
    /// ```
    ///
    /// `transform` receives the current secret (`nil` when there is no such item) and returns
    /// the new one; returning `nil` removes the item, and returning the current bytes writes
    /// nothing. An existing item keeps its label, comment and creation date; a new one gets an
    /// empty label and comment. `transform` runs under the lock: keep it short, and do not call
    /// this vault from it (a nested write on the same thread traps or deadlocks). The `Data`
    /// Coffer passes to `transform` is wiped when the update ends; the `Data` it returns is
    /// left as it is (it is the caller's, and may wrap the caller's own buffer), and Coffer's
    /// copy of it is wiped. Copies `transform` keeps are the caller's to wipe. Name the
    /// parameter's type (`(old: Data?)`, `(old: String?)`) when the body alone does not choose
    /// between this and the `String` form, as in `{ _ in nil }`.
    ///
    /// - Throws: whatever `transform` throws, unchanged, and then nothing is written;
    ///   ``CofferError`` — ``CofferError/Code/locked``, ``CofferError/Code/invalidArgument``
    ///   (empty service or account), ``CofferError/Code/busy``, ``CofferError/Code/io``, …
    public func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {
        try update(service: service, account: account, bytes: { current in
            var old = current.map { Data($0) }
            defer { Self.wipeData(&old) }
            // The returned Data is the caller's (it may even wrap their own buffer, bytesNoCopy):
            // it is copied, and the copy is wiped after the commit; the Data itself is left alone.
            return try transform(old).map { [UInt8]($0) }
        })
    }

    /// Zeroes a `Data` this vault made for a caller, with the same non-elidable zeroing as the
    /// vault's own buffers. If the caller kept a copy, copy-on-write gives this one fresh
    /// storage and the caller's copy stays theirs. (A `Data` of up to 14 bytes is stored inline,
    /// in registers or on the stack; those copies cannot be reached.)
    private static func wipeData(_ data: inout Data?) {
        guard var bytes = data else { return }
        data = nil
        bytes.withUnsafeMutableBytes { zeroMemory($0) }
    }

    /// Updates a UTF-8 string secret atomically: as the `Data` form of `update(service:account:_:)`.
    ///
    /// Swift cannot wipe a `String`: the old and new text stay in freed heap memory until it is
    /// reused. Prefer the `Data` form for secrets that matter (keys, passwords); this form suits
    /// counters and tokens whose exposure in a memory dump is acceptable.
    ///
    /// ```swift
    /// try vault.update(service: "app", account: "launches") { (old: String?) in
    ///     String((old.flatMap { Int($0) } ?? 0) + 1)
    /// }
    /// ```
    /// - Throws: ``CofferError/Code/decoding`` when the current secret is not UTF-8 text
    ///   (`transform` is not called and nothing is written).
    public func update(service: String, account: String, _ transform: (String?) throws -> String?) throws {
        try update(service: service, account: account, bytes: { current in
            let text = try current.map { bytes in
                guard let text = String(validating: bytes, as: UTF8.self) else {
                    throw CofferError(.decoding, "the secret is not UTF-8 text; update it with a Data transform")
                }
                return text
            }
            return try transform(text).map { Array($0.utf8) }
        })
    }

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
            header.slots[target] = try KeySlotCrypto.makeSlot(
                wrapping: session.keys.master, source: material, kdf: parameters, vaultID: header.vaultID)
        }
    }

    /// Convenience for ``changePassphrase(to:kdf:)`` with a `String`.
    public func changePassphrase(to passphrase: String) throws {
        try changePassphrase(to: .passphrase(passphrase))
    }

    /// Adds a key slot, so `source` opens the vault too. Header-only, crash-safe.
    /// - Parameter kdf: Argon2id parameters for a passphrase slot. Above ``defaultKDFLimit``,
    ///   opening with that passphrase needs a `kdfLimit` at least as high.
    public func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters = .moderate) throws {
        try updateHeader { header, session in
            guard header.slots.count < VaultHeader.maximumSlots else {
                throw CofferError(.invalidArgument, "a vault holds at most \(VaultHeader.maximumSlots) key slots")
            }
            let material = try source.material(fileSystem: fs)
            header.slots.append(
                try KeySlotCrypto.makeSlot(wrapping: session.keys.master, source: material, kdf: kdf, vaultID: header.vaultID))
        }
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
            if session.unlockedSlot == index { session.unlockedSlot = 0 }
        }
    }

    // MARK: - Maintenance

    /// Format, key slots and sizes. Nothing secret.
    ///
    /// The key slots are read from the file, so a passphrase change or a slot added or removed
    /// by another process shows at once (those rewrite the header in place, not the records).
    public func info() throws -> VaultInfo {
        try withSession { live in
            let changes = try live.journal.refresh()
            if !changes.isEmpty { try live.apply(changes) }
            _ = try live.reloadHeader()
        }
        return try read { session in
            VaultInfo(
                formatVersion: Int(VaultHeader.formatVersion),
                keySlots: session.header.slots.map { slot in
                    switch slot.kind {
                    case .passphrase:
                        KeySlotInfo(kind: "passphrase", opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
                    case .keyFile: KeySlotInfo(kind: "keyFile")
                    case .rawKey: KeySlotInfo(kind: "key")
                    }
                },
                itemCount: session.entries.count,
                fileSize: session.journal.dataEnd, recordCount: session.recordCount)
        }
    }

    /// Rereads the whole file from the disk and authenticates every record and the header.
    /// - Returns: how many records authenticated and how many items they leave.
    /// - Throws: ``CofferError/Code/corrupted`` at the first failure, with its byte offset.
    public func verify() throws -> VaultVerification {
        try state.withLock { session in
            guard let live = session else { throw CofferError(.locked, "the vault is locked", path: url.path) }
            let (journal, records) = try Journal.open(
                path: url.path, options: options, fileSystem: fs, create: .openExisting)
            defer { try? journal.close() }
            let (header, copy) = try Self.selectHeader(journal.headerArea, path: url.path)
            try Self.verifyMAC(journal.headerArea, copy: copy, keys: live.keys, path: url.path)
            var fresh = try Session(journal: journal, keys: live.keys, header: header, unlockedSlot: 0)
            try fresh.apply(records)
            return VaultVerification(records: fresh.recordCount, items: fresh.entries.count)
        }
    }

    /// Rewrites the file with only the live items, re-sealed under a new epoch.
    public func compact() throws {
        try withSession { live in
            try live.journal.withWriteLock { changes in
                try live.apply(changes)
                try live.compact()
            }
        }
    }

    /// Makes coalesced writes durable now (nothing to do in `.immediate` mode).
    public func flush() throws {
        try state.withLock { session in
            guard let live = session else { return }
            try live.journal.flush()
        }
    }

    // MARK: - Internals

    /// Runs `body` on the unlocked session in place (never on a copy: copying the session would
    /// copy its index, making every call cost O(items)).
    private func withSession<T>(_ body: (inout Session) throws -> T) throws -> T {
        try state.withLock { session in
            guard session != nil else { throw CofferError(.locked, "the vault is locked", path: url.path) }
            if let failure = session!.failure { throw failure }
            return try body(&session!)
        }
    }

    private func read<T>(_ body: (Session) throws -> T) throws -> T {
        try withSession { live in
            let changes = try live.journal.refresh()
            if !changes.isEmpty { try live.apply(changes) }
            return try body(live)
        }
    }

    private func withSecret<T>(service: String, account: String, _ body: ([UInt8]) throws -> T) throws -> T? {
        let found = try read { session -> (Entry, VaultKeys, [UInt8])? in
            guard let entry = session.entries[ItemKey(service: service, account: account)] else { return nil }
            return (entry, session.keys, session.header.vaultID)
        }
        guard let (entry, keys, vaultID) = found else { return nil }
        var secret = try openSecret(entry, keys: keys, vaultID: vaultID)
        defer { wipe(&secret) }
        return try body(secret)
    }

    /// Decrypts an indexed record and returns its secret (the caller wipes it).
    private func openSecret(_ entry: Entry, keys: VaultKeys, vaultID: [UInt8]) throws -> [UInt8] {
        var plaintext = try RecordCipher.open(entry.payload, keys: keys, vaultID: vaultID, chain: entry.chain)
        defer { wipe(&plaintext) }
        guard case .put(_, let secret) = VaultRecordBody.decode(plaintext) else {
            throw CofferError(.corrupted, "a vault record authenticated but its layout is invalid", path: url.path)
        }
        return secret
    }

    private static func checkIdentity(service: String, account: String) throws {
        guard !service.isEmpty, !account.isEmpty else {
            throw CofferError(.invalidArgument, "an item needs a non-empty service and account")
        }
    }

    /// Refuses names, labels and comments above their limits (``maximumNameLength``,
    /// ``maximumTextLength``) before anything is written. The message gives lengths only: a
    /// name may be a secret typed in the wrong place.
    ///
    /// A Swift `String` is always valid Unicode, and a record stores its `utf8` view, so what
    /// this writes is always valid UTF-8 (a reader refuses a record whose names are not).
    static func checkLengths(service: String, account: String, label: String?, comment: String?) throws {
        for (what, text, limit) in [
            ("service name", service, maximumNameLength), ("account name", account, maximumNameLength),
            ("label", label ?? "", maximumTextLength), ("comment", comment ?? "", maximumTextLength),
        ] {
            let length = text.utf8.count
            guard length <= limit else {
                throw CofferError(
                    .invalidArgument, "a \(what) may be at most \(limit) bytes of UTF-8; this one has \(length)")
            }
        }
    }

    /// The read-modify-write behind both `update`s: under one hold of the journal's write lock,
    /// catch up with the other writers, decrypt the current secret, transform it and commit
    /// the result (a `.set` keeping the item's attributes, or a `.remove`), as `write` does.
    private func update(
        service: String, account: String, bytes transform: ([UInt8]?) throws -> [UInt8]?
    ) throws {
        try Self.checkIdentity(service: service, account: account)
        try Self.checkLengths(service: service, account: account, label: nil, comment: nil)
        let warning = try withSession { live -> CofferWarning? in
            try live.journal.withWriteLock { journalChanges in
                try live.apply(journalChanges)
                var current = try live.entries[ItemKey(service: service, account: account)].map {
                    try openSecret($0, keys: live.keys, vaultID: live.header.vaultID)
                }
                defer { if current != nil { wipe(&current!) } }
                var next = try transform(current)
                defer { if next != nil { wipe(&next!) } }
                switch (current, next) {
                case (nil, nil):
                    return
                case (let old?, let new?) where constantTimeEqual(old, new):
                    return  // unchanged: no record, and `modified` stays as it was
                case (_, let new?):
                    _ = try new.withUnsafeBytes { secret in
                        try live.commit(
                            CollectionOfOne(
                                BorrowedSet(service: service, account: account, secret: secret, label: nil, comment: nil)))
                    }
                case (_?, nil):
                    _ = try live.commit(CollectionOfOne(VaultChange.remove(service: service, account: account)))
                }
            }
            return live.compactAfterCommit()
        }
        if let warning { CofferWarnings.warn(warning) }
    }

    @discardableResult
    private func write<Changes: Collection>(_ changes: Changes) throws -> Int where Changes.Element: CommitChange {
        for change in changes {
            let (service, account) = change.identity
            try Self.checkIdentity(service: service, account: account)
            // Sets only: a removal writes nothing new, and must reach an item with a longer name
            // written before the limits existed.
            if let (label, comment) = change.attributes {
                try Self.checkLengths(service: service, account: account, label: label, comment: comment)
            }
        }
        let (written, warning) = try withSession { live in
            let written = try live.journal.withWriteLock { journalChanges in
                try live.apply(journalChanges)
                return try live.commit(changes)
            }
            return (written, live.compactAfterCommit())
        }
        if let warning { CofferWarnings.warn(warning) }
        return written
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
        let stored = area[start..<(start + VaultHeader.copySize)]
        let expected = try keys.headerMAC(stored: stored)
        guard constantTimeEqual(expected, Array(VaultHeader.storedMAC(of: stored))) else {
            throw CofferError(
                .corrupted, "the vault header (copy \(copy + 1)) fails authentication: it was altered", path: path,
                offset: Int64(Journal.fileHeaderSize + start))
        }
    }
}

/// One change for ``Vault/apply(_:)``.
public enum VaultChange: Sendable {
    /// Store `secret` (label/comment `nil` keep the current ones).
    case set(service: String, account: String, secret: [UInt8], label: String?, comment: String?)
    /// Remove the item.
    case remove(service: String, account: String)

    var identity: (String, String) {
        switch self {
        case .set(let service, let account, _, _, _): (service, account)
        case .remove(let service, let account): (service, account)
        }
    }
}

/// A change as ``Session/commit(_:)`` takes it: a ``VaultChange``, or a ``BorrowedSet``.
protocol CommitChange {
    /// Service and account.
    var identity: (String, String) { get }
    /// Label and comment of a set (`nil`: keep the current one); `nil` for a removal.
    var attributes: (label: String?, comment: String?)? { get }
    /// Calls `body` with the secret of a set (empty for a removal).
    func withSecret<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension VaultChange: CommitChange {
    var attributes: (label: String?, comment: String?)? {
        switch self {
        case .set(_, _, _, let label, let comment): (label, comment)
        case .remove: nil
        }
    }

    func withSecret<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch self {
        case .set(_, _, let secret, _, _): try secret.withUnsafeBytes(body)
        case .remove: try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
    }
}

/// A set whose secret is borrowed from the caller for the duration of one `write` (the
/// `Vault.set` overloads): no copy of the secret is made outside the wiped plaintext buffer.
struct BorrowedSet: CommitChange {
    var service: String
    var account: String
    var secret: UnsafeRawBufferPointer
    var label: String?
    var comment: String?

    var identity: (String, String) { (service, account) }
    var attributes: (label: String?, comment: String?)? { (label, comment) }
    func withSecret<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try body(secret) }
}

/// An item's identity, compared by exact UTF-8 bytes (see ``ExactKey``).
/// What other writers changed, collected for ``Vault/observeChanges(_:)``.
struct OutsideChanges: Sendable {
    /// Whether anyone observes (else nothing is collected).
    var tracking = false
    /// Set while records from other writers are applied.
    var collecting = false
    var items: Set<ItemKey> = []
    /// The file was replaced (compacted elsewhere): anything may have changed.
    var all = false

    /// What to tell observers, emptied; `nil` inside means "anything".
    mutating func take() -> Set<VaultItemID>?? {
        guard all || !items.isEmpty else { return .none }
        defer {
            items = []
            all = false
        }
        return .some(all ? nil : Set(items.map { VaultItemID(service: $0.service.string, account: $0.account.string) }))
    }
}

/// An item's identity: its service and account.
public struct VaultItemID: Hashable, Sendable {
    public let service: String
    public let account: String

    public init(service: String, account: String) {
        self.service = service
        self.account = account
    }
}

struct ItemKey: Hashable, Sendable {
    var service: ExactKey
    var account: ExactKey

    init(service: String, account: String) {
        self.service = ExactKey(service)
        self.account = ExactKey(account)
    }
}

struct Entry: Sendable {
    var item: VaultItem
    /// The sealed record (nonce ‖ ciphertext ‖ tag), decrypted only when the secret is read.
    /// A slice: the records of one `Session.apply` share one buffer (one allocation for the
    /// batch, one to free), which lives while any of its entries does.
    var payload: ArraySlice<UInt8>
    /// The chain value the record was sealed against (part of its associated data).
    var chain: ChainValue
}

/// An unlocked vault's state: the open journal, the keys and the index of sealed records.
struct Session: Sendable {
    var journal: Journal
    let keys: VaultKeys
    var header: VaultHeader
    var unlockedSlot: Int
    var chain: ChainValue
    var entries: [ItemKey: Entry] = [:]
    var recordCount = 0
    var liveBytes = 0
    /// The items other writers changed since observers were last told (while observed).
    var outside = OutsideChanges()
    /// Set when what other writers did could not be applied (the file was replaced by another
    /// vault, a record fails authentication): the journal has moved past it, so this session's
    /// items, keys and chain no longer describe the file. Every later call throws it — no stale
    /// read, no write sealed with the old chain — until the vault is locked and unlocked, or
    /// opened again.
    var failure: CofferError?

    init(journal: Journal, keys: VaultKeys, header: VaultHeader, unlockedSlot: Int) throws {
        self.journal = journal
        self.keys = keys
        self.header = header
        self.unlockedSlot = unlockedSlot
        self.chain = try keys.genesis(vaultID: header.vaultID, epoch: header.epoch)
    }

    mutating func apply(_ changes: JournalChanges) throws {
        do {
            try applyOrThrow(changes)
        } catch var error as CofferError {
            error.message += " — this vault stops here: lock and unlock it, or open it again, to read the file anew"
            failure = error
            throw error
        }
    }

    private mutating func applyOrThrow(_ changes: JournalChanges) throws {
        if changes.reset {
            // Another process compacted the file: a new epoch, so a new chain from its start.
            let (header, copy) = try Vault.selectHeader(journal.headerArea, path: journal.path)
            try Vault.verifyMAC(journal.headerArea, copy: copy, keys: keys, path: journal.path)
            adopt(header)
            chain = try keys.genesis(vaultID: header.vaultID, epoch: header.epoch)
            entries.removeAll()
            recordCount = 0
            liveBytes = 0
            if outside.tracking { outside.all = true }
        }
        // Records from other writers: note which items they touch, for observers.
        outside.collecting = outside.tracking && !outside.all
        defer { outside.collecting = false }
        try apply(changes.records)
    }

    /// Authenticates and applies records in order, advancing the chain. With
    /// `skippingFailures` (salvage) a record that fails is skipped — the chain still advances
    /// over its tag — and the count of skipped records is returned.
    ///
    /// In three steps, with the same outcome as opening and indexing one record at a time:
    /// 1. the payloads copied into one buffer: the index's entries keep slices of it (one
    ///    allocation for the batch instead of one per record, and one to free).
    /// 2. the chain value before every record, and every record opened (AEAD) and parsed
    ///    against its chain value. The chain advances over the records' tags, which need no
    ///    decryption, so a record can be opened as soon as the chain has reached it: for a large
    ///    batch one thread computes the chain while the other opens the records it has reached,
    ///    then both open the rest (``chainAndOpen(_:bounds:from:keys:vaultID:chains:into:)``).
    ///    A record too short to hold a tag ends the chain: no later record can be
    ///    authenticated, and step 3 throws there. The plaintexts are decrypted into a scratch
    ///    buffer per thread, wiped as soon as the record is parsed; the secret is never copied
    ///    out (the index keeps the sealed payload).
    /// 3. in order: the index updated, and the first failure thrown (or skipped, when salvaging)
    ///    with its offset, so what is applied before a failure is exactly what was before.
    @discardableResult
    mutating func apply(_ records: [JournalRecord], skippingFailures: Bool = false) throws -> Int {
        if records.isEmpty { return 0 }
        let count = records.count
        // 1. The payloads in one buffer, record i at bounds[i]..<bounds[i + 1].
        var bounds: [Int] = []
        bounds.reserveCapacity(count + 1)
        bounds.append(0)
        for i in 0..<count { bounds.append(bounds[i] + records[i].payload.count) }
        let arena = Self.copyPayloads(records, bounds: bounds)
        // 2. The chain (chains[i]: before record i) and the opens of records 0..<reached.
        let chains = UnsafeMutablePointer<ChainValue>.allocate(capacity: count + 1)
        defer { chains.deallocate() }  // ChainValue is trivial: nothing to deinitialise
        let opened = UnsafeMutablePointer<Opened>.allocate(capacity: count)
        // Outcomes are moved out one by one (no copy, no retain); the rest are destroyed here.
        var next = 0
        var reached = 0
        defer {
            (opened + next).deinitialize(count: reached - next)
            opened.deallocate()
        }
        reached = try arena.withUnsafeBytes { arena in
            try Self.chainAndOpen(
                arena, bounds: bounds, from: chain, keys: keys, vaultID: header.vaultID, chains: chains, into: opened)
        }
        // 3. The index, in order. At most one new item per record: grow the table once.
        entries.reserveCapacity(entries.count + reached)
        var skipped = 0
        while next < reached {
            let i = next
            let outcome = (opened + i).move()
            next += 1
            let payload = arena[bounds[i]..<bounds[i + 1]]
            switch outcome {
            case .body(let body):
                index(body, payload: payload, chainBefore: chains[i], chainAfter: chains[i + 1])
            case .invalid(let why):
                // Sealed by someone holding the key, but not a body Coffer accepts (a name that
                // is not UTF-8, say): salvage drops it like a record that fails to authenticate.
                if skippingFailures {
                    chain = chains[i + 1]
                    skipped += 1
                    continue
                }
                throw CofferError(
                    .corrupted, "a vault record authenticated but \(why)", path: journal.path,
                    offset: records[i].offset)
            case .failed(let failure):
                guard var error = failure as? CofferError else { throw failure }
                if skippingFailures && payload.count >= XChaCha20Poly1305.tagLength {
                    chain = chains[i + 1]
                    skipped += 1
                    continue
                }
                error.path = journal.path
                error.offset = records[i].offset
                throw error
            }
        }
        return skipped
    }

    /// What opening one record gave.
    private enum Opened {
        case body(IndexedBody)
        /// Authenticated, but refused by the body parser: why (``VaultRecordBody/invalidity(_:)``).
        case invalid(String)
        case failed(any Error)
    }

    /// Batches at least this large are opened on two threads, where there are two to use.
    static let parallelOpenThreshold = 512
    /// With one processor (or a CPU quota of one) the second thread would only wait for the
    /// first, spinning on `sched_yield`: open on one thread there.
    static let hasTwoProcessors = ProcessInfo.processInfo.activeProcessorCount >= 2
    /// Records per unit of work on two threads: the chain is published, and opens are claimed,
    /// this many at a time.
    static let pipelineBlock = 64

    /// The payloads of records `0..<bounds.count - 1` in one buffer, record `i` at
    /// `bounds[i]..<bounds[i + 1]`.
    private static func copyPayloads(_ records: [JournalRecord], bounds: [Int]) -> [UInt8] {
        let total = bounds[bounds.count - 1]
        guard total > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: total) { buffer, initialized in
            let arena = UnsafeMutableRawBufferPointer(buffer)
            for i in 0..<(bounds.count - 1) where bounds[i + 1] > bounds[i] {
                records[i].payload.withUnsafeBytes {
                    UnsafeMutableRawBufferPointer(rebasing: arena[bounds[i]..<bounds[i + 1]]).copyMemory(from: $0)
                }
            }
            initialized = total
        }
    }

    /// Step 2 of `apply` for the records `0..<bounds.count - 1` of `arena`: sets `chains[0]` to
    /// `start` and `chains[i + 1]` to the chain value after record `i`, and initialises
    /// `results[i]` with record `i` opened and parsed against `chains[i]`, for every record up
    /// to and including the first too short to hold a tag (whose open fails; no chain value
    /// follows it). Returns how many records were opened. Pure: writes only `chains` and
    /// `results`.
    ///
    /// A large batch runs on two threads with three shared counters and no lock. The first
    /// thread to start owns the chain: it extends it a block at a time, publishing how far it
    /// has got, then helps with the opens. The other claims blocks of records to open in order,
    /// waiting (yielding) only until the chain has reached its block — the chain is about
    /// twice as fast as the opens, so it waits only for the first block. Neither thread waits
    /// for the other otherwise, so if Dispatch runs both iterations on one thread one after the
    /// other, the first does all the work and the second finds none.
    /// - Throws: what advancing the chain throws (nothing has been applied then).
    private static func chainAndOpen(
        _ arena: UnsafeRawBufferPointer, bounds: [Int], from start: ChainValue, keys: VaultKeys, vaultID: [UInt8],
        chains: UnsafeMutablePointer<ChainValue>, into results: UnsafeMutablePointer<Opened>
    ) throws -> Int {
        let count = bounds.count - 1
        chains.initialize(to: start)
        let shared = PipelineBuffers(arena: arena, chains: chains, results: results)
        /// Advances the chain over `range`; returns the first record too short to hold a tag, or nil.
        @Sendable func extend(_ range: Range<Int>) throws -> Int? {
            for i in range {
                let sealed = UnsafeRawBufferPointer(rebasing: shared.arena[bounds[i]..<bounds[i + 1]])
                guard sealed.count >= XChaCha20Poly1305.tagLength else { return i }
                (shared.chains + i + 1).initialize(to: try keys.advance(shared.chains[i], tag: RecordCipher.tag(of: sealed)))
            }
            return nil
        }
        @Sendable func open(_ range: Range<Int>, _ opener: inout RecordOpener) {
            for i in range {
                let sealed = UnsafeRawBufferPointer(rebasing: shared.arena[bounds[i]..<bounds[i + 1]])
                let outcome: Opened
                do {
                    outcome = try opener.open(sealed, chain: shared.chains[i]) { plaintext in
                        VaultRecordBody.indexed(plaintext).map { .body($0) }
                            ?? .invalid(VaultRecordBody.invalidity(plaintext))
                    }
                } catch {
                    outcome = .failed(error)
                }
                (shared.results + i).initialize(to: outcome)
            }
        }
        if count < parallelOpenThreshold || !hasTwoProcessors {
            let reached = try extend(0..<count).map { $0 + 1 } ?? count
            var opener = RecordOpener(keys: keys, vaultID: vaultID)
            open(0..<reached, &opener)
            return reached
        }
        let pipeline = Pipeline()
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            var opener = RecordOpener(keys: keys, vaultID: vaultID)
            if pipeline.owner.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
                // The chain, a block at a time, published after each block.
                var done = 0
                while done < count {
                    let end = min(count, done + pipelineBlock)
                    do {
                        if let short = try extend(done..<end) {
                            pipeline.ready.store(short + 1, ordering: .releasing)  // chains[0...short]
                            break
                        }
                    } catch {
                        pipeline.failure.withLock { $0 = error }
                        pipeline.ready.store(done + 1, ordering: .releasing)
                        break
                    }
                    done = end
                    pipeline.ready.store(done + 1, ordering: .releasing)
                }
                pipeline.finished.store(true, ordering: .releasing)
            }
            // The opens, a claimed block at a time, each once the chain has reached it.
            while true {
                let first = pipeline.claim.wrappingAdd(pipelineBlock, ordering: .relaxed).oldValue
                guard first < count else { return }
                var end = min(count, first + pipelineBlock)
                while pipeline.ready.load(ordering: .acquiring) < end {  // chains[0..<end] needed
                    if pipeline.finished.load(ordering: .acquiring) {
                        end = min(end, pipeline.ready.load(ordering: .acquiring))
                        break
                    }
                    sched_yield()
                }
                guard first < end else { return }
                open(first..<end, &opener)
            }
        }
        // Every record the chain reached was opened: 0..<reached.
        let reached = min(count, pipeline.ready.load(ordering: .acquiring))
        if let failure = pipeline.failure.withLock({ $0 }) {
            results.deinitialize(count: reached)  // the caller destroys only what is returned
            throw failure
        }
        return reached
    }

    /// Records a sealed body in the index and advances the chain past it.
    private mutating func index(_ body: IndexedBody, payload: [UInt8]) throws {
        let after = try keys.advance(chain, over: payload)
        index(body, payload: payload[...], chainBefore: chain, chainAfter: after)
    }

    private mutating func index(
        _ body: IndexedBody, payload: ArraySlice<UInt8>, chainBefore: ChainValue, chainAfter: ChainValue
    ) {
        let size = payload.count + Journal.frameHeaderSize
        switch body {
        case .put(let item):
            // One hash and probe: updateValue returns the entry it replaced.
            let key = ItemKey(service: item.service, account: item.account)
            if outside.collecting { outside.items.insert(key) }
            if let old = entries.updateValue(Entry(item: item, payload: payload, chain: chainBefore), forKey: key) {
                liveBytes -= old.payload.count + Journal.frameHeaderSize
            }
            liveBytes += size
        case .delete(let service, let account):
            if outside.collecting { outside.items.insert(ItemKey(service: service, account: account)) }
            if let old = entries.removeValue(forKey: ItemKey(service: service, account: account)) {
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
    /// append succeeded. Each record costs one allocation, its payload: the plaintext is encoded
    /// into a wiped temporary buffer, the associated data is built on the stack, and the nonce,
    /// ciphertext and tag are written straight into the payload the journal appends.
    mutating func commit<Changes: Collection>(_ changes: Changes) throws -> Int where Changes.Element: CommitChange {
        let capacity = changes.count
        guard capacity > 0 else { return 0 }
        // Milliseconds, as stored: the item in memory equals the item read back from the file.
        let now = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 * 1000).rounded() / 1000)
        // Items as the earlier changes of this batch leave them (nil: removed), over `entries`.
        // A single change needs none (an empty dictionary allocates nothing).
        let batch = capacity > 1
        var overlay: [ItemKey: VaultItem?] = [:]
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
                let old = batch ? (overlay[key] ?? entries[key]?.item) : entries[key]?.item
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
                    if batch { overlay[key] = .some(item) }
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
            try journal.append(payloads)
            for i in 0..<count {
                index(
                    base[i].body, payload: payloads[i][...], chainBefore: base[i].chainBefore,
                    chainAfter: base[i].chainAfter)
            }
            return count
        }
    }

    /// A record of a commit, sealed but not yet appended.
    private struct Sealed {
        var body: IndexedBody
        var chainBefore: ChainValue
        var chainAfter: ChainValue
    }

    /// ``compactIfWorthIt()`` after a commit that is already durable: a failure (a full disk,
    /// say) must not make the caller believe the write failed, so it is returned as a warning
    /// for the caller to tell through ``CofferWarnings`` once its locks are released, and the
    /// file is left as it was (the next write tries again).
    mutating func compactAfterCommit() -> CofferWarning? {
        do {
            try compactIfWorthIt()
            return nil
        } catch {
            return CofferWarning(
                .compactionFailed, "compacting after a write failed; the write itself is durable: \(error)",
                path: journal.path)
        }
    }

    mutating func compactIfWorthIt() throws {
        let used = Int(journal.dataEnd - journal.dataStart)
        let garbage = used - liveBytes
        if garbage > 64 * 1024 && garbage > liveBytes {
            try journal.withWriteLock { changes in
                try apply(changes)
                try compact()
            }
        }
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
    /// file holds now (reread: see ``reloadHeader()``) and its sequence + 1. Call under the
    /// write lock, after applying the journal's changes.
    mutating func compact() throws {
        try reloadHeader()
        var header = self.header
        header.sequence += 1
        header.epoch = SecureRandom.bytes(count: 16)
        header.mac = try keys.headerMAC(header)
        var next = try Session(journal: journal, keys: keys, header: header, unlockedSlot: unlockedSlot)
        var payloads: [Data] = []
        for entry in entries.values.sorted(by: { ($0.item.service, $0.item.account) < ($1.item.service, $1.item.account) }) {
            var plaintext = try RecordCipher.open(entry.payload, keys: keys, vaultID: header.vaultID, chain: entry.chain)
            defer { wipe(&plaintext) }
            guard let body = plaintext.withUnsafeBytes({ VaultRecordBody.indexed($0) }) else {
                let why = plaintext.withUnsafeBytes { VaultRecordBody.invalidity($0) }
                throw CofferError(.corrupted, "a vault record authenticated but \(why)", path: journal.path)
            }
            let payload = try RecordCipher.seal(plaintext, keys: keys, vaultID: header.vaultID, chain: next.chain)
            try next.index(body, payload: payload)
            payloads.append(Data(payload))
        }
        try journal.rewrite(payloads: payloads, headerArea: header.areaBytes())
        next.outside = outside
        self = next
    }
}

/// The buffers handed to the threads of `Session.chainAndOpen`. Both read the payloads; only the
/// chain's owner writes `chains`, and the other reads only the values published before it
/// (`Pipeline.ready`); each writes only the results of the blocks it claimed.
private struct PipelineBuffers<T>: @unchecked Sendable {
    let arena: UnsafeRawBufferPointer
    let chains: UnsafeMutablePointer<ChainValue>
    let results: UnsafeMutablePointer<T>
}

/// The counters the two threads of `Session.chainAndOpen` share.
private final class Pipeline: Sendable {
    /// Whether a thread has taken the chain.
    let owner = Atomic<Bool>(false)
    /// How many chain values are published: `chains[0..<ready]` (release/acquire).
    let ready = Atomic<Int>(1)
    /// Set once the chain is complete, stopped at a short record, or failed: `ready` is final.
    let finished = Atomic<Bool>(false)
    /// The first record of the next block to open.
    let claim = Atomic<Int>(0)
    /// What advancing the chain threw.
    let failure = Locked<(any Error)?>(nil)
}

extension KeySlot {
    /// Whether running this slot's key derivation stays within `limit`: always for a key file
    /// or raw key (a hash), and for a passphrase when neither its passes nor its memory exceeds
    /// the limit's.
    func isWithin(_ limit: Argon2idParameters) -> Bool {
        kind != .passphrase || (opsLimit <= limit.opsLimit && memLimitBytes <= limit.memLimitBytes)
    }
}

extension Argon2idParameters {
    /// Each limit raised to at least `other`'s.
    func raised(to other: Argon2idParameters) -> Argon2idParameters {
        Argon2idParameters(
            opsLimit: max(opsLimit, other.opsLimit), memLimitBytes: max(memLimitBytes, other.memLimitBytes))
    }
}

/// Argon2id's cost in words: "1 GiB and 4 passes", "64 MiB and 1 pass", "8 KiB and 2 passes".
func describeCost(_ passes: UInt64, _ memory: UInt64) -> String {
    let units: [(UInt64, String)] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
    var size = "\(memory) bytes"
    for (unit, name) in units where memory >= unit {
        var whole = memory / unit
        var tenth = (memory % unit * 10 + unit / 2) / unit  // no overflow: memory % unit < 2^30
        if tenth == 10 { (whole, tenth) = (whole + 1, 0) }
        size = tenth == 0 ? "\(whole) \(name)" : "\(whole).\(tenth) \(name)"
        // Not exact to a tenth (1 GiB + 1 byte, say): the exact count too, so a cost just over
        // a limit never reads as equal to it.
        let (product, overflow) = (whole * 10 + tenth).multipliedReportingOverflow(by: unit)
        if overflow || product / 10 != memory || product % 10 != 0 { size = "\(memory) bytes (about \(size))" }
        break
    }
    return "\(size) and \(passes) pass\(passes == 1 ? "" : "es")"
}

extension Vault: WatchStoppable {
    package func stopWatching() { observers.stopAll() }
}
