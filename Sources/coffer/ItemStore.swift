import Coffer
import CofferCrypto
import Foundation
#if Postgres
import CofferPostgres
#endif

/// What `set`, `get`, `list` and `rm` need of a vault: the file vault, or (with the `Postgres`
/// trait) a vault in PostgreSQL named by `--store postgres://…` or `$COFFER_STORE`.
protocol ItemStore {
    /// Where the items are, for messages: a path, or the server and vault (never a password).
    var location: String { get }
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) throws
    func secret(service: String, account: String) throws -> SecureBytes?
    func items(service: String?) throws -> [VaultItem]
    func remove(service: String, account: String) throws -> Bool
}

extension Vault: ItemStore {
    var location: String { url.path }
}

#if Postgres
extension PostgresVault: ItemStore {
    var location: String { "vault \(name) on \(configuration)" }

    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) throws {
        try apply([
            .set(
                service: service, account: account, secret: secret.withUnsafeBytes { [UInt8]($0) }, label: label,
                comment: comment)
        ])
    }

    func secret(service: String, account: String) throws -> SecureBytes? {
        guard var data = try data(service: service, account: account) else { return nil }
        defer { data.resetBytes(in: 0..<data.count) }
        return try SecureBytes(copying: [UInt8](data))
    }
}
#endif

extension GlobalOptions {
    /// `--store`, else `$COFFER_STORE`: a `postgres://` URL (`?vault=NAME`, default `default`).
    var storeURL: String? {
        if let store, !store.isEmpty { return store }
        return environmentText("COFFER_STORE").flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The vault the item commands use: the PostgreSQL one `--store` names, else the file vault.
    /// `create`: the first `set` on a server creates the vault there (with a passphrase asked
    /// twice, or the key file given).
    func openItemStore(create: Bool = false) throws -> any ItemStore {
        guard let url = storeURL else { return try openVault() }
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw CLIError.usage("--store takes a postgres:// URL (the file vault is chosen with --vault)")
        }
        #if Postgres
        let configuration = try PostgresConfiguration(url: url)
        let name = URLComponents(string: url)?.queryItems?.first { $0.name == "vault" }?.value ?? "default"
        let unlock = try unlock(prompt: "Passphrase for vault \(name) on \(configuration): ")
        if create {
            return try PostgresVault.openOrCreate(name: name, unlock: unlock, configuration: configuration)
        }
        return try PostgresVault.open(name: name, unlock: unlock, configuration: configuration)
        #else
        throw CLIError(
            .failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }
}
