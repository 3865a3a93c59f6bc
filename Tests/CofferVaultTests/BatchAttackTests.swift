import CofferCore
import CofferCrypto
import CofferJournal
import CofferRuntime
import CofferTesting
import Foundation
import Synchronization
import Testing

@testable import CofferVault

#if canImport(Glibc)
import Glibc
#endif

/// A vault's batch (`apply` with many changes) attacked from outside: a full disk during the
/// commit and the compaction, a record from another writer that passes its checksums but is no
/// sealed record, a lock file removed under open vaults, the file swapped for a symlink, and
/// batches racing another instance's compactions. What must hold: a clear CofferError, every
/// batch whole or absent, nothing acknowledged lost, no secret in an error.
@Suite("Vault batches under outside attack")
struct BatchAttackTests {
    static func key(_ byte: UInt8) throws -> VaultUnlock { .key(try SecureBytes(copying: [UInt8](repeating: byte, count: 32))) }

    /// Secret `i` of batch `batch`: recognisable, so an error message holding one is caught.
    static func secret(_ batch: Int, _ i: Int) -> [UInt8] { Array("SECRET-\(batch)-\(i)-".utf8) + [UInt8](repeating: 0x73, count: 200) }

    static func batch(_ batch: Int, count: Int) -> [VaultChange] {
        (0..<count).map { .set(service: "b\(batch)", account: "a\($0)", secret: secret(batch, $0), label: nil, comment: nil) }
    }

    /// Every item of each batch in `batches` holds its secret.
    static func expectWhole(_ vault: Vault, batches: some Sequence<Int>, count: Int, sourceLocation: SourceLocation = #_sourceLocation)
        throws
    {
        for batch in batches {
            for i in 0..<count {
                #expect(
                    try vault.data(service: "b\(batch)", account: "a\(i)") == Data(secret(batch, i)),
                    "batch \(batch) item \(i)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test(.timeLimit(.minutes(10)))
    func aFullDiskFailsABatchWholeAndLosesNothingAcknowledged() throws {
        let disk = try SmallDisk("vault-full", kilobytes: 512)
        let url = URL(fileURLWithPath: disk.path + "/v.coffer")
        let vault = try Vault.create(at: url, unlock: try Self.key(1))
        try vault.apply(Self.batch(0, count: 50))
        try disk.fill()
        var acknowledged = [0]
        var refused: CofferError?
        for batch in 1..<200 where refused == nil {
            do {
                try vault.apply(Self.batch(batch, count: 50))
                acknowledged.append(batch)
            } catch let error as CofferError {
                refused = error
                // The refused batch is absent as a whole.
                #expect(try vault.items(service: "b\(batch)").isEmpty)
            }
        }
        #expect(refused?.code == .io)
        #expect(refused?.errno == ENOSPC)
        #expect(refused.map { "\($0)".contains("SECRET") } == false)
        let compaction = #expect(throws: CofferError.self) { try vault.compact() }
        #expect(compaction?.errno == ENOSPC)
        try Self.expectWhole(vault, batches: acknowledged, count: 50)
        let fresh = try Vault.open(at: url, unlock: try Self.key(1))
        try Self.expectWhole(fresh, batches: acknowledged, count: 50)
        #expect(try fresh.verify().items == 50 * acknowledged.count)

        try disk.free()
        try vault.apply(Self.batch(500, count: 50))
        try vault.compact()
        try fresh.apply(Self.batch(501, count: 50))
        let last = try Vault.open(at: url, unlock: try Self.key(1))
        try Self.expectWhole(last, batches: acknowledged + [500, 501], count: 50)
    }

    @Test func aRecordThatPassesItsChecksumsButIsNotSealedStopsTheVault() throws {
        let dir = try Scratch("vault-garbage-record")
        let url = dir.url("v.coffer")
        let vault = try Vault.create(at: url, unlock: try Self.key(2))
        try vault.apply(Self.batch(0, count: 20))
        let (writer, _) = try Journal.open(
            path: url.path, options: JournalOptions(application: Vault.application, headerAreaSize: VaultHeader.areaSize),
            fileSystem: LiveFileSystem(), create: .openExisting)
        _ = try writer.withWriteLock { _ in try writer.append([Data(repeating: 0xA5, count: 300)]) }
        try writer.close()
        let first = #expect(throws: CofferError.self) { _ = try vault.items() }
        #expect(first?.code == .corrupted)
        let again = #expect(throws: CofferError.self) { try vault.apply(Self.batch(1, count: 20)) }
        #expect(again?.code == .corrupted)
        #expect(throws: CofferError.self) { try vault.compact() }
        #expect(first.map { "\($0)".contains("SECRET") } == false)
    }

    @Test(arguments: ["removed", "replaced"])
    func aLockFileRemovedOrReplacedUnderOpenVaultsNeverLetsBatchesOverwriteEachOther(_ how: String) throws {
        let dir = try Scratch("vault-lock-\(how)")
        let url = dir.url("v.coffer")
        let first = try Vault.create(at: url, unlock: try Self.key(3))
        try first.apply(Self.batch(0, count: 10))
        let lock = url.path + ".lock"
        if how == "removed" {
            #expect(unlink(lock) == 0)
        } else {
            try Data(count: 4096).write(to: URL(fileURLWithPath: dir.path(".planted")))
            #expect(chmod(dir.path(".planted"), 0o600) == 0)
            #expect(rename(dir.path(".planted"), lock) == 0)
        }
        let second = try Vault.open(at: url, unlock: try Self.key(3))
        var landed = [0]
        for (vault, batch) in [(first, 1), (second, 2), (first, 3), (second, 4)] {
            do {
                try vault.apply(Self.batch(batch, count: 10))
                landed.append(batch)
            } catch let error as CofferError {
                #expect(error.message.contains("lock file"), "\(error)")
            }
        }
        #expect(landed.contains(2) && landed.contains(4))
        let reopened = try Vault.open(at: url, unlock: try Self.key(3))
        try Self.expectWhole(reopened, batches: landed, count: 10)
        #expect(try reopened.verify().items == 10 * landed.count)
    }

    @Test func theVaultSwappedForASymlinkToAnotherVaultIsNeverWrittenThrough() throws {
        let dir = try Scratch("vault-symlink")
        let url = dir.url("v.coffer")
        let other = dir.url("other.coffer")
        let vault = try Vault.create(at: url, unlock: try Self.key(4))
        try vault.apply(Self.batch(0, count: 10))
        try Vault.create(at: other, unlock: try Self.key(4)).apply(Self.batch(9, count: 10))
        let otherBytes = try Data(contentsOf: other)
        #expect(rename(url.path, dir.path("moved.coffer")) == 0)
        #expect(symlink(other.path, url.path) == 0)
        Thread.sleep(forTimeInterval: 1.1)  // a file replaced by hand is noticed within a second
        #expect(throws: CofferError.self) { try vault.apply(Self.batch(1, count: 10)) }
        #expect(throws: CofferError.self) { try vault.compact() }
        #expect(try Data(contentsOf: other) == otherBytes)
        #expect(unlink(url.path) == 0)
        #expect(rename(dir.path("moved.coffer"), url.path) == 0)
        try Self.expectWhole(try Vault.open(at: url, unlock: try Self.key(4)), batches: [0], count: 10)
    }

    @Test(.timeLimit(.minutes(10)))
    func batchesRacingAnotherInstancesCompactionsLoseNothing() throws {
        let dir = try Scratch("vault-race")
        let url = dir.url("v.coffer")
        let writer = try Vault.create(at: url, unlock: try Self.key(5), lockTimeout: .seconds(60))
        let compactors = try (0..<2).map { _ in try Vault.open(at: url, unlock: try Self.key(5), lockTimeout: .seconds(60)) }
        let failures = Locked<[String]>([])
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            do {
                for batch in 0..<60 { try writer.apply(Self.batch(batch, count: 20)) }
            } catch { failures.withLock { $0.append("writer: \(error)") } }
        }
        for (n, compactor) in compactors.enumerated() {
            DispatchQueue.global().async(group: group) {
                do {
                    for _ in 0..<20 {
                        try compactor.compact()
                        _ = try compactor.items()
                    }
                } catch { failures.withLock { $0.append("compactor \(n): \(error)") } }
            }
        }
        #expect(group.wait(timeout: .now() + 240) == .success)
        #expect(failures.withLock { $0 } == [])
        let reopened = try Vault.open(at: url, unlock: try Self.key(5))
        try Self.expectWhole(reopened, batches: 0..<60, count: 20)
        #expect(try reopened.verify().items == 60 * 20)
        try Self.expectWhole(compactors[0], batches: 0..<60, count: 20)
    }
}
