#if ExampleService
import Coffer
import CofferPostgres

/// The service's state: one `StoredMap` per store, made once at startup and shared by every
/// request. A request makes (or finds) the entry of its key and lets it go when it ends, so no
/// per-request cost grows with the number of flags, tenants or settings.
struct TenantState: Sendable {
    /// Feature flags by name, in the key-value suite "flags" (a journal file in the data directory).
    let flags: StoredMap<Bool>
    /// Each tenant's API token, in the default vault under the service "tenants": encrypted at
    /// rest, never logged, never sent back. No entries are kept between requests
    /// (`keepsRecent: 0`), so a token is in memory only while a request uses it.
    let tokens: StoredMap<String?>
    /// Settings every instance of the service shares, in a PostgreSQL suite.
    let settings: StoredMap<String?>
    /// The PostgreSQL suite under `settings`: `CofferService` is told about it, since a store of
    /// our own is not one of the context's.
    let settingsStore: PostgresKeyValueStrategy

    /// The maps, resolved in `context` (its directory holds the suite and the vault).
    init(context: CofferContext, settingsStore: PostgresKeyValueStrategy) {
        self.settingsStore = settingsStore
        (flags, tokens, settings) = CofferContext.$current.withValue(context) {
            (
                StoredMap<Bool>(store: .keyValue(suite: "flags"), default: false),
                StoredMap<String?>(store: .vault(service: "tenants"), keepsRecent: 0),
                StoredMap<String?>(store: .strategy(settingsStore))
            )
        }
    }
}
#endif
