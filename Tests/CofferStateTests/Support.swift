import CofferCore
import CofferCrypto
import CofferStorage
import CofferTesting  // Protected (the test doubles' lock, which ThreadSanitizer sees), HelperChild
import CofferVault
import Foundation
import Testing

/// Runs `body` with a fresh temporary ``CofferContext`` as the current one, then deletes it.
/// Every test that persists uses this, so tests never share files or touch the user's.
func withTemporaryContext<R>(vault: Bool = false, _ body: (CofferContext) throws -> R) throws -> R {
    var context = try CofferContext.temporary(prefix: "coffer-state-test")
    defer { try? FileManager.default.removeItem(at: context.directory) }
    if vault { context = context.with(testVaultConfiguration) }
    return try CofferContext.$current.withValue(context) { try body(context) }
}

func withTemporaryContext<R>(vault: Bool = false, _ body: (CofferContext) async throws -> R) async throws -> R {
    var context = try CofferContext.temporary(prefix: "coffer-state-test")
    defer { try? FileManager.default.removeItem(at: context.directory) }
    if vault { context = context.with(testVaultConfiguration) }
    return try await CofferContext.$current.withValue(context) { try await body(context) }
}

/// A default vault that unlocks with a passphrase and the cheapest accepted Argon2id cost.
let testVaultConfiguration = VaultConfiguration(unlock: .passphrase("correct horse battery staple"), kdf: .minimum)

/// A thread-safe counter for recomputations and notifications.
final class Counter: Sendable {
    private let count = Protected(0)
    func bump() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// A thread-safe log of strings (operations, values seen).
final class Log<Entry: Sendable>: Sendable {
    private let entries = Protected<[Entry]>([])
    func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
    var all: [Entry] { entries.withLock { $0 } }
}

/// An in-memory strategy that counts what it is asked to do, optionally batch-capable, and can
/// be told to fail.
final class RecordingStrategy: BatchPersistenceStrategy {
    struct Counts: Sendable, Equatable {
        var loads = 0
        var saves = 0
        var removes = 0
        var batches = 0
        var flushes = 0
    }

    let name: String
    let log: Log<String>
    private let storage = Protected<[String: Data]>([:])
    private let counts = Protected(Counts())
    private let failure = Protected<(any Error)?>(nil)
    private let loadFailure = Protected<(any Error)?>(nil)

    init(name: String = "store", log: Log<String> = Log()) {
        self.name = name
        self.log = log
    }

    var recorded: Counts { counts.withLock { $0 } }
    /// Every save, remove and batch fails with `error` until set back to `nil`.
    func failWrites(with error: (any Error)?) { failure.withLock { $0 = error } }
    func failLoads(with error: (any Error)?) { loadFailure.withLock { $0 = error } }

    func load(_ key: String) throws -> Data? {
        counts.withLock { $0.loads += 1 }
        if let error = loadFailure.withLock({ $0 }) { throw error }
        return storage.withLock { $0[key] }
    }

    func save(_ data: Data, for key: String) throws {
        counts.withLock { $0.saves += 1 }
        if let error = failure.withLock({ $0 }) { throw error }
        log.append("\(name).save(\(key))")
        storage.withLock { $0[key] = data }
    }

    func remove(_ key: String) throws {
        counts.withLock { $0.removes += 1 }
        if let error = failure.withLock({ $0 }) { throw error }
        log.append("\(name).remove(\(key))")
        _ = storage.withLock { $0.removeValue(forKey: key) }
    }

    func keys() throws -> [String] { storage.withLock { Array($0.keys) } }

    func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        counts.withLock { $0.batches += 1 }
        if let error = failure.withLock({ $0 }) { throw error }
        log.append("\(name).saveBatch(\(changes.map(\.key).sorted().joined(separator: ",")))")
        storage.withLock { storage in
            for change in changes { storage[change.key] = change.data }
        }
    }

    func flush() throws {
        counts.withLock { $0.flushes += 1 }
        log.append("\(name).flush")
    }

    /// The raw bytes stored under `key`, bypassing the counters.
    func raw(_ key: String) -> Data? { storage.withLock { $0[key] } }
    func put<T: Codable>(_ value: T, for key: String) throws {
        let data = try ValueCodec.encode(value)
        storage.withLock { $0[key] = data }
    }
}

/// A strategy with no batch support, to check the key-by-key path.
final class PlainStrategy: PersistenceStrategy {
    let inner = RecordingStrategy()
    func load(_ key: String) throws -> Data? { try inner.load(key) }
    func save(_ data: Data, for key: String) throws { try inner.save(data, for: key) }
    func remove(_ key: String) throws { try inner.remove(key) }
    func keys() throws -> [String] { try inner.keys() }
}

/// An error that is not a `CofferError`, as a custom strategy might throw.
struct DiskOnFire: Error, CustomStringConvertible {
    var description: String { "the disk is on fire" }
}

/// Collects the first `count` elements of a stream, failing the test after `seconds`.
func collect<S: AsyncSequence & Sendable>(
    _ sequence: S, count: Int, within seconds: Double = 5
) async throws -> [S.Element] where S.Element: Sendable {
    try await withThrowingTaskGroup(of: [S.Element]?.self) { group in
        group.addTask {
            var result: [S.Element] = []
            for try await element in sequence {
                result.append(element)
                if result.count == count { break }
            }
            return result
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let first = try await group.next()!
        group.cancelAll()
        guard let first else {
            Issue.record("timed out waiting for \(count) values")
            return []
        }
        return first
    }
}
