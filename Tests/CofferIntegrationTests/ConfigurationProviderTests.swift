#if Configuration
import CofferConfiguration
import CofferCore
import CofferCrypto
import CofferStorage
import CofferTesting
import CofferVault
import Configuration
import Foundation
import Synchronization
import Testing

/// A `CofferConfigProvider` over the vault treats its values as secrets unless told otherwise:
/// swift-configuration's access reporters and logs must never see them.
@Suite("swift-configuration: a vault's values are secret by default")
struct ConfigurationVaultSecrecyTests {
    @Test("A provider over a VaultStrategy marks its values secret without being told")
    func vaultStrategyValuesAreSecret() throws {
        let scratch = try Scratch("config-vault-secrecy")
        let vault = try Vault.create(
            at: scratch.url.appendingPathComponent("v.coffervault"), unlock: .passphrase("config passphrase"),
            kdf: .minimum)
        let secret = "api-SECRET-9021"
        try vault.set(secret, service: "api", account: "token")
        let events = AccessLines()
        let provider = CofferConfigProvider(store: VaultStrategy(vault: vault, service: "api"))
        let config = ConfigReader(provider: provider, accessReporter: LineReporter(lines: events))
        // Checked as plain Booleans: a failed #expect prints its operands, so none is the secret.
        let readInFull = config.string(forKey: "token") == secret
        #expect(readInFull)
        let isSecret = try provider.value(forKey: AbsoluteConfigKey(["token"]), type: .string).value?.isSecret
        #expect(isSecret == true)
        let told = events.lines.withLock { $0 }
        #expect(told.count == 1)
        let reportsHoldTheSecret = told.joined().contains(secret)
        #expect(!reportsHoldTheSecret, "an access report holds the vault's value")
        // A vault provider told explicitly that nothing is secret is believed.
        let open = CofferConfigProvider(store: VaultStrategy(vault: vault, service: "api"), secrets: .none)
        let openIsSecret = try open.value(forKey: AbsoluteConfigKey(["token"]), type: .string).value?.isSecret
        #expect(openIsSecret == false)
    }
}

/// A watch over a store whose change feed cannot start: the failure is told once (not swallowed),
/// and a later watch tries to observe again instead of inheriting the failure.
@Suite("swift-configuration: a watch that cannot observe says so, and the next one retries")
struct ConfigurationWatchFailureTests {
    @Test("A watch whose store cannot report changes says so, and the next watch tries again")
    func failedObservationIsTold() async throws {
        WarningLog.install()
        let store = UnwatchableStore()
        try store.save(ValueCodec.encode(8080, as: store.valueEncoding), for: "http.port")
        let provider = CofferConfigProvider(store: store, name: "unwatchable-store")
        let key = AbsoluteConfigKey(["http", "port"])
        // A second watch starts while the first is still open: it tries to observe again.
        let (outer, inner) = try await provider.watchValue(forKey: key, type: .int) { updates in
            var outer: ConfigContent?
            for await update in updates {
                outer = try update.get().value?.content
                break
            }
            let inner = try await provider.watchValue(forKey: key, type: .int) { updates in
                for await update in updates { return try update.get().value?.content }
                return nil
            }
            return (outer, inner)
        }
        #expect(outer == .int(8080))
        #expect(inner == .int(8080))
        #expect(store.starts.withLock { $0 } == 2)
        let told = WarningLog.shared.withLock { log in
            log.filter { $0.kind == .watchFailed && $0.message.contains("unwatchable-store") }
        }
        #expect(told.count == 1)
        #expect(told.first?.message.contains("not reachable") == true)
    }
}

/// A store whose change feed cannot start (a custom strategy on a network that is not up yet).
private final class UnwatchableStore: ChangeObservingPersistenceStrategy {
    private let values = Mutex<[String: Data]>([:])
    let starts = Mutex(0)

    func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
    func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
    func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
    func keys() throws -> [String] { values.withLock { Array($0.keys) } }

    func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        starts.withLock { $0 += 1 }
        throw CofferError(.io, "the change feed is not reachable")
    }
}

/// Keeps each access event as text.
private final class AccessLines: Sendable {
    let lines = Mutex<[String]>([])
}

private struct LineReporter: AccessReporter {
    let lines: AccessLines

    func report(_ event: AccessEvent) {
        lines.lines.withLock { $0.append("\(event) \(event.result) \(event.providerResults)") }
    }
}
#endif
