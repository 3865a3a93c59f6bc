import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

@Suite("Observation")
struct ObservationTests {
    @Test("withObservationTracking fires for a stored change, and not for an equal write")
    func storedChange() {
        let fired = Counter()
        let theme = Stored(wrappedValue: "light")
        let value = withObservationTracking { theme.wrappedValue } onChange: { fired.bump() }
        #expect(value == "light")
        theme.wrappedValue = "light"
        #expect(fired.value == 0)
        theme.wrappedValue = "dark"
        #expect(fired.value == 1)
    }

    @Test("withObservationTracking fires when an input of a computed value changes")
    func computedChange() {
        let fired = Counter()
        let first = Stored(wrappedValue: "Ada")
        let last = Stored(wrappedValue: "Lovelace")
        let full = Computed { [first, last] in "\(first.wrappedValue) \(last.wrappedValue)" }
        let shout = Computed { [full] in full.wrappedValue.uppercased() }

        _ = withObservationTracking { shout.wrappedValue } onChange: { fired.bump() }
        last.wrappedValue = "Lovelace"  // equal: nothing
        #expect(fired.value == 0)
        last.wrappedValue = "Byron"
        #expect(fired.value == 1)
        #expect(shout.wrappedValue == "ADA BYRON")

        // Tracking again after the change observes the new inputs.
        _ = withObservationTracking { shout.wrappedValue } onChange: { fired.bump() }
        first.wrappedValue = "Augusta"
        #expect(fired.value == 2)
    }

    @Test("A computed value observed through tracking follows a dynamic dependency switch")
    func computedDynamicObservation() {
        let fired = Counter()
        let useA = Stored(wrappedValue: true)
        let a = Stored(wrappedValue: 1)
        let b = Stored(wrappedValue: 2)
        let pick = Computed { [useA, a, b] in useA.wrappedValue ? a.wrappedValue : b.wrappedValue }
        #expect(pick.wrappedValue == 1)
        useA.wrappedValue = false
        _ = withObservationTracking { pick.wrappedValue } onChange: { fired.bump() }
        a.wrappedValue = 10  // no longer an input
        #expect(fired.value == 0)
        b.wrappedValue = 20
        #expect(fired.value == 1)
    }

    @Test("$x.error is observable")
    func errorIsObservable() {
        let fired = Counter()
        let store = RecordingStrategy()
        let name = Stored(wrappedValue: "", backed: .strategy(store, key: "name"))
        _ = withObservationTracking { name.error } onChange: { fired.bump() }
        store.failWrites(with: CofferError(.io, "disk full"))
        name.wrappedValue = "x"
        #expect(fired.value == 1)
        #expect(name.error?.message == "disk full")
    }

    @Test("values yields the current value, then each change, and skips equal writes")
    func storedValues() async throws {
        let count = Stored(wrappedValue: 0)
        let stream = count.values
        count.wrappedValue = 1
        count.wrappedValue = 1
        count.wrappedValue = 2
        #expect(try await collect(stream, count: 3) == [0, 1, 2])
    }

    @Test("values of a computed value yields only real changes")
    func computedValues() async throws {
        let size = Stored(wrappedValue: 10.0)
        let clamped = Computed { [size] in min(size.wrappedValue, 24) }
        let stream = clamped.values
        size.wrappedValue = 30  // 24
        size.wrappedValue = 40  // still 24: nothing
        size.wrappedValue = 12  // 12
        #expect(try await collect(stream, count: 3) == [10, 24, 12])
    }

    @Test("A values consumer that stops is unregistered and later writes still work")
    func valuesCancellation() async throws {
        let count = Stored(wrappedValue: 0)
        let received = Log<Int>()
        let consumer = Task {
            for await value in count.values { received.append(value) }
            received.append(-1)  // the loop ended
        }
        while received.all.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        consumer.cancel()
        await consumer.value
        #expect(received.all == [0, -1])
        count.wrappedValue = 5
        #expect(count.wrappedValue == 5)
    }

    @Test("Observation works from detached tasks")
    func fromDetachedTasks() async {
        let fired = Counter()
        let flag = Stored(wrappedValue: false)
        let label = Computed { [flag] in flag.wrappedValue ? "on" : "off" }
        await Task.detached { _ = withObservationTracking { label.wrappedValue } onChange: { fired.bump() } }.value
        await Task.detached { flag.wrappedValue = true }.value
        #expect(fired.value == 1)
        #expect(label.wrappedValue == "on")
    }
}
