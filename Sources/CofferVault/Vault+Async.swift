// The file vault's `async` forms of the ``Keychain`` calls: reads answered from memory at once,
// writes (an fsync, a wait for `<file>.lock`) run on Coffer's own threads while the caller suspends.
public import CofferCore
public import CofferCrypto
public import Foundation

extension Vault {
    // MARK: - Reading, from async code

    // Reads answer from the index in memory (after catching up with other writers' appends,
    // which are already in the page cache), in the caller's task, when no one holds the index.
    // A write of this vault's holds it while it waits for `<file>.lock` and while it fsyncs:
    // then the read is asked again on a thread of Coffer's and the caller suspends, so no
    // thread of the cooperative pool waits behind a write.

    /// The secret of an item as bytes, or `nil` when there is no such item: read from memory,
    /// in the calling task unless a write holds the index. As ``data(service:account:)``.
    public func data(service: String, account: String) async throws -> Data? {
        try await withoutWaiting { try self.data(service: service, account: account) }
    }

    /// The secret of an item as UTF-8 text: read from memory, in the calling task unless a
    /// write holds the index.
    public func string(service: String, account: String) async throws -> String? {
        try await withoutWaiting { try self.string(service: service, account: account) }
    }

    /// The secret of an item in guarded memory: read from memory, in the calling task unless a
    /// write holds the index.
    public func secret(service: String, account: String) async throws -> SecureBytes? {
        try await withoutWaiting { try self.secret(service: service, account: account) }
    }

    /// An item's attributes (never its secret): read from memory, in the calling task unless a
    /// write holds the index.
    public func item(service: String, account: String) async throws -> VaultItem? {
        try await withoutWaiting { try self.item(service: service, account: account) }
    }

    /// The attributes of every item (of one service when given): read from memory, in the
    /// calling task unless a write holds the index.
    public func items(service: String? = nil) async throws -> [VaultItem] {
        try await withoutWaiting { try self.items(service: service) }
    }

    // MARK: - Writing, from async code

    // Each write takes `<file>.lock` (waiting for another process's write) and, by default,
    // fsyncs: it runs on a thread of Coffer's (`Offload.run`), never on the cooperative pool,
    // and the calling task suspends meanwhile.

    /// Stores a secret, durable when it returns, without blocking a thread: the write runs on
    /// Coffer's own threads. As ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``.
    public func set(_ secret: Data, service: String, account: String, label: String? = nil, comment: String? = nil)
        async throws
    {
        try await Offload.run { try self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// Stores a UTF-8 text secret, without blocking a thread.
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        async throws
    {
        try await Offload.run { try self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// Stores a secret held in guarded memory, without blocking a thread.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) async throws {
        try await Offload.run { try self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// Removes an item, without blocking a thread. Returns whether it existed.
    @discardableResult
    public func remove(service: String, account: String) async throws -> Bool {
        try await Offload.run { try self.remove(service: service, account: account) }
    }

    /// Applies several changes as one commit (one append, one fsync), without blocking a thread.
    public func apply(_ changes: [VaultChange]) async throws {
        try await Offload.run { try self.apply(changes) }
    }

    /// Adds new items as one commit unless one of them exists already, without blocking a
    /// thread. As ``add(_:)``.
    public func add(_ changes: [VaultChange]) async throws -> [VaultItemID] {
        try await Offload.run { try self.add(changes) }
    }

    /// Reads, transforms and writes one item's secret atomically, without blocking a thread:
    /// the whole update (the wait for `<file>.lock`, `transform`, the fsync) runs on one of
    /// Coffer's threads, which is why `transform` is `@Sendable`. As
    /// ``update(service:account:_:)-(_,_,(Data?)->Data?)``; `transform` is not kept after the
    /// call.
    public func update(service: String, account: String, _ transform: @Sendable (Data?) throws -> Data?) async throws {
        try await withoutActuallyEscaping(transform) { transform in
            try await Self.lending(transform) { transform in
                try await Offload.run { try self.update(service: service, account: account, transform) }
            }
        }
    }

    /// Updates a UTF-8 string secret atomically, without blocking a thread: as the `Data` form
    /// (and the synchronous `String` form's warning about `String` copies holds).
    public func update(service: String, account: String, _ transform: @Sendable (String?) throws -> String?)
        async throws
    {
        try await withoutActuallyEscaping(transform) { transform in
            try await Self.lending(transform) { transform in
                try await Offload.run { try self.update(service: service, account: account, transform) }
            }
        }
    }

    /// Makes coalesced writes durable now, without blocking a thread (the fsync runs on
    /// Coffer's own threads).
    public func flush() async throws {
        try await Offload.run { try self.flush() }
    }

    // MARK: - Opening, unlocking and key changes, from async code

    // Each runs Argon2id for a passphrase (a tenth of a second to seconds) and reads or writes
    // the file, waiting for `<file>.lock`: on a thread of Coffer's, while the caller suspends.

    /// ``create(at:unlock:kdf:durability:lockTimeout:)`` from async code: the key derivation
    /// and the file's first write run on Coffer's own threads.
    public static func create(
        at url: URL, unlock: VaultUnlock, kdf: Argon2idParameters = .moderate, durability: Durability = .immediate,
        lockTimeout: Duration = CofferContext.defaultLockTimeout
    ) async throws -> Vault {
        try await Offload.run {
            try Vault.create(at: url, unlock: unlock, kdf: kdf, durability: durability, lockTimeout: lockTimeout)
        }
    }

    /// ``open(at:unlock:kdfLimit:durability:lockTimeout:recovery:)`` from async code: the key
    /// derivation and the reading of the file run on Coffer's own threads.
    public static func open(
        at url: URL, unlock: VaultUnlock, kdfLimit: Argon2idParameters = defaultKDFLimit,
        durability: Durability = .immediate, lockTimeout: Duration = CofferContext.defaultLockTimeout,
        recovery: JournalRecovery = .strict
    ) async throws -> Vault {
        try await Offload.run {
            try Vault.open(
                at: url, unlock: unlock, kdfLimit: kdfLimit, durability: durability, lockTimeout: lockTimeout,
                recovery: recovery)
        }
    }

    /// ``unlock(_:kdfLimit:)`` from async code: the key derivation runs on Coffer's own threads.
    public func unlock(_ source: VaultUnlock, kdfLimit: Argon2idParameters? = nil) async throws {
        try await Offload.run { try self.unlock(source, kdfLimit: kdfLimit) }
    }

    /// ``changePassphrase(to:kdf:)`` from async code: the key derivation and the header's
    /// rewrite run on Coffer's own threads.
    public func changePassphrase(to new: VaultUnlock, kdf: Argon2idParameters? = nil) async throws {
        try await Offload.run { try self.changePassphrase(to: new, kdf: kdf) }
    }

    /// ``addKeySlot(_:kdf:label:)`` from async code: the key derivation and the header's rewrite
    /// run on Coffer's own threads.
    public func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters = .moderate, label: String? = nil) async throws {
        try await Offload.run { try self.addKeySlot(source, kdf: kdf, label: label) }
    }

    // MARK: - Internals

    /// Runs `body`, a read that calls the synchronous form of a name that has both, in the
    /// calling task if it need not wait for the index; else on a thread of Coffer's.
    private func withoutWaiting<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let slot = Self.readsMustNotWait
        slot.value = UnsafeMutableRawPointer(bitPattern: 1)
        let outcome = Result { try body() }
        slot.value = nil
        if case .failure(let error) = outcome, error is ReadWouldWait {
            return try await Offload.run(body)
        }
        return try outcome.get()
    }

    /// Lends the caller's `transform` to `body` as a closure that may escape into the work
    /// `body` starts, and takes it back before returning (after any call of it in progress
    /// ends), so the caller's closure never outlives this call.
    private static func lending<Input, Output, R: Sendable>(
        _ transform: @escaping @Sendable (Input) throws -> Output,
        _ body: (@escaping @Sendable (Input) throws -> Output) async throws -> R
    ) async throws -> R {
        let lent = WhileBlocked(transform)
        defer { lent.revoke() }
        return try await body { input in try lent.call { try $0(input) } }
    }
}
