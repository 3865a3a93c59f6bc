import CofferCore
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Observation
import Testing

/// `StoredMap`: typed values under keys chosen at run time, with the guarantees of `@Stored` per
/// key (one value per key, outside changes followed, errors per key, nothing lost) and costs that
/// do not grow with the keys in use (nothing held for a key nobody holds).
/// Records what a map's `changes` stream names, on a task of its own, until stopped.
final class ChangeRecorder: Sendable {
    private let seen: Protected<Set<String>>
    private let task: Task<Void, Never>

    init(_ changes: AsyncStream<StoredMapChange>) {
        let seen = Protected<Set<String>>([])
        self.seen = seen
        task = Task {
            for await change in changes {
                switch change {
                case .keys(let keys): seen.withLock { $0.formUnion(keys) }
                case .unknown: seen.withLock { _ = $0.insert("*") }
                }
            }
        }
    }

    /// Whether `keys` were all named within `seconds` (a hang guard).
    func named(_ keys: Set<String>, within seconds: Double = 20) async -> Bool {
        await OutsideChangeTests.eventually(within: seconds) { keys.isSubset(of: seen.withLock { $0 }) }
    }

    /// Stops iterating: the stream ends, and the map lets its listener go.
    func stop() { task.cancel() }
}

/// A store that reports changes made "elsewhere" as the test tells it, with or without keys.
private final class ToldStore: ChangeObservingPersistenceStrategy {
    private let values = Protected<[String: Data]>([:])
    private let handler = Protected<(@Sendable (StoreChange) -> Void)?>(nil)

    func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() throws -> [String] { values.withLock { Array($0.keys) } }

    /// Writes as another instance would, and reports `reported` (nil: "cannot tell which").
    func writeElsewhere(_ value: Int, for key: String, reporting reported: Set<String>?) throws {
        try save(ValueCodec.encode(value, as: valueEncoding), for: key)
        handler.withLock { $0 }?(StoreChange(keys: reported))
    }

    func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        self.handler.withLock { $0 = handler }
        return StoreObservation { [weak self] in self?.handler.withLock { $0 = nil } }
    }
}

@Suite("StoredMap: keys chosen at run time")
struct StoredMapTests {
    /// The strategy a map's store resolves to in `context` (to count what the router holds).
    static func strategy(of store: StoreChoice, in context: CofferContext) throws -> any PersistenceStrategy {
        try #require(try store.backing(key: "").resolve(context)).strategy
    }

    /// The synchronous `keys()`, which async code would not pick over the async one.
    static func syncKeys<Value>(_ map: StoredMap<Value>) throws -> Set<String> { Set(try map.keys()) }

    @Test("Read, write, remove, load and save a key-value suite's keys, synchronously")
    func keyValueSync() throws {
        try withTemporaryContext { context in
            let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false)
            #expect(flags["beta-ui"] == false)
            flags["beta-ui"] = true
            #expect(flags["beta-ui"] == true)
            // Persisted before the setter returned: another instance on the file reads it.
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "flags")
            #expect(try other.get(Bool.self, for: "beta-ui") == true)

            try flags.save(true, for: "dark-mode")
            #expect(try other.get(Bool.self, for: "dark-mode") == true)
            try other.set(false, for: "dark-mode")
            #expect(try flags.load("dark-mode") == false)
            #expect(try Set(flags.keys()) == ["beta-ui", "dark-mode"])

            try flags.remove("beta-ui")
            #expect(flags["beta-ui"] == false)  // the default again
            #expect(try other.get(Bool.self, for: "beta-ui") == nil)
            #expect(try flags.keys() == ["dark-mode"])

            // A map made later (a restart) reads what was stored.
            let again = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: true, keepsRecent: 0)
            #expect(again["dark-mode"] == false)
            #expect(again["never-set"] == true)
        }
    }

    @Test("The async forms: load, save, update, remove, keys")
    func keyValueAsync() async throws {
        try await withTemporaryContext { context in
            let counts = StoredMap<Int>(store: .keyValue(suite: "counts"), default: 0)
            try await counts.save(4, for: "a")
            #expect(try await counts.load("a") == 4)
            #expect(try await counts.update("a") { $0 += 1 } == 5)
            #expect(try await counts.update("b") { $0 += 10 } == 10)
            #expect(try await Set(counts.keys()) == ["a", "b"])
            try await counts.remove("a")
            #expect(counts["a"] == 0)
            #expect(try await counts.keys() == ["b"])
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "counts")
            #expect(try other.get(Int.self, for: "a") == nil)
            #expect(try other.get(Int.self, for: "b") == 10)
        }
    }

    @Test("update loses no increment: tasks and two maps on one suite count at once")
    func updateIsAtomic() async throws {
        try await withTemporaryContext { context in
            let first = StoredMap<Int>(store: .keyValue(suite: "counts"), default: 0, keepsRecent: 0)
            // Another instance of the store, as another process would have.
            let second = StoredMap<Int>(
                store: .keyValue(try KeyValueFileStrategy(directory: context.directory, suite: "counts")), default: 0)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<8 {
                    let map = task.isMultiple(of: 2) ? first : second
                    // Half the tasks call the synchronous form (a closure that is not async picks it).
                    let syncIncrement: @Sendable () throws -> Void = { try map.update("hits") { $0 += 1 } }
                    group.addTask {
                        for _ in 0..<25 {
                            if task < 4 { try syncIncrement() } else { try await map.update("hits") { $0 += 1 } }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await first.load("hits") == 200)
            #expect(try await second.load("hits") == 200)
        }
    }

    @Test("An entry and a @Stored of the same key share one value (one cell)")
    func entryAndStoredShareOneCell() throws {
        final class Model {
            @Stored(backed: .keyValue(suite: "flags", key: "beta-ui")) var betaUI = false
        }
        try withTemporaryContext { context in
            let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false, keepsRecent: 0)
            let model = Model()
            let entry = flags.entry("beta-ui")
            #expect(CellRegistry.users(of: .keyValue(suite: "flags", key: "beta-ui"), context: context, type: Bool.self) == 2)
            let fired = Counter()
            _ = withObservationTracking { entry.wrappedValue } onChange: { fired.bump() }
            model.betaUI = true
            #expect(entry.wrappedValue == true)
            #expect(flags["beta-ui"] == true)
            #expect(fired.value == 1)
            flags["beta-ui"] = false
            #expect(model.betaUI == false)
            try flags.remove("beta-ui")
            #expect(model.betaUI == false)
            flags["beta-ui"] = true
            try flags.remove("beta-ui")
            #expect(model.betaUI == false)  // a removal reaches every holder of the key
        }
    }

    @Test("values(of:) streams one key's values and keeps the key followed while iterated")
    func valuesOfOneKey() async throws {
        try await withTemporaryContext { context in
            let flags = StoredMap<Int>(store: .keyValue(suite: "levels"), default: 0, keepsRecent: 0)
            var values = flags.values(of: "x").makeAsyncIterator()
            #expect(await values.next() == 0)
            flags["x"] = 1
            #expect(await values.next() == 1)
            // The stream holds the key: a write from another instance reaches it.
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "levels")
            try other.set(2, for: "x")
            #expect(await values.next() == 2)
        }
    }

    @Test("changes names the keys written here and elsewhere; dropped, it holds nothing")
    func changesNameTheKeys() async throws {
        try await withTemporaryContext { context in
            var flags: StoredMap<Int>? = StoredMap<Int>(store: .keyValue(suite: "flags"), default: 0, keepsRecent: 0)
            let strategy = try Self.strategy(of: .keyValue(suite: "flags"), in: context)
            let changes = ChangeRecorder(flags!.changes)
            #expect(MapChanges.count(of: strategy) == 1)
            #expect(ChangeRouter.observation(of: strategy) == (1, 1))  // one observation, for the listener

            flags!["here"] = 1  // in this process, through the map
            #expect(await changes.named(["here"]))
            do {
                let entry = flags!.entry("held")
                entry.wrappedValue = 5  // through an entry
                #expect(await changes.named(["held"]))
            }

            // Another instance writes a key nobody holds: told by the store's one observation.
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "flags")
            try other.set(7, for: "elsewhere")
            #expect(await changes.named(["elsewhere"]))
            #expect(flags!["elsewhere"] == 7)

            // The consumer stops and the map goes (it held the store observed while it lived):
            // the listener goes, and the observation with it.
            changes.stop()
            flags = nil
            #expect(await OutsideChangeTests.eventually { MapChanges.count(of: strategy) == 0 })
            #expect(await OutsideChangeTests.eventually { ChangeRouter.observation(of: strategy) == (0, 0) })
        }
    }

    @Test("changes says .unknown when the store cannot tell which keys; a store that cannot observe still tells local writes")
    func changesWhenTheStoreCannotTell() async throws {
        let store = ToldStore()
        let map = StoredMap<Int>(store: .strategy(store), default: 0, keepsRecent: 0)
        let changes = ChangeRecorder(map.changes)
        defer { changes.stop() }
        try store.writeElsewhere(1, for: "x", reporting: ["x"])
        #expect(await changes.named(["x"]))
        try store.writeElsewhere(2, for: "y", reporting: nil)
        #expect(await changes.named(["*"]))  // .unknown
        #expect(map["y"] == 2)

        // A memory store tells no outside changes; writes in this process are still named.
        let memory = StoredMap<Int>(store: .memory, default: 0)
        let local = ChangeRecorder(memory.changes)
        defer { local.stop() }
        memory["a"] = 1
        try await memory.save(2, for: "b")
        try await memory.update("c") { $0 += 3 }
        memory["d"] = 4
        try await memory.remove("d")
        #expect(await local.named(["a", "b", "c", "d"]))
    }

    @Test("A child process writes keys: the held entry follows, changes says which keys")
    func childProcessWrites() async throws {
        try await withTemporaryContext { context in
            let map = StoredMap<Int>(store: .keyValue(suite: "shared"), default: -1, keepsRecent: 0)
            let entry = map.entry("k3")
            #expect(entry.wrappedValue == -1)
            let fired = Counter()
            _ = withObservationTracking { entry.wrappedValue } onChange: { fired.bump() }
            let changes = ChangeRecorder(map.changes)
            defer { changes.stop() }
            // kv-write writes "k0" = 0 … "k4" = 4 into the suite.
            let child = try HelperChild(["kv-write", context.directory.path, "shared", "5", "k", "immediate"])
            #expect(child.wait() == 0)
            #expect(await changes.named(["k0", "k1", "k2", "k3", "k4"]))
            #expect(await OutsideChangeTests.eventually { entry.wrappedValue == 3 })
            #expect(fired.value >= 1)
            #expect(map["k4"] == 4)
            #expect(try Self.syncKeys(map) == ["k0", "k1", "k2", "k3", "k4"])
        }
    }

    @Test("batch over map keys: one notification each, reads in the batch see the writes")
    func batchOverKeys() throws {
        try withTemporaryContext { context in
            let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false, keepsRecent: 0)
            let a = flags.entry("a")
            let fired = Counter()
            _ = withObservationTracking { a.wrappedValue } onChange: { fired.bump() }
            batch {
                flags["a"] = true
                flags["b"] = true
                flags["a"] = false
                flags["a"] = true
                #expect(flags["b"] == true)  // no holder but the batch: still the key's one cell
            }
            #expect(fired.value == 1)
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "flags")
            #expect(try other.get(Bool.self, for: "a") == true)
            #expect(try other.get(Bool.self, for: "b") == true)
        }
    }

    @Test("A vault service: optional values, entries shared with @Stored, remove, keys")
    func vaultService() async throws {
        final class Model {
            @Stored(backed: .vault(service: "tenants", account: "acme")) var acme: String?
        }
        try await withTemporaryContext(vault: true) { _ in
            let tokens = StoredMap<String?>(store: .vault(service: "tenants"))
            #expect(tokens["acme"] == nil)
            tokens["acme"] = "tok-acme-1"
            try await tokens.save("tok-globex-1", for: "globex")
            let model = Model()
            #expect(model.acme == "tok-acme-1")
            model.acme = "tok-acme-2"
            #expect(tokens["acme"] == "tok-acme-2")
            #expect(try await Set(tokens.keys()) == ["acme", "globex"])
            #expect(try Self.syncKeys(tokens) == ["acme", "globex"])
            try await tokens.remove("globex")
            #expect(tokens["globex"] == nil)
            tokens["acme"] = nil  // an optional set to nil removes the key
            #expect(model.acme == nil)
            #expect(try Self.syncKeys(tokens).isEmpty)
            #expect(try await tokens.update("initech") { $0 = ($0 ?? "") + "tok" } == "tok")
            #expect(try await tokens.load("initech") == "tok")
        }
    }

    @Test("Errors are per key: a value that does not decode fails its key only")
    func errorsPerKey() async throws {
        try await withTemporaryContext { context in
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "numbers")
            try other.set("not a number", for: "bad")
            try other.set(3, for: "good")
            let numbers = StoredMap<Int>(store: .keyValue(suite: "numbers"), default: 0)
            #expect(numbers["bad"] == 0)  // the default stays…
            #expect(numbers.entry("bad").error?.code == .decoding)  // …and the key says why
            #expect(numbers["good"] == 3)
            #expect(numbers.entry("good").error == nil)
            #expect(throws: CofferError.self) { try numbers.load("bad") }
            await #expect(throws: CofferError.self) { try await numbers.load("bad") }
            // Nothing stored is lost: the bytes are still there until written over.
            #expect(try other.get(String.self, for: "bad") == "not a number")
            numbers["bad"] = 9
            #expect(numbers.entry("bad").error == nil)
            #expect(try other.get(Int.self, for: "bad") == 9)
        }
    }

    @Test("The registry stays bounded: dropped entries, streams and maps leave nothing held")
    func registryStaysBounded() async throws {
        try await withTemporaryContext { context in
            let choice = StoreChoice.keyValue(suite: "many")
            let strategy = try Self.strategy(of: choice, in: context)
            var map: StoredMap<Int>? = StoredMap<Int>(store: choice, default: 0, keepsRecent: 4)
            var held: [Stored<Int>] = []
            for i in 0..<100 {
                let entry = map!.entry("k\(i)")
                entry.wrappedValue = i
                if i < 10 { held.append(entry) }
            }
            // The ten held, and the four the map keeps (the last four made), are followed, once
            // the cells let go have left (they linger a moment, to be taken up again).
            #expect(await OutsideChangeTests.eventually { ChangeRouter.observation(of: strategy) == (1, 14) })
            #expect(CellRegistry.users(of: choice.backing(key: "k5"), context: context, type: Int.self) == 1)
            #expect(CellRegistry.users(of: choice.backing(key: "k50"), context: context, type: Int.self) == 0)
            #expect(CellRegistry.users(of: choice.backing(key: "k99"), context: context, type: Int.self) == 1)
            #expect(map!["k50"] == 50)  // let go, not lost: loaded again
            var values: AsyncStream<Int>.Iterator? = map!.values(of: "k60").makeAsyncIterator()
            #expect(await values!.next() == 60)
            let changes = ChangeRecorder(map!.changes)
            #expect(MapChanges.count(of: strategy) == 1)

            held = []
            values = nil
            changes.stop()
            map = nil
            #expect(await OutsideChangeTests.eventually { ChangeRouter.observation(of: strategy) == (0, 0) })
            #expect(await OutsideChangeTests.eventually { MapChanges.count(of: strategy) == 0 })
            for key in ["k5", "k50", "k60", "k99"] {
                #expect(CellRegistry.users(of: choice.backing(key: key), context: context, type: Int.self) == 0)
            }
        }
    }

    @Test("The documentation's snippets compile against import Coffer and run")
    func documentationSnippets() async throws {
        try await withTemporaryContext(vault: true) { _ in
            let served = try await StoredMapDocumentationSnippets.run()
            #expect(served == 2)
        }
    }
}
