public import CofferCore
package import Foundation
import Dispatch
import Synchronization

/// The behaviour every ``PersistenceStrategy`` must show, as cases any test framework can run.
///
/// ```swift
/// import CofferTesting
/// import Testing
///
/// let subject = StrategyConformance.Subject(make: { MyStrategy() })
///
/// @Test(arguments: StrategyConformance.cases)
/// func conforms(_ check: StrategyConformance.Case) throws { try check.run(subject) }
/// ```
///
/// Each case makes its own fresh, empty store with ``Subject/make`` and throws
/// ``ConformanceFailure`` when the strategy misbehaves (or the strategy's own error when a call
/// fails unexpectedly, wrapped in a ``ConformanceFailure`` naming the call). Failure messages
/// name keys, byte counts and where a value differs (offset, and the bytes there of the
/// suite's own test values), never bytes the suite did not write.
///
/// Decisions the suite pins down for every strategy:
/// - Keys are compared as exact UTF-8 bytes: `"é"` (NFC, U+00E9) and `"e\u{301}"` (NFD) are two
///   keys, even though Swift's `==` calls them equal.
/// - An unusual key (empty, `"/"`, `".."`, NUL, 1,000 characters …) is either stored and read
///   back exactly like any other, or refused with ``CofferError/Code/invalidArgument`` — and a
///   refused key is then absent. Accepting is preferred.
/// - Zero bytes is a value, distinct from no value. Removing an absent key is not an error.
public enum StrategyConformance: Sendable {
    /// The strategy under test: how to make a fresh, empty store, and how to reopen one.
    public struct Subject: Sendable {
        /// Makes a fresh, empty store. Called once per case.
        public var make: @Sendable () throws -> any PersistenceStrategy
        /// Closes `store` and opens the same storage again; `nil` for strategies that do not persist.
        public var reopen: (@Sendable (any PersistenceStrategy) throws -> any PersistenceStrategy)?

        /// A subject; pass `reopen` when the strategy persists across instances.
        public init(
            make: @escaping @Sendable () throws -> any PersistenceStrategy,
            reopen: (@Sendable (any PersistenceStrategy) throws -> any PersistenceStrategy)? = nil
        ) {
            self.make = make
            self.reopen = reopen
        }
    }

    /// One named check of the suite.
    public struct Case: Sendable, CustomStringConvertible {
        /// A short name, such as `round trip`.
        public let name: String
        /// True for the case that moves 16 MiB; skip it where time matters.
        public let isSlow: Bool
        /// Runs the check against a subject.
        /// - Throws: ``ConformanceFailure`` when the strategy misbehaves.
        public let run: @Sendable (Subject) throws -> Void

        /// A case; users may add their own to ``StrategyConformance/cases``.
        public init(_ name: String, isSlow: Bool = false, run: @escaping @Sendable (Subject) throws -> Void) {
            self.name = name
            self.isSlow = isSlow
            self.run = run
        }

        /// The case's name.
        public var description: String { name }
    }

    /// Every case, fast ones first.
    public static var cases: [Case] {
        [
            Case("round trip", run: roundTrip),
            Case("overwrite", run: overwrite),
            Case("remove", run: remove),
            Case("keys() is the exact set", run: exactKeys),
            Case("empty value is distinct from absent", run: emptyValue),
            Case("odd keys", run: oddKeys),
            Case("NFC and NFD keys are distinct", run: unicodeNormalization),
            Case("1,000 keys", run: thousandKeys),
            Case("typed values", run: typedValues),
            Case("concurrent use", run: concurrentUse),
            Case("reopen and read back", run: reopenAndReadBack),
            Case("16 MiB value", isSlow: true, run: largeValue),
        ]
    }

    /// Runs every case (or the fast ones) and returns the failures, for frameworks without parameterised tests.
    public static func failures(of subject: Subject, includingSlow: Bool = true) -> [(check: Case, error: any Error)] {
        var failures: [(check: Case, error: any Error)] = []
        for check in cases where includingSlow || !check.isSlow {
            do { try check.run(subject) } catch { failures.append((check, error)) }
        }
        return failures
    }

    // MARK: - Cases

    static func roundTrip(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        try expectValue(store, "greeting", nil)
        let value = Data("hello".utf8)
        try save(store, value, "greeting")
        try expectValue(store, "greeting", value)
        let binary = Data((0...255).map { UInt8($0) })
        try save(store, binary, "all bytes")
        try expectValue(store, "all bytes", binary)
        try expectValue(store, "greeting", value)
        try expectValue(store, "Greeting", nil)
    }

    static func overwrite(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        let values = [Data("first, longer value".utf8), Data("short".utf8), Data(count: 1000), Data("last".utf8)]
        for value in values {
            try save(store, value, "k")
            try expectValue(store, "k", value)
        }
        try expectKeys(store, ["k"])
    }

    static func remove(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        try step("remove(never stored)") { try store.remove("never stored") }
        try save(store, Data([1, 2, 3]), "a")
        try save(store, Data([4]), "b")
        try step("remove(a)") { try store.remove("a") }
        try expectValue(store, "a", nil)
        try expectValue(store, "b", Data([4]))
        try step("remove(a) again") { try store.remove("a") }
        try expectKeys(store, ["b"])
        try save(store, Data([5]), "a")
        try expectValue(store, "a", Data([5]))
    }

    static func exactKeys(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        try expectKeys(store, [])
        for i in 0..<10 { try save(store, Data([UInt8(i)]), "key-\(i)") }
        try save(store, Data([9, 9]), "key-3")  // an overwrite must not duplicate a key
        for i in [1, 5, 7] { try step("remove(key-\(i))") { try store.remove("key-\(i)") } }
        try expectKeys(store, Set([0, 2, 3, 4, 6, 8, 9].map { "key-\($0)" }))
    }

    static func emptyValue(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        try save(store, Data(), "empty")
        try expectValue(store, "empty", Data())
        try expectKeys(store, ["empty"])
        try save(store, Data([1]), "empty")
        try save(store, Data(), "empty")
        try expectValue(store, "empty", Data())
        try step("remove(empty)") { try store.remove("empty") }
        try expectValue(store, "empty", nil)
    }

    /// Keys that trip up file names, escaping schemes and C strings.
    public static let oddKeys: [String] = [
        "", " ", "/", "//", "a/b", "a%2Fb", "a\\b", ".", "..", "../escape", ".hidden", "a.tmp", "a.lock",
        "\0", "a\0b", "\n", "tab\there", "🔑", "👩‍👩‍👧‍👦", "e\u{301}\u{302}", "Ǆ", "ǅ", "ǆ", "CON", "con",
        String(repeating: "k", count: 1000), String(repeating: "é", count: 1000),
    ]

    static func oddKeys(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        var accepted: [(key: String, value: Data)] = []
        for (index, key) in oddKeys.enumerated() {
            let value = Data("value \(index)".utf8)
            do {
                try store.save(value, for: key)
                accepted.append((key, value))
            } catch let error as CofferError where error.code == .invalidArgument {
                // Refusing is allowed; then the key must read as absent or be refused again.
                do {
                    let loaded = try store.load(key)
                    try check(loaded == nil, "refused key \(show(key)) reads back \(describe(loaded))")
                } catch let error as CofferError where error.code == .invalidArgument {}
            } catch {
                throw ConformanceFailure(
                    "save(\(show(key))) threw \(error); an odd key must be stored or refused with invalidArgument")
            }
        }
        // Every accepted key reads back its own value: no two keys collide after escaping.
        for (key, value) in accepted { try expectValue(store, key, value) }
        try expectKeys(store, [], exact: accepted.map(\.key))
        for (key, _) in accepted.prefix(accepted.count / 2) {
            try step("remove(\(show(key)))") { try store.remove(key) }
        }
        let rest = Array(accepted.dropFirst(accepted.count / 2))
        for (key, _) in accepted.prefix(accepted.count / 2) { try expectValue(store, key, nil) }
        for (key, value) in rest { try expectValue(store, key, value) }
        try expectKeys(store, [], exact: rest.map(\.key))
    }

    static func unicodeNormalization(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        let nfc = "caf\u{E9}"
        let nfd = "cafe\u{301}"
        try save(store, Data([1]), nfc)
        try save(store, Data([2]), nfd)
        try expectValue(store, nfc, Data([1]))
        try expectValue(store, nfd, Data([2]))
        try expectKeys(store, [], exact: [nfc, nfd])
        try step("remove(NFD)") { try store.remove(nfd) }
        try expectValue(store, nfc, Data([1]))
        try expectValue(store, nfd, nil)
    }

    static func thousandKeys(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        let keys = (0..<1000).map { "item.\($0)" }
        for (i, key) in keys.enumerated() { try save(store, value(i), key) }
        try expectKeys(store, Set(keys))
        for (i, key) in keys.enumerated() { try expectValue(store, key, value(i)) }

        func value(_ i: Int) -> Data { withUnsafeBytes(of: UInt32(i).littleEndian) { Data($0) } }
    }

    struct Profile: Codable, Equatable, Sendable {
        var name: String
        var age: Int
        var tags: [String]
        var nested: [String: Double]
        var optional: Int?
    }

    static func typedValues(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        try typed(store, true)
        try typed(store, false)
        try typed(store, Int.min)
        try typed(store, Int.max)
        try typed(store, 0)
        try typed(store, Int8.min)
        try typed(store, Int16(-300))
        try typed(store, Int32.max)
        try typed(store, UInt8.max)
        try typed(store, UInt64.max)
        try typed(store, UInt.max)
        try typed(store, Double.pi)
        try typed(store, -0.0)
        try typed(store, Double.infinity)
        try typed(store, Double.leastNonzeroMagnitude)
        try typed(store, Float(1.5))
        try typed(store, "")
        try typed(store, "plain ascii")
        try typed(store, "ünïcödé 🔑 e\u{301}")
        try typed(store, Data())
        try typed(store, Data([0, 1, 2, 0xFF]))
        try typed(store, Optional<Int>.some(7))
        try typed(store, [1, 2, 3])
        try typed(store, ["a", "", "é"])
        try typed(store, ["x": 1, "y": 2])
        try typed(store, Profile(name: "Ada", age: 36, tags: ["math", "🔑"], nested: ["pi": 3.14], optional: nil))
        try typed(store, Date(timeIntervalSinceReferenceDate: 1234.5))
        if let url = URL(string: "https://example.com/a?b=c") { try typed(store, url) }

        // NaN: compare bit patterns (tagged encoding), not values.
        let nan = Double(nan: 0x123, signaling: false)
        try step("set NaN") { try store.set(nan, for: "nan") }
        let loaded = try step("get NaN") { try store.get(Double.self, for: "nan") }
        if store.valueEncoding == .tagged {
            try check(loaded?.bitPattern == nan.bitPattern, "NaN did not round-trip bit for bit")
        } else {
            // Plain encoding stores text ("nan"): a NaN stays a NaN, its payload bits do not.
            try check(loaded?.isNaN == true, "NaN did not round-trip as NaN")
        }

        // A stored nil (JSON null) is present, and reads back as a present-but-nil Optional.
        try step("set Int?.none") { try store.set(Int?.none, for: "nil") }
        try check((try step("load(nil)") { try store.load("nil") }) != nil, "a stored nil Optional is absent")
        let none = try step("get Int?") { try store.get(Int?.self, for: "nil") }
        try check(none.map { $0 == nil } == true, "a stored nil Optional does not read back as nil")

        // An absent key is nil for every type.
        try check((try step("get absent") { try store.get(Int.self, for: "absent") }) == nil, "absent key is not nil")
        // A value read as the wrong type is a decoding error.
        try step("set String") { try store.set("not a number", for: "text") }
        do {
            _ = try store.get(Int.self, for: "text")
            throw ConformanceFailure("get(Int.self) of a stored String did not throw")
        } catch let error as CofferError {
            try check(error.code == .decoding, "get(Int.self) of a stored String threw \(error.code), not decoding")
        }
    }

    static func concurrentUse(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        let threads = 16
        let operations = 200
        let errors = Locked<[String]>([])
        let sharedKeys = (0..<4).map { "shared-\($0)" }

        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            do {
                for op in 0..<operations {
                    let own = "thread-\(thread)-\(op % 10)"
                    switch op % 8 {
                    case 0, 1, 2, 3:
                        try store.save(ConcurrentValue.encode(thread: thread, op: op), for: own)
                    case 4:
                        try store.save(ConcurrentValue.encode(thread: thread, op: op), for: sharedKeys[(op / 8 + thread) % 4])
                    case 5:
                        if let data = try store.load(sharedKeys[(op + thread) % 4]), ConcurrentValue.decode(data) == nil {
                            throw ConformanceFailure("a shared key read back \(data.count) bytes that no writer wrote")
                        }
                    case 6:
                        let keys = try store.keys()
                        if keys.count > threads * 10 + sharedKeys.count {
                            throw ConformanceFailure("keys() returned \(keys.count) keys; at most \(threads * 10 + 4) exist")
                        }
                    default:
                        if let data = try store.load(own), ConcurrentValue.decode(data)?.thread != thread {
                            throw ConformanceFailure("thread \(thread)'s own key holds a value it did not write")
                        }
                    }
                }
            } catch {
                errors.withLock { $0.append("thread \(thread): \(error)") }
            }
        }
        let failures = errors.withLock { $0 }
        if let first = failures.first {
            throw ConformanceFailure("\(failures.count) thread(s) failed; first: \(first)")
        }
        // No lost writes: each own key holds its thread's last write to it.
        for thread in 0..<threads {
            for slot in 0..<10 {
                let key = "thread-\(thread)-\(slot)"
                let last = (0..<operations).last { $0 % 10 == slot && $0 % 8 < 4 }
                let expected = last.map { ConcurrentValue.encode(thread: thread, op: $0) }
                try expectValue(store, key, expected)
            }
        }
        for key in sharedKeys {
            let data = try step("load(\(key))") { try store.load(key) }
            try check(data.flatMap(ConcurrentValue.decode) != nil, "shared key \(key) holds no valid value after the run")
        }
    }

    static func reopenAndReadBack(_ subject: Subject) throws {
        guard let reopen = subject.reopen else { return }  // not a persistent strategy
        let store = try step("make a store") { try subject.make() }
        var expected: [String: Data] = [:]
        for i in 0..<50 {
            let data = Data((0..<(i * 7)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) })
            try save(store, data, "key-\(i)")
            expected["key-\(i)"] = data
        }
        try save(store, Data(), "empty")
        expected["empty"] = Data()
        for i in stride(from: 0, to: 50, by: 5) {
            try step("remove(key-\(i))") { try store.remove("key-\(i)") }
            expected["key-\(i)"] = nil
        }
        for i in stride(from: 1, to: 50, by: 5) {
            let data = Data("overwritten \(i)".utf8)
            try save(store, data, "key-\(i)")
            expected["key-\(i)"] = data
        }
        try step("set typed") { try store.set(UInt64.max, for: "typed") }
        expected["typed"] = try ValueCodec.encode(UInt64.max, as: store.valueEncoding)

        let reopened = try step("reopen") { try reopen(store) }
        try expectKeys(reopened, Set(expected.keys))
        for (key, data) in expected { try expectValue(reopened, key, data) }
        for i in stride(from: 0, to: 50, by: 5) { try expectValue(reopened, "key-\(i)", nil) }
        let typed = try step("get typed") { try reopened.get(UInt64.self, for: "typed") }
        try check(typed == UInt64.max, "typed value did not survive reopening")

        // Changes after reopening persist too.
        try step("remove(key-1)") { try reopened.remove("key-1") }
        try save(reopened, Data([7]), "after")
        let again = try step("reopen again") { try reopen(reopened) }
        try expectValue(again, "key-1", nil)
        try expectValue(again, "after", Data([7]))
    }

    static func largeValue(_ subject: Subject) throws {
        let store = try step("make a store") { try subject.make() }
        var generator = SplitMix64(seed: 0xC0FFEE)
        var big = Data(count: 16 << 20)
        big.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in words.indices { words[i] = generator.next() }
        }
        try save(store, big, "big")
        try expectValue(store, "big", big)
        try save(store, Data([1]), "small")
        try expectValue(store, "big", big)
        try save(store, Data([2]), "big")
        try expectValue(store, "big", Data([2]))
        if let reopen = subject.reopen {
            try save(store, big, "big")
            let reopened = try step("reopen") { try reopen(store) }
            try expectValue(reopened, "big", big)
        }
    }

    // MARK: - Helpers

    /// Values the concurrency case writes: 16 bytes that identify their writer and check themselves.
    enum ConcurrentValue {
        static func encode(thread: Int, op: Int) -> Data {
            var bytes: [UInt8] = []
            for word in [UInt32(thread), UInt32(op), UInt32(thread &* 7919 &+ op), 0xC0FF_EE00] {
                withUnsafeBytes(of: word.littleEndian) { bytes.append(contentsOf: $0) }
            }
            return Data(bytes)
        }

        static func decode(_ data: Data) -> (thread: Int, op: Int)? {
            guard data.count == 16 else { return nil }
            let words = (0..<4).map { i in data.dropFirst(i * 4).prefix(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
            guard words[3] == 0xC0FF_EE00, words[2] == words[0] &* 7919 &+ words[1] else { return nil }
            return (Int(words[0]), Int(words[1]))
        }
    }

    static func typed<T: Codable & Equatable>(
        _ store: any PersistenceStrategy, _ value: T, file: StaticString = #fileID, line: UInt = #line
    ) throws {
        let key = "typed.\(T.self)"
        try step("set(\(T.self))") { try store.set(value, for: key) }
        let loaded = try step("get(\(T.self))") { try store.get(T.self, for: key) }
        try check(loaded == value, "a \(T.self) did not round-trip", file: file, line: line)
    }

    static func save(
        _ store: any PersistenceStrategy, _ data: Data, _ key: String, file: StaticString = #fileID, line: UInt = #line
    ) throws {
        try step("save(\(show(key)))", file: file, line: line) { try store.save(data, for: key) }
    }

    static func expectValue(
        _ store: any PersistenceStrategy, _ key: String, _ expected: Data?, file: StaticString = #fileID,
        line: UInt = #line
    ) throws {
        let loaded = try step("load(\(show(key)))", file: file, line: line) { try store.load(key) }
        guard loaded != expected else { return }
        throw ConformanceFailure("load(\(show(key))) \(difference(loaded, expected))", file: file, line: line)
    }

    /// What differs between a loaded value and the expected one, for a failure message: the
    /// lengths, the first differing byte's offset and both values there, and how many bytes
    /// differ. The values are the suite's own test bytes, never anything it did not write.
    ///
    /// `returned 4 bytes, expected 4: they differ at byte 2 (0x01, expected 0x02), 1 byte in all`
    package static func difference(_ loaded: Data?, _ expected: Data?) -> String {
        switch (loaded, expected) {
        case (nil, nil):
            return "returned no value, as expected"
        case (nil, let expected?):
            return "returned no value (nil), expected \(bytes(expected.count)); the value was lost"
        case (let loaded?, nil):
            return "returned \(bytes(loaded.count)), expected no value (the key should be absent)"
        case (let loaded?, let expected?):
            let loaded = [UInt8](loaded), expected = [UInt8](expected)
            let common = min(loaded.count, expected.count)
            let first = (0..<common).first { loaded[$0] != expected[$0] }
            let differing = (0..<common).filter { loaded[$0] != expected[$0] }.count
            let counts = loaded.count == expected.count
                ? "returned \(bytes(loaded.count)) as expected" : "returned \(bytes(loaded.count)), expected \(expected.count)"
            guard let first else {
                // One is a prefix of the other.
                if loaded.count > expected.count {
                    return "\(counts): the first \(bytes(common)) match, then \(bytes(loaded.count - common)) more "
                        + "starting with \(hex(loaded[common]))"
                }
                return "\(counts): the first \(bytes(common)) match, then the value ends where \(hex(expected[common])) "
                    + "was expected (\(bytes(expected.count - common)) missing)"
            }
            return "\(counts): they differ at byte \(first) (\(hex(loaded[first])), expected \(hex(expected[first]))), "
                + "\(bytes(differing)) of the first \(common) in all"
        }
    }

    private static func bytes(_ count: Int) -> String { count == 1 ? "1 byte" : "\(count) bytes" }

    private static func hex(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16)
        return "0x" + (digits.count == 1 ? "0" + digits : digits)
    }

    /// Checks `keys()` holds exactly `expected` plus `exact` (both compared as UTF-8 bytes), once each.
    static func expectKeys(
        _ store: any PersistenceStrategy, _ expected: Set<String>, exact: [String] = [], file: StaticString = #fileID,
        line: UInt = #line
    ) throws {
        let keys = try step("keys()", file: file, line: line) { try store.keys() }
        let want = expected.bytesSet.union(exact.map { Array($0.utf8) })
        let got = keys.map { Array($0.utf8) }
        if Set(got).count != got.count {
            throw ConformanceFailure("keys() returned a key more than once (\(got.count) keys, \(Set(got).count) distinct)",
                                     file: file, line: line)
        }
        let missing = want.subtracting(got)
        let extra = Set(got).subtracting(want)
        guard missing.isEmpty && extra.isEmpty else {
            let name = { (bytes: [UInt8]) in show(String(decoding: bytes, as: UTF8.self)) }
            throw ConformanceFailure(
                "keys() returned \(got.count) keys, expected \(want.count); missing: "
                    + "\(missing.prefix(5).map(name).sorted()), unexpected: \(extra.prefix(5).map(name).sorted())",
                file: file, line: line)
        }
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
                      line: UInt = #line) throws {
        if !condition { throw ConformanceFailure(message(), file: file, line: line) }
    }

    /// Runs a strategy call; an unexpected error becomes a failure naming the call.
    static func step<T>(_ what: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line,
                        _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let failure as ConformanceFailure {
            throw failure
        } catch {
            throw ConformanceFailure("\(what()) threw: \(error)", file: file, line: line, cause: error)
        }
    }

    /// A key as a readable, escaped literal, shortened when long.
    static func show(_ key: String) -> String {
        let utf8 = key.utf8.count
        if utf8 > 40 { return "\(String(key.prefix(8)).debugDescription)… (\(utf8) UTF-8 bytes)" }
        // Spell out scalars so NFC and NFD spellings look different.
        let escaped = key.unicodeScalars.map { $0.isASCII ? $0.escaped(asASCII: true) : "\\u{\(String($0.value, radix: 16))}" }
        return "\"\(escaped.joined())\""
    }

    /// A stored value described without its content.
    static func describe(_ data: Data?) -> String {
        guard let data else { return "nil" }
        return "\(data.count) bytes"
    }
}

/// A conformance check that failed: what the strategy did wrong, and where the check is.
public struct ConformanceFailure: Error, Sendable, CustomStringConvertible {
    /// What went wrong; names keys, byte counts and where a test value differs, never bytes
    /// the suite did not write.
    public let message: String
    /// The file of the check that failed.
    public let file: String
    /// The line of the check that failed.
    public let line: UInt
    /// The strategy's own error, when a call threw unexpectedly.
    public let cause: (any Error)?

    /// A failure at the caller's location.
    public init(_ message: String, file: StaticString = #fileID, line: UInt = #line, cause: (any Error)? = nil) {
        self.message = message
        self.file = "\(file)"
        self.line = line
        self.cause = cause
    }

    /// `message (file:line)`.
    public var description: String { "\(message) (\(file):\(line))" }
}

extension Set where Element == String {
    var bytesSet: Set<[UInt8]> { Set<[UInt8]>(map { Array($0.utf8) }) }
}
