import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation
import Observation
import Testing

// The model of the README's "What it looks like" (the design's target shape), exactly as written there:
// if this file compiles, the public contract holds.

struct Session: Codable, Sendable, Equatable {
    var user: String
    var expires: Double
}

final class AccountModel {
    @Stored var draft = ""  // memory (the default)
    @Stored(backed: .keyValue(key: "theme")) var theme = "light"
    @Stored(backed: .keyValue(suite: "network", key: "timeout")) var timeout = 30.0
    @Stored(backed: .disk(key: "session")) var session: Session? = nil
    @Stored(backed: .vault(service: "api.github.com", account: "octocat")) var token: String? = nil
    @Computed var isSignedIn: Bool
    init() { $isSignedIn = Computed { [$token] in $token.wrappedValue != nil } }
}

@Suite("API")
struct APITests {
    @Test("The README's model persists every property in its own store and restores it")
    func designModelRoundTrip() throws {
        try withTemporaryContext(vault: true) { context in
            let first = AccountModel()
            #expect(first.isSignedIn == false)
            first.draft = "unsent"
            first.theme = "dark"
            first.timeout = 12.5
            first.session = Session(user: "octocat", expires: 1_700_000_000)
            first.token = "ghp_example_token_value"
            #expect(first.isSignedIn == true)
            for property in [first.$theme.error, first.$session.error, first.$token.error] {
                #expect(property == nil)
            }
            #expect(first.$timeout.error == nil)

            let second = AccountModel()
            #expect(second.draft == "")  // memory only
            #expect(second.theme == "dark")
            #expect(second.timeout == 12.5)
            #expect(second.session == Session(user: "octocat", expires: 1_700_000_000))
            #expect(second.token == "ghp_example_token_value")
            #expect(second.isSignedIn == true)

            // The token is encrypted at rest: its bytes appear in no file of the context.
            let secret = Data("ghp_example_token_value".utf8)
            let files = FileManager.default.enumerator(atPath: context.directory.path)?.allObjects as? [String] ?? []
            #expect(!files.isEmpty)
            for file in files {
                let url = context.directory.appendingPathComponent(file)
                guard let bytes = try? Data(contentsOf: url) else { continue }
                #expect(bytes.range(of: secret) == nil, "plaintext token found in \(file)")
            }

            second.token = nil
            #expect(second.isSignedIn == false)
            #expect(AccountModel().token == nil)
        }
    }

    @Test("Compile-only: the rest of the public surface")
    func publicSurface() throws {
        let strategy = MemoryStrategy()
        let stored = Stored(wrappedValue: 1, backed: .strategy(strategy, key: "k"))
        let projected: Stored<Int> = stored.projectedValue
        let _: Backing = projected.backing
        let _: Int = projected.initialValue
        let _: CofferContext = projected.context
        let _: CofferError? = projected.error
        let _: AsyncStream<Int> = projected.values
        let _: Int = try projected.load()
        try projected.save(2)
        let outcome: MigrationOutcome = try projected.migrate(from: .memory)
        #expect(outcome == .nothingToMigrate)

        let computed = Computed("double", fallback: 0) { [stored] in stored.wrappedValue * 2 }
        let _: Int = computed.wrappedValue
        let _: Computed<Int> = computed.projectedValue
        let _: CofferError? = computed.error
        let _: Bool = computed.isAssigned
        let _: String? = computed.name
        let _: AsyncStream<Int> = computed.values
        let sum: Int = batch { stored.wrappedValue + 1 }
        #expect(sum == 3)
        #expect(computed.wrappedValue == 4)

        // Plain values work with Observation's generic API.
        func observe<T: Observable>(_: T) {}
        observe(stored)
        observe(computed)
    }
}
