import Coffer
import CofferCrypto
import CofferInterchange
import Foundation
import Observation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// `coffer-demo` (`make demo`): the guided main job. No set-up, no prompt, nothing outside its
/// own directory; every claim it prints is checked, and it exits 1 if one does not hold.
///
/// The demo's credentials are random (so finding them in a file means something) and are shown
/// only masked (`ghp_…abcd`). The vault's passphrase is random too, kept in a `0600` file that
/// the second process reads, and never printed.
struct Demo {
    var directory: String?

    func run() throws {
        let clock = ContinuousClock()
        let started = clock.now
        let dir = try prepareDirectory()
        var tour = Tour()
        tour.say("Coffer demo: a keychain-style vault, and persistent, reactive state")
        tour.say("Working in \(dir.path) — nothing outside it is touched.")

        // 1. A vault, unlocked by a random passphrase with a fast (interactive) Argon2id.
        let vaultURL = dir.appendingPathComponent("demo.coffer")
        let passphraseFile = dir.appendingPathComponent("passphrase")
        let passphrase = try makePassphrase(writingTo: passphraseFile)
        tour.step(1, "Create a vault")
        let (vault, createTime) = try measure(clock) {
            try Vault.create(at: vaultURL, unlock: .passphrase(passphrase), kdf: Argon2idParameters.interactive)
        }
        let slot = try vault.info().keySlots.first
        tour.say(
            "   demo.coffer: one passphrase slot, \(describeKDF(opsLimit: slot?.opsLimit, memLimitBytes: slot?.memLimitBytes)) — created in \(seconds(createTime))"
        )
        tour.say("   the passphrase is random and lives only in ./passphrase (mode 0600); it is never printed")

        // 2. Two credentials, keychain-style.
        let github = Credential(
            service: "api.github.com", account: "octocat", label: "GitHub token", secret: "ghp_" + randomText(36))
        let database = Credential(
            service: "db.internal", account: "app", label: "database password", secret: randomText(24, symbols: true))
        tour.step(2, "Store two credentials")
        for credential in [github, database] {
            try vault.set(
                credential.secret, service: credential.service, account: credential.account, label: credential.label)
        }
        tour.table(
            [github, database].map {
                ["   \($0.service) / \($0.account)", $0.label, mask($0.secret), "\($0.secret.utf8.count) bytes"]
            })

        // 3. The file's bytes hold neither the secrets nor the names.
        let fileBytes = [UInt8](try Data(contentsOf: vaultURL))
        tour.step(3, "Search the vault file's \(fileBytes.count) bytes for them")
        var rows: [[String]] = []
        for (needle, shown) in [
            (github.secret, mask(github.secret)), (database.secret, mask(database.secret)),
            (github.service, github.service), (github.account, github.account), (github.label, github.label),
        ] {
            let found = fileBytes.firstRange(of: Array(needle.utf8))
            tour.check(found == nil, "\(shown) appears in the vault file")
            rows.append(["   \"\(shown)\"", found == nil ? "not found" : "FOUND at byte \(found!.lowerBound)"])
        }
        tour.table(rows)
        tour.say("   only record sizes are visible: secrets, names, labels and dates are encrypted")
        vault.lock()

        // 4. A second process reads them back with the passphrase file.
        tour.step(4, "Read them back in a second process (this vault is now locked here: keys wiped)")
        var childPIDs: [Int32] = []
        for credential in [github, database] {
            tour.say(
                "   $ coffer --vault demo.coffer --passphrase-file passphrase get \(credential.service) \(credential.account)"
            )
            let child = try runChild(
                [
                    "--vault", "demo.coffer", "--passphrase-file", "passphrase", "get", credential.service,
                    credential.account,
                ],
                in: dir)
            childPIDs.append(child.pid)
            let identical = child.status == 0 && child.output == Data(credential.secret.utf8)
            tour.check(identical, "the second process did not read back \(credential.service) / \(credential.account)")
            tour.say(
                "     pid \(child.pid) exited \(child.status): \(child.output.count) bytes, "
                    + (identical ? "identical to what was stored ✓" : "DIFFERENT ✗ \(child.error)"))
        }

        // 5–7. The reactive layer, on the same vault and a key-value file beside it.
        let configuration = VaultConfiguration(
            url: vaultURL, unlock: .passphrase(passphrase), createIfMissing: false,
            kdf: Argon2idParameters.interactive)
        let session = try reactiveModel(dir: dir, configuration: configuration, tour: &tour)
        try restart(dir: dir, configuration: configuration, expecting: session, tour: &tour)

        tour.say("")
        tour.say("Summary")
        tour.summary([1, 2], "a vault sealed with Argon2id + XChaCha20-Poly1305; 2 credentials stored")
        tour.summary([3], "no secret, service, account or label readable in the file")
        tour.summary(
            [4],
            "a second process (pids \(childPIDs.map(String.init).joined(separator: ", "))) read both back, byte for byte"
        )
        tour.summary(
            [5, 6], "a @Computed status followed a vault-backed token — set here and by coffer set in a second "
                + "process — and survived a restart")
        tour.summary([7], "a legacy plaintext token moved into the vault; no plaintext copy left")
        tour.say("   Files kept in \(dir.path). Try:")
        tour.say("     \(Self.commandName) --vault \(vaultURL.path) --passphrase-file \(passphraseFile.path) list")
        tour.say("   Finished in \(seconds(clock.now - started)).")
        guard tour.failures.isEmpty else {
            throw DemoError(
                "the demo found \(tour.failures.count) problem(s): \(tour.failures.joined(separator: "; "))")
        }
    }

    // MARK: - The reactive layer

    /// A model whose session token lives in the vault and whose login lives in a key-value file;
    /// `status` is computed from both. Returns the token it ends with.
    private func reactiveModel(dir: URL, configuration: VaultConfiguration, tour: inout Tour) throws -> String {
        tour.step(5, "A @Stored model with a @Computed value")
        tour.say("   token: @Stored(backed: .vault(…)) · login: @Stored(backed: .keyValue(…)) · status: @Computed")
        let context = CofferContext(directory: dir).with(configuration)
        return try CofferContext.$current.withValue(context) {
            let model = AccountModel()
            try model.$token.load()
            tour.say("   status: \(model.status)")
            let notified = Flag()
            withObservationTracking {
                _ = model.status
            } onChange: {
                notified.set()
            }
            let first = "ghp_" + randomText(36)
            model.login = "octocat"
            model.token = first
            try check(model.$token.error)
            tour.check(notified.value, "Observation was not told that status changed")
            tour.say("   sign in   (token ← \(mask(first)))   status: \(model.status)   observers notified ✓")
            let rotated = "ghp_" + randomText(36)
            model.token = rotated
            try check(model.$token.error)
            tour.check(model.status.hasSuffix(mask(rotated)), "status did not follow the rotated token")
            tour.say("   rotate    (token ← \(mask(rotated)))   status: \(model.status)")

            // Another process changes the token while this model runs: it follows by itself.
            let fromTerminal = "ghp_" + randomText(36)
            let followed = Flag()
            withObservationTracking {
                _ = model.status
            } onChange: {
                followed.set()
            }
            tour.say("   $ printf %s \"$NEW_TOKEN\" | coffer --vault demo.coffer --passphrase-file passphrase set \(AccountModel.service) \(AccountModel.account)")
            let started = ContinuousClock.now
            let child = try runChild(
                [
                    "--vault", "demo.coffer", "--passphrase-file", "passphrase", "set", AccountModel.service,
                    AccountModel.account,
                ],
                in: dir, input: Data(fromTerminal.utf8))
            tour.check(child.status == 0, "coffer set in the second process failed: \(child.error)")
            let deadline = ContinuousClock.now + .seconds(2)
            while model.token != fromTerminal && ContinuousClock.now < deadline { usleep(500) }
            let following = model.token == fromTerminal && model.status.hasSuffix(mask(fromTerminal))
            tour.check(following, "the running model did not follow the second process's coffer set")
            tour.check(followed.value, "Observation was not told of the change made by the second process")
            tour.say(
                "     pid \(child.pid) exited \(child.status); this model, still running, now has status: \(model.status) "
                    + "\(following ? "✓" : "✗") (\(seconds(ContinuousClock.now - started)) from starting the process)")
            return fromTerminal
        }
    }

    /// A fresh context and model (a "restart"), then a migration from the plain key-value file
    /// into the vault.
    private func restart(dir: URL, configuration: VaultConfiguration, expecting token: String, tour: inout Tour) throws
    {
        let context = CofferContext(directory: dir).with(configuration)
        try CofferContext.$current.withValue(context) {
            tour.step(6, "Restart: a new context and a new model read what the old one stored")
            let model = AccountModel()
            tour.check(model.token == token, "the token did not survive the restart")
            tour.say("   status: \(model.status)   \(model.token == token ? "✓" : "✗")")

            tour.step(7, "Swap strategies: move a legacy token from a plain key-value file into the vault")
            // An older release kept the API token in plain text.
            let legacy = try KeyValueFileStrategy(directory: dir, suite: "legacy", durability: .immediate)
            let apiToken = "sk_live_" + randomText(24)
            try legacy.set(apiToken, for: "api-token")
            let plainBefore = try contains(legacy.path, apiToken)
            tour.check(plainBefore, "the legacy file should hold the plain token before the migration")
            tour.say("   before: legacy.cofferkv holds \(mask(apiToken)) in plain text: \(plainBefore ? "yes" : "no")")
            let outcome = try model.$apiToken.migrate(from: .keyValue(legacy, key: "api-token"))
            // A removed key's old record stays in the journal until compaction: compact, so the
            // plaintext bytes are really gone from the file.
            try legacy.compact()
            let plainAfter = try contains(legacy.path, apiToken)
            let inVaultFile = try contains(configuration.url!.path, apiToken)
            tour.check(outcome == .moved && model.apiToken == apiToken, "the token did not move into the vault")
            tour.check(!plainAfter, "the plain copy is still in legacy.cofferkv")
            tour.check(!inVaultFile, "the token is readable in the vault file")
            tour.say("   migrate(from: .keyValue(…)) → \(outcome); legacy.cofferkv compacted")
            tour.say(
                "   after:  legacy.cofferkv holds it: \(plainAfter ? "YES ✗" : "no") · the model reads it from the vault: "
                    + "\(model.apiToken.map(mask) ?? "nil") \(model.apiToken == apiToken ? "✓" : "✗") · readable in the vault file: "
                    + "\(inVaultFile ? "YES ✗" : "no")")
        }
    }

    private func check(_ error: CofferError?) throws {
        if let error { throw error }
    }

    // MARK: - Set-up

    private func prepareDirectory() throws -> URL {
        if let directory {
            let url = URL(fileURLWithPath: directory)
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("demo.coffer").path) {
                throw DemoError("\(url.path) already holds a demo; choose another directory with --dir")
            }
            try FileManager.default.createDirectory(
                at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return url
        }
        var template = Array("\(FileManager.default.temporaryDirectory.path)/coffer-demo-XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }
        guard let created else {
            throw DemoError("cannot create a temporary directory: \(String(cString: strerror(errno)))")
        }
        return URL(fileURLWithPath: String(cString: created), isDirectory: true)
    }

    /// A random 32-character passphrase in guarded memory, also written to `file` (`0600`).
    private func makePassphrase(writingTo file: URL) throws -> SecureBytes {
        let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789".utf8)
        var random = SecureRandom.bytes(count: 32)
        var text = random.map { alphabet[Int($0) % alphabet.count] }
        SecureMemory.zero(&random)
        defer { SecureMemory.zero(&text) }
        let fd = open(file.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw DemoError("cannot create \(file.path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        guard text.withUnsafeBytes({ writeAll(fd, $0) }), fsync(fd) == 0 else {
            throw DemoError("cannot write \(file.path): \(String(cString: strerror(errno)))")
        }
        return try text.withUnsafeBytes { try SecureBytes(copying: $0) }
    }

    /// Runs `coffer` (``executablePath``) with `arguments`, capturing its output.
    private func runChild(_ arguments: [String], in directory: URL, input: Data? = nil) throws -> (
        pid: Int32, status: Int32, output: Data, error: String
    ) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executablePath)
        process.arguments = arguments
        process.currentDirectoryURL = directory
        var environment = ProcessInfo.processInfo.environment
        for name in ["COFFER_PASSPHRASE", "COFFER_NEW_PASSPHRASE", "COFFER_VAULT"] { environment[name] = nil }
        process.environment = environment
        let output = Pipe()
        let error = Pipe()
        process.standardOutput = output
        process.standardError = error
        let inputPipe = input.map { _ in Pipe() }
        process.standardInput = inputPipe ?? FileHandle.nullDevice
        try process.run()
        if let input, let inputPipe {
            try? inputPipe.fileHandleForWriting.write(contentsOf: input)
            try? inputPipe.fileHandleForWriting.close()
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let message = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.processIdentifier, process.terminationStatus, data, String(decoding: message, as: UTF8.self))
    }

    /// How to run that `coffer`: `coffer` when that is what `PATH` finds, else its full path
    /// (under `swift run` it is not on `PATH`).
    static var commandName: String {
        let path = executablePath
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = "\(directory)/coffer"
            if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: candidate), resolved == path {
                return "coffer"
            }
            if candidate == path { return "coffer" }
        }
        return path
    }

    /// The `coffer` the demo runs as its second process: the one built beside this program
    /// (`swift build` puts both in one folder), else the first on `PATH`.
    static var executablePath: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        if n > 0 {
            let own = URL(fileURLWithPath: String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self))
            let beside = own.deletingLastPathComponent().appendingPathComponent("coffer").path
            if access(beside, X_OK) == 0 { return beside }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = "\(directory)/coffer"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return "coffer"
    }
}

/// The demo's model: the shape of the README's first example ("What it looks like").
final class AccountModel {
    static let service = "demo.app"
    static let account = "session-token"
    @Stored(backed: .vault(service: service, account: account)) var token: String? = nil
    @Stored(backed: .keyValue(key: "login")) var login = ""
    @Stored(backed: .vault(service: "demo.app", account: "api-token")) var apiToken: String? = nil
    @Computed var status: String

    init() {
        // Dependencies are found by reading: no list to keep in sync.
        $status = Computed("status") { [$token, $login] in
            guard let token = $token.wrappedValue else { return "signed out" }
            return "signed in as \($login.wrappedValue) with \(mask(token))"
        }
    }
}

private struct Credential {
    var service: String
    var account: String
    var label: String
    var secret: String
}

/// Collects the demo's output and the claims that did not hold.
private struct Tour {
    var failures: [String] = []
    private var failedSteps: Set<Int> = []
    private var currentStep = 0

    func say(_ line: String) { writeOut(line + "\n") }

    mutating func step(_ number: Int, _ title: String) {
        currentStep = number
        say("\n\(number). \(title)")
    }

    func summary(_ steps: Set<Int>, _ claim: String) {
        say("   \(steps.isDisjoint(with: failedSteps) ? "✓" : "✗") \(claim)")
    }

    func table(_ rows: [[String]]) {
        if !rows.isEmpty { writeOut(formatTable(rows)) }
    }

    mutating func check(_ holds: Bool, _ failure: String) {
        guard !holds else { return }
        failures.append(failure)
        failedSteps.insert(currentStep)
    }
}

// One-shot flag set from Observation's onChange, which may run on any thread.
private final class Flag: Sendable {
    // An atomic rather than a Mutex: ThreadSanitizer sees atomics (the CI runs the CLI under it).
    private let state = Atomic(false)
    func set() { state.store(true, ordering: .releasing) }
    var value: Bool { state.load(ordering: .acquiring) }
}

/// `ghp_…abcd`: enough to recognise a secret, not enough to use it.
func mask(_ secret: String) -> String {
    guard secret.count > 12 else { return "…" }
    return "\(secret.prefix(4))…\(secret.suffix(4))"
}

private func randomText(_ count: Int, symbols: Bool = false) -> String {
    let alphabet = Array(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + (symbols ? "-_.!%+" : ""))
    return String(SecureRandom.bytes(count: count).map { alphabet[Int($0) % alphabet.count] })
}

private func contains(_ path: String, _ text: String) throws -> Bool {
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    return bytes.firstRange(of: Array(text.utf8)) != nil
}

private func measure<T>(_ clock: ContinuousClock, _ body: () throws -> T) rethrows -> (T, Duration) {
    let start = clock.now
    let value = try body()
    return (value, clock.now - start)
}

private func seconds(_ duration: Duration) -> String {
    let (whole, attoseconds) = duration.components
    return String(format: "%.2f s", Double(whole) + Double(attoseconds) / 1e18)
}
