import CofferCore
import CofferState
import CofferTesting
import Foundation
import Testing

/// A store whose every call is `async` and may be held, as a network store's are: memory behind
/// a gate the test opens and closes, a failure it can inject, and a log of what was written in
/// which order. The state layer drives it as it drives PostgreSQL, so these tests cover the
/// remote path (background writers, loads, flush, update) in the core build, under
/// ThreadSanitizer too (`make test-tsan` builds no PostgreSQL).
final class GatedRemoteStrategy: AsyncPersistenceStrategy, CompareAndSwapPersistenceStrategy {
    private struct State {
        var values: [String: Data] = [:]
        var open = true
        var failure: CofferError?
        var saved: [Data] = []
        var inFlightSaves = 0
        var mostInFlight = 0
    }

    private let state = Protected(State())

    /// Holds every call (`false`) or lets them through (`true`).
    func setOpen(_ open: Bool) { state.withLock { $0.open = open } }
    /// Makes every call fail with `failure` (`nil`: succeed).
    func fail(with failure: CofferError?) { state.withLock { $0.failure = failure } }
    /// Every value saved, in the order the store received them.
    var saved: [Data] { state.withLock { $0.saved } }
    /// The most saves that were in flight at once.
    var mostInFlight: Int { state.withLock { $0.mostInFlight } }

    private func pass() async throws {
        while !state.withLock({ $0.open }) { try await Task.sleep(for: .milliseconds(2)) }
        try await Task.sleep(for: .milliseconds(1))  // a round trip
        if let failure = state.withLock({ $0.failure }) { throw failure }
    }

    func load(_ key: String) async throws -> Data? {
        try await pass()
        return state.withLock { $0.values[key] }
    }

    func save(_ data: Data, for key: String) async throws {
        state.withLock {
            $0.inFlightSaves += 1
            $0.mostInFlight = max($0.mostInFlight, $0.inFlightSaves)
        }
        defer { state.withLock { $0.inFlightSaves -= 1 } }
        try await pass()
        state.withLock {
            $0.values[key] = data
            $0.saved.append(data)
        }
    }

    func remove(_ key: String) async throws {
        try await pass()
        state.withLock { _ = $0.values.removeValue(forKey: key) }
    }

    func keys() async throws -> [String] {
        try await pass()
        return state.withLock { Array($0.values.keys) }
    }

    func compareAndSwap(_ key: String, expected: Data?, new: Data?) async throws -> Bool {
        try await pass()
        return state.withLock { s in
            guard s.values[key] == expected else { return false }
            s.values[key] = new
            if let new { s.saved.append(new) }
            return true
        }
    }
}

@Suite("A remote store behind @Stored: background writes, loads, flush and update")
struct RemoteStoreTests {
    static func until(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return condition()
    }

    static func decoded(_ data: Data) throws -> Int {
        try ValueCodec.decode(Int.self, from: data, as: .tagged)
    }

    @Test("A setter returns while the store is held; the writes reach it in order, one at a time, the last one last")
    func settersDoNotWait() async throws {
        let store = GatedRemoteStrategy()
        let n = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        try await n.load()
        store.setOpen(false)
        for value in 1...200 { n.wrappedValue = value }  // none waits for the held store
        #expect(n.wrappedValue == 200)
        store.setOpen(true)
        try await n.flush()
        #expect(try await store.get(Int.self, for: "n") == 200)
        let saved = try store.saved.map(Self.decoded)
        #expect(saved == saved.sorted(), "writes reached the store out of order: \(saved)")
        #expect(saved.last == 200)
        #expect(saved.count < 200, "every intermediate value was written: the writer should send the newest")
        #expect(store.mostInFlight == 1)
        #expect(n.saveError == nil)
        #expect(await RemoteWrites.settle(timeout: .seconds(20)))
    }

    @Test("A failed write lands in saveError and keeps the value; the next write after recovery clears it")
    func saveErrorAndRecovery() async throws {
        let store = GatedRemoteStrategy()
        let n = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        try await n.load()
        store.fail(with: CofferError(.io, "the server is unavailable"))
        n.wrappedValue = 1
        await #expect(throws: CofferError.self) { try await n.flush() }
        #expect(n.saveError?.code == .io)
        #expect(n.wrappedValue == 1)
        await #expect(throws: CofferError.self) { try await n.save(2) }
        store.fail(with: nil)
        try await n.save(3)
        #expect(n.saveError == nil)
        #expect(try await store.get(Int.self, for: "n") == 3)
    }

    @Test("A first read shows the initial value with isLoading, then the stored value; a failed load says so")
    func firstReadDoesNotWait() async throws {
        let store = GatedRemoteStrategy()
        try await store.set(41, for: "n")
        store.setOpen(false)
        let n = Stored(wrappedValue: 0, backed: .strategy(store, key: "n"))
        #expect(n.wrappedValue == 0)  // returns at once: the store is held
        #expect(n.isLoading)
        store.setOpen(true)
        #expect(await Self.until { n.wrappedValue == 41 && !n.isLoading })
        #expect(n.loadError == nil)

        store.fail(with: CofferError(.io, "the server is unavailable"))
        let m = Stored(wrappedValue: 7, backed: .strategy(store, key: "m"))
        await #expect(throws: CofferError.self) { try await m.load() }
        #expect(m.loadError?.code == .io)
        #expect(m.wrappedValue == 7)
        store.fail(with: nil)
        #expect(try await m.load() == 7)
        #expect(m.loadError == nil)
    }

    @Test("update from 8 tasks on two properties of one key is exact: 8 × 25 = 200")
    func updateIsExact() async throws {
        let store = GatedRemoteStrategy()
        // An update gives up after the context's lock timeout, and waiting for its turn behind
        // the other updates of the key counts: on a machine running the whole suite on two cores
        // that can pass 10 s, so this context allows five minutes (what is asserted is exactness).
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-remote-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let context = CofferContext(directory: directory, lockTimeout: .seconds(300))
        let (a, b) = CofferContext.$current.withValue(context) {
            (Stored(wrappedValue: 0, backed: .strategy(store, key: "count")),
             Stored(wrappedValue: 0, backed: .strategy(store, key: "count")))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                let property = task % 2 == 0 ? a : b
                group.addTask {
                    for _ in 0..<25 { _ = try await property.update { $0 += 1 } }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await store.get(Int.self, for: "count") == 200)
        #expect(a.wrappedValue == 200 && b.wrappedValue == 200)
    }
}
