// The Swift snippets of Sources/Coffer/Coffer.docc/KeysChosenAtRunTime.md and docs/STATE.md
// ("Keys chosen at run time"), pasted as they are, so that a change to the API that breaks one
// fails the build. They use only what `import Coffer` re-exports (CofferState, CofferStorage,
// CofferVault); `StoredMapTests.documentationSnippets` runs them in a temporary context.
import CofferCore
import CofferState
import CofferStorage
import CofferVault
import Foundation

enum StoredMapDocumentationSnippets {
    // MARK: KeysChosenAtRunTime.md, "The API"

    static func theAPI() throws {
        let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false)
        let tokens = StoredMap<String?>(store: .vault(service: "tenants"))  // Optional: default nil

        flags["beta-ui"] = true  // persisted before the setter returns (a local store)
        let on = flags["beta-ui"]  // the first read of a key loads it
        let entry = flags.entry("beta-ui")  // the key's Stored<Bool>: Observation, values, error
        tokens["acme"] = "s3cr3t"  // encrypted at rest
        try flags.remove("beta-ui")  // the key reads the default again

        let counts = StoredMap<Int>(store: .keyValue(suite: "counts"), default: 0)
        try counts.update("acme") { $0 += 1 }  // no increment lost, across processes
        let present = try counts.keys()  // the keys the store holds

        batch {
            flags["a"] = true
            flags["b"] = false  // one notification per key, one commit
        }
        _ = (on, entry, present)
    }

    // MARK: KeysChosenAtRunTime.md, "The API" (async code)

    static func theAsyncAPI(counts: StoredMap<Int>) async throws {
        try await counts.update("acme") { $0 += 1 }  // suspends, never blocks a thread
        let stored = try await counts.load("acme")  // the stored value, on a remote store too
        try await counts.save(stored * 2, for: "acme")
        try await counts.remove("globex")
        let present = try await counts.keys()
        _ = present
    }

    // MARK: docs/STATE.md, "Keys chosen at run time" (compiled, not run: it waits for a change)

    static func stateGuide() async throws {
        let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false)
        let tokens = StoredMap<String?>(store: .vault(service: "tenants"))  // Optional: default nil
        flags["beta-ui"] = true  // persisted, as a @Stored setter
        let entry = flags.entry("beta-ui")  // the key's Stored<Bool>: shares one value with a
        // @Stored(backed: .keyValue(suite: "flags", key: "beta-ui"))
        try await flags.remove("beta-ui")  // reads the default again
        try await flags.update("count-beta") { $0.toggle() }  // read-modify-write, + load/save/keys
        for await change in flags.changes {  // .keys(set): changed here or elsewhere; .unknown
            if case .keys(let keys) = change, keys.contains("beta-ui") { break }
        }
        _ = (tokens, entry)
    }

    // MARK: KeysChosenAtRunTime.md, "The API" (following changes)

    static func follow(_ flags: StoredMap<Bool>, show: (String, Bool) -> Void, reloadAll: () -> Void) async {
        for await change in flags.changes {
            switch change {
            case .keys(let keys):
                for key in keys { show(key, flags[key]) }
            case .unknown:
                reloadAll()  // the store cannot tell which keys changed
            }
        }
    }

    // MARK: KeysChosenAtRunTime.md, "Server patterns"

    /// Made once at startup and shared by every request.
    struct TenantState: Sendable {
        let plans = StoredMap<String>(store: .keyValue(suite: "plans"), default: "free")
        let requests = StoredMap<Int>(store: .keyValue(suite: "requests"), default: 0)

        /// A request: entries made here are dropped when it ends.
        func handle(tenant: String) async throws -> String {
            try await requests.update(tenant) { $0 += 1 }
            return try await plans.load(tenant)  // the stored value, on a remote store too
        }
    }

    /// Runs the snippets that end (the caller provides a temporary context with a vault);
    /// returns the request count of the tenant the server snippet served twice.
    static func run() async throws -> Int {
        try theAPI()
        try await theAsyncAPI(counts: StoredMap<Int>(store: .keyValue(suite: "counts"), default: 0))
        let state = TenantState()
        state.plans["acme"] = "pro"
        _ = try await state.handle(tenant: "acme")
        _ = try await state.handle(tenant: "acme")
        let flags = StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false)
        let task = Task { await follow(flags, show: { _, _ in }, reloadAll: {}) }
        task.cancel()
        await task.value
        return state.requests["acme"]
    }
}
