import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation
import Observation
import Testing

// Spellings the ported seed examples need, each written the way the seed
// libraries' users write them, then persisted, re-created as on the next launch, and checked.

@Suite("Spellings: heterogeneous settings, memory-only values, key groups, optionals")
struct SpellingTests {
    // MARK: A heterogeneous settings dictionary (swift-state-graph's `[String: Any]`)

    final class DocumentEditorModel {
        @Stored(backed: .keyValue(key: "lastOpenedDocument")) var lastOpenedDocumentPath: String?
        @Stored(backed: .keyValue(key: "editorSettings")) var editorSettings: JSONValue = [:]
        @Stored var currentDocument: Document?
        @Computed var canRestoreSession: Bool

        init() {
            $canRestoreSession = Computed { [$lastOpenedDocumentPath, $currentDocument] in
                $lastOpenedDocumentPath.wrappedValue != nil && $currentDocument.wrappedValue == nil
            }
        }

        func saveDocument(_ document: Document, at path: String) {
            currentDocument = document
            lastOpenedDocumentPath = path
        }
    }

    /// Not `Codable`: a reference to an open document, as an editor holds one.
    final class Document: Sendable {
        let path: String
        let text: String
        init(path: String, text: String) {
            self.path = path
            self.text = text
        }
    }

    @Test("The document editor: a [String: Any]-style settings value persists, the open document stays in memory")
    func documentEditor() throws {
        try withTemporaryContext { context in
            let editor = DocumentEditorModel()
            #expect(editor.lastOpenedDocumentPath == nil)
            #expect(editor.currentDocument == nil)
            #expect(!editor.canRestoreSession)
            editor.editorSettings = [
                "fontSize": 14, "theme": "dark", "rulers": [80, 120], "wrap": true, "tabWidth": 4.5, "font": nil,
            ]
            editor.editorSettings["minimap"] = ["enabled": false, "scale": 2]
            editor.saveDocument(Document(path: "/home/ada/engine.md", text: "notes"), at: "/home/ada/engine.md")
            #expect(editor.currentDocument?.path == "/home/ada/engine.md")
            #expect(!editor.canRestoreSession)  // a document is open

            let relaunched = DocumentEditorModel()
            #expect(relaunched.lastOpenedDocumentPath == "/home/ada/engine.md")
            #expect(relaunched.currentDocument == nil)  // memory only: never written
            #expect(relaunched.canRestoreSession)
            let settings = relaunched.editorSettings
            #expect(settings["fontSize"]?.intValue == 14)
            #expect(settings["theme"]?.stringValue == "dark")
            #expect(settings["rulers"]?[1]?.intValue == 120)
            #expect(settings["wrap"]?.boolValue == true)
            #expect(settings["tabWidth"]?.doubleValue == 4.5)
            #expect(settings["font"]?.isNull == true)
            #expect(settings["minimap"]?["scale"] == 2)
            #expect(settings == editor.editorSettings)
            // Stored as plain JSON text in the key-value file, which other programs can read.
            let store = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            let raw = try #require(try store.load("editorSettings"))
            #expect(String(decoding: raw, as: UTF8.self).hasPrefix("{\"font\":null,\"fontSize\":14,"))

            relaunched.currentDocument = Document(path: "/home/ada/loom.md", text: "")
            #expect(!relaunched.canRestoreSession)
            relaunched.currentDocument = nil
            #expect(relaunched.canRestoreSession)
        }
    }

    // MARK: Errors name what to act on

    final class NetworkSettings {
        @Stored(backed: .keyValue(suite: "network", key: "timeout")) var timeout = 30.0
    }

    final class OlderNetworkSettings {  // an older release kept the timeout as text
        @Stored(backed: .keyValue(suite: "network", key: "timeout")) var timeout = "30s"
    }

    @Test("A value that does not decode: the property keeps its default and its error names the key and both types")
    func decodingErrorNamesKeyAndTypes() throws {
        try withTemporaryContext { _ in
            let older = OlderNetworkSettings()
            older.timeout = "forty"
            let settings = NetworkSettings()
            #expect(settings.timeout == 30)
            let error = try #require(settings.$timeout.error)
            #expect(error.code == .decoding)
            #expect(
                error.message
                    == "cannot read keyValue(suite: network, key: timeout) as Double: the stored value is a String of 5 bytes, not a Double"
            )
            #expect(!error.description.contains("forty"))
            #expect(throws: CofferError.self) { try settings.$timeout.load() }
        }
    }

    // MARK: A memory-only value of a non-Codable type

    /// A closure and a class: nothing a `Codable` conformance could describe.
    struct Presenter: Sendable {
        let title: String
        let present: @Sendable (String) -> String
    }

    final class ScreenModel {
        @Stored var presenter = Presenter(title: "list") { "list: \($0)" }
        @Stored var selection: Document?
        @Computed var heading: String

        init() {
            $heading = Computed { [$presenter, $selection] in
                $presenter.wrappedValue.present($selection.wrappedValue?.path ?? "nothing")
            }
        }
    }

    @Test("A memory-only @Stored of a non-Codable type observes, computes, batches and streams")
    func memoryOnlyNonCodable() async throws {
        let model = ScreenModel()
        #expect(model.heading == "list: nothing")
        #expect(model.$selection.backing.description == "memory")
        #expect(model.$selection.error == nil)

        let observed = Counter()
        withObservationTracking {
            _ = model.selection
        } onChange: {
            observed.bump()
        }
        let document = Document(path: "a.md", text: "")
        model.selection = document
        #expect(observed.value == 1)
        #expect(model.selection === document)
        #expect(model.heading == "list: a.md")

        batch {
            model.presenter = Presenter(title: "detail") { "detail of \($0)" }
            model.selection = Document(path: "b.md", text: "")
        }
        #expect(model.heading == "detail of b.md")

        // update and save work on memory too; `values` streams the changes.
        try await model.$presenter.update { $0 = Presenter(title: "grid") { "grid: \($0)" } }
        #expect(model.presenter.title == "grid")
        let stream = model.$presenter.values  // subscribed now: the current value, then each change
        model.presenter = Presenter(title: "last") { $0 }
        let seen = try await collect(stream, count: 2).map(\.title)
        #expect(seen == ["grid", "last"])
    }

    // MARK: An optional without `= nil`

    final class Account {
        @Stored(backed: .keyValue(key: "token")) var token: String?
        @Stored(backed: .disk(key: "lastSync")) var lastSync: Date?
        @Stored var draft: String?
    }

    @Test("An optional property without `= nil` starts at nil, persists, and nil removes the key")
    func optionalWithoutNil() throws {
        try withTemporaryContext { context in
            let account = Account()
            #expect(account.token == nil)
            #expect(account.lastSync == nil)
            #expect(account.draft == nil)
            #expect(account.$token.initialValue == nil)
            account.token = "t-1"
            let when = Date(timeIntervalSince1970: 1_700_000_000)
            account.lastSync = when
            account.draft = "unsent"

            let relaunched = Account()
            #expect(relaunched.token == "t-1")
            #expect(relaunched.lastSync == when)
            #expect(relaunched.draft == nil)  // memory only
            relaunched.token = nil
            let store = try KeyValueFileStrategy(directory: context.directory, suite: "standard")
            #expect(try store.load("token") == nil)
            #expect(Account().token == nil)
        }
    }

    // MARK: A typed key group with an injectable store (key-value-storage's injectable backend)

    struct AppKeys: StoredKeyGroup {
        let launchCount = StoredKey("launchCount", default: 0)
        let lastLaunchDate = StoredKey<Date?>("lastLaunchDate")
        let fruit = StoredKey("fruit", default: Fruit.apple)
        let account = StoredKey<AccountInfo?>("account")
        let debug = DebugKeys()
    }

    struct DebugKeys: StoredKeyGroup {
        let showConsole = StoredKey("showConsole", default: false)
    }

    enum Fruit: Int, Codable, Sendable { case apple, banana, orange }

    struct AccountInfo: Codable, Sendable, Equatable {
        var name: String
        var email: String
    }

    @Test("A key group in a named suite: read, write, nested group, a new group is the next launch")
    func keyGroupInSuite() throws {
        try withTemporaryContext { context in
            let storage = StoredGroup<AppKeys>(store: .keyValue(suite: "app"))
            #expect(storage.launchCount == 0)
            #expect(storage.lastLaunchDate == nil)
            storage.launchCount += 1
            storage.lastLaunchDate = Date(timeIntervalSince1970: 86_400)
            storage.fruit = .orange
            storage.account = AccountInfo(name: "Ada", email: "ada@example.com")
            storage.debug.showConsole = true

            let relaunched = StoredGroup<AppKeys>(store: .keyValue(suite: "app"))
            #expect(relaunched.launchCount == 1)
            #expect(relaunched.lastLaunchDate == Date(timeIntervalSince1970: 86_400))
            #expect(relaunched.fruit == .orange)
            #expect(relaunched.account?.name == "Ada")
            #expect(relaunched.debug.showConsole)
            // Every key went to the one suite chosen for the group.
            let suite = try KeyValueFileStrategy(directory: context.directory, suite: "app")
            #expect(Set(try suite.keys()) == ["launchCount", "lastLaunchDate", "fruit", "account", "showConsole"])
            #expect(
                !FileManager.default.fileExists(
                    atPath: context.directory.appendingPathComponent("standard.cofferkv").path))

            // The Stored underneath: atomic update, errors, and one value shared with @Stored.
            try relaunched.stored(\.launchCount).update { $0 += 10 }
            #expect(storage.launchCount == 11)
            #expect(relaunched.stored(\.launchCount) === relaunched.stored(\.launchCount))
            final class Legacy {
                @Stored(backed: .keyValue(suite: "app", key: "launchCount")) var launchCount = 0
            }
            #expect(Legacy().launchCount == 11)
        }
    }

    /// A model that takes its store once, as key-value-storage's users inject a backend.
    final class LaunchTracker {
        let storage: StoredGroup<AppKeys>
        @Computed var isFirstLaunch: Bool

        init(store: StoreChoice = .keyValue(suite: "app")) {
            storage = StoredGroup(store: store)
            $isFirstLaunch = Computed { [launchCount = storage.stored(\.launchCount)] in launchCount.wrappedValue <= 1 }
        }

        func launched() { storage.launchCount += 1 }
    }

    @Test("One line switches the whole model to memory: nothing is written, values live in that store")
    func keyGroupInMemory() throws {
        try withTemporaryContext { context in
            let store = StoreChoice.memory
            let tracker = LaunchTracker(store: store)
            tracker.launched()
            #expect(tracker.isFirstLaunch)
            tracker.launched()
            #expect(!tracker.isFirstLaunch)
            tracker.storage.debug.showConsole = true
            // The same StoreChoice value is the same store: a second model is the next launch.
            let again = LaunchTracker(store: store)
            #expect(again.storage.launchCount == 2)
            #expect(again.storage.debug.showConsole)
            // Another `.memory` is a fresh store, and nothing reached the disk.
            #expect(LaunchTracker(store: .memory).storage.launchCount == 0)
            let files = try FileManager.default.contentsOfDirectory(atPath: context.directory.path)
            #expect(files.isEmpty)
        }
    }

    @Test("A key group observes like @Stored, and a store choice gives @Stored properties their backings")
    func keyGroupObservationAndBacking() throws {
        try withTemporaryContext { _ in
            let storage = StoredGroup<AppKeys>(store: .keyValue)
            let changed = Counter()
            withObservationTracking {
                _ = storage.launchCount
            } onChange: {
                changed.bump()
            }
            storage.launchCount = 5
            #expect(changed.value == 1)

            final class Editor {
                @Stored var fontSize: Double
                @Stored var theme: String
                init(store: StoreChoice) {
                    _fontSize = Stored(wrappedValue: 13, backed: store.backing(key: "fontSize"))
                    _theme = Stored(wrappedValue: "light", backed: store.backing(key: "theme"))
                }
            }
            let editor = Editor(store: .disk)
            editor.fontSize = 15
            editor.theme = "dark"
            #expect(Editor(store: .disk).fontSize == 15)
            #expect(Editor(store: .disk).theme == "dark")
            #expect(Editor(store: .memory).theme == "light")
            #expect(StoreChoice.keyValue(suite: "app").backing(key: "x").description == "keyValue(suite: app, key: x)")
        }
    }

    @Test("A key group in the vault: each key an account of one service, encrypted")
    func keyGroupInVault() throws {
        struct Credentials: StoredKeyGroup {
            let github = StoredKey<String?>("octocat")
            let gitlab = StoredKey<String?>("ada")
        }
        try withTemporaryContext(vault: true) { context in
            let credentials = StoredGroup<Credentials>(store: .vault(service: "tokens"))
            credentials.github = "ghp_example"
            #expect(credentials.stored(\.github).error == nil)
            let reopened = StoredGroup<Credentials>(store: .vault(service: "tokens"))
            #expect(reopened.github == "ghp_example")
            #expect(reopened.gitlab == nil)
            let file = try Data(contentsOf: context.directory.appendingPathComponent(VaultConfiguration.defaultFileName))
            #expect(file.range(of: Data("ghp_example".utf8)) == nil)
        }
    }
}
