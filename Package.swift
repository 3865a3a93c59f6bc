// swift-tools-version: 6.1
import PackageDescription

// Layers (see DESIGN.md): each module imports only the ones below it.
//   coffer (CLI) → Coffer (umbrella) → CofferState → CofferVault, CofferStorage → CofferCore → CCRC32C, CSharedWord
//   CofferVault → CofferCrypto → CSodium (libsodium); CofferState → CofferCore only
let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Coffer",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Coffer", targets: ["Coffer"]),
        .library(name: "CofferTesting", targets: ["CofferTesting"]),
        .executable(name: "coffer", targets: ["coffer"]),
        // The fleet store (README "Many machines"); empty unless the `Postgres` trait is enabled.
        .library(name: "CofferPostgres", targets: ["CofferPostgres"]),
    ],
    // `Postgres`: the PostgreSQL-backed fleet store (CofferPostgres) and `coffer --store postgres://…`.
    // Off by default, so an application that does not use it builds no NIO.
    traits: [
        .trait(name: "Postgres", description: "CofferPostgres: a key-value store and a vault on PostgreSQL (postgres-nio)"),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        .target(name: "CofferCrypto", dependencies: ["CSodium"], swiftSettings: strictSettings),
        // CRC-32C with the CPU's instruction (SSE4.2, ARMv8 CRC32) and a portable fallback.
        .target(name: "CCRC32C"),
        // Atomic loads and stores of words in a shared mapping (the journal's control page).
        .target(name: "CSharedWord"),
        .target(name: "CofferCore", dependencies: ["CCRC32C", "CSharedWord"], swiftSettings: strictSettings),
        .target(name: "CofferStorage", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        .target(name: "CofferVault", dependencies: ["CofferCore", "CofferCrypto"], swiftSettings: strictSettings),
        .target(name: "CofferState", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        .target(name: "CofferTesting", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        // Built (and postgres-nio with it) only with the `Postgres` trait; an empty module without.
        .target(
            name: "CofferPostgres",
            dependencies: [
                "CofferCore", "CofferVault", "CofferCrypto",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "Coffer",
            dependencies: ["CofferCore", "CofferStorage", "CofferVault", "CofferState"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "coffer",
            dependencies: [
                "Coffer", "CofferPostgres", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            ],
            swiftSettings: strictSettings
        ),
        // A small helper process the tests spawn (multi-process journal use, kill -9 loops).
        .executableTarget(
            name: "CofferTestHelper",
            dependencies: ["CofferStorage", "CofferVault", "CofferState", "CofferPostgres"],
            swiftSettings: strictSettings
        ),
        // libFuzzer targets (see Fuzz/README.md); a plain build replays corpus files instead.
        .executableTarget(
            name: "CofferFuzz",
            dependencies: ["CofferCore", "CofferVault"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "CofferCryptoTests", dependencies: ["CofferCrypto"], swiftSettings: strictSettings),
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStorageTests",
            dependencies: ["CofferStorage", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferVaultTests",
            dependencies: ["CofferVault", "CofferStorage", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStateTests",
            dependencies: ["CofferState", "CofferStorage", "CofferVault", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "CofferCLITests", dependencies: ["coffer"], swiftSettings: strictSettings),
        // Against a real, throwaway PostgreSQL server; empty without the `Postgres` trait.
        .testTarget(
            name: "CofferPostgresTests",
            dependencies: ["CofferPostgres", "CofferState", "CofferVault", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
    ]
)
