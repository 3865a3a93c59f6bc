#if ServiceLifecycle
import CofferCore
import CofferCrypto
import CofferServiceLifecycle
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("swift-service-lifecycle integration")
struct ServiceLifecycleTests {
    /// A real `ServiceGroup` in a child process, shut down by SIGTERM as a container stop would.
    @Test("SIGTERM: coalesced writes are flushed, the vault is locked, no watch is left")
    func sigtermFlushesLocksAndStopsWatching() async throws {
        let scratch = try Scratch("lifecycle")
        let child = try HelperChild(["lifecycle-serve", scratch.path], standardError: .capture)
        let before = try #require(try await child.waitForLine(startingWith: "before "), "\(child.transcript)")
        #expect(before == "before unsynced=true locked=false watching=true inotify=1", "\(before)")
        _ = try #require(try await child.waitForLine(startingWith: "ready"), "\(child.transcript)")
        kill(child.process.processIdentifier, SIGTERM)
        let status = try await child.waitForExit()
        #expect(status == 0, "\(child.lines) \(child.standardError)")
        let after = try #require(child.lines.first { $0.hasPrefix("after ") }, "\(child.lines) \(child.standardError)")
        #expect(after == "after unsynced=false locked=true watching=false inotify=0", "\(after)")
        // New instances read what was written before the shutdown.
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
        #expect(try suite.get(String.self, for: "greeting") == "hello from before the shutdown")
        let vault = try await Vault.open(
            at: scratch.url.appendingPathComponent(VaultConfiguration.defaultFileName),
            unlock: .passphrase(IntegrationSecrets.passphrase))
        // Plain Booleans and indices: a failed #expect prints its operands, which must not be secrets.
        let vaultKeptTheToken = try await vault.string(service: "api", account: "token") == IntegrationSecrets.vaultSecret
        #expect(vaultKeptTheToken)
        let output = child.lines.joined() + child.standardError
        let leaked = IntegrationSecrets.all.indices.filter { output.contains(IntegrationSecrets.all[$0]) }
        #expect(leaked.isEmpty, "these secrets (by index in IntegrationSecrets.all) reached the output")
    }

    /// In process, without signals: `triggerGracefulShutdown()` runs the same steps on the
    /// stores and vaults given explicitly.
    @Test("Graceful shutdown of a group flushes explicit stores and locks explicit vaults")
    func gracefulShutdownOfExplicitStores() async throws {
        let scratch = try Scratch("lifecycle-explicit")
        let suite = try KeyValueFileStrategy(
            directory: scratch.url, suite: "prefs", durability: .coalesced(window: .seconds(3600)))
        try suite.set(42, for: "answer")
        #expect(suite.hasUnsyncedWrites)
        let vault = try await Vault.create(
            at: scratch.url.appendingPathComponent("v.coffervault"), unlock: .passphrase("explicit test passphrase"),
            kdf: .minimum)
        try await vault.set("value", service: "s", account: "a")
        let changes = Mutex(0)
        let observation = try suite.observeChanges { _ in changes.withLock { $0 += 1 } }
        let logged = Mutex<[String]>([])
        let logger = Logger(label: "test") { _ in
            CapturingLogHandler { _, message, fields in logged.withLock { $0.append("\(message) \(fields)") } }
        }
        let service = CofferService(context: nil, stores: [suite], vaults: [vault], logger: logger)
        let group = ServiceGroup(services: [service], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(!suite.hasUnsyncedWrites)
        #expect(vault.isLocked)
        #expect(throws: CofferError.self) { _ = try vault.string(service: "s", account: "a") }
        // The store's watch is gone: a write by another instance is no longer told.
        let other = try KeyValueFileStrategy(directory: scratch.url, suite: "prefs")
        try other.set(43, for: "answer")
        try await Task.sleep(for: .milliseconds(500))
        #expect(changes.withLock { $0 } == 0)
        observation.cancel()  // does nothing now, and must not fail
        #expect(try suite.get(Int.self, for: "answer") == 43)  // the store itself still works
        #expect(logged.withLock { $0 }.contains { $0.contains("coffer: shut down") && $0.contains("coffer.locked=1") })
    }

    /// A keychain reachable several ways — the context's default vault, a listed strategy over
    /// it, a listed vault — is flushed and locked once; and any ``Keychain`` is, not only the
    /// file vault (the service works on the protocol).
    @Test("Every keychain is flushed and locked once, however many ways it is reachable")
    func keychainsAreLockedOnce() throws {
        let scratch = try Scratch("lifecycle-keychains")
        let context = CofferContext(directory: scratch.url)
            .with(VaultConfiguration(unlock: .passphrase("keychain test passphrase"), kdf: .minimum))
        let vault = try context.defaultVault()
        try vault.set("value", service: "s", account: "a")
        let other = RecordingKeychain()
        let logged = Mutex<[String]>([])
        let logger = Logger(label: "test") { _ in
            CapturingLogHandler { _, message, fields in logged.withLock { $0.append("\(message) \(fields)") } }
        }
        let service = CofferService(
            context: context, stores: [VaultStrategy(vault: vault, service: "s")], vaults: [vault, other, other],
            logger: logger)
        try service.shutDown()
        #expect(vault.isLocked)
        #expect(other.calls.withLock { $0 } == ["flush", "lock"])
        #expect(logged.withLock { $0 }.contains { $0.contains("coffer: shut down") && $0.contains("coffer.locked=2") })
    }

    /// From async code (`run()` after the group's shutdown, or a caller's `await`), the flushes
    /// (an fsync each) and the locks run on Coffer's own threads, never on the cooperative
    /// thread of the task that awaits them.
    @Test("An async shutdown flushes and locks on Coffer's threads, not the awaiting task's")
    func asyncShutDownBlocksNoCooperativeThread() async throws {
        let keychain = RecordingKeychain()
        let service = CofferService(context: nil, vaults: [keychain], logger: Logger(label: "test"))
        try await service.shutDown()
        #expect(keychain.calls.withLock { $0 } == ["flush", "lock"])
        #expect(keychain.onCofferThread.withLock { $0 } == [true, true])
    }
}

/// A ``Keychain`` that only records ``flush()`` and ``lock()``: what `CofferService` does to a
/// keychain that is not the file vault. It holds no items.
final class RecordingKeychain: Keychain {
    let calls = Mutex<[String]>([])
    /// For each call recorded, whether it ran on a thread of Coffer's (``BlockingPool``).
    let onCofferThread = Mutex<[Bool]>([])
    var location: String { "recording keychain" }
    var isLocked: Bool { calls.withLock { $0.contains("lock") } }
    func data(service: String, account: String) throws -> Data? { nil }
    func string(service: String, account: String) throws -> String? { nil }
    func secret(service: String, account: String) throws -> SecureBytes? { nil }
    func item(service: String, account: String) throws -> VaultItem? { nil }
    func items(service: String?) throws -> [VaultItem] { [] }
    func set(_ secret: Data, service: String, account: String, label: String?, comment: String?) throws {}
    func set(_ secret: String, service: String, account: String, label: String?, comment: String?) throws {}
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) throws {}
    func remove(service: String, account: String) throws -> Bool { false }
    func apply(_ changes: [VaultChange]) throws {}
    func add(_ changes: [VaultChange]) throws -> [VaultItemID] { [] }
    func update(service: String, account: String, _ transform: (Data?) throws -> Data?) throws {}
    func data(service: String, account: String) async throws -> Data? { nil }
    func string(service: String, account: String) async throws -> String? { nil }
    func secret(service: String, account: String) async throws -> SecureBytes? { nil }
    func item(service: String, account: String) async throws -> VaultItem? { nil }
    func items(service: String?) async throws -> [VaultItem] { [] }
    func set(_ secret: Data, service: String, account: String, label: String?, comment: String?) async throws {}
    func set(_ secret: String, service: String, account: String, label: String?, comment: String?) async throws {}
    func set(_ secret: SecureBytes, service: String, account: String, label: String?, comment: String?) async throws {}
    func remove(service: String, account: String) async throws -> Bool { false }
    func apply(_ changes: [VaultChange]) async throws {}
    func add(_ changes: [VaultChange]) async throws -> [VaultItemID] { [] }
    func update(service: String, account: String, _ transform: @Sendable (Data?) throws -> Data?) async throws {}
    func flush() async throws { record("flush") }
    func lock() { record("lock") }
    func flush() throws { record("flush") }
    private func record(_ call: String) {
        calls.withLock { $0.append(call) }
        onCofferThread.withLock { $0.append(BlockingPool.isCurrentThread) }
    }
    func observeChanges(_ handler: @escaping @Sendable (Set<VaultItemID>?) -> Void) -> StoreObservation {
        StoreObservation {}
    }
}
#endif
