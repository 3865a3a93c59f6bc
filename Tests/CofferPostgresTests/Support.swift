#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// The settings of the process's throwaway cluster (started on first use, stopped at exit).
/// Fails with the reason — PostgreSQL not installed, initdb or pg_ctl failing — never skips.
func sharedConfiguration() throws -> PostgresConfiguration {
    try PostgresConfiguration(url: PostgresTestCluster.shared.url)
}

/// A suite or vault name no other test uses.
func uniqueName(_ prefix: String = "t") -> String { "\(prefix)-\(UUID().uuidString.prefix(8))" }

/// The raw key every test vault unlocks with (no Argon2id: tests stay fast).
let testKey = try! SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))

/// Polls `condition` every 10 ms until it holds or `timeout` seconds pass.
func eventually(timeout: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date() + timeout
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return try condition()
}
#endif
