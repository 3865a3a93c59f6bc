// The vault: its type and state, the item API, maintenance, and the write path every change takes.
import CofferCore
import CofferRuntime
import CofferJournal
public import CofferCrypto
public import Foundation

/// An encrypted, keychain-style store of credentials in one file: a ``Keychain``, as
/// CofferPostgres's `PostgresVault` is, so code written against the protocol works on either.
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
    let fs: any FileSystem
    let options: JournalOptions
    /// The most ``unlock(_:kdfLimit:)`` lets a passphrase slot ask for, unless told otherwise.
    let kdfLimit: Argon2idParameters
    /// The unlocked session (`nil` while locked) under its lock, and the watch that tells
    /// observers what other processes changed: the journal-store engine the key-value file
    /// shares (``JournalStore``).
    let store: JournalStore<Session>

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

    init(
        url: URL, fileSystem: any FileSystem, options: JournalOptions, kdfLimit: Argon2idParameters,
        session: sending Session
    ) {
        self.url = url
        self.fs = fileSystem
        self.options = options
        self.kdfLimit = kdfLimit
        self.store = JournalStore(
            session, path: url.path, fileSystem: fileSystem,
            closedError: CofferError(.locked, "the vault is locked", path: url.path))
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
        try secret.withUnsafeBytes { try set($0, service: service, account: account, label: label, comment: comment) }
    }

    /// Stores a UTF-8 string secret. See ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        var secret = secret
        try secret.withUTF8 {
            try set(UnsafeRawBufferPointer($0), service: service, account: account, label: label, comment: comment)
        }
    }

    /// Stores a secret held in guarded memory.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) throws {
        try secret.withUnsafeBytes { try set($0, service: service, account: account, label: label, comment: comment) }
    }

    /// Every `set`: the secret is borrowed from the caller for this one write (no copy of it is
    /// made outside the record being sealed), and the write is one ``Session/commitSet(service:account:secret:label:comment:)``.
    private func set(
        _ secret: UnsafeRawBufferPointer, service: String, account: String, label: String?, comment: String?
    ) throws {
        try Self.checkIdentity(service: service, account: account)
        try Self.checkLengths(service: service, account: account, label: label, comment: comment)
        try store.write {
            try $0.commitSet(service: service, account: account, secret: secret, label: label, comment: comment)
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
        let key = ItemKey(service: service, account: account)
        return try read { $0.entries[key]?.item(key) }
    }

    /// The attributes of every item (of one service when given), sorted by service then account.
    public func items(service: String? = nil) throws -> [VaultItem] {
        try read { session in
            session.entries.compactMap { key, entry in
                service.map { key.service.string.utf8.elementsEqual($0.utf8) } ?? true ? entry.item(key) : nil
            }
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

    /// Adds new items as one commit (one append, one fsync) unless one of them exists already:
    /// whether one does is decided under the vault's write lock (`<file>.lock`), after catching
    /// up with the other writers, and the commit is made under that same hold, so an item
    /// another thread or process stored meanwhile is never replaced.
    ///
    /// - Parameter changes: `.set` changes only.
    /// - Returns: The items of `changes` that exist already, in the order of `changes` (then
    ///   nothing is written); empty when every item was added.
    /// - Throws: ``CofferError/Code/invalidArgument`` for a `.remove`, an empty name, or a name,
    ///   label or comment above its limit (nothing is written); as ``apply(_:)``.
    public func add(_ changes: [VaultChange]) throws -> [VaultItemID] {
        for change in changes where change.attributes == nil {
            throw CofferError(.invalidArgument, "add(_:) adds items: a removal is not one")
        }
        try Self.check(changes)
        return try store.write { live in
            var present: [VaultItemID] = []
            var seen = Set<ItemKey>()
            for change in changes {
                let (service, account) = change.identity
                let key = ItemKey(service: service, account: account)
                if live.entries[key] != nil, seen.insert(key).inserted {
                    present.append(VaultItemID(service: service, account: account))
                }
            }
            guard present.isEmpty else { return present }
            _ = try live.commit(changes)
            return []
        }
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
    /// this vault from it: such a call throws ``CofferError/Code/invalidArgument`` saying so
    /// (and the update then writes nothing), and the members that cannot throw (`isLocked`,
    /// `lock()`, `sessionKey`, `observeChanges`) stop the process with that message. The `Data`
    /// Coffer passes to `transform` is wiped when the update ends; the `Data` it returns is
    /// left as it is (it is the caller's, and may wrap the caller's own buffer), and Coffer's
    /// copy of it is wiped. Copies `transform` keeps are the caller's to wipe. Name the
    /// parameter's type (`(old: Data?)`, `(old: String?)`) when the body alone does not choose
    /// between this and the `String` form, as in `{ _ in nil }`.
    ///
    /// - Throws: whatever `transform` throws, unchanged, and then nothing is written;
    ///   ``CofferError`` — ``CofferError/Code/locked``, ``CofferError/Code/invalidArgument``
    ///   (empty service or account, or this vault called from `transform`),
    ///   ``CofferError/Code/busy``, ``CofferError/Code/io``, …
    public func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {
        try update(service: service, account: account, bytes: { current in
            var old = current.map { Data($0) }
            defer { SecureMemory.zero(&old) }
            // The returned Data is the caller's (it may even wrap their own buffer, bytesNoCopy):
            // it is copied, and the copy is wiped after the commit; the Data itself is left alone.
            return try transform(old).map { [UInt8]($0) }
        })
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

    // MARK: - Maintenance

    /// One slot as ``info()`` lists it.
    static func slotInfo(_ slot: KeySlot) -> KeySlotInfo {
        var info =
            switch slot.kind {
            case .passphrase:
                KeySlotInfo(kind: "passphrase", opsLimit: slot.opsLimit, memLimitBytes: slot.memLimitBytes)
            case .keyFile: KeySlotInfo(kind: "keyFile")
            case .rawKey: KeySlotInfo(kind: "key")
            case .recipient:
                KeySlotInfo(kind: "recipient", recipient: (try? X25519Recipient(publicKey: slot.recipientKey))?.description)
            }
        info.label = slot.label.isEmpty ? nil : slot.label
        return info
    }

    /// Format, key slots and sizes. Nothing secret.
    ///
    /// The key slots are read from the file, so a passphrase change or a slot added or removed
    /// by another process shows at once (those rewrite the header in place, not the records).
    public func info() throws -> VaultInfo {
        try withSession { live in
            try live.catchUp()
            _ = try live.reloadHeader()
        }
        return try read { session in
            VaultInfo(
                formatVersion: Int(session.header.version),
                keySlots: session.header.slots.map(Self.slotInfo),
                itemCount: session.entries.count,
                fileSize: session.journal.dataEnd, recordCount: session.recordCount)
        }
    }

    /// Rereads the whole file from the disk and authenticates every record and the header.
    /// - Returns: how many records authenticated and how many items they leave.
    /// - Throws: ``CofferError/Code/corrupted`` at the first failure, with its byte offset.
    public func verify() throws -> VaultVerification {
        try store.checkNotHeldHere()
        return try store.withState { session in
            guard session != nil else { throw CofferError(.locked, "the vault is locked", path: url.path) }
            // What other processes did first: a rotation made elsewhere changes the keys.
            try session!.catchUp()
            let live = session!
            let (journal, records) = try Journal.open(
                path: url.path, options: options, fileSystem: fs, create: .openExisting)
            defer { try? journal.close() }
            let (header, copy) = try Self.selectHeader(journal.headerArea, path: url.path)
            try Self.verifyMAC(journal.headerArea, copy: copy, keys: live.keys, path: url.path)
            var fresh = try Session(journal: journal, keys: live.keys, header: header, unlockedSlot: 0, opener: nil)
            try fresh.apply(records)
            return VaultVerification(records: fresh.recordCount, items: fresh.entries.count)
        }
    }

    /// Rewrites the file with only the live items, re-sealed under a new epoch.
    public func compact() throws {
        try store.compact()
    }

    /// Makes coalesced writes durable now (nothing to do in `.immediate` mode).
    public func flush() throws {
        try store.checkNotHeldHere()
        try store.ifOpen { try $0.journal.flush() }
    }

    // MARK: - Internals

    /// Runs `body` on the unlocked session in place (never on a copy: copying the session would
    /// copy its index, making every call cost O(items)).
    func withSession<T>(_ body: (inout Session) throws -> T) throws -> T {
        try store.withIndex(body)
    }

    private func read<T>(_ body: (Session) throws -> T) throws -> T {
        if Self.readsMustNotWait.value != nil {
            guard let result = try store.readIfAvailable({ try body($0) }) else { throw ReadWouldWait() }
            return result
        }
        return try store.read { try body($0) }
    }

    /// Set on a thread while an async read runs the synchronous form in the caller's task: the
    /// read then takes the index only if no one holds it, else throws ``ReadWouldWait`` and the
    /// async form asks again on a thread of Coffer's (Vault+Async.swift).
    static let readsMustNotWait = ThreadLocalSlot()

    /// A read that would have waited for a write in progress (its wait for `<file>.lock`, its fsync).
    struct ReadWouldWait: Error {}

    private func withSecret<T>(service: String, account: String, _ body: ([UInt8]) throws -> T) throws -> T? {
        let found = try read { session -> (Entry, VaultKeys, [UInt8])? in
            guard let entry = session.entries[ItemKey(service: service, account: account)] else { return nil }
            return (entry, session.keys, session.header.vaultID)
        }
        guard let (entry, keys, vaultID) = found else { return nil }
        var secret = try openSecret(entry, keys: keys, vaultID: vaultID)
        defer { SecureMemory.zero(&secret) }
        return try body(secret)
    }

    /// Decrypts an indexed record and returns its secret (the caller wipes it).
    private func openSecret(_ entry: Entry, keys: VaultKeys, vaultID: [UInt8]) throws -> [UInt8] {
        var plaintext = try RecordCipher.open(entry.payload, keys: keys, vaultID: vaultID, chain: entry.chain)
        defer { SecureMemory.zero(&plaintext) }
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
    ///
    /// Four direct checks, not a loop over an array of them: the array was an allocation and
    /// four retains on every `set` (2 % of a coalesced vault write).
    static func checkLengths(service: String, account: String, label: String?, comment: String?) throws {
        try checkLength("service name", service, maximumNameLength)
        try checkLength("account name", account, maximumNameLength)
        if let label { try checkLength("label", label, maximumTextLength) }
        if let comment { try checkLength("comment", comment, maximumTextLength) }
    }

    private static func checkLength(_ what: StaticString, _ text: String, _ limit: Int) throws {
        let length = text.utf8.count
        guard length <= limit else {
            throw CofferError(
                .invalidArgument, "a \(what) may be at most \(limit) bytes of UTF-8; this one has \(length)")
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
        try store.write { live in
            var current = try live.entries[ItemKey(service: service, account: account)].map {
                try openSecret($0, keys: live.keys, vaultID: live.header.vaultID)
            }
            defer { SecureMemory.zero(&current) }
            var next = try transform(current)
            defer { SecureMemory.zero(&next) }
            switch (current, next) {
            case (nil, nil):
                return
            case (let old?, let new?) where SecureMemory.constantTimeEqual(old, new):
                return  // unchanged: no record, and `modified` stays as it was
            case (_, let new?):
                try new.withUnsafeBytes { secret in
                    try live.commitSet(service: service, account: account, secret: secret, label: nil, comment: nil)
                }
            case (_?, nil):
                _ = try live.commit(CollectionOfOne(VaultChange.remove(service: service, account: account)))
            }
        }
    }

    @discardableResult
    private func write<Changes: Collection>(_ changes: Changes) throws -> Int where Changes.Element == VaultChange {
        try Self.check(changes)
        return try store.write { try $0.commit(changes) }
    }

    /// Refuses, before anything is written, a change with an empty name, or a set whose name,
    /// label or comment is above its limit.
    private static func check<Changes: Collection>(_ changes: Changes) throws where Changes.Element == VaultChange {
        for change in changes {
            let (service, account) = change.identity
            try Self.checkIdentity(service: service, account: account)
            // Sets only: a removal writes nothing new, and must reach an item with a longer name
            // written before the limits existed.
            if let (label, comment) = change.attributes {
                try checkLengths(service: service, account: account, label: label, comment: comment)
            }
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

/// Printed, logged or dumped, a change names its item and never shows the secret it sets.
extension VaultChange: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        switch self {
        case .set(let service, let account, _, let label, let comment):
            "VaultChange.set(service: \(String(reflecting: service)), account: \(String(reflecting: account)), "
                + "secret: <redacted>, label: \(label.map { String(reflecting: $0) } ?? "nil"), "
                + "comment: \(comment.map { String(reflecting: $0) } ?? "nil"))"
        case .remove(let service, let account):
            "VaultChange.remove(service: \(String(reflecting: service)), account: \(String(reflecting: account)))"
        }
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .enum) }
}

/// What ``Session/commit(_:)`` reads of a change (a set's secret is borrowed by `Vault.set`
/// and goes to ``Session/commitSet(service:account:secret:label:comment:)`` instead).
extension VaultChange {
    /// Label and comment of a set (`nil`: keep the current one); `nil` for a removal.
    var attributes: (label: String?, comment: String?)? {
        switch self {
        case .set(_, _, _, let label, let comment): (label, comment)
        case .remove: nil
        }
    }

    /// Calls `body` with the secret of a set (empty for a removal).
    func withSecret<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch self {
        case .set(_, _, let secret, _, _): try secret.withUnsafeBytes(body)
        case .remove: try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
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

/// An item's identity, compared by exact UTF-8 bytes (see ``ExactKey``).
///
/// Both names are hashed once, when the key is made, and the index's probes compare that hash
/// before the names: an open makes each record's key on the thread that decrypted it, so the
/// thread that inserts 10,000 keys in order hashes one word per key instead of its names, and
/// compares no names with the keys that merely share a bucket run (those were most of an
/// insert's instructions).
struct ItemKey: Hashable, Sendable {
    let service: ExactKey
    let account: ExactKey
    /// Both names through one `Hasher` (this process's random seed): equal keys have equal
    /// hashes; a dictionary mixes it again with its own seed.
    private let hash: Int

    init(service: String, account: String) {
        self.service = ExactKey(service)
        self.account = ExactKey(account)
        var hasher = Hasher()
        self.service.hash(into: &hasher)
        self.account.hash(into: &hasher)
        hash = hasher.finalize()
    }

    static func == (a: ItemKey, b: ItemKey) -> Bool {
        a.hash == b.hash && a.service == b.service && a.account == b.account
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(hash)
    }
}

struct Entry: Sendable {
    /// The item's label, comment and dates; its names are its key's.
    var attributes: ItemAttributes
    /// The sealed record (nonce ‖ ciphertext ‖ tag), decrypted only when the secret is read.
    /// A slice: the records of one `Session.apply` share the buffer the journal read them into
    /// (the file's image at an open: nothing copied, one buffer to free), which lives while
    /// any of its entries does.
    var payload: ArraySlice<UInt8>
    /// The chain value the record was sealed against (part of its associated data).
    var chain: ChainValue
    /// Whether `payload`'s buffer was made for this entry alone (by a set), rather than being
    /// a slice of a batch's buffer, which also holds other records, superseded ones included.
    var ownsBuffer = false

    /// The label and comment a new record of the item has (`label` and `comment`, or the
    /// current ones for `nil`), and when it was created. `mutating` only so that it is reached
    /// through the dictionary's in-place accessor: its getter would copy the whole entry.
    mutating func kept(label: String?, comment: String?) -> (label: String, comment: String, created: Date) {
        (label ?? attributes.label, comment ?? attributes.comment, attributes.created)
    }

    /// The item this entry is the index's record of, under `key`.
    func item(_ key: ItemKey) -> VaultItem {
        attributes.item(service: key.service.string, account: key.account.string)
    }

    /// The item set again (``Session/commitSet(service:account:secret:label:comment:)``), in
    /// place: a new record, `modified`, and the label and comment that are given. Returns the
    /// size of the record it replaces.
    ///
    /// The record is copied over the one it replaces when the buffer was made for this entry
    /// (``ownsBuffer``) and is the same size, so rewriting an item allocates nothing; if a
    /// reader holds a copy of the entry, the copy-on-write gives this one a buffer of its own
    /// first. A slice of a batch's buffer (after an open or a catch-up) is never written into:
    /// the last entry left on it would keep the whole batch alive; it gets its own buffer.
    mutating func resealed(
        _ sealed: UnsafeRawBufferPointer, chain: ChainValue, modified: Date, label: String?, comment: String?
    ) -> Int {
        let replaced = payload.count
        if ownsBuffer && replaced == sealed.count {
            payload.withUnsafeMutableBytes { $0.copyMemory(from: sealed) }
        } else {
            payload = ArraySlice(sealed)
            ownsBuffer = true
        }
        self.chain = chain
        attributes.modified = modified
        if let label { attributes.label = label }
        if let comment { attributes.comment = comment }
        return replaced
    }
}
