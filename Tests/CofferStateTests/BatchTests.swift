import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

@Suite("Batch")
struct BatchTests {
    @Test("Writes in a batch persist in one saveBatch per strategy")
    func oneCommitPerStrategy() throws {
        let store = RecordingStrategy()
        let other = RecordingStrategy(name: "other")
        let width = Stored(wrappedValue: 0, backed: .strategy(store, key: "width"))
        let height = Stored(wrappedValue: 0, backed: .strategy(store, key: "height"))
        let title = Stored<String?>(wrappedValue: "old", backed: .strategy(store, key: "title"))
        let zoom = Stored(wrappedValue: 1.0, backed: .strategy(other, key: "zoom"))
        let scratch = Stored(wrappedValue: "")  // memory: nothing to persist

        batch {
            width.wrappedValue = 100
            width.wrappedValue = 1280
            height.wrappedValue = 800
            title.wrappedValue = nil
            zoom.wrappedValue = 2
            scratch.wrappedValue = "x"
            #expect(store.recorded.batches == 0)  // nothing persisted inside the batch
        }
        #expect(store.recorded == .init(loads: 3, saves: 0, removes: 0, batches: 1, flushes: 0))
        #expect(other.recorded.batches == 1)
        #expect(store.log.all == ["store.saveBatch(height,title,width)"])
        #expect(try store.get(Int.self, for: "width") == 1280)
        #expect(try store.get(Int.self, for: "height") == 800)
        #expect(store.raw("title") == nil)
        #expect(try other.get(Double.self, for: "zoom") == 2)
        #expect(width.error == nil && title.error == nil)
    }

    @Test("A strategy without batch support gets one save per property, not per write")
    func keyByKeyFallback() throws {
        let plain = PlainStrategy()
        let x = Stored(wrappedValue: 0, backed: .strategy(plain, key: "x"))
        let y = Stored(wrappedValue: 0, backed: .strategy(plain, key: "y"))
        batch {
            for i in 1...5 {
                x.wrappedValue = i
                y.wrappedValue = -i
            }
        }
        #expect(plain.inner.recorded.saves == 2)
        #expect(try plain.get(Int.self, for: "x") == 5)
        #expect(try plain.get(Int.self, for: "y") == -5)
    }

    @Test("Observers are told once, with the final values")
    func notifiesOnce() async throws {
        let runs = Counter()
        let fired = Counter()
        let a = Stored(wrappedValue: 0)
        let b = Stored(wrappedValue: 0)
        let sum = Computed { [a, b] in
            runs.bump()
            return a.wrappedValue + b.wrappedValue
        }
        let aValues = a.values
        let sumValues = sum.values
        _ = withObservationTracking { sum.wrappedValue } onChange: { fired.bump() }
        #expect(runs.value == 1)

        batch {
            a.wrappedValue = 1
            b.wrappedValue = 10
            a.wrappedValue = 2
            #expect(sum.wrappedValue == 12)  // reads inside the batch see the writes
            b.wrappedValue = 20
            #expect(fired.value == 0)  // but nobody is told yet
        }
        #expect(fired.value == 1)
        #expect(sum.wrappedValue == 22)
        a.wrappedValue = 100  // a sentinel after the batch
        #expect(try await collect(aValues, count: 3) == [0, 2, 100])
        #expect(try await collect(sumValues, count: 3) == [0, 22, 120])
        #expect(runs.value == 4)  // initial, the read in the batch, after it, after the sentinel
    }

    @Test("Nested batches join the outermost one")
    func nested() {
        let store = RecordingStrategy()
        let a = Stored(wrappedValue: 0, backed: .strategy(store, key: "a"))
        let b = Stored(wrappedValue: 0, backed: .strategy(store, key: "b"))
        batch {
            a.wrappedValue = 1
            batch { b.wrappedValue = 2 }
            #expect(store.recorded.batches == 0)
        }
        #expect(store.recorded.batches == 1)
    }

    @Test("A batch that throws still persists and notifies the writes it made")
    func throwingBody() throws {
        struct Abort: Error {}
        let store = RecordingStrategy()
        let a = Stored(wrappedValue: 0, backed: .strategy(store, key: "a"))
        let fired = Counter()
        _ = withObservationTracking { a.wrappedValue } onChange: { fired.bump() }
        #expect(throws: Abort.self) {
            try batch {
                a.wrappedValue = 3
                throw Abort()
            }
        }
        #expect(fired.value == 1)
        #expect(try store.get(Int.self, for: "a") == 3)
    }

    @Test("A failed batch commit surfaces on every property in it, and a later write clears it")
    func failedCommit() throws {
        let store = RecordingStrategy()
        let a = Stored(wrappedValue: 0, backed: .strategy(store, key: "a"))
        let b = Stored(wrappedValue: 0, backed: .strategy(store, key: "b"))
        store.failWrites(with: CofferError(.io, "read-only file system"))
        batch {
            a.wrappedValue = 1
            b.wrappedValue = 2
        }
        #expect(a.error?.code == .io)
        #expect(b.error?.code == .io)
        #expect(a.wrappedValue == 1)  // memory keeps the value
        store.failWrites(with: nil)
        batch { a.wrappedValue = 5 }
        // Both properties are persisted by the next successful commit that includes them.
        #expect(a.error == nil)
        #expect(try store.get(Int.self, for: "a") == 5)
        b.wrappedValue = 3
        #expect(b.error == nil)
    }

    @Test("A batch on the key-value file is one journal commit that survives reopening")
    func keyValueFileBatch() throws {
        try withTemporaryContext { _ in
            let left = Stored(wrappedValue: 0, backed: .keyValue(suite: "layout", key: "left"))
            let right = Stored(wrappedValue: 0, backed: .keyValue(suite: "layout", key: "right"))
            batch {
                left.wrappedValue = 10
                right.wrappedValue = 20
            }
            #expect(left.error == nil)
            #expect(Stored(wrappedValue: 0, backed: .keyValue(suite: "layout", key: "left")).wrappedValue == 10)
            #expect(Stored(wrappedValue: 0, backed: .keyValue(suite: "layout", key: "right")).wrappedValue == 20)
        }
    }
}
