import CofferCore
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Testing

/// A strategy written as the documents show it: the four methods and nothing else.
private final class FourMethods: PersistenceStrategy {
    let values = Protected<[String: Data]>([:])
    func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() throws -> [String] { values.withLock { Array($0.keys) } }
}

/// A remote store of the four `async` methods alone: no one-commit batch, no swap.
private final class PlainRemote: AsyncPersistenceStrategy {
    let values = Protected<[String: Data]>([:])
    func load(_ key: String) async throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) async throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) async throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() async throws -> [String] { values.withLock { Array($0.keys) } }
}

/// A remote store that adopts the batch and swap promises but forgot their async forms.
private final class ForgetfulRemote: AsyncPersistenceStrategy, BatchPersistenceStrategy, CompareAndSwapPersistenceStrategy {
    let values = Protected<[String: Data]>([:])
    func load(_ key: String) async throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) async throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) async throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() async throws -> [String] { values.withLock { Array($0.keys) } }
}

/// Guards what an author of a strategy can leave out (every requirement but the four methods
/// has a default that is right for a plain store), that the stores that differ say so, and that
/// "which store" has one name, the ``StoreID``, whether a strategy, a backing or a context's
/// table of shared stores asks.
@Suite("Strategy defaults and store names")
struct StrategyDefaultsTests {
    @Test("A strategy of four methods: tagged bytes, no secrets, nothing to flush or compact, its own instance's store")
    func fourMethodsSuffice() throws {
        let store = FourMethods()
        #expect(store.valueEncoding == .tagged)
        #expect(!store.holdsSecrets)
        try store.set(42, for: "answer")
        try store.flush()
        try store.compact()
        #expect(try store.get(Int.self, for: "answer") == 42)
        #expect(store.id == StoreID(store))
        #expect(!(store is any BatchPersistenceStrategy) && !(store is any CompareAndSwapPersistenceStrategy))
        // A @Stored property on it persists through the defaults.
        let answer = Stored(wrappedValue: 0, backed: .strategy(store, key: "answer"))
        #expect(answer.wrappedValue == 42)
        answer.wrappedValue = 43
        try answer.projectedValue.flush()
        #expect(try store.get(Int.self, for: "answer") == 43)
    }

    @Test("The vault's strategy says its bytes are plain and its values secret")
    func vaultStatesWhatDiffers() throws {
        try withTemporaryContext(vault: true) { context in
            let strategy: any PersistenceStrategy = VaultStrategy(vault: try context.defaultVault(), service: "s")
            #expect(strategy.valueEncoding == .plain)
            #expect(strategy.holdsSecrets)
            let suite: any PersistenceStrategy = try KeyValueFileStrategy(directory: context.directory)
            #expect(suite.valueEncoding == .tagged && !suite.holdsSecrets)
        }
    }

    @Test("A remote store without the batch and swap promises: its batch applies each change, its swap is refused")
    func remoteWithoutPromises() async throws {
        let store = PlainRemote()
        try await store.save(Data([1]), for: "gone")
        try await store.saveBatch([("a", Data([2])), ("gone", nil), ("a", Data([3]))])
        #expect(store.values.withLock { $0 } == ["a": Data([3])])
        await #expect(throws: CofferError.self) { _ = try await store.compareAndSwap("a", expected: Data([3]), new: nil) }
        #expect(store.values.withLock { $0["a"] } == Data([3]))
        // The synchronous forms run the async ones.
        try (store as any PersistenceStrategy).save(Data([4]), for: "b")
        #expect(try (store as any PersistenceStrategy).load("b") == Data([4]))
    }

    @Test("A remote store that adopts the promises without their async forms is refused at its first batch or swap, and nothing is written")
    func promisesWithoutTheirAsyncForms() async throws {
        let store = ForgetfulRemote()
        await #expect(throws: CofferError.self) { try await store.saveBatch([("a", Data([1])), ("b", Data([2]))]) }
        #expect(throws: CofferError.self) { try (store as any BatchPersistenceStrategy).saveBatch([("a", Data([1]))]) }
        await #expect(throws: CofferError.self) { _ = try await store.compareAndSwap("a", expected: nil, new: Data([1])) }
        #expect(store.values.withLock { $0 }.isEmpty)
    }

    @Test("A remote store that keeps the promises gets the synchronous batch and swap from its async ones")
    func remoteWithPromises() throws {
        let store = GatedRemoteStrategy()
        let synchronous: any CompareAndSwapPersistenceStrategy = store
        #expect(try synchronous.compareAndSwap("k", expected: nil, new: Data([1])))
        #expect(try !synchronous.compareAndSwap("k", expected: nil, new: Data([2])))
        #expect(try synchronous.load("k") == Data([1]))
    }

    @Test("StoreID's three forms: an object or a part of it, a name, a name within a context")
    func storeIDForms() {
        let object = FourMethods()
        #expect(StoreID(object, ["service", "a"]) != StoreID(object, ["service", "b"]))
        #expect(StoreID(object, ["service", "a"]).whole == StoreID(object))
        #expect(StoreID(named: ["keyValue", "app"]).whole == StoreID(named: ["keyValue", "app"]))
        #expect(StoreID.inContext(["keyValue", "app"]) == StoreID.inContext(["keyValue", "app"]))
        #expect(StoreID.inContext(["keyValue", "app"]) != StoreID(named: ["keyValue", "app"]))
        #expect(StoreID.inContext(["keyValue", "app"]).isContextual && !StoreID(named: ["x"]).isContextual)
    }

    @Test("A backing's store is the id under which its context shares the store it opens")
    func backingStoreIsTheContextsKey() throws {
        try withTemporaryContext { context in
            let backing = Backing.keyValue(suite: "app", key: "theme")
            #expect(backing.store == StoreID.inContext(["keyValue", "app"]))
            let theme = Stored(wrappedValue: "light", backed: backing)
            theme.wrappedValue = "dark"
            let shared: KeyValueFileStrategy = try context.sharedStore(id: try #require(backing.store)) {
                throw CofferError(.notFound, "the property's suite was not shared under its backing's store")
            }
            #expect(try shared.get(String.self, for: "theme") == "dark")
            #expect(Backing.disk(key: "k").store == StoreID.inContext(["disk"]))
            #expect(Backing.strategy(shared, key: "theme").store == shared.id)
            #expect(Backing.memory.store == nil)
        }
    }

    @Test("Two instances on one file: different stores by id, one by the files they hold")
    func fileStoreID() throws {
        try withTemporaryContext { context in
            let one = try KeyValueFileStrategy(directory: context.directory, suite: "same")
            let two = try KeyValueFileStrategy(directory: context.directory, suite: "same")
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "other")
            #expect(one.id != two.id)
            #expect(one.fileStoreID == two.fileStoreID)
            #expect(one.fileStoreID != other.fileStoreID)
        }
    }
}
