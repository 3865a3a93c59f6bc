import CofferCore
import CofferCrypto
import CofferTesting
import CofferVault
import Foundation
import Testing

/// A fresh directory for one test (CofferTesting's ``TemporaryDirectory``), removed after it.
typealias Scratch = TemporaryDirectory

/// What a vault holds: its items and each one's secret, to compare one open of it with another.
struct Snapshot: Equatable {
    var items: [VaultItem]
    var secrets: [Data?]

    init(of vault: Vault) throws {
        items = try vault.items()
        secrets = try items.map { try vault.data(service: $0.service, account: $0.account) }
    }
}

/// Argon2id at libsodium's minimum cost: the tests exercise the format, not the KDF's strength.
let fastKDF = Argon2idParameters.minimum

/// Expects `body` to throw a ``CofferError`` with `code`; returns it.
@discardableResult
func expectError(
    _ code: CofferError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> CofferError? {
    let error = #expect(throws: CofferError.self, sourceLocation: sourceLocation) { try body() }
    #expect(error?.code == code, "got \(error.map { String(describing: $0.code) } ?? "nothing")", sourceLocation: sourceLocation)
    return error
}

func readBytes(_ url: URL) throws -> [UInt8] { Array(try Data(contentsOf: url)) }
func writeBytes(_ bytes: [UInt8], to url: URL) throws { try Data(bytes).write(to: url) }

/// Whether `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
        if Array(haystack[i..<(i + needle.count)]) == needle { return true }
    }
    return false
}

/// Runs `Tools/vault-reader.py` (the independent reader, written from docs/FORMAT.md alone)
/// with `arguments`: its exit status and standard output (and standard error, when
/// `mergingErrors`). Exit 77 means its dependencies (PyNaCl) are missing.
func runVaultReader(_ arguments: [String], mergingErrors: Bool = false) throws -> (status: Int32, output: String) {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Tools/vault-reader.py")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", script.path] + arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = mergingErrors ? output : Pipe()
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}
