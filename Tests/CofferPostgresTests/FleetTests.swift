#if Postgres
import CofferCore
import CofferPostgres
import CofferState
import CofferTesting
import CofferVault
import Foundation
import Observation
import Testing

/// A model as an application instance holds it: a setting, and a value computed from it.
final class FleetModel: Sendable {
    let mode: Stored<String>
    let counter: Stored<Int>
    let banner: Computed<String>

    init(_ backing: (String) -> Backing) {
        mode = Stored(wrappedValue: "normal", backed: backing("mode"))
        counter = Stored(wrappedValue: 0, backed: backing("counter"))
        let mode = self.mode
        banner = Computed { "running in \(mode.wrappedValue) mode" }
    }
}

/// Three instances (three connections, as on three machines) on one suite and one vault.
@Suite("PostgreSQL fleet")
struct FleetTests {
    enum Kind: String, CaseIterable, Sendable { case keyValue, vault }

    /// Three instances' backings on one suite or vault, each with its own connection.
    static func instances(_ kind: Kind, count: Int = 3) throws -> [(String) -> Backing] {
        let configuration = try sharedConfiguration()
        let name = uniqueName(kind.rawValue)
        switch kind {
        case .keyValue:
            return (0..<count).map { _ in
                let store = PostgresKeyValueStrategy(configuration: configuration, suite: name)
                return { key in .postgres(store, key: key) }
            }
        case .vault:
            _ = try PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
            return try (0..<count).map { _ in
                let vault = try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
                return { key in .vault(vault, service: "fleet", account: key) }
            }
        }
    }

    @Test("A write in one instance reaches the others' properties, computed values and observers", arguments: Kind.allCases)
    func writeReachesEveryone(_ kind: Kind) async throws {
        let models = try Self.instances(kind).map(FleetModel.init)
        for model in models { #expect(model.mode.wrappedValue == "normal") }
        let told = Protected(0)
        _ = withObservationTracking { models[2].mode.wrappedValue } onChange: { told.withLock { $0 += 1 } }
        var values = models[1].mode.values.makeAsyncIterator()
        #expect(await values.next() == "normal")

        models[0].mode.wrappedValue = "maintenance"
        #expect(models[0].mode.error == nil)
        #expect(await values.next() == "maintenance")
        #expect(eventually { models[2].mode.wrappedValue == "maintenance" })
        #expect(told.withLock { $0 } == 1)
        #expect(eventually { models[2].banner.wrappedValue == "running in maintenance mode" })
        #expect(models[1].banner.wrappedValue == "running in maintenance mode")
    }

    @Test("All instances converge on the last committed value", arguments: Kind.allCases)
    func convergeOnLastCommit(_ kind: Kind) async throws {
        let models = try Self.instances(kind).map(FleetModel.init)
        for model in models { _ = model.mode.wrappedValue }
        await withTaskGroup(of: Void.self) { group in
            for (index, model) in models.enumerated() {
                group.addTask {
                    for round in 0..<20 { model.mode.wrappedValue = "writer \(index) round \(round)" }
                }
            }
        }
        // The database's last committed value.
        let committed = try await models[0].mode.load()
        #expect(committed.hasSuffix("round 19"))
        for model in models {
            #expect(eventually { model.mode.wrappedValue == committed }, "an instance did not converge")
        }
    }

    @Test("update from 3 instances × 300 gives exactly 900", arguments: Kind.allCases)
    func exactCounter(_ kind: Kind) async throws {
        let models = try Self.instances(kind).map(FleetModel.init)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for model in models {
                let counter = model.counter
                group.addTask {
                    // On Coffer's threads: 300 blocking updates on a cooperative thread would hold
                    // it for the whole loop, and every async test of the process would wait.
                    try await Offload.run { for _ in 0..<300 { try counter.update { $0 += 1 } } }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await models[0].counter.load() == 900)
        for model in models { #expect(eventually { model.counter.wrappedValue == 900 }) }
    }

    @Test("Separate processes: 3 × 300 updates give 900, and a follower process sees a write", arguments: Kind.allCases)
    func separateProcesses(_ kind: Kind) throws {
        let url = try PostgresTestCluster.shared.url
        let configuration = try sharedConfiguration()
        let name = uniqueName(kind.rawValue)
        let which = kind == .vault ? "vault" : "kv"
        if kind == .vault {
            _ = try PostgresVault.create(name: name, unlock: .key(testKey), configuration: configuration)
        }
        let follower = try HelperChild(["pg-follow", url, which, name, "mode", "600"])  // stopped below
        #expect(follower.readLine() == "ready")
        #expect(follower.readLine() == "value ")
        let children = try (0..<3).map { _ in try HelperChild(["pg-increment", url, which, name, "300"]) }
        for child in children { #expect(child.readLine() == "ready") }
        for child in children { child.say("go") }
        for child in children {
            #expect(child.readLine()?.hasPrefix("done") == true)
            #expect(child.wait() == 0)
        }
        let backing: Backing
        if kind == .vault {
            let vault = try PostgresVault.open(name: name, unlock: .key(testKey), configuration: configuration)
            #expect(try vault.string(service: "counter", account: "stored") == "900")
            backing = .vault(vault, service: "fleet", account: "mode")
        } else {
            let store = PostgresKeyValueStrategy(configuration: configuration, suite: name)
            #expect(try store.get(Int.self, for: "stored") == 900)
            backing = .postgres(store, key: "mode")
        }
        let mode = Stored(wrappedValue: "", backed: backing)
        mode.wrappedValue = "rotated"
        #expect(follower.readLine() == "value rotated")
        follower.say("stop")
        #expect(follower.wait() == 0)
    }
}
#endif
