#if Postgres
// A vault kept in PostgreSQL as a `Keychain`: the synchronous forms of the item calls, which
// run the async ones on Coffer's own threads and block the caller until they end.
import CofferCore
public import CofferCrypto
public import CofferVault
public import Foundation

extension PostgresVault: Keychain {
    /// The vault's name with its server and database (never a password): `vault NAME on
    /// postgres://user@host:port/database (tls: …)`.
    public var location: String { "vault \(name) on \(configuration)" }

    // MARK: - Items, for callers that are not async

    /// ``set(_:service:account:label:comment:)-(Data,_,_,_,_)``, blocking until it ends.
    public func set(_ secret: Data, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        try Offload.wait { try await self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// Stores a text secret (its UTF-8), blocking until it ends.
    public func set(_ secret: String, service: String, account: String, label: String? = nil, comment: String? = nil)
        throws
    {
        try set(Data(secret.utf8), service: service, account: account, label: label, comment: comment)
    }

    /// The secret's bytes, or `nil`, blocking until they arrive.
    public func data(service: String, account: String) throws -> Data? {
        try Offload.wait { try await self.data(service: service, account: account) }
    }

    /// Stores a secret held in guarded memory, blocking until it is committed.
    public func set(
        _ secret: SecureBytes, service: String, account: String, label: String? = nil, comment: String? = nil
    ) throws {
        try Offload.wait { try await self.set(secret, service: service, account: account, label: label, comment: comment) }
    }

    /// The secret as text, blocking until it arrives.
    public func string(service: String, account: String) throws -> String? {
        try Offload.wait { try await self.string(service: service, account: account) }
    }

    /// The secret in guarded memory, or `nil`, blocking until it arrives.
    public func secret(service: String, account: String) throws -> SecureBytes? {
        try Offload.wait { try await self.secret(service: service, account: account) }
    }

    /// The item's attributes (no secret), or `nil`, blocking until they arrive.
    public func item(service: String, account: String) throws -> VaultItem? {
        try Offload.wait { try await self.item(service: service, account: account) }
    }

    /// Every item (of `service`, when given), blocking until they arrive.
    public func items(service: String? = nil) throws -> [VaultItem] {
        try Offload.wait { try await self.items(service: service) }
    }

    /// Removes the item, blocking until it is removed; returns whether there was one.
    @discardableResult
    public func remove(service: String, account: String) throws -> Bool {
        try Offload.wait { try await self.remove(service: service, account: account) }
    }

    /// Applies every change in one transaction, blocking until it is committed.
    public func apply(_ changes: [VaultChange]) throws {
        try Offload.wait { try await self.apply(changes) }
    }

    /// ``update(service:account:_:)``, blocking until it ends. `transform` runs on one of
    /// Coffer's threads while the caller waits, and is taken back before this returns.
    public func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {
        try withoutActuallyEscaping(transform) { transform in
            let lent = WhileBlocked(transform)
            defer { lent.revoke() }
            try Offload.wait { try await self.update(service: service, account: account, lent: lent) }
        }
    }

    /// `add(_:)`, blocking until it ends.
    public func add(_ changes: [VaultChange]) throws -> [VaultItemID] {
        try Offload.wait { try await self.add(changes) }
    }


    /// Nothing to do: every write is committed in the database when it returns.
    public func flush() throws {}

    /// Nothing to do: every write is committed in the database when it returns.
    public func flush() async throws {}
}

#endif
