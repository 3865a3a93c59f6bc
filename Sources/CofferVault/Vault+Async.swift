// The file vault's `async` forms of the ``Keychain`` calls: reads answered from memory at once,
// writes (an fsync, a wait for `<file>.lock`) run on Coffer's own threads while the caller suspends.
import CofferCore
public import CofferCrypto
public import Foundation

extension Vault {
    // MARK: - Reading, from async code

    // Reads answer from the index in memory (after catching up with other writers' appends,
    // which are already in the page cache): no fsync, no wait for the file lock, so they run
    // in the caller's task, as the synchronous forms do.

    /// The secret of an item as bytes, or `nil` when there is no such item: read from memory,
    /// in the calling task. As ``data(service:account:)``.
    public func data(service: String, account: String) async throws -> Data? {
        try synchronously { try self.data(service: service, account: account) }
    }

    /// The secret of an item as UTF-8 text: read from memory, in the calling task.
    public func string(service: String, account: String) async throws -> String? {
        try synchronously { try self.string(service: service, account: account) }
    }

    /// The secret of an item in guarded memory: read from memory, in the calling task.
    public func secret(service: String, account: String) async throws -> SecureBytes? {
        try synchronously { try self.secret(service: service, account: account) }
    }

    /// An item's attributes (never its secret): read from memory, in the calling task.
    public func item(service: String, account: String) async throws -> VaultItem? {
        try synchronously { try self.item(service: service, account: account) }
    }

    /// The attributes of every item (of one service when given): read from memory, in the
    /// calling task.
    public func items(service: String? = nil) async throws -> [VaultItem] {
        try synchronously { try self.items(service: service) }
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

    // MARK: - Internals

    /// Runs `body` in a synchronous context, where it calls the synchronous form of a name
    /// that has both.
    private func synchronously<T>(_ body: () throws -> T) rethrows -> T { try body() }

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
