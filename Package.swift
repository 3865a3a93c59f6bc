// swift-tools-version: 6.2
import PackageDescription

// Layers (docs/ARCHITECTURE.md): each module imports only the ones below it, and only those it
// lists in its own `dependencies:` (scripts/check-imports.py, run by `make build` and `make test`).
//   coffer (CLI) → Coffer (umbrella) → CofferState → CofferVault, CofferStorage → CofferJournal
//     → CofferRuntime → CofferCore → CofferSync
//   CofferCore (the vocabulary: PersistenceStrategy and its capabilities, CofferError,
//     CofferContext, Backing, ValueCodec, JSONValue, warnings, the FileSystem protocol, and the
//     executor the async strategies' synchronous calls run on; Locked re-exported from CofferSync)
//   CofferRuntime (the runtime, as NIOPosix is NIOCore's: LiveFileSystem, DurableIO, FileWatcher
//     and its inotify thread, DeadlineTimer, ProcessHardening, signals; no public API but
//     ProcessHardening, the one public type, which Coffer's re-export of the module shows users)
//   CofferJournal (the storage engine: journal, control page, file lock, CRC-32C; `package` API only)
//     → CCRC32C, CSharedWord
//   CofferCore, CofferCrypto → CofferSync (Locked, the one lock type)
//   CofferVault → CofferCrypto → CSodium (libsodium: the only C boundary for crypto, zeroing,
//     constant-time comparison), CRandom (the kernel's generator through the vDSO);
//     CofferState → CofferCore only
let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
    // A member is visible only where its module is imported, not through another import.
    .enableUpcomingFeature("MemberImportVisibility"),
    // Every public type says whether it is Sendable (a conformance, or an unavailable one).
    .treatWarning("ExplicitSendable", as: .error),
]

let package = Package(
    name: "Coffer",
    // Linux (x86_64, arm64) is what CI builds and tests. macOS is planned, not supported: this is
    // the minimum it will need (Synchronization.Mutex), and its code paths are uncompiled (README).
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Coffer", targets: ["Coffer"]),
        .library(name: "CofferTesting", targets: ["CofferTesting"]),
        .executable(name: "coffer", targets: ["coffer"]),
        // Integrations (README "Integrations"): each builds only with its trait enabled.
        .library(name: "CofferLogging", targets: ["CofferLogging"]),
        .library(name: "CofferServiceLifecycle", targets: ["CofferServiceLifecycle"]),
        .library(name: "CofferConfiguration", targets: ["CofferConfiguration"]),
        .library(name: "CofferDependencies", targets: ["CofferDependencies"]),
        // The fleet store (README "Many machines"); empty unless the `Postgres` trait is enabled.
        .library(name: "CofferPostgres", targets: ["CofferPostgres"]),
    ],
    // Optional integrations: the core builds none of their packages unless a trait asks for it
    // (`swift build --traits Logging`, or `traits: ["Logging"]` on the dependency).
    traits: [
        .trait(name: "Logging", description: "CofferLogging: Coffer's warnings go to a swift-log Logger."),
        .trait(
            name: "ServiceLifecycle",
            description: "CofferServiceLifecycle: a Service that flushes, locks vaults and stops watches on shutdown."),
        .trait(
            name: "Configuration",
            description: "CofferConfiguration: a swift-configuration ConfigProvider over a suite or a vault."),
        .trait(
            name: "Dependencies",
            description: "CofferDependencies: a swift-dependencies key for the Coffer context, and settings objects."),
        .trait(name: "Postgres", description: "CofferPostgres: a key-value store and a vault on PostgreSQL (postgres-nio)"),
        // Not an integration: the example server, built by `make test` (every trait) so it cannot rot.
        .trait(
            name: "ExampleService",
            description: "Builds the example Hummingbird service in Examples/TenantService.",
            enabledTraits: ["Postgres", "ServiceLifecycle"]),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Without its default JSON trait: the provider needs none of the file formats.
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: []),
        // Without its default traits (clocks, Combine schedulers): only the `Dependencies`
        // product is used, which needs neither, nor swift-syntax (that is for the macros).
        .package(url: "https://github.com/pointfreeco/swift-dependencies", from: "1.17.1", traits: []),
        // `make docs` only: a command plugin, so no target builds or links it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // The example service only (trait `ExampleService`); it shares swift-nio with postgres-nio.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        // The one lock type (Locked: a Mutex that ThreadSanitizer sees), below CofferCrypto and CofferCore.
        .target(name: "CofferSync", swiftSettings: strictSettings),
        .target(name: "CofferCrypto", dependencies: ["CSodium", "CRandom", "CofferSync"], swiftSettings: strictSettings),
        // Random bytes from the kernel through the vDSO's getrandom (no system call per nonce).
        .target(name: "CRandom"),
        // CRC-32C with the CPU's instruction (SSE4.2, ARMv8 CRC32) and a portable fallback.
        .target(name: "CCRC32C"),
        // Atomic loads and stores of words in a shared mapping (the journal's control page).
        .target(name: "CSharedWord"),
        // The Linux kernel keyring (add_key, keyctl) for `coffer unlock` and `coffer lock`.
        .target(name: "CKeyring"),
        .target(name: "CofferCore", dependencies: ["CofferSync"], swiftSettings: strictSettings),
        // The runtime over the vocabulary (as NIOPosix over NIOCore): the kernel's file system,
        // durable writes, the directory watcher, deadlines, process hardening. Coffer re-exports it for
        // ProcessHardening, its only public type.
        .target(name: "CofferRuntime", dependencies: ["CofferCore", "CSharedWord"], swiftSettings: strictSettings),
        .target(
            name: "CofferJournal", dependencies: ["CofferCore", "CofferRuntime", "CCRC32C", "CSharedWord"],
            swiftSettings: strictSettings),
        .target(
            name: "CofferStorage", dependencies: ["CofferCore", "CofferRuntime", "CofferJournal"],
            swiftSettings: strictSettings),
        .target(
            name: "CofferVault", dependencies: ["CofferCore", "CofferRuntime", "CofferJournal", "CofferCrypto"],
            swiftSettings: strictSettings),
        .target(name: "CofferState", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        // Test support (a public product); swift-log only for the integration children's and
        // tests' log handler (CapturingLogHandler.swift), with the traits that use it.
        .target(
            name: "CofferTesting",
            dependencies: [
                "CofferCore", "CofferRuntime",
                .product(
                    name: "Logging", package: "swift-log", condition: .when(traits: ["Logging", "ServiceLifecycle", "Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
        // Built (and postgres-nio with it) only with the `Postgres` trait; an empty module without.
        .target(
            name: "CofferPostgres",
            dependencies: [
                "CofferCore", "CofferRuntime", "CofferVault", "CofferCrypto",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "Coffer",
            dependencies: ["CofferCore", "CofferRuntime", "CofferCrypto", "CofferStorage", "CofferVault", "CofferState"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "coffer",
            dependencies: [
                "Coffer", "CofferCore", "CofferRuntime", "CofferCrypto", "CofferVault", "CofferPostgres", "CKeyring",
                "CofferBenchHarness", "CofferInterchange",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ],
            // `coffer generate --words`' list, compiled into the binary (no bundle to find at run time).
            resources: [.embedInCode("EFFWordList.txt")],
            // The test hooks (COFFER_TEST_FAST_KDF, COFFER_TEST_HOOK, COFFER_TEST_RUN_PAUSE) exist
            // only in debug builds, which every test build is (`swift test`, `make test`,
            // `make test-tsan`); the release binary `make install` ships has none (it checks).
            // Not a trait: `make install` enables every trait, and so may any dependent.
            swiftSettings: strictSettings + [.define("COFFER_TEST_HOOKS", .when(configuration: .debug))]
        ),
        // What `coffer` reads and writes besides vaults, apart from its commands: the import
        // formats (CSV, JSON, KeePassXC, Bitwarden, 1Password, pass), `.env` files, the escaping
        // of names for a terminal or a shell, and the wiping buffer secrets are read into. All
        // `package`: no product exports it. Tested in-process (CofferInterchangeTests).
        .target(name: "CofferInterchange", dependencies: ["CofferCrypto", "CofferVault"], swiftSettings: strictSettings),
        // `coffer bench`'s rows and the timing harness, shared with `coffer-bench`. Not a product.
        .target(name: "CofferBenchHarness", dependencies: ["Coffer", "CofferCrypto"], swiftSettings: strictSettings),
        // Developer tools, not products (never installed): the benchmark suite (`coffer-bench`,
        // `make bench-postgres`) and the guided tour (`coffer-demo`, `make demo`). Each runs the
        // `coffer` built beside it.
        .executableTarget(
            name: "coffer-bench",
            dependencies: [
                "Coffer", "CofferCore", "CofferCrypto", "CofferPostgres", "CofferBenchHarness", "CofferInterchange",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "coffer-demo",
            dependencies: ["Coffer", "CofferCrypto", "CofferInterchange", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSettings
        ),
        // A small helper process the tests spawn (multi-process journal use, kill -9 loops).
        .executableTarget(
            name: "CofferTestHelper",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferRuntime", "CofferStorage", "CofferVault", "CofferState",
                "CofferJournal", "CofferPostgres", "CofferTesting",
                // The integration children (Integrations.swift), built with their traits.
                .target(name: "CofferLogging", condition: .when(traits: ["Logging"])),
                .target(name: "CofferServiceLifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging", "ServiceLifecycle"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
            ],
            swiftSettings: strictSettings
        ),
        // The example service (Examples/TenantService/README.md): a Hummingbird server with
        // StoredMaps over a suite, the vault and PostgreSQL. Not a product. Without its trait, a
        // main that says the trait is needed; Hummingbird is then neither resolved nor built.
        .executableTarget(
            name: "TenantService",
            dependencies: [
                "Coffer", "CofferCrypto", "CofferPostgres", "CofferServiceLifecycle",
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["ExampleService"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["ExampleService"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ExampleService"])),
            ],
            path: "Examples/TenantService",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        // libFuzzer targets (see Fuzz/README.md); a plain build replays corpus files instead.
        .executableTarget(
            name: "CofferFuzz",
            dependencies: ["CofferCore", "CofferCrypto", "CofferJournal", "CofferVault"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "CofferCryptoTests", dependencies: ["CofferCrypto"], swiftSettings: strictSettings),
        .testTarget(
            name: "CofferInterchangeTests", dependencies: ["CofferInterchange", "CofferCrypto", "CofferVault"],
            swiftSettings: strictSettings),
        // Every ```swift block of README.md and the DocC articles, compiled against `import Coffer`
        // alone (the plugin extracts them at build time; Sources/CofferSnippetExtractor/main.swift).
        .executableTarget(name: "CofferSnippetExtractor", swiftSettings: strictSettings),
        .plugin(name: "CofferSnippetPlugin", capability: .buildTool(), dependencies: ["CofferSnippetExtractor"]),
        .testTarget(
            name: "CofferSnippetTests", dependencies: ["Coffer"], swiftSettings: strictSettings,
            plugins: ["CofferSnippetPlugin"]),
        // The documents' blocks that import an integration module, each under its traits.
        .testTarget(
            name: "CofferIntegrationSnippetTests",
            dependencies: [
                "Coffer",
                .target(name: "CofferPostgres", condition: .when(traits: ["Postgres"])),
                .target(name: "CofferLogging", condition: .when(traits: ["Logging"])),
                .target(name: "CofferServiceLifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .target(name: "CofferConfiguration", condition: .when(traits: ["Configuration"])),
                .target(name: "CofferDependencies", condition: .when(traits: ["Dependencies"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging", "Postgres", "ServiceLifecycle"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "Configuration", package: "swift-configuration", condition: .when(traits: ["Configuration"])),
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["ExampleService"])),
            ],
            swiftSettings: strictSettings,
            plugins: ["CofferSnippetPlugin"]),
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferRuntime", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        // The process's machinery: deadlines, fsync rules (live and under injected faults), process hardening.
        .testTarget(
            name: "CofferRuntimeTests",
            dependencies: ["CofferCore", "CofferRuntime", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        // The test kit itself: the in-memory file system (faults, power loss) and the strategy conformance suite.
        .testTarget(
            name: "CofferTestingTests",
            dependencies: ["CofferCore", "CofferRuntime", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferJournalTests",
            dependencies: ["CofferJournal", "CofferCore", "CofferRuntime", "CofferStorage", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStorageTests",
            dependencies: ["CofferCore", "CofferStorage", "CofferJournal", "CofferRuntime", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferVaultTests",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferVault", "CofferStorage", "CofferJournal", "CofferRuntime", "CofferTesting",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStateTests",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferState", "CofferStorage", "CofferVault", "CofferTesting", "CofferTestHelper",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferCLITests",
            dependencies: ["coffer", "coffer-bench", "coffer-demo", "CofferCore", "CofferCrypto", "CofferVault", "CKeyring", "CofferTesting"],
            swiftSettings: strictSettings),

        // Integrations. Each target compiles to an empty module unless its trait is enabled
        // (its sources are wrapped in `#if Trait`), and its package dependency is conditional.
        .target(
            name: "CofferLogging",
            dependencies: [
                "CofferCore", "CofferCrypto",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "CofferServiceLifecycle",
            dependencies: [
                "CofferCore", "CofferVault",
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["ServiceLifecycle"])),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "CofferConfiguration",
            dependencies: [
                "CofferCore", "CofferVault",
                .product(name: "Configuration", package: "swift-configuration", condition: .when(traits: ["Configuration"])),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "CofferDependencies",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferVault", "CofferState",
                .product(name: "Dependencies", package: "swift-dependencies", condition: .when(traits: ["Dependencies"])),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferIntegrationTests",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferStorage", "CofferVault", "CofferState", "CofferTesting",
                .target(name: "CofferLogging", condition: .when(traits: ["Logging"])),
                .target(name: "CofferServiceLifecycle", condition: .when(traits: ["ServiceLifecycle"])),
                .target(name: "CofferConfiguration", condition: .when(traits: ["Configuration"])),
                .target(name: "CofferDependencies", condition: .when(traits: ["Dependencies"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging", "ServiceLifecycle"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "Configuration", package: "swift-configuration", condition: .when(traits: ["Configuration"])),
                .product(name: "Dependencies", package: "swift-dependencies", condition: .when(traits: ["Dependencies"])),
            ],
            swiftSettings: strictSettings
        ),
        // Against a real, throwaway PostgreSQL server; empty without the `Postgres` trait.
        .testTarget(
            name: "CofferPostgresTests",
            dependencies: [
                "CofferCore", "CofferCrypto", "CofferPostgres", "CofferState", "CofferVault", "CofferTesting",
                "CofferTestHelper", "TenantService",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
