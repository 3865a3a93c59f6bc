#if Postgres
package import CofferVault

extension PostgresVault {
    /// The key-encryption key of the slot this instance was unlocked with, for `coffer unlock`
    /// (``VaultSessionKey``); `nil` when locked or unlocked with an identity. Opened again with
    /// `open(name:unlock: .sessionKey(key), …)`.
    package var sessionKey: VaultSessionKey? { (try? sealing)?.sessionKey }
}

extension PostgresVault: SessionKeyLending {}
#endif
