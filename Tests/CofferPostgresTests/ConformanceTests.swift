#if Postgres
import CofferCore
import CofferPostgres
import CofferTesting
import CofferVault
import Foundation
import Testing

/// Both PostgreSQL strategies pass the shared conformance suite, against a real server.
@Suite("PostgreSQL conformance")
struct PostgresConformanceTests {
    @Test(arguments: StrategyConformance.cases)
    func keyValue(_ check: StrategyConformance.Case) throws {
        let configuration = try sharedConfiguration()
        try check.run(
            StrategyConformance.Subject(
                make: { PostgresKeyValueStrategy(configuration: configuration, suite: uniqueName()) },
                reopen: { store in
                    PostgresKeyValueStrategy(
                        configuration: configuration, suite: (store as! PostgresKeyValueStrategy).suite)
                }))
    }

    @Test(arguments: StrategyConformance.cases)
    func vault(_ check: StrategyConformance.Case) throws {
        let configuration = try sharedConfiguration()
        try check.run(
            StrategyConformance.Subject(
                make: {
                    try PostgresVault.create(name: uniqueName("v"), unlock: .key(testKey), configuration: configuration)
                        .strategy(service: "conformance")
                },
                reopen: { store in
                    let name = (store as! PostgresVaultStrategy).vault.name
                    return try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
                        .strategy(service: "conformance")
                }))
    }
}
#endif
