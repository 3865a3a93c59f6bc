#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferVault
import Foundation
import Testing

/// A vault on PostgreSQL goes away (and its keys with it) once nothing uses it.
@Suite("PostgreSQL vault lifetime")
struct PostgresVaultLifetimeTests {
    @Test("A vault is freed with its last strategy and property; while alive, one strategy per service")
    func aVaultIsFreedWithItsLastUser() throws {
        let configuration = try sharedConfiguration()
        weak var weakVault: PostgresVault?
        weak var weakStrategy: PostgresVaultStrategy?
        do {
            let vault = try PostgresVault.create(name: uniqueName("life"), unlock: .key(testKey), configuration: configuration)
            weakVault = vault
            let strategy = vault.strategy(service: "svc")
            weakStrategy = strategy
            try strategy.set("value", for: "a")
            #expect(vault.strategy(service: "svc") === strategy)
            let stored = Stored<String?>(wrappedValue: nil, backed: .vault(vault, service: "svc", account: "a"))
            #expect(eventually { stored.wrappedValue == "value" })  // loaded in the background
        }
        // The change feed's thread lets go of the vault when the last property's observation ends.
        #expect(eventually { weakVault == nil && weakStrategy == nil })
    }
}
#endif
