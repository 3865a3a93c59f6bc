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

@Suite("swift-configuration integration")
struct ConfigurationTests {
    @Test("A ConfigReader reads typed settings from a key-value suite")
    func readsSettingsFromASuite() throws {
        let scratch = try Scratch("config-read")
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        try suite.set("example.org", for: "http.host")
        try suite.set(8443, for: "http.port")
        try suite.set(12.5, for: "http.timeout")
        try suite.set(true, for: "features.beta")
        try suite.set(["eu", "us"], for: "regions")
        try suite.set(Data([1, 2, 3]), for: "salt")
        let config = ConfigReader(provider: CofferConfigProvider(store: suite))
        #expect(config.string(forKey: "http.host") == "example.org")
        #expect(config.int(forKey: "http.port") == 8443)
        #expect(config.double(forKey: "http.timeout") == 12.5)
        #expect(config.bool(forKey: "features.beta") == true)
        #expect(config.stringArray(forKey: "regions") == ["eu", "us"])
        #expect(config.bytes(forKey: "salt") == [1, 2, 3])
        #expect(config.int(forKey: "http.retries", default: 3) == 3)  // absent: the default
        let http = config.scoped(to: "http")
        #expect(http.string(forKey: "host") == "example.org")
        #expect(try config.requiredInt(forKey: "http.port") == 8443)
    }

    @Test("A value of the wrong type is an error naming the key, never a silent default")
    func wrongTypeNamesTheKey() throws {
        let scratch = try Scratch("config-type")
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        try suite.set("eighty", for: "http.port")
        let provider = CofferConfigProvider(store: suite)
        let error = #expect(throws: CofferError.self) {
            _ = try provider.value(forKey: AbsoluteConfigKey(["http", "port"]), type: .int)
        }
        #expect(error?.code == .decoding)
        #expect(error?.message.contains("http.port") == true, "\(String(describing: error))")
        #expect(throws: (any Error).self) { _ = try ConfigReader(provider: provider).requiredInt(forKey: "http.port") }
    }

    @Test("Vault values are secret: read in full, redacted in reports and descriptions")
    func vaultSecretsAreRedacted() throws {
        let scratch = try Scratch("config-vault")
        let vault = try Vault.create(
            at: scratch.url.appendingPathComponent("v.coffervault"), unlock: .passphrase("config test passphrase"),
            kdf: .minimum)
        let secret = "db-SECRET-4410"
        try vault.set(secret, service: "app", account: "db.password")
        try vault.set("5432", service: "app", account: "db.port")
        let reports = Reports()
        let config = ConfigReader(
            provider: CofferConfigProvider(vault: vault, service: "app"), accessReporter: Reporter(reports: reports))
        let readInFull = config.string(forKey: "db.password") == secret
        #expect(readInFull)
        #expect(config.int(forKey: "db.port") == 5432)  // a number stored as text
        let provider = CofferConfigProvider(vault: vault, service: "app")
        let value = try #require(try provider.value(forKey: AbsoluteConfigKey(["db", "password"]), type: .string).value)
        let valueIsSecret = value.isSecret
        #expect(valueIsSecret)
        // Checked as plain Booleans: a failed #expect prints its operands, so none holds the secret.
        let inDescription = value.description.contains(secret)
        let inSnapshot = String(describing: provider.snapshot()).contains(secret)
        let inProvider = String(describing: provider).contains(secret)
        #expect(!inDescription)
        #expect(!inSnapshot)
        #expect(!inProvider)
        let told = reports.lines.withLock { $0 }
        #expect(told.count == 2)
        let inReports = told.joined().contains(secret)
        #expect(!inReports, "an access report holds the secret")
    }

    /// A sealed store that is not a `VaultStrategy` (as `PostgresVaultStrategy` is not): memory
    /// that says it holds secrets.
    final class SealedMemory: PersistenceStrategy {
        var holdsSecrets: Bool { true }
        var valueEncoding: ValueEncoding { .plain }
        let values = Mutex<[String: Data]>([:])
        func load(_ key: String) throws -> Data? { values.withLock { $0[key] } }
        func save(_ data: Data, for key: String) throws { values.withLock { $0[key] = data } }
        func remove(_ key: String) throws { _ = values.withLock { $0.removeValue(forKey: key) } }
        func keys() throws -> [String] { values.withLock { Array($0.keys) } }
    }

    @Test("Every sealed store's values are secret, decided by holdsSecrets, not by the vault's concrete type")
    func sealedByCapability() throws {
        let store = SealedMemory()
        try store.set("hunter2-never-shown", for: "db.password")
        let provider = CofferConfigProvider(store: store)
        let value = try provider.value(forKey: AbsoluteConfigKey(["db", "password"]), type: .string).value
        #expect(value?.isSecret == true)
        #expect(!"\(provider)".contains("hunter2"))
        #expect(!String(describing: value as Any).contains("hunter2"))
    }

    @Test("A suite's values can be marked secret by key")
    func specificSecrets() throws {
        let scratch = try Scratch("config-secrets")
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        try suite.set("hunter2", for: "smtp.password")
        try suite.set("mail.example.org", for: "smtp.host")
        let provider = CofferConfigProvider(store: suite, secrets: .specific(["smtp.password"]))
        #expect(try provider.value(forKey: AbsoluteConfigKey(["smtp", "password"]), type: .string).value?.isSecret == true)
        #expect(try provider.value(forKey: AbsoluteConfigKey(["smtp", "host"]), type: .string).value?.isSecret == false)
    }

    @Test("A watch sees a change written by a second store instance")
    func watchSeesAnotherInstancesWrite() async throws {
        let scratch = try Scratch("config-watch")
        let reading = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        try reading.set("first", for: "greeting")
        let writing = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        let config = ConfigReader(provider: CofferConfigProvider(store: reading))
        let seen = try await withThrowingTaskGroup(of: [String?].self) { group in
            group.addTask {
                try await config.watchString(forKey: "greeting") { updates in
                    var seen: [String?] = []
                    for await value in updates {
                        seen.append(value)
                        if value == "first" { try writing.set("second", for: "greeting") }
                        if value == "second" { break }
                    }
                    return seen
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(600))  // a bound on a hang, not a speed
                return ["no change seen"]
            }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
        #expect(seen == ["first", "second"])
    }

    @Test("A snapshot watch sees a removal and an addition made elsewhere")
    func snapshotWatch() async throws {
        let scratch = try Scratch("config-snapshots")
        let reading = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        try reading.set(1, for: "a")
        let writing = try KeyValueFileStrategy(directory: scratch.url, suite: "settings")
        let provider = CofferConfigProvider(store: reading)
        let final = try await withThrowingTaskGroup(of: String.self) { group in
            group.addTask {
                try await provider.watchSnapshot { updates in
                    var step = 0
                    for await snapshot in updates {
                        let a = try snapshot.value(forKey: AbsoluteConfigKey(["a"]), type: .int).value
                        let b = try snapshot.value(forKey: AbsoluteConfigKey(["b"]), type: .string).value
                        if step == 0 {
                            #expect(a?.content == .int(1))
                            try writing.remove("a")
                            try writing.set("new", for: "b")
                            step = 1
                        } else if a == nil, b?.content == .string("new") {
                            return "a removed, b added"
                        }
                    }
                    return "ended"
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(600))  // a bound on a hang, not a speed
                return "no change seen"
            }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
        #expect(final == "a removed, b added")
        #expect(String(describing: provider).contains("0 watchers"))
    }
}

/// Keeps each access event as text: its description, its result and every provider's result.
private final class Reports: Sendable {
    let lines = Mutex<[String]>([])
}

private struct Reporter: AccessReporter {
    let reports: Reports

    func report(_ event: AccessEvent) {
        reports.lines.withLock { $0.append("\(event) \(event.result) \(event.providerResults)") }
    }
}
#endif
