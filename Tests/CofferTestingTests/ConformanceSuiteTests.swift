import CofferCore
import CofferTesting
import Foundation
import Testing

/// Storage shared by the instances of a ``DictionaryStrategy``, so "reopening" finds what an
/// earlier instance wrote. Keys are UTF-8 bytes: Swift's `String ==` would merge NFC and NFD.
final class DictionaryStorage: Sendable {
    let values = Locked<[[UInt8]: Data]>([:])
}

/// A correct, minimal strategy over a dictionary: the suite must pass it.
final class DictionaryStrategy: PersistenceStrategy {
    let storage: DictionaryStorage
    init(storage: DictionaryStorage = DictionaryStorage()) { self.storage = storage }

    func load(_ key: String) throws -> Data? { storage.values.withLock { $0[Array(key.utf8)] } }
    func save(_ data: Data, for key: String) throws { storage.values.withLock { $0[Array(key.utf8)] = data } }
    func remove(_ key: String) throws { _ = storage.values.withLock { $0.removeValue(forKey: Array(key.utf8)) } }
    func keys() throws -> [String] { storage.values.withLock { $0.keys.map { String(decoding: $0, as: UTF8.self) } } }
}

/// Ways to be subtly wrong, each of which the suite must catch.
final class BrokenStrategy: PersistenceStrategy {
    enum Flaw: String, CaseIterable, CustomStringConvertible, Sendable {
        case dropsEmptyWrites, keysMissesOne, mergesUnicodeNormalForms, removeOfAbsentKeyThrows, reopenLosesRemovals
        case rejectsOddKeysInconsistently, truncatesLargeValues, loadsStaleValueAfterOverwrite
        var description: String { rawValue }
    }

    let flaw: Flaw
    let storage: DictionaryStorage
    private let stringKeyed = Locked<[String: Data]>([:])
    private let removed = Locked<[[UInt8]: Data]>([:])

    init(_ flaw: Flaw, storage: DictionaryStorage = DictionaryStorage()) {
        self.flaw = flaw
        self.storage = storage
    }

    func load(_ key: String) throws -> Data? {
        if flaw == .mergesUnicodeNormalForms { return stringKeyed.withLock { $0[key] } }
        if flaw == .rejectsOddKeysInconsistently && key.isEmpty { return Data() }
        return storage.values.withLock { $0[Array(key.utf8)] }
    }

    func save(_ data: Data, for key: String) throws {
        switch flaw {
        case .dropsEmptyWrites where data.isEmpty: return
        case .mergesUnicodeNormalForms: stringKeyed.withLock { $0[key] = data }
        case .rejectsOddKeysInconsistently where key.isEmpty:
            throw CofferError(.invalidArgument, "empty keys are not allowed")
        case .truncatesLargeValues where data.count > 1 << 20:
            storage.values.withLock { $0[Array(key.utf8)] = data.prefix(1 << 20) }
        case .loadsStaleValueAfterOverwrite:
            storage.values.withLock { values in
                if values[Array(key.utf8)] == nil || data.count < 4 { values[Array(key.utf8)] = data }
            }
        default: storage.values.withLock { $0[Array(key.utf8)] = data }
        }
    }

    func remove(_ key: String) throws {
        if flaw == .mergesUnicodeNormalForms {
            _ = stringKeyed.withLock { $0.removeValue(forKey: key) }
            return
        }
        let old = storage.values.withLock { $0.removeValue(forKey: Array(key.utf8)) }
        if flaw == .removeOfAbsentKeyThrows && old == nil { throw CofferError(.notFound, "no such key") }
        if flaw == .reopenLosesRemovals, let old { removed.withLock { $0[Array(key.utf8)] = old } }
    }

    func keys() throws -> [String] {
        if flaw == .mergesUnicodeNormalForms { return stringKeyed.withLock { Array($0.keys) } }
        let keys = storage.values.withLock { $0.keys.map { String(decoding: $0, as: UTF8.self) } }
        return flaw == .keysMissesOne ? Array(keys.dropFirst()) : keys
    }

    /// A new instance over the same storage; with `.reopenLosesRemovals`, removed keys come back.
    func reopened() -> BrokenStrategy {
        let resurrected = removed.withLock { $0 }
        storage.values.withLock { values in
            for (key, value) in resurrected where values[key] == nil { values[key] = value }
        }
        return BrokenStrategy(flaw, storage: storage)
    }
}

@Suite("StrategyConformance")
struct ConformanceSuiteTests {
    static let correct = StrategyConformance.Subject(
        make: { DictionaryStrategy() },
        reopen: { old in
            guard let old = old as? DictionaryStrategy else { throw ConformanceFailure("not a DictionaryStrategy") }
            return DictionaryStrategy(storage: old.storage)
        })

    @Test(arguments: StrategyConformance.cases)
    func aCorrectStrategyPasses(_ check: StrategyConformance.Case) throws {
        try check.run(Self.correct)
    }

    @Test func aNonPersistentSubjectSkipsReopening() throws {
        let failures = StrategyConformance.failures(of: .init(make: { DictionaryStrategy() }), includingSlow: false)
        #expect(failures.isEmpty)
        #expect(StrategyConformance.cases.filter(\.isSlow).map(\.name) == ["16 MiB value"])
        #expect(Set(StrategyConformance.cases.map(\.name)).count == StrategyConformance.cases.count)
    }

    /// The case each flaw must fail (it may fail others too).
    static let expectedFailure: [BrokenStrategy.Flaw: String] = [
        .dropsEmptyWrites: "empty value is distinct from absent",
        .keysMissesOne: "keys() is the exact set",
        .mergesUnicodeNormalForms: "NFC and NFD keys are distinct",
        .removeOfAbsentKeyThrows: "remove",
        .reopenLosesRemovals: "reopen and read back",
        .rejectsOddKeysInconsistently: "odd keys",
        .truncatesLargeValues: "16 MiB value",
        .loadsStaleValueAfterOverwrite: "overwrite",
    ]

    @Test(arguments: BrokenStrategy.Flaw.allCases)
    func aBrokenStrategyFails(_ flaw: BrokenStrategy.Flaw) throws {
        let subject = StrategyConformance.Subject(
            make: { BrokenStrategy(flaw) },
            reopen: { old in
                guard let old = old as? BrokenStrategy else { throw ConformanceFailure("not a BrokenStrategy") }
                return old.reopened()
            })
        let failures = StrategyConformance.failures(of: subject)
        let failed = Set(failures.map(\.check.name))
        let expected = try #require(Self.expectedFailure[flaw])
        #expect(failed.contains(expected), "\(flaw) was not caught by '\(expected)'; failed: \(failed.sorted())")
        for failure in failures {
            // Failures explain themselves without the stored bytes ("value 3" is what odd keys store).
            let text = String(describing: failure.error)
            #expect(!text.contains("value 1"))
            #expect(failure.error is ConformanceFailure)
        }
    }

    @Test func failureMessagesNameKeysAndSizesOnly() throws {
        let store = BrokenStrategy(.loadsStaleValueAfterOverwrite)
        let subject = StrategyConformance.Subject(make: { store })
        let overwrite = try #require(StrategyConformance.cases.first { $0.name == "overwrite" })
        let failure = try #require(throws: ConformanceFailure.self) { try overwrite.run(subject) }
        #expect(failure.message.contains("\"k\""))
        #expect(failure.message.contains("bytes"))
        #expect(!failure.message.contains("first, longer value"))
        #expect(!failure.message.contains("short"))
        #expect(failure.description.contains(failure.file))
    }
}
