import CofferCore
import CofferRuntime
import CofferCrypto
import CofferTesting
import Foundation
import Testing

@testable import CofferVault

/// A vault attacked or failing from outside: a vault whose update from the file fails must not
/// go on serving stale items or seal its next write with the old chain; a compaction failing
/// after a durable write must not report the write as failed; a key "file" whose size reads 0
/// (procfs) must not be read.
@Suite("Vault under outside attack: a swapped file, a failed compaction, a key file of size 0")
struct OutsideAttackTests {
    static func key(_ byte: UInt8) throws -> VaultUnlock { .key(try SecureBytes(copying: [UInt8](repeating: byte, count: 32))) }

    @Test("A vault swapped for another under an open Vault stops: no stale read, no write into the other file")
    func swappedVaultStops() throws {
        let dir = try Scratch("swap")
        let path = dir.url("v.coffer")
        let other = dir.url("o.coffer")
        let vault = try Vault.create(at: path, unlock: try Self.key(1))
        try vault.set("secret-a", service: "s", account: "a")
        try Vault.create(at: other, unlock: try Self.key(2)).set("secret-b", service: "s", account: "a")
        #expect(rename(other.path, path.path) == 0)
        Thread.sleep(forTimeInterval: 1.1)  // a file replaced by hand is noticed within a second

        #expect(throws: CofferError.self) { _ = try vault.string(service: "s", account: "a") }
        // Used to return "secret-a" from here on, with no error.
        let again = #expect(throws: CofferError.self) { _ = try vault.string(service: "s", account: "a") }
        #expect(again?.message.contains("open it again") == true)
        #expect(throws: CofferError.self) { try vault.set("w", service: "s", account: "w") }
        // The other vault was not written to: it still verifies and holds one item.
        let swapped = try Vault.open(at: path, unlock: try Self.key(2))
        #expect(try swapped.verify().items == 1)
        #expect(try swapped.string(service: "s", account: "a") == "secret-b")
    }

    @Test("A compaction that fails after a durable write does not report the write as failed")
    func failedCompactionKeepsTheWrite() throws {
        let fs = InMemoryFileSystem()
        let url = URL(fileURLWithPath: "/v.coffer")
        let vault = try Vault.create(at: url, unlock: try Self.key(3), fileSystem: fs)
        let big = Data(repeating: 0x61, count: 40_000)
        try vault.set(big, service: "s", account: "big")
        try vault.set(big, service: "s", account: "big")
        // The next overwrite makes the garbage worth compacting; the compaction's temporary file
        // cannot be written (a full disk).
        fs.inject(.fail(.open, errno: 28, persistent: true, where: { $0.hasSuffix(".tmp") }))
        try vault.set("tiny", service: "s", account: "big")  // used to throw ENOSPC
        #expect(try vault.string(service: "s", account: "big") == "tiny")
        try vault.remove(service: "s", account: "big")
        #expect(try vault.string(service: "s", account: "big") == nil)
    }

    @Test("A key file whose size reads 0 is refused without being read (procfs)")
    func procfsKeyFile() throws {
        let dir = try Scratch("procfs-key")
        let url = dir.url("k.coffer")
        _ = try Vault.create(at: url, unlock: try Self.key(4))
        // /proc/self/status: st_size 0, yet a read returns hundreds of bytes (and /proc/kmsg blocks).
        let error = #expect(throws: CofferError.self) {
            _ = try Vault.open(at: url, unlock: .keyFile(URL(fileURLWithPath: "/proc/self/status")))
        }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("at least 32 bytes") == true)
    }
}
