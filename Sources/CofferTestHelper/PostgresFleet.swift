import Foundation
#if Postgres
import CofferCore
import CofferCrypto
import CofferPostgres
import CofferState
import CofferVault
#endif

// The fleet store's children (CofferPostgresTests, `make demo-fleet`):
//
//   CofferTestHelper pg-increment URL kv|vault NAME TIMES
//       `$counter.update { $0 += 1 }` TIMES times on `.postgres(store, key: "counter")` of suite
//       NAME, or on the item (counter, stored) of the vault NAME (raw key of 0x5a bytes), after
//       printing "ready" and reading one line of standard input.
//   CofferTestHelper pg-follow URL kv|vault NAME KEY [SECONDS]
//       prints "ready", then "value <v>" each time the property (a String, key KEY of the suite,
//       or account KEY of service "fleet" of the vault) changes, until SECONDS (default 30) pass
//       or standard input closes. With COFFER_FLEET_KEY_FILE set, the vault unlocks with that key file;
//       with COFFER_FLEET_IDENTITY_FILE, with that identity file. A line "status" on standard input
//       prints "status <value> <code of loadError, or none>".

/// Runs a `pg-…` command; `false` when the helper was built without the `Postgres` trait.
func postgresCommand(_ arguments: [String]) throws {
    #if Postgres
    guard arguments.count >= 5 else { fail("usage: \(arguments[1]) URL kv|vault NAME …") }
    let configuration = try PostgresConfiguration(url: arguments[2])
    let vault = arguments[3] == "vault"
    let name = arguments[4]
    // `COFFER_FLEET_KEY_FILE` (make demo-fleet): the key file `coffer --key-file` uses.
    let unlock: VaultUnlock =
        if let path = ProcessInfo.processInfo.environment["COFFER_FLEET_KEY_FILE"] {
            .keyFile(URL(fileURLWithPath: path))
        } else if let path = ProcessInfo.processInfo.environment["COFFER_FLEET_IDENTITY_FILE"] {
            .identity(URL(fileURLWithPath: path))
        } else {
            .key(try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32)))
        }
    func backing(_ account: String, service: String) throws -> Backing {
        if vault {
            let opened = try PostgresVault.openOrCreate(
                name: name, unlock: unlock, configuration: configuration)
            return .vault(opened, service: service, account: account)
        }
        return .postgres(PostgresKeyValueStrategy(configuration: configuration, suite: name), key: account)
    }
    switch arguments[1] {
    case "pg-increment":
        guard arguments.count >= 6, let times = Int(arguments[5]) else { fail("usage: pg-increment URL kv|vault NAME TIMES") }
        let counter = Stored(wrappedValue: 0, backed: try backing("stored", service: "counter"))
        _ = try counter.load()
        say("ready")
        _ = readLine()
        for _ in 0..<times { try counter.update { $0 += 1 } }
        say("done \(counter.wrappedValue)")
    case "pg-follow":
        guard arguments.count >= 6 else { fail("usage: pg-follow URL kv|vault NAME KEY [SECONDS]") }
        let seconds = arguments.count > 6 ? Double(arguments[6]) ?? 30 : 30
        let property = Stored(wrappedValue: "", backed: try backing(arguments[5], service: "fleet"))
        _ = try property.load()
        let values = property.values
        let done = DispatchSemaphore(value: 0)
        say("ready")  // before the first value, which the task below prints
        Task.detached {
            for await value in values { say("value \(value)") }
        }
        Thread.detachNewThread {
            // The parent closes standard input to stop the child.
            while let line = readLine(), line == "status" {
                say("status \(property.wrappedValue) \(property.loadError.map { "\($0.code)" } ?? "none")")
            }
            done.signal()
        }
        _ = done.wait(timeout: .now() + seconds)
    default:
        fail("unknown command \(arguments[1])")
    }
    #else
    fail("\(arguments[1]): this helper was built without the Postgres trait")
    #endif
}
