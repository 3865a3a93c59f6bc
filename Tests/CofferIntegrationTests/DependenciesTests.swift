#if Dependencies
import CofferCore
import CofferDependencies
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Dependencies
import Foundation
import Testing

/// The seed's settings object (`Dependency.AppStorage` for TCA), on Coffer: a struct, `Sendable`
/// as declared (its properties are references, so its copies share their values).
struct MySettings: CofferSettings {
    @Stored(backed: .keyValue(key: "username")) var username: String? = nil
    @Stored(backed: .keyValue(key: "isSoundEnabled")) var isSoundEnabled = false
    @Stored(backed: .vault(service: "api.example.com", account: "me")) var token: String? = nil
}

/// The earlier spelling of a settings object, a class: it still compiles and works (it is not
/// `Sendable`, so it stays on the task that uses it).
final class ClassSettings: CofferSettings {
    @Stored(backed: .keyValue(key: "classFlag")) var flag = false
}

@Suite("swift-dependencies integration")
struct DependenciesTests {
    @Test("In tests the context is a private temporary one, never the user's")
    func testContextIsTemporary() throws {
        @Dependency(\.cofferContext) var context
        #expect(context.directory.path.hasPrefix(FileManager.default.temporaryDirectory.path))
        #expect(context.directory != CofferContext.standard.directory)
        // A vault works out of the box (a random key in memory).
        MySettings.shared.token = "t0ken"
        #expect(MySettings.shared.$token.error == nil)
        #expect(MySettings.shared.token == "t0ken")
        #expect(FileManager.default.fileExists(atPath: context.directory.appendingPathComponent(VaultConfiguration.defaultFileName).path))
    }

    @Test("Live, the context is the current one")
    func liveContextIsCurrent() {
        withDependencies {
            $0.context = .live
        } operation: {
            @Dependency(\.cofferContext) var context
            #expect(context === CofferContext.current)
        }
    }

    @Test("A settings class (the earlier spelling) still compiles, and `.shared` is one object per context")
    func settingsClassStillWorks() throws {
        let scratch = try Scratch("deps-class")
        let context = CofferContext(directory: scratch.url)
        try withDependencies {
            $0.cofferContext = context
        } operation: {
            #expect(ClassSettings.shared === ClassSettings.shared)
            ClassSettings.shared.flag = true
            let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
            #expect(try suite.get(Bool.self, for: "classFlag") == true)
        }
    }

    @Test("`.shared` is one object per context, and writes reach that context's files")
    func sharedPerContext() throws {
        let scratch = try Scratch("deps-shared")
        let context = CofferContext(directory: scratch.url)
        let settings = withDependencies {
            $0.cofferContext = context
        } operation: {
            MySettings.shared.isSoundEnabled = true
            MySettings.shared.username = "blob"
            #expect(MySettings.shared.$isSoundEnabled === MySettings.shared.$isSoundEnabled)
            return MySettings.shared
        }
        #expect(settings.isSoundEnabled)
        #expect(MySettings.shared.$isSoundEnabled !== settings.$isSoundEnabled)  // this test's own context
        #expect(MySettings.shared.isSoundEnabled == false)
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
        #expect(try suite.get(Bool.self, for: "isSoundEnabled") == true)
        #expect(try suite.get(String.self, for: "username") == "blob")
    }

    @Test("Setting a value is an effect: `await settings.set(\\.isSoundEnabled, to: true)`")
    func setAsAnEffect() async throws {
        let scratch = try Scratch("deps-set")
        try await withDependencies {
            $0.cofferContext = CofferContext(directory: scratch.url, durability: .immediate)
        } operation: {
            let settings = MySettings.shared
            // What a reducer returns: `.run { _ in await MySettings.shared.set(\.isSoundEnabled, to: true) }`.
            let effect: @Sendable () async -> Void = { await MySettings.shared.set(\.isSoundEnabled, to: true) }
            #expect(settings.isSoundEnabled == false)
            await effect()
            #expect(settings.isSoundEnabled)
            try await settings.save(\.$username, "saved")
            #expect(settings.username == "saved")
        }
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
        #expect(try suite.get(Bool.self, for: "isSoundEnabled") == true)
        #expect(try suite.get(String.self, for: "username") == "saved")
    }

    @Test("A long-lived effect keeps other state in sync with several settings, merged")
    func valuesMergedForSeveralSettings() async throws {
        let settings = MySettings.shared
        // The feature's own state, kept in sync the way `.bind(to:)` would.
        struct State: Equatable {
            var isSoundEnabled = false
            var username: String? = nil
        }
        let stream = settings.values(\.$isSoundEnabled, \.$username)
        var state = State()
        var steps = 0
        for await (isSoundEnabled, username) in stream {
            state.isSoundEnabled = isSoundEnabled
            state.username = username
            if steps == 0 {
                #expect(state == State())
                steps = 1
                await settings.set(\.isSoundEnabled, to: true)
            } else if steps == 1, state.isSoundEnabled {
                steps = 2
                await settings.set(\.username, to: "blob")
            } else if steps == 2, state.username == "blob" {
                break
            }
        }
        #expect(state == State(isSoundEnabled: true, username: "blob"))
        // One setting alone is its value.
        for await isSoundEnabled in settings.values(\.$isSoundEnabled) {
            #expect(isSoundEnabled)
            break
        }
    }

    @Test("The merged values follow a write made by another store instance (another process, say)")
    func valuesFollowOutsideWrites() async throws {
        let scratch = try Scratch("deps-outside")
        try await withDependencies {
            $0.cofferContext = CofferContext(directory: scratch.url)
        } operation: {
            let settings = MySettings.shared
            let other = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
            for await (isSoundEnabled, _) in settings.values(\.$isSoundEnabled, \.$username) {
                if !isSoundEnabled {
                    try other.set(true, for: "isSoundEnabled")
                } else {
                    break
                }
            }
            #expect(settings.isSoundEnabled)
        }
    }

    @Test("A settings object made inside `withDependencies { $0.cofferContext = … }` resolves in that context")
    func propertiesMadeUnderTheDependency() async throws {
        let scratch = try Scratch("deps-made")
        let context = CofferContext(directory: scratch.url, durability: .immediate)
        let settings = withDependencies {
            $0.cofferContext = context
        } operation: {
            MySettings()
        }
        #expect(settings.$isSoundEnabled.context === context)
        #expect(settings.$token.context === context)
        settings.isSoundEnabled = true
        let suite = try KeyValueFileStrategy(directory: scratch.url, suite: "standard")
        #expect(try suite.get(Bool.self, for: "isSoundEnabled") == true)

        // A group, and a property made in a task started in the scope, resolve there too.
        let (group, inTask) = await withDependencies {
            $0.cofferContext = context
        } operation: {
            let group = StoredGroup<Keys>(store: .keyValue)
            let inTask = await Task { Stored(wrappedValue: 0, backed: .keyValue(key: "n")).context }.value
            return (group, inTask)
        }
        #expect(group.context === context)
        #expect(inTask === context)

        // `CofferContext.$current.withValue` inside the scope is nearer, and wins.
        let inner = try CofferContext.temporary(prefix: "deps-inner")
        defer { try? FileManager.default.removeItem(at: inner.directory) }
        withDependencies {
            $0.cofferContext = context
        } operation: {
            CofferContext.$current.withValue(inner) {
                #expect(MySettings().$username.context === inner)
            }
        }
        // Outside any override, as always: the current context.
        #expect(MySettings().$username.context === CofferContext.current)
    }

    @Test("Settings cross tasks: `let s = MySettings.shared; Task { s.… }` compiles without @unchecked")
    func settingsAreSendable() async throws {
        func requireSendable<T: Sendable>(_: T.Type) {}
        requireSendable(MySettings.self)
        let settings = MySettings.shared
        let writer = Task { settings.isSoundEnabled = true }
        let reader = Task { settings.username }
        await writer.value
        #expect(await reader.value == nil)
        #expect(settings.isSoundEnabled)
        #expect(MySettings.shared.isSoundEnabled)  // a copy: the same values
    }
}

private struct Keys: StoredKeyGroup {
    let count = StoredKey("count", default: 0)
}
#endif
