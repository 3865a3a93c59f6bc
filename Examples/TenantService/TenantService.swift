// An example service (README.md beside this file): feature flags, per-tenant API tokens and
// fleet settings, each a StoredMap, behind Hummingbird 2, shut down gracefully with CofferService.
#if ExampleService
import Coffer
import CofferPostgres
import CofferServiceLifecycle
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import UnixSignals

@main
struct TenantService {
    static func main() async {
        // Before anything else runs: no core file, no crash report (either could show a token),
        // and the passphrase out of the environment.
        ProcessHardening.suppressCrashReports(message: "tenant-service: crashed; no report is printed\n")
        let logger = Logger(label: "tenant-service")
        do {
            try ProcessHardening.disableCoreDumps()
            let unlock = try vaultUnlock()
            try await run(unlock: unlock, logger: logger)
        } catch let error as ConfigurationError {
            fail(error.message, status: 2)
        } catch {
            fail("\(error)", status: 1)
        }
    }

    /// Opens the stores, serves until SIGTERM or SIGINT, then shuts down: the server drains,
    /// then Coffer flushes the stores and locks the vault.
    static func run(unlock: VaultUnlock, logger: Logger) async throws {
        let environment = ProcessInfo.processInfo.environment
        let host = environment["TENANT_SERVICE_HOST"] ?? "127.0.0.1"
        let port = try environment["TENANT_SERVICE_PORT"].map {
            guard let port = Int($0), (0...65535).contains(port) else {
                throw ConfigurationError(message: "TENANT_SERVICE_PORT is a port number, 0 to 65535")
            }
            return port
        } ?? 8080

        // The flags suite and the vault live in TENANT_SERVICE_DATA, else
        // $XDG_DATA_HOME/tenant-service (~/.local/share/tenant-service).
        try CofferContext.setDefaultAppName("tenant-service")
        let base = environment["TENANT_SERVICE_DATA"].map { CofferContext(directory: URL(fileURLWithPath: $0)) }
        let context = (base ?? CofferContext.standard).with(VaultConfiguration(unlock: unlock))
        // A wrong key or a damaged vault fails here, before the server takes a request.
        try await context.openVault()

        // The fleet's settings: DATABASE_URL (postgres://…; the password better in PGPASSWORD
        // or ~/.pgpass), else libpq's PG* variables.
        let database = try environment["DATABASE_URL"].map { try PostgresConfiguration(url: $0) } ?? .environment()
        let state = TenantState(
            context: context, settingsStore: PostgresKeyValueStrategy(configuration: database, suite: "settings"))

        let app = Application(
            router: makeRouter(state: state, logger: logger),
            configuration: .init(address: .hostname(host, port: port), serverName: "tenant-service"),
            onServerRunning: { channel in
                // The port actually bound (TENANT_SERVICE_PORT=0 picks a free one).
                let line = "tenant-service: listening on \(host):\(channel.localAddress?.port ?? port)\n"
                FileHandle.standardOutput.write(Data(line.utf8))
            },
            logger: logger)
        // CofferService first: a group stops its services in reverse order, so the server stops
        // taking requests before Coffer waits for writes on their way to PostgreSQL, flushes the
        // flags suite and locks the vault.
        let coffer = CofferService(context: context, stores: [state.settingsStore], logger: logger)
        let group = ServiceGroup(
            services: [coffer, app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }

    /// How the vault unlocks: TENANT_SERVICE_KEY_FILE (a file of 32 bytes to 64 KiB, say from
    /// `head -c 32 /dev/urandom`), else the passphrase in TENANT_SERVICE_PASSPHRASE, which is
    /// read and removed from the environment.
    static func vaultUnlock() throws -> VaultUnlock {
        if let path = ProcessInfo.processInfo.environment["TENANT_SERVICE_KEY_FILE"] {
            return .keyFile(URL(fileURLWithPath: path))
        }
        let passphrase = try ProcessHardening.consumeEnvironmentVariable("TENANT_SERVICE_PASSPHRASE") { bytes in
            try bytes.map { try SecureBytes(copying: $0) }
        }
        guard let passphrase else {
            throw ConfigurationError(
                message: "the vault needs a key: set TENANT_SERVICE_KEY_FILE to a key file, or TENANT_SERVICE_PASSPHRASE")
        }
        return .passphrase(passphrase)
    }

    static func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data("tenant-service: \(message)\n".utf8))
        exit(status)
    }
}

/// A setting the service cannot start with (exit 2).
struct ConfigurationError: Error {
    let message: String
}
#else
import Foundation

@main
enum TenantService {
    static func main() {
        FileHandle.standardError.write(
            Data("tenant-service: built without its trait; build with --traits ExampleService (or --enable-all-traits)\n".utf8))
        exit(2)
    }
}
#endif
