import CofferCore
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Testing

/// Every built-in plaintext strategy passes the shared conformance suite.
@Suite("Conformance")
struct ConformanceTests {
    /// A new directory per store; the strategies create it (0700) themselves.
    static func fresh() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("coffer-conformance-\(UUID().uuidString)")
    }

    @Test(arguments: StrategyConformance.cases)
    func memory(_ check: StrategyConformance.Case) throws {
        try check.run(StrategyConformance.Subject(make: { MemoryStrategy() }))
    }

    @Test(arguments: StrategyConformance.cases)
    func disk(_ check: StrategyConformance.Case) throws {
        try check.run(
            StrategyConformance.Subject(
                make: { try DiskStrategy(directory: Self.fresh()) },
                reopen: { store in try DiskStrategy(directory: URL(fileURLWithPath: (store as! DiskStrategy).directory)) }
            ))
    }

    @Test(arguments: StrategyConformance.cases)
    func keyValueCoalesced(_ check: StrategyConformance.Case) throws {
        try check.run(
            StrategyConformance.Subject(
                make: { try KeyValueFileStrategy(directory: Self.fresh(), suite: "s") },
                reopen: { store in
                    let path = (store as! KeyValueFileStrategy).path
                    try (store as! KeyValueFileStrategy).flush()
                    return try KeyValueFileStrategy(
                        directory: URL(fileURLWithPath: DurableIO.parentDirectory(of: path)), suite: "s")
                }))
    }

    @Test(arguments: StrategyConformance.cases)
    func keyValueImmediate(_ check: StrategyConformance.Case) throws {
        try check.run(
            StrategyConformance.Subject(
                make: { try KeyValueFileStrategy(directory: Self.fresh(), suite: "s", durability: .immediate) },
                reopen: { store in
                    let path = (store as! KeyValueFileStrategy).path
                    return try KeyValueFileStrategy(
                        directory: URL(fileURLWithPath: DurableIO.parentDirectory(of: path)), suite: "s",
                        durability: .immediate)
                }))
    }
}
