// The rows `coffer bench` prints, as `cryptsetup benchmark` does for its own: what a user asks of
// this machine and this disk before choosing settings. `coffer-bench` (the developers' suite)
// runs the same rows, inside its own groups, next to the rest.
//
// What one operation is, per name:
//   vault.write           `Vault.set` of a 32-byte secret to one item, `.coalesced`
//   vault.write.durable   the same, `.immediate` (fdatasync before returning)
//   vault.read            `Vault.data(service:account:)` of a 32-byte secret, unlocked
//   peer.fsync.floor      pwrite of 100 bytes into a preallocated file + fdatasync: the disk's floor
//   kdf.interactive       Argon2id at the interactive preset (one passphrase unlock's KDF)
//   kdf.moderate          Argon2id at the moderate preset (`coffer init`'s default)

package import Coffer
package import CofferCrypto
package import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A benchmark that could not run (a file it could not make, a value read back wrong).
package struct BenchError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// A private (0700) temporary directory, removed with everything in it at the end.
package struct BenchDirectory {
    package let url: URL

    package init() throws {
        var template = Array((NSTemporaryDirectory() + "/coffer-bench-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw BenchError("cannot create a temporary directory: \(String(cString: strerror(errno)))")
        }
        url = URL(fileURLWithPath: String(cString: made))
    }

    package func remove() { try? FileManager.default.removeItem(at: url) }
}

/// The rows `coffer bench` prints, and the builders of those `coffer-bench` groups with others.
package struct UserBenchmarks {
    package let runner: BenchRunner
    package let directory: URL

    package init(runner: BenchRunner, directory: URL) {
        self.runner = runner
        self.directory = directory
    }

    /// `coffer bench`'s rows, in `coffer-bench`'s order (its `--json` names are these).
    package static let names = [
        "vault.write", "vault.write.durable", "vault.read", "peer.fsync.floor", "kdf.interactive", "kdf.moderate",
    ]

    /// Runs `coffer bench`'s rows: the coalesced vault write with the read, the durable write
    /// with the disk's floor (each pair's runs interleaved), then the KDF presets.
    package func run(progress: (String) -> Void = { _ in }) throws -> [BenchResult] {
        var results: [BenchResult] = []
        let key = try SecureBytes.random(count: 32)
        progress("vault.write, vault.read")
        do {
            let (write, vault) = try vaultWriter("vault.write", .coalesced, key: key)
            try vault.set(Data(repeating: 7, count: 32), service: "bench", account: "item")
            results += try runner.measureGroup([write, vaultRead(vault)])
            try vault.flush()
        }
        progress("vault.write.durable, peer.fsync.floor")
        do {
            let (write, _) = try vaultWriter("vault.write.durable", .immediate, key: key)
            let floor = try FsyncFloor(directory: directory)
            results += try withExtendedLifetime(floor) { try runner.measureGroup([write, floor.spec]) }
        }
        progress("kdf.interactive, kdf.moderate")
        results += try kdf(["kdf.interactive", "kdf.moderate"])
        return results.sorted { (Self.names.firstIndex(of: $0.name) ?? 99) < (Self.names.firstIndex(of: $1.name) ?? 99) }
    }

    /// A vault writer: a 32-byte secret to one item.
    package func vaultWriter(_ name: String, _ durability: Durability, key: SecureBytes) throws -> (BenchSpec, Vault) {
        let vault = try Vault.create(
            at: directory.appendingPathComponent(name + ".coffervault"), unlock: .key(key), durability: durability)
        let secret = Data((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        var count: UInt64 = 0
        let spec = BenchSpec(name: name, maxIterations: 2_000_000) { n in
            for _ in 0..<n {
                try vault.set(secret, service: "bench", account: "item")
                count &+= 1
            }
            return count
        }
        return (spec, vault)
    }

    /// `vault.read`: the item a vault writer writes, read back.
    package func vaultRead(_ vault: Vault) -> BenchSpec {
        BenchSpec(name: "vault.read") { n in
            try sumOfReads(n) { try vault.data(service: "bench", account: "item")?.count ?? 0 }
        }
    }

    /// `kdf.interactive` and `kdf.moderate`, those of them `selected` names.
    package func kdf(_ selected: [String]) throws -> [BenchResult] {
        let passphrase = try SecureBytes(utf8: "coffer bench passphrase")
        let salt = [UInt8](repeating: 0x42, count: PasswordHash.saltLength)
        var results: [BenchResult] = []
        for (name, parameters) in [("kdf.interactive", Argon2idParameters.interactive), ("kdf.moderate", .moderate)]
        where selected.contains(name) {
            results.append(
                try runner.measureSingle(name) {
                    let key = try PasswordHash.deriveKey(length: 32, passphrase: passphrase, salt: salt, parameters: parameters)
                    return key.withUnsafeBytes { UInt64($0[0]) }
                })
        }
        return results
    }
}

/// `peer.fsync.floor`: 100 bytes into a preallocated (written, synced) file, then fdatasync. The
/// file stays open while the instance lives.
package final class FsyncFloor {
    private let fd: Int32
    package private(set) var spec: BenchSpec

    package init(directory: URL) throws {
        let path = directory.appendingPathComponent("fsync-floor").path
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BenchError("bench: cannot create \(path): \(String(cString: strerror(errno)))") }
        self.fd = fd
        let size = 4 << 20
        let zeros = [UInt8](repeating: 0, count: size)
        guard zeros.withUnsafeBytes({ pwrite(fd, $0.baseAddress, size, 0) }) == size, fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw BenchError("bench: cannot preallocate \(path): \(reason)")
        }
        let record = [UInt8](repeating: 0xA5, count: 100)
        var offset = 0
        spec = BenchSpec(name: "peer.fsync.floor", maxIterations: 1_000_000) { n in
            var sum: UInt64 = 0
            for _ in 0..<n {
                if offset + 100 > size { offset = 0 }
                let written = record.withUnsafeBytes { pwrite(fd, $0.baseAddress, 100, off_t(offset)) }
                guard written == 100, fdatasync(fd) == 0 else {
                    throw BenchError("bench: write or fdatasync failed: \(String(cString: strerror(errno)))")
                }
                offset += 100
                sum &+= UInt64(written)
            }
            return sum
        }
    }

    deinit { close(fd) }
}
