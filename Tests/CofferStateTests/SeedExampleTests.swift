import CofferCore
import CofferState
import CofferStorage
import Foundation
import Testing

// The examples that motivated the library, written against Coffer. Each persists, is
// re-created as an app would be on its next launch, and checks that stored and computed values
// come back right.

@Suite("Seed examples")
struct SeedExampleTests {
    final class Preferences {
        @Stored(backed: .keyValue(key: "name")) var name = ""
        @Stored(backed: .keyValue(key: "fontSize")) var fontSize = 13.0
        @Computed var displayName: String
        @Computed var clampedFontSize: Double

        init() {
            $displayName = Computed { [$name] in
                let trimmed = $name.wrappedValue.trimmingCharacters(in: .whitespaces)
                return trimmed.isEmpty ? "Anonymous" : trimmed
            }
            $clampedFontSize = Computed { [$fontSize] in min(max($fontSize.wrappedValue, 9), 36) }
        }
    }

    @Test("Preferences: name and font size, a display name and a clamped size, restored")
    func preferences() throws {
        try withTemporaryContext { _ in
            let first = Preferences()
            #expect(first.displayName == "Anonymous")
            #expect(first.clampedFontSize == 13)
            first.name = "  Ada Lovelace "
            first.fontSize = 72
            #expect(first.displayName == "Ada Lovelace")
            #expect(first.clampedFontSize == 36)

            let relaunched = Preferences()
            #expect(relaunched.name == "  Ada Lovelace ")
            #expect(relaunched.fontSize == 72)
            #expect(relaunched.displayName == "Ada Lovelace")
            #expect(relaunched.clampedFontSize == 36)
            relaunched.fontSize = 4
            #expect(relaunched.clampedFontSize == 9)
            #expect(Preferences().fontSize == 4)
        }
    }

    final class AppConfiguration {
        // Product flags and experiment flags live in two suites (two files).
        @Stored(backed: .keyValue(suite: "features", key: "newEditor")) var newEditor = false
        @Stored(backed: .keyValue(suite: "features", key: "syncEnabled")) var syncEnabled = true
        @Stored(backed: .keyValue(suite: "experiments", key: "betaSync")) var betaSync = false
        @Stored(backed: .keyValue(suite: "experiments", key: "rollout")) var rolloutPercent = 0
        @Computed var usesBetaSync: Bool
        @Computed var enabledFeatures: [String]

        init() {
            $usesBetaSync = Computed { [$syncEnabled, $betaSync, $rolloutPercent] in
                $syncEnabled.wrappedValue && $betaSync.wrappedValue && $rolloutPercent.wrappedValue >= 50
            }
            $enabledFeatures = Computed { [$newEditor, $syncEnabled, $usesBetaSync] in
                var features: [String] = []
                if $newEditor.wrappedValue { features.append("new-editor") }
                if $syncEnabled.wrappedValue { features.append($usesBetaSync.wrappedValue ? "sync (beta)" : "sync") }
                return features
            }
        }
    }

    @Test("App configuration: feature flags in two suites with derived settings")
    func appConfiguration() throws {
        try withTemporaryContext { context in
            let config = AppConfiguration()
            #expect(config.enabledFeatures == ["sync"])
            batch {
                config.newEditor = true
                config.betaSync = true
                config.rolloutPercent = 75
            }
            #expect(config.usesBetaSync)
            #expect(config.enabledFeatures == ["new-editor", "sync (beta)"])
            let files = try FileManager.default.contentsOfDirectory(atPath: context.directory.path)
            #expect(files.filter { $0.hasPrefix("features") }.count >= 1)
            #expect(files.filter { $0.hasPrefix("experiments") }.count >= 1)

            let relaunched = AppConfiguration()
            #expect(relaunched.enabledFeatures == ["new-editor", "sync (beta)"])
            relaunched.syncEnabled = false
            #expect(!relaunched.usesBetaSync)
            #expect(relaunched.enabledFeatures == ["new-editor"])
            #expect(AppConfiguration().enabledFeatures == ["new-editor"])
        }
    }

    struct Theme: Codable, Sendable, Equatable {
        enum Appearance: String, Codable, Sendable { case light, dark }
        struct Color: Codable, Sendable, Equatable {
            var red, green, blue: Double
            var luminance: Double { 0.2126 * red + 0.7152 * green + 0.0722 * blue }
        }
        var name: String
        var appearance: Appearance
        var accent: Color
        var cornerRadius: Double

        static let standard = Theme(
            name: "Standard", appearance: .light, accent: Color(red: 0, green: 0.48, blue: 1), cornerRadius: 8)
    }

    final class ThemeModel {
        @Stored(backed: .disk(key: "theme")) var theme = Theme.standard
        @Computed var textOnAccent: String
        init() {
            $textOnAccent = Computed { [$theme] in $theme.wrappedValue.accent.luminance > 0.5 ? "black" : "white" }
        }
    }

    @Test("A Codable theme round-trips through its own file")
    func codableTheme() throws {
        try withTemporaryContext { _ in
            let model = ThemeModel()
            #expect(model.textOnAccent == "white")
            let solarized = Theme(
                name: "Solarized", appearance: .dark, accent: Theme.Color(red: 0.71, green: 0.54, blue: 0), cornerRadius: 4)
            model.theme = solarized
            #expect(model.textOnAccent == "black")
            model.theme.cornerRadius = 6  // a mutation through the wrapper is a write
            let relaunched = ThemeModel()
            #expect(relaunched.theme.name == "Solarized")
            #expect(relaunched.theme.cornerRadius == 6)
            #expect(relaunched.theme.appearance == .dark)
            #expect(relaunched.textOnAccent == "black")
        }
    }

    final class NetworkConfiguration {
        @Stored(backed: .keyValue(suite: "network", key: "environment")) var environment = "production"
        @Stored(backed: .keyValue(suite: "network", key: "customEndpoints")) var customEndpoints: [String: String] = [:]
        @Stored(backed: .keyValue(suite: "network", key: "timeout")) var timeout = 30.0
        @Computed var baseURL: URL?

        static let builtIn = [
            "production": "https://api.example.com", "staging": "https://staging.api.example.com",
        ]

        init() {
            $baseURL = Computed { [$environment, $customEndpoints] in
                let environment = $environment.wrappedValue
                if let builtIn = Self.builtIn[environment] { return URL(string: builtIn) }
                return $customEndpoints.wrappedValue[environment].flatMap(URL.init(string:))
            }
        }
    }

    @Test("Network configuration: a base URL from an environment name and custom endpoints")
    func networkConfiguration() throws {
        try withTemporaryContext { _ in
            let network = NetworkConfiguration()
            #expect(network.baseURL?.absoluteString == "https://api.example.com")
            network.environment = "staging"
            #expect(network.baseURL?.host == "staging.api.example.com")
            network.environment = "local"
            #expect(network.baseURL == nil)
            network.customEndpoints["local"] = "http://localhost:8080"
            #expect(network.baseURL?.absoluteString == "http://localhost:8080")
            network.timeout = 5

            let relaunched = NetworkConfiguration()
            #expect(relaunched.environment == "local")
            #expect(relaunched.customEndpoints == ["local": "http://localhost:8080"])
            #expect(relaunched.baseURL?.port == 8080)
            #expect(relaunched.timeout == 5)
            relaunched.customEndpoints["local"] = "http://127.0.0.1:9000"
            #expect(relaunched.baseURL?.port == 9000)
        }
    }

    final class DocumentEditor {
        @Stored(backed: .disk(key: "lastSessionPath")) var lastSessionPath: String? = nil
        @Stored(backed: .disk(key: "recentFiles")) var recentFiles: [String] = []
        @Stored var unsavedText = ""
        @Computed var windowTitle: String

        init() {
            $windowTitle = Computed { [$lastSessionPath, $unsavedText] in
                let name = $lastSessionPath.wrappedValue.map { ($0 as NSString).lastPathComponent } ?? "Untitled"
                return $unsavedText.wrappedValue.isEmpty ? name : "\(name) — Edited"
            }
        }

        func open(_ path: String) {
            batch {
                lastSessionPath = path
                recentFiles = [path] + recentFiles.filter { $0 != path }.prefix(4)
                unsavedText = ""
            }
        }
    }

    @Test("Document editor: the last session path is restored on the next launch")
    func documentEditor() throws {
        try withTemporaryContext { _ in
            let editor = DocumentEditor()
            #expect(editor.windowTitle == "Untitled")
            editor.open("/home/ada/notes/engine.md")
            editor.open("/home/ada/notes/loom.md")
            editor.unsavedText = "draft"
            #expect(editor.windowTitle == "loom.md — Edited")

            let relaunched = DocumentEditor()
            #expect(relaunched.lastSessionPath == "/home/ada/notes/loom.md")
            #expect(relaunched.recentFiles == ["/home/ada/notes/loom.md", "/home/ada/notes/engine.md"])
            #expect(relaunched.windowTitle == "loom.md")  // unsaved text was memory only
            relaunched.lastSessionPath = nil
            #expect(DocumentEditor().lastSessionPath == nil)
        }
    }
}
