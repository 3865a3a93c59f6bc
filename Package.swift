// swift-tools-version: 6.1
import PackageDescription

// Layers (see DESIGN.md): each module imports only the ones below it.
//   coffer (CLI) → Coffer (umbrella) → CofferState → CofferVault, CofferStorage → CofferJournal → CofferCore
//   CofferJournal (the storage engine: journal, control page, file lock, CRC-32C; `package` API only)
//     → CCRC32C, CSharedWord
//   CofferCore (the vocabulary: PersistenceStrategy, CofferError, ValueCodec, CofferContext,
//     FileSystem, warnings, FileWatcher; Platform/ is the one place that calls the C library)
//   CofferCore, CofferCrypto → CofferSync (Locked, the one lock type; re-exported by CofferCore)
//   CofferVault → CofferCrypto → CSodium (libsodium: the only C boundary for crypto, zeroing,
//     constant-time comparison); CofferState → CofferCore only
let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
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
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // `make docs` only: a command plugin, so no target builds or links it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        // The one lock type (Locked: a Mutex that ThreadSanitizer sees), below CofferCrypto and CofferCore.
        .target(name: "CofferSync", swiftSettings: strictSettings),
        .target(name: "CofferCrypto", dependencies: ["CSodium", "CofferSync"], swiftSettings: strictSettings),
        // CRC-32C with the CPU's instruction (SSE4.2, ARMv8 CRC32) and a portable fallback.
        .target(name: "CCRC32C"),
        // Atomic loads and stores of words in a shared mapping (the journal's control page).
        .target(name: "CSharedWord"),
        .target(name: "CofferCore", dependencies: ["CofferSync", "CSharedWord"], swiftSettings: strictSettings),
        .target(
            name: "CofferJournal", dependencies: ["CofferCore", "CCRC32C", "CSharedWord"], swiftSettings: strictSettings),
        .target(name: "CofferStorage", dependencies: ["CofferCore", "CofferJournal"], swiftSettings: strictSettings),
        .target(
            name: "CofferVault", dependencies: ["CofferCore", "CofferJournal", "CofferCrypto"],
            swiftSettings: strictSettings),
        .target(name: "CofferState", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        .target(name: "CofferTesting", dependencies: ["CofferCore"], swiftSettings: strictSettings),
        .target(
            name: "Coffer",
            dependencies: ["CofferCore", "CofferStorage", "CofferVault", "CofferState"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "coffer",
            dependencies: ["Coffer", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSettings
        ),
        // A small helper process the tests spawn (multi-process journal use, kill -9 loops).
        .executableTarget(
            name: "CofferTestHelper",
            dependencies: ["CofferStorage", "CofferVault", "CofferState", "CofferJournal"],
            swiftSettings: strictSettings
        ),
        // libFuzzer targets (see Fuzz/README.md); a plain build replays corpus files instead.
        .executableTarget(
            name: "CofferFuzz",
            dependencies: ["CofferCore", "CofferJournal", "CofferVault"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "CofferCryptoTests", dependencies: ["CofferCrypto"], swiftSettings: strictSettings),
        .testTarget(
            name: "CofferCoreTests",
            dependencies: ["CofferCore", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferJournalTests",
            dependencies: ["CofferJournal", "CofferCore", "CofferStorage", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStorageTests",
            dependencies: ["CofferStorage", "CofferJournal", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferVaultTests",
            dependencies: ["CofferVault", "CofferStorage", "CofferJournal", "CofferTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CofferStateTests",
            dependencies: ["CofferState", "CofferStorage", "CofferVault", "CofferTesting", "CofferTestHelper"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "CofferCLITests", dependencies: ["coffer"], swiftSettings: strictSettings),
    ]
)
