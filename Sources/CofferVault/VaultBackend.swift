public import CofferCore

extension Backend {
    /// Items of one service in the default vault of the property's ``CofferContext``, each key
    /// an account: `.vault(service:account:)` per key. Encrypted at rest.
    ///
    /// ```swift
    /// struct Credentials: StoredKeyGroup {
    ///     let github = StoredKey<String?>("octocat")
    /// }
    /// let credentials = StoredGroup<Credentials>(backend: .vault(service: "api.github.com"))
    /// ```
    public static func vault(service: String) -> Backend {
        Backend(description: "vault(service: \(service))") { account in .vault(service: service, account: account) }
    }

    /// Items of one service in an explicit vault.
    public static func vault(_ vault: Vault, service: String) -> Backend {
        Backend(description: "vault(\(vault.url.path), service: \(service))") { account in
            .vault(vault, service: service, account: account)
        }
    }
}
