import CofferCore
import CofferCrypto
import CofferTesting
import CofferVault
import Foundation
import Testing

/// The committed vault files of `Vectors/vault/` open to exactly the contents in `manifest.json`.
/// If the format changes, these fail: make new vectors and bump the format version.
@Suite("Vault vectors")
struct VaultVectorTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Vectors/vault")

    struct Manifest: Decodable {
        struct Entry: Decodable {
            struct Unlock: Decodable {
                var kind: String
                var passphrase: String?
                var key_file: String?
                var key_hex: String?
            }
            struct Item: Decodable, Equatable {
                var service: String
                var account: String
                var label: String
                var comment: String
                var secret_hex: String
            }
            var file: String
            var unlock: Unlock
            var wrong_passphrase: String?
            var also_opens_with_passphrase: String?
            var items: [Item]
            var records: Int?
        }
        var format_version: Int
        var vaults: [Entry]
    }

    static func manifest() throws -> Manifest {
        try JSONDecoder().decode(Manifest.self, from: Data(contentsOf: directory.appendingPathComponent("manifest.json")))
    }

    static func bytes(hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return bytes
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test func everyVectorOpensToItsExpectedContents() throws {
        let manifest = try Self.manifest()
        #expect(manifest.format_version == 1)
        #expect(manifest.vaults.count >= 5)
        let scratch = try Scratch("vectors")
        for entry in manifest.vaults {
            // Work on a copy: opening takes a lock file beside the vault.
            let url = scratch.url(entry.file)
            try FileManager.default.copyItem(at: Self.directory.appendingPathComponent(entry.file), to: url)
            let unlock: VaultUnlock
            switch entry.unlock.kind {
            case "passphrase": unlock = .passphrase(try #require(entry.unlock.passphrase))
            case "keyFile": unlock = .keyFile(Self.directory.appendingPathComponent(try #require(entry.unlock.key_file)))
            default: unlock = .key(try SecureBytes(copying: Self.bytes(hex: try #require(entry.unlock.key_hex))))
            }
            let vault = try Vault.open(at: url, unlock: unlock)
            let items = try vault.items()
            var seen: [Manifest.Entry.Item] = []
            for item in items {
                let secret = try #require(try vault.data(service: item.service, account: item.account))
                seen.append(
                    .init(service: item.service, account: item.account, label: item.label, comment: item.comment,
                          secret_hex: Self.hex([UInt8](secret))))
                #expect(item.created <= item.modified)
            }
            let key: (Manifest.Entry.Item) -> String = { Self.hex(Array(($0.service + "\u{0}" + $0.account).utf8)) }
            #expect(seen.sorted { key($0) < key($1) } == entry.items.sorted { key($0) < key($1) }, "\(entry.file)")
            let verification = try vault.verify()
            #expect(verification.items == entry.items.count)
            if let records = entry.records { #expect(verification.records == records, "\(entry.file)") }
            if let wrong = entry.wrong_passphrase {
                expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase(wrong)) }
            }
            if let other = entry.also_opens_with_passphrase {
                #expect(try Vault.open(at: url, unlock: .passphrase(other)).items().count == entry.items.count)
            }
        }
    }

    /// The independent reader (written from docs/FORMAT.md alone) agrees, when Python with
    /// PyNaCl is available; `make test` installs it.
    @Test func independentReaderAgrees() throws {
        let (status, text) = try runVaultReader(["--check-vectors", Self.directory.path], mergingErrors: true)
        // Exit 77: the reader's dependencies are missing on this machine.
        if status == 77 { return }
        #expect(status == 0, "vault-reader.py: \(text.suffix(2000))")
    }
}
