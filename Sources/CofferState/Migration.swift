public import CofferCore
import Foundation

/// What ``Stored/migrate(from:)`` did.
public enum MigrationOutcome: Sendable, Hashable {
    /// The old location held nothing: nothing changed.
    case nothingToMigrate
    /// The value moved: it is durable in this property's store, and the old copy is gone.
    case moved
    /// This property's store already held a value: it was kept, and the old copy was deleted.
    case keptExisting
}

extension Stored where Value: Codable {
    /// Moves a value that an older release kept elsewhere into this property's store.
    ///
    /// ```swift
    /// // Release 1 kept the token in the plain key-value file; release 2 keeps it in the vault.
    /// try model.$token.migrate(from: .keyValue(key: "token"))
    /// ```
    ///
    /// The steps are ordered so that a crash at any point loses nothing:
    /// 1. read the old copy and check that it decodes as a `Value` (if not, nothing is touched);
    /// 2. write it to this property's store, unless that store already holds a value — the
    ///    newer location wins, so running a migration again after a crash is harmless;
    /// 3. make this store durable (``PersistenceStrategy/flush()``);
    /// 4. delete the old copy, and make that durable too.
    ///
    /// A crash between 3 and 4 leaves two copies; the next run finds the destination filled and
    /// deletes the old one. Both backings resolve in this property's ``context``. Call it once
    /// at startup, before other writes to the property.
    ///
    /// - Parameter old: Where the value used to be.
    /// - Returns: What happened (``MigrationOutcome``). The value in memory is updated when the
    ///   value moved, and observers are notified.
    /// - Throws: ``CofferError`` — ``CofferError/Code/invalidArgument`` when this property is
    ///   memory-only (deleting the old copy would lose the value),
    ///   ``CofferError/Code/decoding`` when the old bytes are not a `Value`, or the error of a
    ///   strategy. The old copy is deleted only after every earlier step succeeded.
    @discardableResult
    public func migrate(from old: Backing) throws -> MigrationOutcome {
        try cell.migrate(from: old)
    }
}

extension StoredCell {
    func migrate(from old: Backing) throws -> MigrationOutcome {
        let resolved = self.binding()
        let (outcome, changed) = try persistLock.withLock { _ throws(CofferError) -> (MigrationOutcome, Bool) in
            let binding: StoreBinding?
            switch resolved {
            case .failure(let error): throw error
            case .success(let resolved): binding = resolved
            }
            guard let destination = binding?.strategy, let key = binding?.key else {
                throw CofferError(
                    .invalidArgument,
                    "cannot migrate \(old) into \(backing): memory is not durable, and the old copy would be lost")
            }
            let source: (strategy: any PersistenceStrategy, key: String)?
            do { source = try old.resolve(context) } catch { throw .wrapping(error, "opening \(old)") }
            guard let (sourceStrategy, oldKey) = source else { return (.nothingToMigrate, false) }
            if oldKey == key, Self.sameStore(sourceStrategy, destination) { return (.nothingToMigrate, false) }

            do {
                guard let data = try sourceStrategy.load(oldKey) else { return (.nothingToMigrate, false) }
                let value = try decodeValue(data, as: sourceStrategy.valueEncoding)
                let outcome: MigrationOutcome
                if try destination.load(key) != nil {
                    outcome = .keptExisting
                } else {
                    try destination.save(encodeValue(value, as: destination.valueEncoding), for: key)
                    outcome = .moved
                }
                try destination.flush()
                try sourceStrategy.remove(oldKey)
                try sourceStrategy.flush()
                // An append-only source still holds the old record: rewrite it so the old copy
                // (often a plaintext token) is gone from the file, not just marked removed.
                try sourceStrategy.compact()
                guard outcome == .moved else { return (outcome, false) }
                let changed = mutate { s in adoptStored(value, in: &s, keepingUnsavedWrite: false) ?? false }
                return (outcome, changed)
            } catch {
                throw .wrapping(error, "migrating \(old) to \(backing)")
            }
        }
        if changed { valueDidChange() }
        // Live properties on the old key (in this process) now read nothing there: the source
        // does not report this instance's own removal as a change from elsewhere.
        if outcome != .nothingToMigrate {
            for cell in CellRegistry.cells(boundTo: old, context: context) { cell.reloadAfterSiblingChange() }
        }
        return outcome
    }

    /// Whether two strategies are one store (equal ``PersistenceStrategy/id``s, or two instances
    /// on the same files: equal ``FileLocatedPersistenceStrategy/fileStoreID``s): moving a key
    /// onto itself there would delete the value.
    private static func sameStore(_ a: any PersistenceStrategy, _ b: any PersistenceStrategy) -> Bool {
        if let id = a.id, id == b.id { return true }
        guard let a = a as? any FileLocatedPersistenceStrategy, let b = b as? any FileLocatedPersistenceStrategy else {
            return false
        }
        return a.fileStoreID == b.fileStoreID
    }
}
