import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

/// The settings examples ported as a new user would: a settings singleton and a second model
/// on the same key share one value in the process.
final class SoundSettings {
    @Stored(backed: .keyValue(key: "isSoundEnabled")) var isSoundEnabled = false
    @Stored(backed: .keyValue(suite: "audio", key: "volume")) var volume = 5
    @Computed var label: String

    init() {
        $label = Computed { [$isSoundEnabled, $volume] in
            $isSoundEnabled.wrappedValue ? "on at \($volume.wrappedValue)" : "off"
        }
    }
}

@Suite("One value per key")
struct OneValuePerKeyTests {
    @Test("The lost write: a = true, b = false, and the next launch reads false")
    func lastWriteWins() throws {
        try withTemporaryContext { context in
            let a = SoundSettings()
            let b = SoundSettings()
            #expect(!b.isSoundEnabled)  // b has read the value before a writes
            a.isSoundEnabled = true
            #expect(b.isSoundEnabled)
            b.isSoundEnabled = false  // the user's latest choice: no longer skipped as "equal"
            #expect(!a.isSoundEnabled)
            // The next launch: a new context on the same directory opens the suite anew.
            let relaunched = CofferContext(directory: context.directory)
            CofferContext.$current.withValue(relaunched) {
                let settings = SoundSettings()
                #expect(!settings.isSoundEnabled)
                #expect(settings.$isSoundEnabled.error == nil)
            }
        }
    }

    @Test("Objects created before and after a write agree; each stream and each tracking fires once per change")
    func everyObserverOfTheKeyIsTold() async throws {
        try await withTemporaryContext { _ in
            let before = SoundSettings()
            before.volume = 7
            let after = SoundSettings()
            #expect(after.volume == 7)

            let firedBefore = Counter()
            let firedAfter = Counter()
            _ = withObservationTracking { before.volume } onChange: { firedBefore.bump() }
            _ = withObservationTracking { after.volume } onChange: { firedAfter.bump() }
            var beforeValues = before.$volume.values.makeAsyncIterator()
            var afterValues = after.$volume.values.makeAsyncIterator()
            #expect(await beforeValues.next() == 7)
            #expect(await afterValues.next() == 7)

            after.volume = 9
            #expect(before.volume == 9)
            #expect(firedBefore.value == 1)
            #expect(firedAfter.value == 1)
            #expect(await beforeValues.next() == 9)
            #expect(await afterValues.next() == 9)

            before.volume = 9  // equal to the shared value: nothing
            #expect(firedBefore.value == 1)
            before.volume = 3
            #expect(await afterValues.next() == 3)  // once per change: 9 was not delivered twice
        }
    }

    @Test("A write through one object recomputes the other object's computed values")
    func computedValuesOfEveryObjectFollow() throws {
        try withTemporaryContext { _ in
            let a = SoundSettings()
            let b = SoundSettings()
            #expect(b.label == "off")
            let fired = Counter()
            _ = withObservationTracking { b.label } onChange: { fired.bump() }
            a.isSoundEnabled = true
            #expect(fired.value == 1)
            #expect(b.label == "on at 5")
            a.volume = 11
            #expect(b.label == "on at 11")
        }
    }

    @Test("One batch writing the key through two objects commits once, with the last value")
    func batchThroughTwoObjects() throws {
        let store = RecordingStrategy(name: "batch")
        let a = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        let b = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        let fired = Counter()
        _ = withObservationTracking { a.wrappedValue } onChange: { fired.bump() }
        batch {
            a.wrappedValue = 1
            b.wrappedValue = 2
            #expect(a.wrappedValue == 2)
        }
        #expect(fired.value == 1)
        #expect(store.raw("n") == (try ValueCodec.encode(2, as: store.valueEncoding)))
        #expect(store.recorded.batches == 1)
    }

    @Test("A failed save is the error of every object on the key")
    func errorIsShared() {
        let store = RecordingStrategy(name: "failing")
        let a = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        let b = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        store.failWrites(with: CofferError(.io, "disk full", errno: 28))
        a.wrappedValue = 1
        #expect(b.error?.errno == 28)
        #expect(b.wrappedValue == 1)  // the value in memory is kept
    }

    @Test("Two types on one key: the other reloads and decodes, or says why not")
    func siblingsOfAnotherType() throws {
        try withTemporaryContext { _ in
            let count = Stored(wrappedValue: 0, backed: .keyValue(key: "shared"))
            let ratio = Stored(wrappedValue: 0.5, backed: .keyValue(key: "shared"))
            let name = Stored(wrappedValue: "none", backed: .keyValue(key: "shared"))
            #expect(ratio.wrappedValue == 0.5)
            #expect(name.wrappedValue == "none")
            count.wrappedValue = 4
            #expect(ratio.wrappedValue == 4.0)
            #expect(name.wrappedValue == "none")  // kept
            #expect(name.error?.code == .decoding)
        }
    }

    @Test("Cells are released with the last property that uses them")
    func cellsAreReleased() throws {
        let store = RecordingStrategy(name: "release")
        let backing = Backing.strategy(store, key: "k")
        var a: Stored<Int>? = Stored(wrappedValue: 1, backed: backing)
        var b: Stored<Int>? = Stored(wrappedValue: 1, backed: backing)
        #expect(CellRegistry.users(of: backing, type: Int.self) == 2)
        a = nil
        #expect(CellRegistry.users(of: backing, type: Int.self) == 1)
        b?.wrappedValue = 3
        b = nil
        #expect(CellRegistry.users(of: backing, type: Int.self) == 0)
        // A new property on the key starts from the store, not from a cell left behind.
        let c = Stored(wrappedValue: 1, backed: backing)
        #expect(c.wrappedValue == 3)
        _ = (a, b)
    }

    @Test("Memory properties and separate contexts never share")
    func noSharingWhereThereIsNoKey() throws {
        let a = Stored(wrappedValue: 1)
        let b = Stored(wrappedValue: 1)
        a.wrappedValue = 2
        #expect(b.wrappedValue == 1)
        let first = try withTemporaryContext { _ in SoundSettings() }
        let second = try withTemporaryContext { _ in SoundSettings() }
        first.volume = 8
        #expect(second.volume == 5)
    }

    @Test("Many threads writing through many objects on one key end on one value, the store's")
    func concurrentWritersConverge() async throws {
        let store = RecordingStrategy(name: "converge")
        let properties = (0..<8).map { _ in Stored(wrappedValue: 0, backed: .strategy(store, key: "n")) }
        await withTaskGroup(of: Void.self) { group in
            for (index, property) in properties.enumerated() {
                group.addTask {
                    for round in 1...200 { property.wrappedValue = index * 1000 + round }
                }
            }
        }
        let final = properties[0].wrappedValue
        for property in properties { #expect(property.wrappedValue == final) }
        #expect(store.raw("n") == (try ValueCodec.encode(final, as: store.valueEncoding)))
    }
}
