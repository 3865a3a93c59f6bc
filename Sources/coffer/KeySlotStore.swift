import Coffer
import CofferCrypto
import Foundation

#if Postgres
import CofferPostgres
#endif

/// What `coffer slot` and `coffer rotate` work on: the key slots of a file vault or of a
/// PostgreSQL vault (`--store`).
protocol KeySlotStore: Keychain {
    func keySlots() throws -> [KeySlotInfo]
    func addRecipient(_ recipient: X25519Recipient, label: String?) throws -> Bool
    func addKeySlot(_ source: VaultUnlock, kdf: Argon2idParameters, label: String?) throws
    func removeKeySlot(at index: Int) throws
    func removeRecipient(_ recipient: X25519Recipient) throws -> Int
    func rotate(removing slots: Set<Int>, removingRecipients: [X25519Recipient], keeping: [VaultUnlock]) throws
        -> VaultRotation
}

extension Vault: KeySlotStore {
    func keySlots() throws -> [KeySlotInfo] { try info().keySlots }
}

#if Postgres
extension PostgresVault: KeySlotStore {
    func rotate(removing slots: Set<Int>, removingRecipients: [X25519Recipient], keeping: [VaultUnlock]) throws
        -> VaultRotation
    {
        try rotate(removing: slots, removingRecipients: removingRecipients, keeping: keeping, kdfLimit: Vault.defaultKDFLimit)
    }
}
#endif

extension GlobalOptions {
    /// The vault whose key slots `slot` and `rotate` change: the PostgreSQL one `--store`
    /// names, else the file vault. Opened with the secret itself, never with a key kept by
    /// `coffer unlock`: who may open the vault is decided by someone who can prove it.
    func openKeySlotStore() throws -> any KeySlotStore {
        guard try storeURL != nil else { return try openVault(usingSessionKey: false) }
        #if Postgres
        guard let vault = try openKeychain(usingSessionKey: false) as? PostgresVault else {
            throw CLIError(.failure, "--store did not open a PostgreSQL vault")
        }
        return vault
        #else
        _ = try openKeychain()  // says that this coffer was built without PostgreSQL support
        throw CLIError(.failure, "this coffer was built without PostgreSQL support")
        #endif
    }
}
