import CofferCore
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Observation
import Testing

/// Changes made outside the process's store instance reach running properties: another instance on the same file, another process, a compaction, a file removed
/// or replaced by hand.
@Suite("Changes from elsewhere")
struct OutsideChangeTests {
    final class Settings {
        @Stored(backed: .keyValue(key: "theme")) var theme = "light"
        @Stored(backed: .keyValue(key: "k3")) var count = 0
        @Computed var summary: String

        init() {
            $summary = Computed { [$theme, $count] in "\($theme.wrappedValue) \($count.wrappedValue)" }
        }
    }

    /// Waits (at most `seconds`) until `condition` holds.
    static func eventually(within seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test("A second store instance in this process writes; the property and its observers follow")
    func secondInstance() async throws {
        try await withTemporaryContext { context in
            let settings = Settings()
            #expect(settings.theme == "light")
            let fired = Counter()
            _ = withObservationTracking { settings.theme } onChange: { fired.bump() }
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            try other.set("dark", for: "theme")
            #expect(await Self.eventually { settings.theme == "dark" })
            #expect(fired.value == 1)
            #expect(settings.summary == "dark 0")
        }
    }

    @Test("A child process writes; the parent's observer fires and its computed value recomputes")
    func childProcess() async throws {
        try await withTemporaryContext { context in
            let settings = Settings()
            #expect(settings.summary == "light 0")
            var values = settings.$count.values.makeAsyncIterator()
            #expect(await values.next() == 0)
            // kv-write writes "k0" = 0 … "k4" = 4 into the standard suite.
            let child = try HelperChild(["kv-write", context.directory.path, "standard", "5", "k", "immediate"])
            #expect(child.wait() == 0)
            #expect(await Self.eventually { settings.count == 3 })
            #expect(await values.next() == 3)
            #expect(settings.summary == "light 3")
        }
    }

    @Test("Own writes notify once")
    func ownWritesNotifyOnce() async throws {
        try await withTemporaryContext { _ in
            let settings = Settings()
            var values = settings.$theme.values.makeAsyncIterator()
            #expect(await values.next() == "light")
            settings.theme = "dark"
            settings.theme = "blue"
            #expect(await values.next() == "dark")
            #expect(await values.next() == "blue")
            try await Task.sleep(for: .milliseconds(200))  // the watcher sees our own appends too
            let fired = Counter()
            _ = withObservationTracking { settings.theme } onChange: { fired.bump() }
            try await Task.sleep(for: .milliseconds(200))
            #expect(fired.value == 0)
        }
    }

    @Test("Another instance compacts, then the file is replaced and removed by hand: the property follows or says so")
    func compactionReplacementRemoval() async throws {
        try await withTemporaryContext { context in
            let settings = Settings()
            _ = settings.theme
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            try other.set("dark", for: "theme")
            try other.compact()  // a new file renamed into place
            try other.set("green", for: "theme")
            #expect(await Self.eventually { settings.theme == "green" })

            // Replaced by hand with another suite's file.
            let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-replace-\(UUID())")
            defer { try? FileManager.default.removeItem(at: elsewhere) }
            do {
                let replacement = try KeyValueFileStrategy(directory: elsewhere, suite: "standard", durability: .immediate)
                try replacement.set("from-backup", for: "theme")
            }
            let suite = context.directory.appendingPathComponent("standard.cofferkv").path
            #expect(rename(elsewhere.appendingPathComponent("standard.cofferkv").path, suite) == 0)
            #expect(await Self.eventually { settings.theme == "from-backup" })

            // Removed by hand: the value is kept, and the error says the file is gone.
            #expect(unlink(suite) == 0)
            #expect(await Self.eventually { settings.$theme.error != nil })
            #expect(settings.theme == "from-backup")
            #expect(settings.$theme.error?.code == .notFound)
        }
    }

    @Test("The watcher thread and its descriptors go away with the last property")
    func watchesAreReleased() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-watch-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let child = try HelperChild(["watch-release", directory.path])
        let line = child.readLine() ?? ""
        #expect(child.wait() == 0)
        var report: [String: Int] = [:]
        for field in line.split(separator: " ") {
            let parts = field.split(separator: "=")
            if parts.count == 2 { report[String(parts[0])] = Int(parts[1]) }
        }
        #expect(report["running-during"] == 1, "\(line)")
        #expect(report["running-after"] == 0, "\(line)")
        #expect(report["fds-after"] == report["fds-baseline"], "\(line)")
        #expect((report["fds-during"] ?? 0) > (report["fds-baseline"] ?? 0), "\(line)")
        #expect(report["threads-after"] == report["threads-baseline"], "\(line)")
    }
}

/// The vault: `coffer set`, `rm`, `passwd` and `compact` from a terminal reach a running model.
@Suite("Changes from elsewhere: the vault")
struct VaultOutsideChangeTests {
    static let passphrase = "correct horse battery staple"

    final class Credentials {
        @Stored(backed: .vault(service: "api.example.com", account: "ci")) var token: String? = nil
        @Computed var isSignedIn: Bool

        init() {
            $isSignedIn = Computed { [$token] in $token.wrappedValue != nil }
        }
    }

    /// Runs the built `coffer` on the context's default vault; returns its exit status.
    @discardableResult
    static func coffer(
        _ arguments: [String], in context: CofferContext, stdin: String? = nil, newPassphrase: Bool = false
    ) throws -> Int32 {
        try HelperChild.run(
            ["--vault", context.directory.appendingPathComponent(VaultConfiguration.defaultFileName).path] + arguments,
            executable: builtProduct(named: "coffer"), input: Data((stdin ?? "").utf8),
            environment: [
                "PATH": "/usr/bin:/bin", "HOME": context.directory.path,
                "COFFER_PASSPHRASE": newPassphrase ? passphrase + " 2" : passphrase,
                "COFFER_NEW_PASSPHRASE": passphrase + " 2", "COFFER_TEST_FAST_KDF": "1",
            ],
            inheritsEnvironment: false, standardError: .discard
        ).status
    }

    @Test("coffer set, rm, compact and passwd from another process reach a running model")
    func cofferCommandsReachTheModel() async throws {
        try await withTemporaryContext(vault: true) { (context: CofferContext) async throws in
            let model = Credentials()
            #expect(model.token == nil)
            #expect(!model.isSignedIn)
            let fired = Counter()
            _ = withObservationTracking { model.isSignedIn } onChange: { fired.bump() }

            #expect(try Self.coffer(["set", "api.example.com", "ci"], in: context, stdin: "ghp_first") == 0)
            #expect(await OutsideChangeTests.eventually { model.token == "ghp_first" })
            #expect(model.isSignedIn)
            #expect(fired.value == 1)

            #expect(try Self.coffer(["compact"], in: context) == 0)
            #expect(try Self.coffer(["set", "api.example.com", "ci"], in: context, stdin: "ghp_second") == 0)
            #expect(await OutsideChangeTests.eventually { model.token == "ghp_second" })

            #expect(try Self.coffer(["passwd"], in: context) == 0)
            #expect(try Self.coffer(["--passphrase-file", "/dev/null", "list"], in: context) != 0)
            // The model keeps its keys (a passphrase change keeps the master key) and goes on.
            model.token = "from-the-model"
            #expect(model.$token.error == nil)

            #expect(try Self.coffer(["rm", "api.example.com", "ci"], in: context, newPassphrase: true) == 0)
            #expect(await OutsideChangeTests.eventually { model.token == nil })
            #expect(!model.isSignedIn)
        }
    }

    @Test("A change that arrives while the vault is locked is reported as .locked; unlocking catches up")
    func lockedVault() async throws {
        try await withTemporaryContext(vault: true) { (context: CofferContext) async throws in
            let model = Credentials()
            model.token = "before"
            let vault = try context.sharedStore(id: .inContext(["vault", context.directory.appendingPathComponent(VaultConfiguration.defaultFileName).path])) {
                () throws -> Vault in
                Issue.record("the default vault should be open")
                throw CofferError(.notFound, "")
            }
            vault.lock()
            #expect(try Self.coffer(["set", "api.example.com", "ci"], in: context, stdin: "while-locked") == 0)
            #expect(await OutsideChangeTests.eventually { model.$token.error?.code == .locked })
            #expect(model.token == "before")
            try await vault.unlock(.passphrase(Self.passphrase))
            #expect(await OutsideChangeTests.eventually { model.token == "while-locked" })
            #expect(model.$token.error == nil)
        }
    }
}

@Suite("Changes from elsewhere: one file per key")
struct DiskOutsideChangeTests {
    final class Document {
        @Stored(backed: .disk(key: "draft")) var draft = ""
    }

    @Test("Another instance replaces a key's file; the property follows, and a removal resets it")
    func anotherInstance() async throws {
        try await withTemporaryContext { (context: CofferContext) async throws in
            let document = Document()
            #expect(document.draft == "")
            let other = try DiskStrategy(directory: context.directory.appendingPathComponent("files"))
            try other.set("from elsewhere", for: "draft")
            #expect(await OutsideChangeTests.eventually { document.draft == "from elsewhere" })
            document.draft = "mine"
            #expect(try other.get(String.self, for: "draft") == "mine")
            try other.remove("draft")
            #expect(await OutsideChangeTests.eventually { document.draft == "" })
        }
    }
}

@Suite("Changes from elsewhere: four processes")
struct ConvergenceTests {
    @Test("4 processes × 1,000 writes to one shared key and to their own: every process ends on the store's last value, nothing lost")
    func fourProcessesConverge() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-converge-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let children = try (0..<4).map { try HelperChild(["stored-converge", directory.path, "\($0)", "1000"]) }
        for child in children { #expect(child.readLine() == "ready") }
        for child in children { child.say("go") }
        for child in children { #expect(child.readLine() == "done") }
        let store = try KeyValueFileStrategy(directory: directory, suite: "standard")
        let last = try #require(try store.get(Int.self, for: "shared"))
        #expect(last % 1_000_000 == 999)  // some process's last write is the last committed one
        for child in children { child.say("expect \(last)") }
        for (index, child) in children.enumerated() {
            #expect(child.readLine() == "shared=\(last) own=999")
            #expect(child.wait() == 0)
            #expect(try store.get(Int.self, for: "own-\(index)") == 999)
        }
    }
}

@Suite("Changes from elsewhere: the polling fallback")
struct PollingFallbackTests {
    @Test("Where the directory cannot be watched, a poll finds the change, and a warning says so once")
    func pollingFindsTheChange() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-poll-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let child = try HelperChild(["stored-follow", directory.path], environment: ["COFFER_WATCH": "poll"])
        #expect(child.readLine() == "ready")
        let store = try KeyValueFileStrategy(directory: directory, suite: "standard")
        try store.set("dark", for: "theme")
        #expect(child.readLine() == "theme=dark warnings=watching falls back to polling")
        #expect(child.wait() == 0)
    }
}

@Suite("Changes from elsewhere: an unsaved write here")
struct UnsavedWriteTests {
    @Test("A change from elsewhere that lands inside a batch does not undo the batch's write")
    func reloadKeepsAnUnsavedWrite() throws {
        try withTemporaryContext { context in
            let theme = Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
            _ = try theme.load()
            let other = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            batch {
                theme.wrappedValue = "mine"  // in memory; persisted when the batch ends
                try? other.set("theirs", for: "theme")
                Thread.sleep(forTimeInterval: 0.3)  // the watcher reloads meanwhile
                #expect(theme.wrappedValue == "mine")
            }
            #expect(theme.wrappedValue == "mine")
            #expect(try other.get(String.self, for: "theme") == "mine")  // the last write won, on disk too
        }
    }
}

@Suite("Changes from elsewhere: a removal right after a read")
struct RemovalTests {
    @Test("A suite removed by hand within a second of the last check is still reported, and stays reported")
    func removalIsReported() async throws {
        try await withTemporaryContext { (context: CofferContext) async throws in
            let theme = Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
            theme.wrappedValue = "dark"
            #expect(unlink(context.directory.appendingPathComponent("standard.cofferkv").path) == 0)
            #expect(await OutsideChangeTests.eventually { theme.error?.code == .notFound })
            try await Task.sleep(for: .milliseconds(300))
            #expect(theme.error?.code == .notFound)  // not cleared by a later reload trusting the page
            #expect(theme.wrappedValue == "dark")
        }
    }

    @Test("The store's directory replaced by a copy, by a symlink to a copy, or removed and made again: the property follows the path")
    func replacedDirectory() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-moved-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appendingPathComponent("store")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let context = CofferContext(directory: directory)
        try await CofferContext.$current.withValue(context) {
            let theme = Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
            func write(_ value: String) throws {
                try KeyValueFileStrategy(directory: directory, suite: "standard", durability: .immediate).set(value, for: "theme")
            }
            try write("v5")
            #expect(await OutsideChangeTests.eventually { theme.wrappedValue == "v5" })

            // Renamed away, and a copy put in its place: a writer at the path writes v10.
            let moved = root.appendingPathComponent("moved")
            #expect(rename(directory.path, moved.path) == 0)
            try FileManager.default.copyItem(at: moved, to: directory)
            try write("v10")
            #expect(await OutsideChangeTests.eventually { theme.wrappedValue == "v10" }, "the property kept following the moved directory")
            #expect(theme.error == nil)

            // Renamed away again, and a symlink to a copy put in its place.
            let copy = root.appendingPathComponent("copy")
            #expect(rename(directory.path, root.appendingPathComponent("moved-again").path) == 0)
            try FileManager.default.copyItem(at: root.appendingPathComponent("moved-again"), to: copy)
            #expect(symlink(copy.path, directory.path) == 0)
            try write("v15")
            #expect(await OutsideChangeTests.eventually { theme.wrappedValue == "v15" }, "the property did not follow the symlink")
            #expect(theme.error == nil)

            // Removed: the value is kept and the error says so; made again: it follows the new store.
            #expect(unlink(directory.path) == 0)
            #expect(await OutsideChangeTests.eventually { theme.error?.code == .notFound })
            #expect(theme.wrappedValue == "v15")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try write("v20")
            #expect(await OutsideChangeTests.eventually { theme.wrappedValue == "v20" }, "the property never followed the new store")
            #expect(await OutsideChangeTests.eventually { theme.error == nil })
        }
    }
}
