// Which keychain the item commands work on: the file vault, or the PostgreSQL vault `--store` names.
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation
#if Postgres
import CofferPostgres
#endif

extension GlobalOptions {
    /// `--store`, else `$COFFER_STORE`: a `postgres://` URL (`?vault=NAME`, default `default`).
    var storeURL: String? {
        get throws {
            if let store, !store.isEmpty { return try Self.refusingPassword(store, from: "--store") }
            // An explicit --vault names a file vault: $COFFER_STORE must not override it.
            if let vault, !vault.isEmpty { return nil }
            return environmentText("COFFER_STORE").flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    #if Postgres
    /// The server and vault name (`vault=`, default `default`) of a `--store` URL.
    static func postgresVault(_ url: String) throws -> (PostgresConfiguration, String) {
        let configuration = try PostgresConfiguration(url: url)
        let name = URLComponents(string: url)?.queryItems?.first { $0.name == "vault" }?.value ?? "default"
        return (configuration, name)
    }
    #endif

    /// `url`, unless it holds a password: an argument is shown to every local user (`ps`,
    /// `/proc/PID/cmdline`) for the whole run. The environment (`COFFER_STORE`, `PGPASSWORD`) and
    /// the password file are readable by this user only, and a password there is never shown
    /// (descriptions and errors leave it out).
    static func refusingPassword(_ url: String, from option: String) throws -> String {
        // The user information is what precedes the last `@` before the query; with a `:`, it
        // holds a password (also when the password has an unescaped `/` and the URL is malformed).
        let beforeQuery = url.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        let afterScheme = beforeQuery.range(of: "://").map { beforeQuery[$0.upperBound...] } ?? beforeQuery
        let userInfo = afterScheme.lastIndex(of: "@").map { afterScheme[..<$0] } ?? ""
        let query = URLComponents(string: url)?.queryItems ?? []
        if userInfo.contains(":") || query.contains(where: { $0.name == "password" }) {
            throw CLIError.usage(
                "\(option) holds a password, which every user of this machine can read in `ps` while coffer runs: "
                    + "leave it out and put it in PGPASSWORD, in ~/.pgpass or in the file PGPASSFILE names (mode 0600)")
        }
        return url
    }

    /// The keychain every item command (set, get, list, rm, generate, run, inject, import,
    /// export, unlock) works on: the PostgreSQL vault `--store` names, else the file vault.
    /// A PostgreSQL vault is made by `coffer --store … init` only: a misspelled `vault=` is
    /// "not found", never a new, empty vault. Without an explicit unlock source, the key `coffer
    /// unlock` kept in the session keyring opens it without a prompt (not with `usingSessionKey:
    /// false`).
    func openKeychain(usingSessionKey: Bool = true) throws -> any Keychain {
        guard let url = try storeURL else { return try openVault(usingSessionKey: usingSessionKey) }
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw CLIError.usage("--store takes a postgres:// URL (the file vault is chosen with --vault)")
        }
        #if Postgres
        let (configuration, name) = try Self.postgresVault(url)
        do {
            if usingSessionKey, let description = try? SessionKeyring.description(forStore: configuration, vault: name),
                let vault = try openWithSessionKey(
                    description,
                    place: "vault \(escapedName(name)) on \(configuration)",
                    { try PostgresVault.open(name: name, unlock: $0, configuration: configuration) })
            {
                return vault
            }
        } catch let error as CofferError where error.code == .notFound {
            throw CofferError(
                .notFound,
                "there is no vault \(escapedName(name)) on \(configuration): create it with `coffer --store … init`")
        }
        let unlock = try unlock(prompt: "Passphrase for vault \(escapedName(name)) on \(configuration): ")
        do {
            return try PostgresVault.open(name: name, unlock: unlock, configuration: configuration)
        } catch let error as CofferError where error.code == .notFound {
            throw CofferError(
                .notFound,
                "there is no vault \(escapedName(name)) on \(configuration): create it with `coffer --store … init`")
        }
        #else
        throw CLIError(
            .failure, "this coffer was built without PostgreSQL support: build it with `--traits Postgres`")
        #endif
    }
}
