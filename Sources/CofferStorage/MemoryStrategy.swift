public import CofferCore
public import Foundation
import Synchronization

/// Keeps values in memory for the life of the instance. Nothing is written anywhere.
///
/// Useful in tests and previews: the same model runs on `.memory` in a test and on disk in
/// production.
public final class MemoryStrategy: PersistenceStrategy, BatchPersistenceStrategy {
    private let values = Mutex<[String: Data]>([:])

    /// An empty in-memory store.
    public init() {}

    public func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
    public func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
    public func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    public func keys() throws -> [String] { values.withLock { Array($0.keys) } }

    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        values.withLock { values in
            for change in changes { values[change.key] = change.data }
        }
    }
}
