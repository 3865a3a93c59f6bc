import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation
import Testing

/// One model, whose storage is chosen by whoever creates it: memory in a test, a file in
/// production.
final class CounterModel {
    @Stored var count: Int
    @Stored var label: String?
    @Computed var summary: String

    init(count countBacking: Backing, label labelBacking: Backing) {
        _count = Stored(wrappedValue: 0, backed: countBacking)
        _label = Stored(wrappedValue: nil, backed: labelBacking)
        $summary = Computed { [$count, $label] in "\($label.wrappedValue ?? "count"): \($count.wrappedValue)" }
    }
}

@Suite("Swapping strategies")
struct StrategySwapTests {
    enum Kind: String, CaseIterable, Sendable {
        case memory, keyValue, keyValueSuite, disk, vault, custom

        func backing(_ key: String, custom: MemoryStrategy) -> Backing {
            switch self {
            case .memory: .memory
            case .keyValue: .keyValue(key: key)
            case .keyValueSuite: .keyValue(suite: "counters", key: key)
            case .disk: .disk(key: key)
            case .vault: .vault(service: "counters", account: key)
            case .custom: .strategy(custom, key: key)
            }
        }

        var persists: Bool { self != .memory }
    }

    @Test("The same model runs on every strategy; only memory forgets on relaunch", arguments: Kind.allCases)
    func sameModelEveryStrategy(kind: Kind) throws {
        try withTemporaryContext(vault: true) { _ in
            let custom = MemoryStrategy()
            func launch() -> CounterModel {
                CounterModel(count: kind.backing("count", custom: custom), label: kind.backing("label", custom: custom))
            }
            let model = launch()
            #expect(model.summary == "count: 0")
            model.count += 1
            model.count += 1
            model.label = "clicks"
            #expect(model.summary == "clicks: 2")
            #expect(model.$count.error == nil && model.$label.error == nil)

            let relaunched = launch()
            #expect(relaunched.count == (kind.persists ? 2 : 0))
            #expect(relaunched.summary == (kind.persists ? "clicks: 2" : "count: 0"))
            relaunched.label = nil
            #expect(launch().label == nil)
        }
    }
}
