import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

// Small trivially copyable values (Int, Double, Bool, a raw enum, Int8, UInt32) are read with one
// atomic load instead of the lock; everything else (String, Int?, arrays) takes the lock. These
// tests pin both paths to the same behaviour: first load, writes, `load()`, migration, and
// dependency recording while a computed value runs.

private enum Mode: String, Codable, Sendable {
    case light, dark, system
}

private enum Level: UInt8, Codable, Sendable {
    case low = 1, high = 200
}

@Suite("Lock-free word reads")
struct WordPathTests {
    @Test("Word-sized values read back what was written, in memory and from a store")
    func roundTrips() throws {
        try withTemporaryContext { _ in
            let double = Stored(wrappedValue: 1.5, backed: .keyValue(key: "double"))
            let flag = Stored(wrappedValue: false, backed: .keyValue(key: "flag"))
            let level = Stored(wrappedValue: Level.low, backed: .keyValue(key: "level"))
            let small = Stored(wrappedValue: Int8(-3), backed: .keyValue(key: "small"))
            let wide = Stored(wrappedValue: UInt32.max, backed: .keyValue(key: "wide"))
            let optional = Stored(wrappedValue: Int?.none, backed: .keyValue(key: "optional"))
            let mode = Stored(wrappedValue: Mode.light, backed: .keyValue(key: "mode"))

            #expect(double.wrappedValue == 1.5)
            #expect(flag.wrappedValue == false)
            #expect(level.wrappedValue == .low)
            #expect(small.wrappedValue == -3)
            #expect(wide.wrappedValue == .max)
            #expect(optional.wrappedValue == nil)
            #expect(mode.wrappedValue == .light)

            double.wrappedValue = -0.25
            flag.wrappedValue = true
            level.wrappedValue = .high
            small.wrappedValue = .min
            wide.wrappedValue = 7
            optional.wrappedValue = 42
            mode.wrappedValue = .dark
            #expect(double.wrappedValue == -0.25)
            #expect(flag.wrappedValue == true)
            #expect(level.wrappedValue == .high)
            #expect(small.wrappedValue == .min)
            #expect(wide.wrappedValue == 7)
            #expect(optional.wrappedValue == 42)
            #expect(mode.wrappedValue == .dark)

            // New properties over the same keys load what the first ones persisted.
            let reread = Stored(wrappedValue: 0.0, backed: .keyValue(key: "double"))
            #expect(reread.wrappedValue == -0.25)
            #expect(reread.error == nil)
            #expect(double.error == nil)
            #expect(Stored(wrappedValue: false, backed: .keyValue(key: "flag")).wrappedValue == true)
            #expect(Stored(wrappedValue: Level.low, backed: .keyValue(key: "level")).wrappedValue == .high)
            #expect(Stored(wrappedValue: Int8(0), backed: .keyValue(key: "small")).wrappedValue == .min)
            #expect(Stored(wrappedValue: UInt32(0), backed: .keyValue(key: "wide")).wrappedValue == 7)
            #expect(Stored(wrappedValue: Int?.none, backed: .keyValue(key: "optional")).wrappedValue == 42)
            #expect(Stored(wrappedValue: Mode.light, backed: .keyValue(key: "mode")).wrappedValue == .dark)
        }
    }

    @Test("load() and save(_:) keep the lock-free copy in step with the stored value")
    func loadAndSave() throws {
        try withTemporaryContext { context in
            let strategy = try KeyValueFileStrategy(directory: context.directory, suite: "words")
            let counter = Stored(wrappedValue: 0, backed: .strategy(strategy, key: "counter"))
            #expect(counter.wrappedValue == 0)
            // Another writer changes the stored bytes behind the property's back.
            try strategy.save(ValueCodec.encode(99, as: strategy.valueEncoding), for: "counter")
            #expect(counter.wrappedValue == 0, "reads are served from memory until load()")
            #expect(try counter.load() == 99)
            #expect(counter.wrappedValue == 99)
            try counter.save(5)
            #expect(counter.wrappedValue == 5)
        }
    }

    @Test("A word-sized input read while a computed value runs is still recorded as a dependency")
    func dependencyRecording() {
        let count = Stored(wrappedValue: 1)
        let ratio = Stored(wrappedValue: 0.5)
        // Read once outside any computation, so both take the lock-free path from now on.
        #expect(count.wrappedValue == 1)
        #expect(ratio.wrappedValue == 0.5)
        let runs = Counter()
        let scaled = Computed { [count, ratio] in
            runs.bump()
            return Double(count.wrappedValue) * ratio.wrappedValue
        }
        #expect(scaled.wrappedValue == 0.5)
        count.wrappedValue = 4
        #expect(scaled.wrappedValue == 2)
        ratio.wrappedValue = 2
        #expect(scaled.wrappedValue == 8)
        #expect(runs.value == 3)

        let fired = Counter()
        _ = withObservationTracking { count.wrappedValue } onChange: { fired.bump() }
        count.wrappedValue = 4
        #expect(fired.value == 0, "an equal write does not notify")
        count.wrappedValue = 5
        #expect(fired.value == 1, "Observation still sees reads made through the lock-free path")
    }

    @Test("Readers on other threads only ever see values that were written")
    func concurrentReaders() async {
        let value = Stored(wrappedValue: 0)
        let wide = Stored(wrappedValue: Double(0))
        _ = value.wrappedValue
        _ = wide.wrappedValue
        let written = Set((0...2_000).map { $0 * 3 })
        let strays = Counter()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for i in 1...2_000 {
                    value.wrappedValue = i * 3
                    wide.wrappedValue = Double(i * 3)
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    for _ in 0..<4_000 {
                        if !written.contains(value.wrappedValue) { strays.bump() }
                        if !written.contains(Int(wide.wrappedValue)) { strays.bump() }
                    }
                }
            }
        }
        #expect(strays.value == 0)
        #expect(value.wrappedValue == 6_000)
        #expect(wide.wrappedValue == 6_000)
    }
}
