import CofferCore
import CofferState
import CofferStorage
import Foundation
import Testing

@Suite("Computed")
struct ComputedTests {
    @Test("A chain recomputes lazily, once per change, and not at all without one")
    func chain() {
        let runsB = Counter()
        let runsC = Counter()
        let a = Stored(wrappedValue: 1)
        let b = Computed { [a] in
            runsB.bump()
            return a.wrappedValue * 2
        }
        let c = Computed { [b] in
            runsC.bump()
            return b.wrappedValue + 1
        }
        #expect(runsB.value == 0 && runsC.value == 0)  // lazy: nothing ran yet
        #expect(c.wrappedValue == 3)
        #expect(c.wrappedValue == 3)
        #expect(runsB.value == 1 && runsC.value == 1)

        a.wrappedValue = 5
        a.wrappedValue = 6
        a.wrappedValue = 7
        #expect(runsB.value == 1 && runsC.value == 1)  // lazy: writes alone compute nothing
        #expect(c.wrappedValue == 15)
        #expect(runsB.value == 2 && runsC.value == 2)
        #expect(b.wrappedValue == 14)
        #expect(runsB.value == 2)

        // An unrelated write elsewhere does not rerun anything.
        let unrelated = Stored(wrappedValue: 0)
        unrelated.wrappedValue = 1
        #expect(c.wrappedValue == 15)
        #expect(runsB.value == 2 && runsC.value == 2)
    }

    @Test("A diamond recomputes each node once and never sees a mix of old and new inputs")
    func diamond() {
        let runs = (b: Counter(), c: Counter(), d: Counter())
        let seen = Log<(Int, Int, Int)>()
        let a = Stored(wrappedValue: 1)
        let b = Computed { [a] in
            runs.b.bump()
            return a.wrappedValue + 1
        }
        let c = Computed { [a] in
            runs.c.bump()
            return a.wrappedValue * 10
        }
        let d = Computed { [a, b, c] in
            runs.d.bump()
            let (x, y) = (b.wrappedValue, c.wrappedValue)
            seen.append((a.wrappedValue, x, y))
            return x + y
        }
        #expect(d.wrappedValue == 12)
        for value in 2...5 {
            a.wrappedValue = value
            #expect(d.wrappedValue == (value + 1) + value * 10)
        }
        #expect(runs.b.value == 5 && runs.c.value == 5 && runs.d.value == 5)
        for (input, x, y) in seen.all {
            #expect(x == input + 1 && y == input * 10, "glitch: d saw b=\(x), c=\(y) for a=\(input)")
        }
    }

    @Test("An equal intermediate result stops recomputation downstream")
    func equalResultCutsOff() {
        let runs = Counter()
        let fontSize = Stored(wrappedValue: 30.0)
        let clamped = Computed { [fontSize] in min(max(fontSize.wrappedValue, 9), 24) }
        let label = Computed { [clamped] in
            runs.bump()
            return "\(Int(clamped.wrappedValue)) pt"
        }
        #expect(label.wrappedValue == "24 pt")
        fontSize.wrappedValue = 40
        #expect(label.wrappedValue == "24 pt")
        #expect(clamped.wrappedValue == 24)
        #expect(runs.value == 1)
        fontSize.wrappedValue = 12
        #expect(label.wrappedValue == "12 pt")
        #expect(runs.value == 2)
    }

    @Test("Dependencies are dynamic: a branch not taken is not an input")
    func dynamicBranches() {
        let runs = Counter()
        let useMetric = Stored(wrappedValue: true)
        let celsius = Stored(wrappedValue: 20.0)
        let fahrenheit = Stored(wrappedValue: 68.0)
        let display = Computed { [useMetric, celsius, fahrenheit] in
            runs.bump()
            return useMetric.wrappedValue ? "\(celsius.wrappedValue) °C" : "\(fahrenheit.wrappedValue) °F"
        }
        #expect(display.wrappedValue == "20.0 °C")
        fahrenheit.wrappedValue = 70
        #expect(display.wrappedValue == "20.0 °C")
        #expect(runs.value == 1)  // fahrenheit was not read, so it is not an input

        useMetric.wrappedValue = false
        #expect(display.wrappedValue == "70.0 °F")
        #expect(runs.value == 2)
        celsius.wrappedValue = 25
        #expect(display.wrappedValue == "70.0 °F")
        #expect(runs.value == 2)  // and now celsius is not
        fahrenheit.wrappedValue = 72
        #expect(display.wrappedValue == "72.0 °F")
        #expect(runs.value == 3)
    }

    @Test("A computed read inside another is an input, through any depth")
    func nestedComputed() {
        let base = Stored(wrappedValue: 2)
        let squared = Computed { [base] in base.wrappedValue * base.wrappedValue }
        let plusOne = Computed { [squared] in squared.wrappedValue + 1 }
        let text = Computed { [plusOne] in "value \(plusOne.wrappedValue)" }
        #expect(text.wrappedValue == "value 5")
        base.wrappedValue = 3
        #expect(text.wrappedValue == "value 10")
    }

    @Test("A self-referencing value reports a cycle instead of hanging or crashing")
    func selfCycle() throws {
        let count = Computed<Int>()
        count.projectedValue = Computed("count") { [count] in count.wrappedValue + 1 }
        #expect(count.wrappedValue == 1)  // the read closing the loop saw the literal zero
        let error = try #require(count.error)
        #expect(error.code == .cycle)
        #expect(error.message.contains("Computed<Int>(count) → Computed<Int>(count)"))
    }

    @Test("A two-node cycle marks both nodes, and breaking it clears the error")
    func mutualCycleComesAndGoes() throws {
        let linked = Stored(wrappedValue: false)
        let a = Computed<Int>()
        let b = Computed<Int>()
        a.projectedValue = Computed("a") { [b] in b.wrappedValue + 1 }
        b.projectedValue = Computed("b") { [a, linked] in linked.wrappedValue ? a.wrappedValue + 1 : 100 }
        #expect(a.wrappedValue == 101)
        #expect(a.error == nil && b.error == nil)

        linked.wrappedValue = true
        _ = a.wrappedValue  // terminates
        #expect(a.error?.code == .cycle)
        #expect(b.error?.code == .cycle)
        #expect(try #require(a.error).message.contains("Computed<Int>(a)"))
        #expect(try #require(a.error).message.contains("Computed<Int>(b)"))

        linked.wrappedValue = false
        #expect(a.wrappedValue == 101)
        #expect(a.error == nil)
        #expect(b.error == nil)
    }

    @Test("A cycle in a type with no literal zero uses the fallback")
    func cycleFallback() {
        struct Point: Sendable, Equatable { var x, y: Int }
        let p = Computed<Point>()
        p.projectedValue = Computed(fallback: Point(x: -1, y: -1)) { [p] in
            let previous = p.wrappedValue
            return Point(x: previous.x + 1, y: previous.y + 1)
        }
        #expect(p.wrappedValue == Point(x: 0, y: 0))
        #expect(p.error?.code == .cycle)
    }

    @Test("An unassigned value reports itself through error and isAssigned")
    func unassignedIsReported() {
        let lonely = Computed<String>()
        #expect(!lonely.isAssigned)
        #expect(lonely.error?.code == .invalidArgument)
        lonely.projectedValue = Computed { "now assigned" }
        #expect(lonely.isAssigned)
        #expect(lonely.error == nil)
        #expect(lonely.wrappedValue == "now assigned")
    }

    @Test("Reading an unassigned value stops the program with a message, never silently")
    func unassignedReadTraps() async {
        await #expect(processExitsWith: .failure) {
            let lonely = Computed<Int>()
            _ = lonely.wrappedValue
        }
    }

    @Test("Assigning a new closure replaces the formula and updates dependents")
    func reassignment() {
        let price = Stored(wrappedValue: 10)
        let total = Computed<Int>()
        total.projectedValue = Computed { [price] in price.wrappedValue * 2 }
        let label = Computed { [total] in "€\(total.wrappedValue)" }
        #expect(label.wrappedValue == "€20")
        total.projectedValue = Computed { [price] in price.wrappedValue * 3 }
        #expect(label.wrappedValue == "€30")
        price.wrappedValue = 1
        #expect(label.wrappedValue == "€3")
    }

    @Test("Computed values may be assigned in any order in init")
    func assignmentOrder() {
        final class Cart {
            @Stored var items = [3, 4]
            @Computed var total: Int
            @Computed var summary: String
            init() {
                $summary = Computed { [$total] in "total \($total.wrappedValue)" }  // $total not assigned yet
                $total = Computed { [$items] in $items.wrappedValue.reduce(0, +) }
            }
        }
        let cart = Cart()
        #expect(cart.summary == "total 7")
        cart.items.append(10)
        #expect(cart.summary == "total 17")
    }

    @Test("A model with computed values is freed when its last reference goes")
    func noRetainCycle() async throws {
        final class Profile {
            @Stored(backed: .keyValue(key: "first")) var first = "Ada"
            @Stored var last = "Lovelace"
            @Computed var full: String
            @Computed var initials: String
            init() {
                $full = Computed { [$first, $last] in "\($first.wrappedValue) \($last.wrappedValue)" }
                $initials = Computed { [$full] in String($full.wrappedValue.split(separator: " ").compactMap(\.first)) }
            }
        }
        weak var weakProfile: Profile?
        weak var weakFirst: Stored<String>?
        weak var weakFull: Computed<String>?
        try await withTemporaryContext { _ in
            var profile: Profile? = Profile()
            weakProfile = profile
            weakFirst = profile?.$first
            weakFull = profile?.$full
            #expect(profile?.initials == "AL")
            profile?.first = "Grace"
            #expect(profile?.initials == "GL")
            // An open values stream does not keep the model alive either.
            let stream = try #require(profile?.$initials.values)
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next() == "GL")
            profile = nil
            #expect(await iterator.next() == nil)  // the stream finishes when its property goes
        }
        #expect(weakProfile == nil)
        #expect(weakFirst == nil)
        #expect(weakFull == nil)
    }
}
