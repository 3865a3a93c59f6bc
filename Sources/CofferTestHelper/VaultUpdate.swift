// The vault counter child for Vault.update (CounterStressTests, RELIABILITY.md section 8).
import CofferCrypto
import CofferVault
import Foundation

/// The raw key of the vault `vault-update` opens: 32 bytes of 0x5a, as CounterStressTests
/// creates it.
let counterVaultKey = [UInt8](repeating: 0x5a, count: 32)

/// `vault-update PATH TIMES`: increments the little-endian UInt64 secret of the item
/// (counter, update) TIMES times with `Vault.update`, each read-modify-write under the vault's
/// own lock (no application lock, unlike `vault-increment`).
///
/// Prints `ready` once the vault is open, then waits for a line (or end of file) on standard
/// input before the first increment, so the parent can start two children's loops together:
/// otherwise one child could finish before the other has opened the vault.
func vaultUpdateIncrement(path: String, times: Int) throws {
    let vault = try Vault.open(
        at: URL(fileURLWithPath: path), unlock: .key(try SecureBytes(copying: counterVaultKey)), lockTimeout: .seconds(30))
    say("ready")
    _ = readLine()
    for _ in 0..<times {
        try vault.update(service: "counter", account: "update") { (old: Data?) in
            var count: UInt64 = 0
            if let old {
                guard old.count == 8 else { fail("the counter holds \(old.count) bytes, not 8") }
                count = UInt64(littleEndian: old.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
            }
            return withUnsafeBytes(of: (count + 1).littleEndian) { Data($0) }
        }
    }
}
