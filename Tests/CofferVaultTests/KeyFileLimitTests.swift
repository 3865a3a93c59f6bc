import CofferCore
import CofferCrypto
import CofferTesting
import CofferVault
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Key files are read only when they are regular files of at most 64 KiB: a FIFO must not hang
/// the open, a huge file must not be read whole.
@Suite("Key file limits")
struct KeyFileLimitTests {
    /// A vault unlocked by a 40-byte key file, and that key's bytes.
    private func vaultWithKeyFile(_ dir: Scratch) throws -> (url: URL, key: [UInt8]) {
        let key = SecureRandom.bytes(count: 40)
        try writeBytes(key, to: dir.url("key"))
        let url = dir.url("v.coffer")
        try Vault.create(at: url, unlock: .keyFile(dir.url("key")), kdf: fastKDF).set("x", service: "s", account: "a")
        return (url, key)
    }

    @Test func aFIFOIsRefusedAtOnceNotWaitedOn() throws {
        let dir = try Scratch("fifo")
        let (url, key) = try vaultWithKeyFile(dir)
        let fifo = dir.url("key.fifo").path
        #expect(mkfifo(fifo, 0o600) == 0)
        // Should the open wait for a writer (the defect), one turns up after two seconds with the
        // right key, so the test fails on the time and the outcome instead of hanging.
        let writer = Thread {
            sleep(2)
            let fd = open(fifo, O_WRONLY | O_NONBLOCK)
            if fd >= 0 {
                _ = key.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        }
        writer.start()
        let start = Date()
        let error = expectError(.invalidArgument) {
            _ = try Vault.open(at: url, unlock: .keyFile(URL(fileURLWithPath: fifo)))
        }
        #expect(Date().timeIntervalSince(start) < 1)
        #expect(error?.message.contains("not a regular file") == true, "\(String(describing: error))")
        sleep(2)  // let the writer finish before the directory goes
    }

    @Test func aKeyFileAboveTheLimitIsRefusedBeforeItIsRead() throws {
        let dir = try Scratch("large")
        let (url, key) = try vaultWithKeyFile(dir)
        #expect(VaultUnlock.maximumKeyFileSize == 65536)
        // One byte over: the right key followed by padding would otherwise be read (and fail as
        // a wrong key).
        let over = dir.url("over")
        try writeBytes(key + [UInt8](repeating: 0, count: 65536 + 1 - key.count), to: over)
        let error = expectError(.limitExceeded) { _ = try Vault.open(at: url, unlock: .keyFile(over)) }
        #expect(error?.message.contains("65536") == true)
        // A 256 MiB sparse file: refused from its size, without reading it.
        let huge = dir.url("huge").path
        let fd = open(huge, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        #expect(fd >= 0 && ftruncate(fd, 256 << 20) == 0)
        close(fd)
        let start = Date()
        expectError(.limitExceeded) { _ = try Vault.open(at: url, unlock: .keyFile(URL(fileURLWithPath: huge))) }
        #expect(Date().timeIntervalSince(start) < 0.5)
    }

    @Test func aKeyFileOfExactlyTheLimitWorks() throws {
        let dir = try Scratch("limit")
        let keyFile = dir.url("key")
        try writeBytes(SecureRandom.bytes(count: VaultUnlock.maximumKeyFileSize), to: keyFile)
        let url = dir.url("v.coffer")
        try Vault.create(at: url, unlock: .keyFile(keyFile), kdf: fastKDF).set("x", service: "s", account: "a")
        #expect(try Vault.open(at: url, unlock: .keyFile(keyFile)).string(service: "s", account: "a") == "x")
    }

    @Test func aLinkToAKeyFileIsFollowedButDirectoriesAndFIFOsAreRefused() throws {
        let dir = try Scratch("kinds")
        let (url, _) = try vaultWithKeyFile(dir)
        // A key on another device, or a Kubernetes secret mount, is reached through links.
        #expect(symlink(dir.url("key").path, dir.url("link").path) == 0)
        #expect(try Vault.open(at: url, unlock: .keyFile(dir.url("link"))).string(service: "s", account: "a") == "x")
        #expect(mkfifo(dir.url("fifo").path, 0o600) == 0)
        #expect(symlink(dir.url("fifo").path, dir.url("fifo-link").path) == 0)
        expectError(.invalidArgument) { _ = try Vault.open(at: url, unlock: .keyFile(dir.url("fifo-link"))) }
        expectError(.invalidArgument) { _ = try Vault.open(at: url, unlock: .keyFile(dir.url)) }
        expectError(.notFound) { _ = try Vault.open(at: url, unlock: .keyFile(dir.url("missing"))) }
    }

    @Test func keyFileContentsOpenTheKeyFileSlot() throws {
        let dir = try Scratch("contents")
        let (url, key) = try vaultWithKeyFile(dir)
        let vault = try Vault.open(at: url, unlock: .keyFileContents(try SecureBytes(copying: key)))
        #expect(try vault.string(service: "s", account: "a") == "x")
        expectError(.wrongKey) {
            _ = try Vault.open(at: url, unlock: .keyFileContents(try SecureBytes(copying: key + [0])))
        }
        expectError(.invalidArgument) {
            _ = try Vault.open(at: url, unlock: .keyFileContents(try SecureBytes(copying: Array(key[..<31]))))
        }
        expectError(.limitExceeded) {
            _ = try Vault.open(at: url, unlock: .keyFileContents(try SecureBytes(count: 65537)))
        }
        #expect("\(VaultUnlock.keyFileContents(try SecureBytes(copying: key)))".contains("redacted"))
    }
}
