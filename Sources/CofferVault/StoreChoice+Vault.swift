public import CofferCore
import Foundation

extension StoreChoice {
    /// Items of one service in the default vault of the property's ``CofferContext``, each key
    /// an account: `.vault(service:account:)` per key. Encrypted at rest.
    ///
    /// ```swift
    /// struct Credentials: StoredKeyGroup {
    ///     let github = StoredKey<String?>("octocat")
    /// }
    /// let credentials = StoredGroup<Credentials>(store: .vault(service: "api.github.com"))
    /// ```
    public static func vault(service: String) -> StoreChoice {
        StoreChoice(description: "vault(service: \(service))") { account in .vault(service: service, account: account) }
    }

    /// Items of one service in an explicit vault.
    public static func vault(_ vault: Vault, service: String) -> StoreChoice {
        StoreChoice(description: "vault(\(vault.url.path), service: \(service))") { account in
            .vault(vault, service: service, account: account)
        }
    }
}
