import CofferCore
import CofferCrypto
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Observation
import Testing

/// `$x.update { … }`: a read-modify-write that loses nothing, across threads and processes.
@Suite("Atomic update")
struct AtomicUpdateTests {
    final class Model {
        @Stored(backed: .keyValue(key: "counter")) var counter = 0
    }

    @Test("Eight tasks × 200 updates through two objects give exactly 1,600")
    func inProcess() async throws {
        try await withTemporaryContext { _ in
            let models = [Model(), Model()]
            let counters = models.map(\.$counter)  // the properties themselves are Sendable
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<8 {
                    group.addTask { for _ in 0..<200 { try counters[index % 2].update { $0 += 1 } } }
                }
                try await group.waitForAll()
            }
            #expect(models[0].counter == 1600)
            #expect(models[1].counter == 1600)
            #expect(try await models[1].$counter.load() == 1600)
        }
    }

    @Test("update tells observers once, runs again after a write from elsewhere, and throws what the body throws")
    func semantics() throws {
        try withTemporaryContext { context in
            let model = Model()
            let fired = Counter()
            _ = withObservationTracking { model.counter } onChange: { fired.bump() }
            let five = try model.$counter.update { $0 += 5 }
            #expect(five == 5)
            #expect(fired.value == 1)

            // Another instance of the suite writes between this update's read and its swap: the
            // body runs again on the newer value.
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            let runs = Counter()
            try model.$counter.update { value in
                runs.bump()
                if runs.value == 1 { try? other.set(100, for: "counter") }
                value += 1
            }
            #expect(runs.value == 2)
            #expect(model.counter == 101)
            #expect(try other.get(Int.self, for: "counter") == 101)

            struct Refused: Error {}
            #expect(throws: Refused.self) { try model.$counter.update { _ in throw Refused() } }
            #expect(model.counter == 101)
        }
    }

    @Test("Four processes × 500 $counter.update on a key-value suite and on a vault give exactly 2,000")
    func acrossProcesses() throws {
        for vault in [false, true] {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "coffer-stored-update-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
            let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
            if vault {
                _ = try Vault.create(at: directory.appendingPathComponent(VaultConfiguration.defaultFileName), unlock: .key(key))
            }
            let children = try (0..<4).map { _ in
                try HelperChild(["stored-increment", directory.path, "500"] + (vault ? ["vault"] : []))
            }
            for child in children { #expect(child.readLine() == "ready") }
            for child in children { child.say("go") }
            for child in children { #expect(child.wait() == 0) }
            let context = CofferContext(directory: directory)
                .with(VaultConfiguration(unlock: .key(key), createIfMissing: false))
            let total: Int = try CofferContext.$current.withValue(context) {
                if vault {
                    let item = Stored(wrappedValue: 0, backed: .vault(service: "counter", account: "stored"))
                    return try item.load()
                }
                return try Model().$counter.load()
            }
            #expect(total == 2000, "vault: \(vault)")
        }
    }
}

@Suite("Atomic update: the body runs with no lock held")
struct UpdateReentrancyTests {
    final class Model {
        @Stored(backed: .keyValue(key: "n")) var n = 0
        @Stored var memory = 0
    }

    @Test("The body may read and write the property, and a batch's unsaved write is its starting point")
    func reentrantBody() throws {
        try withTemporaryContext { _ in
            let model = Model()
            // Used to stop the process: "Recursive call to lock Mutex".
            let result = try model.$n.update { value in
                value = model.n + 1
                model.memory = value
            }
            #expect(result == 1)
            let memory = try model.$memory.update { value in value += model.memory }
            #expect(memory == 2)
            batch {
                model.n = 5
                #expect((try? model.$n.update { $0 += 1 }) == 6)  // used to give 1: the 5 was dropped
            }
            #expect(model.n == 6)
            #expect(try model.$n.load() == 6)
        }
    }
}
