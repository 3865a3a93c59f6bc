// The integration children: each needs its package trait (`make test` enables them all).
//
//   CofferTestHelper log-warnings DIR
//       CofferWarning.log(to:) with a printing LogHandler; meets every warning it can (a shared
//       directory, secret memory not locked, a salvage, a watch polling under COFFER_WATCH=poll)
//       while handling a passphrase and secrets, prints each log entry as one line, then "done".
//   CofferTestHelper lifecycle-serve DIR
//       a ServiceGroup with a CofferService over a context in DIR (a suite with a pending
//       coalesced write, the default vault, properties watching both); prints "ready", waits for
//       SIGTERM, and prints what was left: unsynced writes, the vault's lock, the watcher.
import CofferCore
import CofferRuntime
import CofferCrypto
import CofferState
import CofferStorage
import CofferTesting  // IntegrationSecrets, CapturingLogHandler
import CofferVault
import Foundation

#if Logging
import CofferLogging
import Logging
#endif
#if ServiceLifecycle
import CofferServiceLifecycle
import Logging
import ServiceLifecycle
import UnixSignals
#endif

/// Runs an integration command to its end (main.swift is synchronous).
func runIntegrationCommand(_ arguments: [String]) {
    let done = DispatchSemaphore(value: 0)
    let failure = Locked<String?>(nil)
    Task {
        do {
            try await integrationCommand(arguments)
        } catch {
            failure.withLock { $0 = "\(error)" }
        }
        done.signal()
    }
    done.wait()
    if let failure = failure.withLock({ $0 }) { fail("error: \(failure)") }
}

private func integrationCommand(_ arguments: [String]) async throws {
    guard arguments.count >= 3 else { fail("usage: \(arguments[1]) DIR") }
    switch arguments[1] {
    case "log-warnings":
        #if Logging
        try logWarnings(directory: arguments[2])
        #else
        fail("built without the Logging trait")
        #endif
    case "lifecycle-serve":
        #if ServiceLifecycle
        try await lifecycleServe(directory: arguments[2])
        #else
        fail("built without the ServiceLifecycle trait")
        #endif
    default:
        fail("unknown command \(arguments[1])")
    }
}

#if Logging || ServiceLifecycle
/// Prints each entry as `log LEVEL MESSAGE | key=value …` (the handler's and the entry's
/// metadata), and hands `MESSAGE|key=value …` to `seen`.
func printingLogHandler(_ seen: @escaping @Sendable (String) -> Void = { _ in }) -> CapturingLogHandler {
    CapturingLogHandler { level, message, fields in
        say("log \(level) \(message) | \(fields)")
        seen("\(message)|\(fields)")
    }
}
#endif

#if Logging
private func logWarnings(directory: String) throws {
    let lines = Locked<[String]>([])
    let logger = Logger(label: "coffer.test") { _ in printingLogHandler { line in lines.withLock { $0.append(line) } } }
    CofferWarning.log(to: logger)

    // Every secret from here on fails to lock into RAM (as past `ulimit -l`).
    _ = SecureMemory.replaceLockFunction { _, _ in ENOMEM }
    SecureMemory.resetReporting()

    // A vault in a directory others can write, holding a secret under a passphrase.
    let shared = directory + "/shared"
    try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
    chmod(shared, 0o777)
    let vault = try Vault.create(
        at: URL(fileURLWithPath: shared + "/v.coffervault"), unlock: .passphrase(IntegrationSecrets.passphrase),
        kdf: .minimum)
    try vault.set(IntegrationSecrets.vaultSecret, service: "api", account: "token")
    guard try vault.string(service: "api", account: "token") == IntegrationSecrets.vaultSecret else {
        fail("the vault did not keep the secret")
    }

    // A damaged suite holding secret-looking values, salvaged.
    let kv = URL(fileURLWithPath: directory + "/kv")
    do {
        let store = try KeyValueFileStrategy(directory: kv, suite: "s", durability: .immediate)
        for i in 0..<6 { try store.set("\(IntegrationSecrets.storedSecret)-\(i)", for: "k\(i)") }
    }
    let path = kv.path + "/s.cofferkv"
    var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    let marker = Array("\(IntegrationSecrets.storedSecret)-3".utf8)
    guard let at = (0..<(bytes.count - marker.count)).first(where: { Array(bytes[$0..<($0 + marker.count)]) == marker })
    else { fail("no record to damage") }
    bytes[at] ^= 0xFF
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    let salvaged = try KeyValueFileStrategy(directory: kv, suite: "s", recovery: .salvage)

    // A watch that must poll (COFFER_WATCH=poll); its warning comes from the watcher thread.
    let observation = try salvaged.observeChanges { _ in }
    let deadline = ContinuousClock.now + .seconds(60)
    while !lines.withLock({ $0.contains { $0.contains("coffer.warning=watching falls back to polling") } }),
        ContinuousClock.now < deadline
    {
        Thread.sleep(forTimeInterval: 0.01)
    }
    observation.cancel()
    vault.lock()
    say("done")
}
#endif

#if ServiceLifecycle
/// Holds settings in a context, the way an app's models do.
private final class ServerSettings {
    @Stored(backed: .keyValue(key: "greeting")) var greeting = ""
    @Stored(backed: .vault(service: "api", account: "token")) var token: String? = nil
}

/// Says "ready" once the group runs (its signals are trapped by then), then waits for shutdown.
private struct ReadyService: Service {
    func run() async throws {
        say("ready")
        try? await gracefulShutdown()
    }
}

private func inotifyDescriptors() -> Int {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return entries.filter {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == "anon_inode:inotify"
    }.count
}

private func lifecycleServe(directory: String) async throws {
    let context = CofferContext(directory: URL(fileURLWithPath: directory), durability: .coalesced(window: .seconds(3600)))
        .with(VaultConfiguration(unlock: .passphrase(IntegrationSecrets.passphrase), kdf: .minimum))
    let settings = CofferContext.$current.withValue(context) { ServerSettings() }
    settings.greeting = "hello from before the shutdown"
    settings.token = IntegrationSecrets.vaultSecret
    guard settings.$greeting.error == nil, settings.$token.error == nil else {
        fail("writing failed: \(String(describing: settings.$greeting.error ?? settings.$token.error))")
    }
    let suite = context.openStores.compactMap { $0 as? KeyValueFileStrategy }.first
    let vault = context.openStores.compactMap { $0 as? Vault }.first
    guard let suite, let vault else { fail("the context opened no suite or no vault") }
    say(
        "before unsynced=\(suite.hasUnsyncedWrites) locked=\(vault.isLocked) watching=\(FileWatcher.shared.isRunning) "
            + "inotify=\(inotifyDescriptors())")

    let logger = Logger(label: "coffer.lifecycle") { _ in printingLogHandler() }
    let group = ServiceGroup(
        services: [CofferService(context: context, logger: logger), ReadyService()],
        gracefulShutdownSignals: [.sigterm], logger: logger)
    try await group.run()
    say(
        "after unsynced=\(suite.hasUnsyncedWrites) locked=\(vault.isLocked) watching=\(FileWatcher.shared.isRunning) "
            + "inotify=\(inotifyDescriptors())")
    withExtendedLifetime(settings) {}
}
#endif
