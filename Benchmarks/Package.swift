// swift-tools-version: 6.1
// Coffer's benchmark suite: a nested package so that the library's own package never
// depends on ordo-one/benchmark, SQLite or LMDB. Run it from the repository root with
// `make bench`; `make bench-check` fails when a benchmark regresses past Thresholds/.
import PackageDescription

import struct Foundation.URL

// A path dependency's identity is the name of its directory (whatever the clone is called).
let cofferPackage = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .lastPathComponent.lowercased()

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let benchmarkDependencies: [Target.Dependency] = [
    .product(name: "Benchmark", package: "benchmark"),
    .product(name: "Coffer", package: cofferPackage),
    "BenchSupport",
]

func suite(_ name: String, _ extra: [Target.Dependency] = []) -> Target {
    .executableTarget(
        name: name,
        dependencies: benchmarkDependencies + extra,
        path: "Benchmarks/\(name)",
        swiftSettings: strict,
        plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    )
}

let package = Package(
    name: "CofferBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // Peers, from the system (Debian: libsqlite3-dev, liblmdb-dev; scripts/install-bench-deps.sh).
        .systemLibrary(
            name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        .systemLibrary(
            name: "CLMDB", path: "Sources/CLMDB", pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]),
        // libsodium itself, for the raw-AEAD peer (Coffer's own wrapper is not public API).
        .systemLibrary(
            name: "CSodiumPeer", path: "Sources/CSodiumPeer", pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]),
        .target(
            name: "BenchSupport",
            dependencies: [.product(name: "Coffer", package: cofferPackage), .product(name: "Benchmark", package: "benchmark")],
            path: "Sources/BenchSupport",
            swiftSettings: strict),
        suite("KeyValue"),
        suite("Vault"),
        suite("State"),
        suite("Keys"),
        suite("Peers", ["CSQLite", "CLMDB", "CSodiumPeer"]),
    ]
)
