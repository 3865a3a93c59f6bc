import CofferCore
import CofferStorage
import Foundation
import CofferState
import Synchronization
import Testing

/// What happens to a key's cell after its last property goes away (it lingers, to be taken up
/// again, then is let go in the background), and the lock-free read of two-word values.
// Serialized: `CellRegistry.settle()` lets go of every lingering cell, the one a test of
// taking up waits to take up included.
@Suite("Cell lifetime", .serialized)
struct CellLifetimeTests {
    /// A store that follows changes (the observation does nothing), counts its loads, and can
    /// fail them.
    final class FollowedStore: ChangeObservingPersistenceStrategy, @unchecked Sendable {
        // @unchecked Sendable: every field is a lock or an atomic.
        let values = Locked<[String: Data]>([:])
        let loads = Atomic<Int>(0)
        let failing = Atomic<Bool>(false)
        let observations = Atomic<Int>(0)

        struct Failure: Error {}

        func load(_ key: String) throws -> Data? {
            loads.add(1, ordering: .relaxed)
            if failing.load(ordering: .relaxed) { throw Failure() }
            return values.withLock { $0[key] }
        }

        func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
        func remove(_ key: String) throws { values.withLock { $0[key] = nil } }
        func keys() throws -> [String] { values.withLock { Array($0.keys) } }

        func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
            observations.add(1, ordering: .relaxed)
            return StoreObservation { [self] in observations.subtract(1, ordering: .relaxed) }
        }
    }

    @Test("A released cell that follows its store is taken up by the next property of its key, without a load")
    func releasedCellIsTakenUp() throws {
        // A cell lingers 250 ms: a round where this thread stalled longer is tried again.
        var takenUp = false
        for _ in 0..<5 where !takenUp {
            let store = FollowedStore()
            var first: Stored<Int>? = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
            first!.wrappedValue = 7
            let loads = store.loads.load(ordering: .relaxed)
            first = nil
            #expect(CellRegistry.users(of: .strategy(store, key: "k"), type: Int.self) == 0)

            let second = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
            #expect(second.wrappedValue == 7)
            #expect(CellRegistry.users(of: .strategy(store, key: "k"), type: Int.self) == 1)
            // Not loaded again, and one cell follows the key: the lingering one, taken up (a new
            // one would load, and be a second follower until the first is let go).
            takenUp = store.loads.load(ordering: .relaxed) == loads && ChangeRouter.observation(of: store) == (1, 1)
            _ = first
        }
        #expect(takenUp)
    }

    @Test("A released cell that failed to load is not taken up: the next property loads anew")
    func failedCellIsNotTakenUp() throws {
        let store = FollowedStore()
        store.failing.store(true, ordering: .relaxed)
        var first: Stored<Int>? = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        #expect(first!.wrappedValue == 0)
        #expect(first!.error != nil)
        let loads = store.loads.load(ordering: .relaxed)
        first = nil

        store.failing.store(false, ordering: .relaxed)
        try store.save(ValueCodec.encode(5, as: store.valueEncoding), for: "k")
        let second = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        #expect(second.wrappedValue == 5)  // a new cell, loaded
        #expect(second.error == nil)
        #expect(store.loads.load(ordering: .relaxed) == loads + 1)
        _ = first
    }

    @Test("A released cell of a store that cannot follow changes rereads its key when taken up")
    func unfollowedCellRereads() throws {
        let store = RecordingStrategy(name: "unfollowed")
        var first: Stored<Int>? = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        first!.wrappedValue = 3
        let loads = store.recorded.loads
        first = nil
        // Changed behind the cell's back, which it could not have heard of.
        try store.save(ValueCodec.encode(4, as: store.valueEncoding), for: "k")
        let second = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        #expect(second.wrappedValue == 4)
        #expect(store.recorded.loads == loads + 1)
    }

    @Test("A cell made to replace a failed one still tells the key's cells of other value types")
    func replacementKeepsItsSiblings() throws {
        let store = FollowedStore()
        let ratio = Stored(wrappedValue: 0.0, backed: .strategy(store, key: "k"))
        var count: Stored<Int>? = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        _ = (ratio.wrappedValue, count!.wrappedValue)
        ratio.wrappedValue = 1.5  // not an Int: the Int cell reloads and fails to decode it
        #expect(count!.error?.code == .decoding)
        count = nil  // a failed cell: not taken up, replaced

        let next = Stored(wrappedValue: 0, backed: .strategy(store, key: "k"))
        next.wrappedValue = 4
        #expect(ratio.wrappedValue == 4.0)  // told by the replacement, and reread
        _ = count
    }

    @Test("Released cells are let go: unregistered and unsubscribed, and the store's observation ends with the last")
    func releasedCellsAreLetGo() throws {
        let store = FollowedStore()
        var table: [Stored<Int>] = (0..<1000).map { i in
            let entry = Stored(wrappedValue: 0, backed: .strategy(store, key: "k\(i)"))
            entry.wrappedValue = i
            return entry
        }
        #expect(ChangeRouter.observation(of: store) == (1, 1000))
        #expect(store.observations.load(ordering: .relaxed) == 1)
        table.removeAll()
        CellRegistry.settle()
        #expect(ChangeRouter.observation(of: store) == (0, 0))
        #expect(store.observations.load(ordering: .relaxed) == 0)
        // A new property of a let-go key is a new cell, loaded from the store.
        let loads = store.loads.load(ordering: .relaxed)
        #expect(Stored(wrappedValue: 0, backed: .strategy(store, key: "k5")).wrappedValue == 5)
        #expect(store.loads.load(ordering: .relaxed) == loads + 1)
        _ = table
    }

    @Test("A map keeps its store observed while it lives, however its entries come and go")
    func mapHoldsItsStore() throws {
        let store = FollowedStore()
        var map: StoredMap<Int?>? = StoredMap<Int?>(store: .strategy(store), keepsRecent: 0)
        for i in 0..<100 { map!["k\(i)"] = i }  // each entry made and dropped at once
        CellRegistry.settle()
        #expect(ChangeRouter.observation(of: store) == (1, 1))  // the map's hold, no key
        #expect(store.observations.load(ordering: .relaxed) == 1)  // started once
        #expect(map!["k42"] == 42)
        map = nil
        CellRegistry.settle()
        #expect(ChangeRouter.observation(of: store) == (0, 0))
        #expect(store.observations.load(ordering: .relaxed) == 0)
    }

    /// What the racing readers saw.
    final class Tally: Sendable {
        let writing = Atomic<Bool>(true)
        let torn = Atomic<Int>(0)
        /// Reads made while the writer still ran that saw each of the two values.
        let sawNil = Atomic<Int>(0)
        let sawValue = Atomic<Int>(0)
    }

    @Test("Reads of a two-word value (Int?, Double?) racing its writes never see half of one write")
    func twoWordReadsAreWhole() throws {
        let number = Stored<Int?>(wrappedValue: nil, backed: .memory)
        let ratio = Stored<Double?>(wrappedValue: nil, backed: .memory)
        _ = (number.wrappedValue, ratio.wrappedValue)
        // nil and Int.max share no byte: a read mixing the words of the two gives .some(0) (or
        // another value neither write made) or the nil tag with a payload.
        let tally = Tally()
        let finished = DispatchGroup()
        for _ in 0..<2 {
            finished.enter()
            Thread.detachNewThread {
                defer { finished.leave() }
                while tally.writing.load(ordering: .acquiring) {
                    let n = number.wrappedValue
                    let r = ratio.wrappedValue
                    if !(n == nil || n == Int.max) { tally.torn.add(1, ordering: .relaxed) }
                    if !(r == nil || r == -Double.greatestFiniteMagnitude) { tally.torn.add(1, ordering: .relaxed) }
                    if n == nil { tally.sawNil.add(1, ordering: .relaxed) } else { tally.sawValue.add(1, ordering: .relaxed) }
                }
            }
        }
        // Writes until both readers saw both values while writes ran (at most 20 s).
        let deadline = Date().addingTimeInterval(20)
        var i = 0
        repeat {
            for _ in 0..<1000 {
                number.wrappedValue = i.isMultiple(of: 2) ? nil : Int.max
                ratio.wrappedValue = i.isMultiple(of: 2) ? nil : -Double.greatestFiniteMagnitude
                i += 1
            }
        } while (tally.sawNil.load(ordering: .relaxed) < 1000 || tally.sawValue.load(ordering: .relaxed) < 1000)
            && Date() < deadline
        tally.writing.store(false, ordering: .releasing)
        #expect(finished.wait(timeout: .now() + 20) == .success)
        #expect(tally.torn.load(ordering: .relaxed) == 0)
        #expect(tally.sawNil.load(ordering: .relaxed) >= 1000)
        #expect(tally.sawValue.load(ordering: .relaxed) >= 1000)
    }
}
