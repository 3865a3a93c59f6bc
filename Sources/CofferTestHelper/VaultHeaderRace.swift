// The other process of HeaderChangeRaceTests (a header change by another process is never
// undone): a vault held open across another process's passphrase change, then compacted.
import CofferVault
import Foundation

/// `vault-compact PATH PASSPHRASE compact|remove SERVICE`: opens the vault with PASSPHRASE,
/// prints `ready`, waits for a line on standard input (the parent changes the passphrase
/// meanwhile), then either compacts it or removes every item of SERVICE one by one (which
/// triggers the automatic compaction when enough is removed), and prints `done`.
func vaultCompactAfterGo(path: String, passphrase: String, mode: String, service: String) throws {
    let vault = try Vault.open(at: URL(fileURLWithPath: path), unlock: .passphrase(passphrase))
    say("ready")
    _ = readLine()
    switch mode {
    case "compact":
        try vault.compact()
    case "remove":
        for item in try vault.items(service: service) {
            try vault.remove(service: item.service, account: item.account)
        }
    default:
        fail("vault-compact: mode is compact or remove, not \(mode)")
    }
    say("done")
}
