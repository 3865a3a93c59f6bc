public import CofferCore
public import Foundation
import Synchronization

/// Keeps values in memory for the life of the instance. Nothing is written anywhere.
///
/// Useful in tests and previews: the same model runs on `.memory` in a test and on disk in
/// production.
public final class MemoryStrategy: BatchPersistenceStrategy {
    private let values = Locked<[ExactKey: Data]>([:])

    /// An empty in-memory store.
    public init() {}

    public func load(_ key: String) throws -> Data? { values.withLock { $0[ExactKey(key)] } }
    public func save(_ data: Data, for key: String) throws { values.withLock { $0[ExactKey(key)] = data } }
    public func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: ExactKey(key)) } }
    public func keys() throws -> [String] { values.withLock { $0.keys.map(\.string) } }

    public func saveBatch(_ changes: [(key: String, data: Data?)]) throws {
        values.withLock { values in
            for change in changes { values[ExactKey(change.key)] = change.data }
        }
    }
}
