import CofferCore
import CofferState
import CofferTesting
import Foundation
import Synchronization
import Testing

/// A store whose observation fails to start until told otherwise (a custom strategy on a
/// network that is not up yet, say).
private final class FlakyObservedStore: ChangeObservingPersistenceStrategy {
    private let values = Mutex<[String: Data]>([:])
    let failStarts = Mutex(1)
    let starts = Mutex(0)
    let handler = Mutex<(@Sendable (StoreChange) -> Void)?>(nil)

    func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() throws -> [String] { values.withLock { Array($0.keys) } }

    /// Writes as another instance would, and reports it.
    func writeElsewhere(_ value: Int, for key: String) throws {
        try save(ValueCodec.encode(value, as: valueEncoding), for: key)
        handler.withLock { $0 }?(StoreChange(keys: [key]))
    }

    func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        starts.withLock { $0 += 1 }
        let fail = failStarts.withLock { n -> Bool in
            defer { n = max(0, n - 1) }
            return n > 0
        }
        if fail { throw CofferError(.io, "the change feed is not reachable") }
        self.handler.withLock { $0 = handler }
        return StoreObservation { [weak self] in self?.handler.withLock { $0 = nil } }
    }
}

/// What happens when a strategy cannot start telling its changes.
@Suite struct ChangeRouterTests {
    @Test func aFailedObservationIsToldOnceAndRetriedByTheNextProperty() throws {
        WarningLog.install()
        let store = FlakyObservedStore()
        let first = Stored(wrappedValue: 0, backed: .strategy(store, key: "count"))
        #expect(first.wrappedValue == 0)  // resolves: the observation fails to start
        #expect(store.starts.withLock { $0 } == 1)
        let told = WarningLog.shared.withLock { log in
            log.filter { $0.kind == .watchFailed && $0.message.contains("FlakyObservedStore") }
        }
        #expect(told.count == 1)
        #expect(told.first?.message.contains("not reachable") == true)

        // The property still works on its own.
        first.wrappedValue = 5
        #expect(try store.get(Int.self, for: "count") == 5)

        // Another property on another key of the store tries again, and this time it starts:
        // from then on both follow changes made elsewhere.
        let second = Stored(wrappedValue: 0, backed: .strategy(store, key: "other"))
        #expect(second.wrappedValue == 0)
        #expect(store.starts.withLock { $0 } == 2)
        try store.writeElsewhere(7, for: "count")
        try store.writeElsewhere(9, for: "other")
        #expect(first.wrappedValue == 7)
        #expect(second.wrappedValue == 9)

        // Released with the last property.
        withExtendedLifetime((first, second)) {}
    }
}
