import CofferCore
import CofferRuntime
import CofferTesting
import Foundation
import Testing

@Suite("InMemoryFileSystem")
struct InMemoryFileSystemTests {
    /// The errno of a CofferError thrown by `body`, or nil.
    func errno(_ body: () throws -> Void) -> Int32? {
        do {
            try body()
            return nil
        } catch let error as CofferError {
            return error.code == .io ? error.errno : -1
        } catch {
            return -2
        }
    }

    func write(_ fs: InMemoryFileSystem, _ path: String, _ bytes: [UInt8], sync: Bool = true) throws {
        let fd = try fs.open(path, create: true, exclusive: false, mode: 0o600)
        defer { fs.close(fd) }
        try fs.ftruncate(fd, size: 0)
        try bytes.withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: path) }
        if sync { try fs.fsync(fd) }
    }

    @Test func errorsCarryLinuxErrnoValues() throws {
        let fs = InMemoryFileSystem()
        try fs.mkdir("/d", mode: 0o700)
        try write(fs, "/d/f", [1])
        #expect(errno { _ = try fs.open("/d/missing", create: false, exclusive: false, mode: 0o600) } == 2)  // ENOENT
        #expect(errno { _ = try fs.openReadOnly("/nope/f") } == 2)
        #expect(errno { _ = try fs.open("/d/f", create: true, exclusive: true, mode: 0o600) } == 17)  // EEXIST
        #expect(errno { _ = try fs.open("/d/f/x", create: true, exclusive: false, mode: 0o600) } == 20)  // ENOTDIR
        #expect(errno { try fs.mkdir("/d/f", mode: 0o700) } == 17)
        #expect(errno { try fs.mkdir("/missing/d", mode: 0o700) } == 2)
        #expect(errno { _ = try fs.contentsOfDirectory("/d/f") } == 20)
        #expect(errno { _ = try fs.contentsOfDirectory("/missing") } == 2)
        #expect(errno { try fs.fsyncDirectory("/d/f") } == 20)
        #expect(errno { try fs.rename("/d/missing", "/d/g") } == 2)
        #expect(errno { try fs.rename("/d/f", "/missing/g") } == 2)
        try fs.mkdir("/d/empty", mode: 0o700)
        #expect(errno { try fs.rename("/d/f", "/d/empty") } == 21)  // EISDIR
        #expect(errno { try fs.unlink("/d") } == 21)
        #expect(errno { _ = try fs.open("/d", create: false, exclusive: false, mode: 0) } == 21)
        #expect(errno { _ = try fs.open("/d/" + String(repeating: "x", count: 256), create: true, exclusive: false, mode: 0o600) } == 36)
        #expect(errno { _ = try fs.open("/d/a\0b", create: true, exclusive: false, mode: 0o600) } == 22)  // EINVAL
        try fs.mkdir("/d/sub", mode: 0o700)
        try write(fs, "/d/sub/x", [1])
        try fs.mkdir("/e", mode: 0o700)
        #expect(errno { try fs.rename("/e", "/d/sub") } == 39)  // ENOTEMPTY
        #expect(errno { try fs.rename("/d", "/d/sub/inside") } == 22)

        // Missing things that are not errors.
        try fs.unlink("/d/missing")
        try fs.unlink("/missing/x")
        try fs.mkdir("/d", mode: 0o700)
        #expect(try fs.stat("/d/missing") == nil)
        #expect(try fs.stat("/d/f/x") == nil)  // ENOTDIR reads as absent, like LiveFileSystem

        // Descriptors.
        let fd = try fs.openReadOnly("/d/f")
        #expect(errno { _ = try [UInt8](repeating: 0, count: 1).withUnsafeBytes { try fs.pwrite(fd, $0, at: 0) } } == 9)  // EBADF
        #expect(errno { try fs.ftruncate(fd, size: 0) } == 22)
        fs.close(fd)
        #expect(errno { _ = try fs.fstat(fd) } == 9)
        #expect(errno { try fs.fsync(fd) } == 9)
        fs.close(fd)  // closing twice is harmless
    }

    @Test func liveFileSystemAgreesOnErrnos() throws {
        // The same calls on the kernel give the same errnos (the model is checked against reality).
        let directory = try TemporaryDirectory()
        let live = LiveFileSystem()
        let d = directory.path
        let fd = try live.open(d + "/f", create: true, exclusive: false, mode: 0o600)
        live.close(fd)
        #expect(errno { _ = try live.open(d + "/missing", create: false, exclusive: false, mode: 0o600) } == 2)
        #expect(errno { _ = try live.open(d + "/f", create: true, exclusive: true, mode: 0o600) } == 17)
        #expect(errno { _ = try live.open(d + "/f/x", create: true, exclusive: false, mode: 0o600) } == 20)
        #expect(errno { try live.mkdir(d + "/f", mode: 0o700) } == 17)
        #expect(errno { _ = try live.contentsOfDirectory(d + "/f") } == 20)
        #expect(errno { try live.rename(d + "/missing", d + "/g") } == 2)
        try live.mkdir(d + "/empty", mode: 0o700)
        #expect(errno { try live.rename(d + "/f", d + "/empty") } == 21)
        #expect(errno { try live.unlink(d) } == 21)
        #expect(errno { _ = try live.open(d, create: false, exclusive: false, mode: 0) } == 21)
        #expect(errno { _ = try live.open(d + "/" + String(repeating: "x", count: 256), create: true, exclusive: false, mode: 0o600) } == 36)
        #expect(try live.stat(d + "/f/x") == nil)
    }

    @Test func modesAreRecordedAndMaskedByUmask() throws {
        let fs = InMemoryFileSystem()
        try fs.mkdir("/a", mode: 0o755)
        let fd = try fs.open("/a/loose", create: true, exclusive: false, mode: 0o666)
        fs.close(fd)
        #expect(fs.permissions(atPath: "/a") == 0o755)
        #expect(fs.permissions(atPath: "/a/loose") == 0o644)  // umask 022
        #expect(try fs.stat("/a/loose")?.mode == 0o644)

        // With umask 0, DurableIO still creates 0600 files and 0700 directories.
        let open = InMemoryFileSystem(umask: 0)
        try DurableIO.ensureDirectory("/x/y", fileSystem: open)
        try DurableIO.atomicReplace("/x/y/value", with: Data([1]), fileSystem: open)
        #expect(open.permissions(atPath: "/x") == 0o700)
        #expect(open.permissions(atPath: "/x/y") == 0o700)
        #expect(open.permissions(atPath: "/x/y/value") == 0o600)
    }

    @Test func inodesAreStableAndRenameReplacesAtomically() throws {
        let fs = InMemoryFileSystem()
        try fs.mkdir("/d", mode: 0o700)
        try write(fs, "/d/a", [1, 1])
        try write(fs, "/d/b", [2, 2, 2])
        let a = try #require(try fs.stat("/d/a"))
        let b = try #require(try fs.stat("/d/b"))
        #expect(a.inode != b.inode)
        #expect(try fs.stat("/d/a") == a)
        try write(fs, "/d/a", [3])  // rewritten in place: same inode
        #expect(try fs.stat("/d/a")?.inode == a.inode)

        let reader = try fs.openReadOnly("/d/b")
        try fs.rename("/d/a", "/d/b")
        #expect(try fs.stat("/d/a") == nil)
        #expect(try fs.stat("/d/b")?.inode == a.inode)
        #expect(fs.contents(atPath: "/d/b") == Data([3]))
        // The descriptor opened before still reads the replaced file, as on Linux.
        #expect(try fs.fstat(reader).inode == b.inode)
        var buffer = [UInt8](repeating: 0, count: 8)
        let n = try buffer.withUnsafeMutableBytes { try fs.readFully(reader, into: $0, at: 0) }
        #expect(Array(buffer[0..<n]) == [2, 2, 2])
        fs.close(reader)
        #expect(try fs.contentsOfDirectory("/d") == ["b"])
        try fs.rename("/d/b", "/d/b")  // renaming onto itself does nothing
        #expect(fs.contents(atPath: "/d/b") == Data([3]))
    }

    @Test func namesAreBytesSoNFCAndNFDAreDifferentFiles() throws {
        let fs = InMemoryFileSystem()
        try fs.mkdir("/d", mode: 0o700)
        try write(fs, "/d/caf\u{E9}", [1])
        try write(fs, "/d/cafe\u{301}", [2])
        #expect(try fs.contentsOfDirectory("/d").count == 2)
        #expect(fs.contents(atPath: "/d/caf\u{E9}") == Data([1]))
        #expect(fs.contents(atPath: "/d/cafe\u{301}") == Data([2]))
    }

    @Test func sparseWritesTruncationAndReads() throws {
        let fs = InMemoryFileSystem()
        let fd = try fs.open("/f", create: true, exclusive: false, mode: 0o600)
        defer { fs.close(fd) }
        try [UInt8]([9, 9]).withUnsafeBytes { _ = try fs.pwrite(fd, $0, at: 4) }
        #expect(fs.contents(atPath: "/f") == Data([0, 0, 0, 0, 9, 9]))
        try fs.ftruncate(fd, size: 5)
        #expect(try fs.fstat(fd).size == 5)
        try fs.ftruncate(fd, size: 8)
        #expect(fs.contents(atPath: "/f") == Data([0, 0, 0, 0, 9, 0, 0, 0]))
        var buffer = [UInt8](repeating: 7, count: 4)
        #expect(try buffer.withUnsafeMutableBytes { try fs.pread(fd, into: $0, at: 100) } == 0)
        #expect(try buffer.withUnsafeMutableBytes { try fs.pread(fd, into: $0, at: 6) } == 2)
    }

    @Test func faultsCountMatchingCallsFromInstallation() throws {
        let fs = InMemoryFileSystem()
        try fs.mkdir("/d", mode: 0o700)
        try write(fs, "/d/a", [1])
        fs.resetCalls()
        fs.inject(.fail(.fsync, occurrence: 2, errno: 5, where: { $0.hasSuffix("/b") }))
        try write(fs, "/d/b", [1])  // fsync #1 of /d/b
        try write(fs, "/d/a", [1])  // does not count
        let error = try #require(throws: CofferError.self) { try write(fs, "/d/b", [2]) }
        #expect(error.errno == 5)
        #expect(error.path == "/d/b")
        try write(fs, "/d/b", [3])  // fired once only
        #expect(fs.callCount(.fsync) == 4)
        #expect(fs.callCount(.fsync, where: { $0.hasSuffix("/b") }) == 3)
        #expect(fs.callCount(.open) == 4)
        #expect(fs.calls.first == InMemoryFileSystem.Call(operation: .open, path: "/d/b"))

        fs.inject(.fail(.mkdir, errno: 28, persistent: true))
        #expect(throws: CofferError.self) { try fs.mkdir("/x", mode: 0o700) }
        #expect(throws: CofferError.self) { try fs.mkdir("/y", mode: 0o700) }
        #expect(fs.pendingFaultCount == 1)
        fs.removeAllFaults()
        try fs.mkdir("/x", mode: 0o700)
    }

    @Test func shortWriteThenFailure() throws {
        let fs = InMemoryFileSystem()
        fs.inject(.shortWrite(bytes: 3, thenErrno: 28))
        let fd = try fs.open("/f", create: true, exclusive: false, mode: 0o600)
        defer { fs.close(fd) }
        let bytes: [UInt8] = [1, 2, 3, 4, 5]
        #expect(try bytes.withUnsafeBytes { try fs.pwrite(fd, $0, at: 0) } == 3)
        let error = try #require(throws: CofferError.self) {
            _ = try bytes.withUnsafeBytes { try fs.pwrite(fd, UnsafeRawBufferPointer(rebasing: $0[3...]), at: 3) }
        }
        #expect(error.errno == 28)
        #expect(fs.contents(atPath: "/f") == Data([1, 2, 3]))
        #expect(try bytes.withUnsafeBytes { try fs.pwrite(fd, $0, at: 0) } == 5)
    }

    @Test func diskBudgetCountsGrowthOnly() throws {
        let fs = InMemoryFileSystem()
        let fd = try fs.open("/f", create: true, exclusive: false, mode: 0o600)
        defer { fs.close(fd) }
        let ten = [UInt8](repeating: 1, count: 10)
        try ten.withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: "/f") }
        fs.setDiskSpace(remaining: 4)
        try ten.withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: "/f") }  // overwrite: free
        #expect(try ten.withUnsafeBytes { try fs.pwrite(fd, $0, at: 10) } == 4)  // short: 4 bytes fit
        #expect(errno { _ = try ten.withUnsafeBytes { try fs.pwrite(fd, $0, at: 14) } } == 28)
        #expect(try fs.fstat(fd).size == 14)
    }

    // MARK: Power loss

    @Test func unsyncedDataIsLostSyncedDataIsNot() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/d")
        try write(fs, "/d/synced", [1, 2, 3])
        try fs.fsyncDirectory("/d")
        let fd = try fs.open("/d/synced", create: false, exclusive: false, mode: 0o600)
        try [UInt8]([9]).withUnsafeBytes { _ = try fs.pwrite(fd, $0, at: 0) }
        #expect(fs.contents(atPath: "/d/synced") == Data([9, 2, 3]))
        #expect(!fs.isDurable("/d/synced"))
        let report = fs.simulatePowerLoss(seed: 7, data: .drop, metadata: .drop)
        #expect(report.droppedWrites == 1)
        #expect(fs.contents(atPath: "/d/synced") == Data([1, 2, 3]))
        #expect(errno { try fs.fsync(fd) } == 9)  // descriptors die with the power
        #expect(fs.openDescriptorCount == 0)
    }

    @Test func aNewFileNeedsItsDirectorySynced() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/d")
        try write(fs, "/d/new", [1])  // data fsync'd, directory entry not
        #expect(!fs.isDurable("/d/new"))
        fs.simulatePowerLoss(seed: 1, data: .keep, metadata: .drop)
        #expect(fs.contents(atPath: "/d/new") == nil)

        try write(fs, "/d/new", [1])
        try fs.fsyncDirectory("/d")
        #expect(fs.isDurable("/d/new"))
        fs.simulatePowerLoss(seed: 1, data: .drop, metadata: .drop)
        #expect(fs.contents(atPath: "/d/new") == Data([1]))

        // Created but never fsync'd, entry durable: an empty file (ext4's zero-length file).
        try write(fs, "/d/empty", [5, 5], sync: false)
        try fs.fsyncDirectory("/d")
        fs.simulatePowerLoss(seed: 1, data: .drop, metadata: .drop)
        #expect(fs.contents(atPath: "/d/empty") == Data())
    }

    @Test func keepingEverythingChangesNothing() throws {
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/a/b")
        try write(fs, "/a/b/x", [1], sync: false)
        try write(fs, "/a/y", [2, 3])
        try fs.rename("/a/y", "/a/b/z")
        try fs.mkdir("/a/c", mode: 0o700)
        try fs.unlink("/a/b/x")
        try write(fs, "/a/c/w", [4], sync: false)
        let before = fs.allPaths()
        let contents = before.map { fs.contents(atPath: $0) }
        let report = fs.simulatePowerLoss(seed: 3, data: .keep, metadata: .keep)
        #expect(!report.lostAnything)
        #expect(fs.allPaths() == before)
        #expect(fs.allPaths().map { fs.contents(atPath: $0) } == contents)
        #expect(before == ["/a/", "/a/b/", "/a/b/z", "/a/c/", "/a/c/w"])
    }

    @Test func processCrashKeepsDataButDropsDescriptorsAndLocks() throws {
        let fs = InMemoryFileSystem()
        let fd = try fs.open("/f", create: true, exclusive: false, mode: 0o600)
        try [UInt8]([1]).withUnsafeBytes { _ = try fs.pwrite(fd, $0, at: 0) }
        try fs.lock(fd, exclusive: true, timeout: .seconds(0), path: "/f")
        fs.simulateProcessCrash()
        #expect(fs.contents(atPath: "/f") == Data([1]))
        #expect(errno { _ = try fs.fstat(fd) } == 9)
        let other = try fs.open("/f", create: false, exclusive: false, mode: 0o600)
        try fs.lock(other, exclusive: true, timeout: .seconds(0), path: "/f")
        fs.close(other)
    }

    @Test func renamesAreAtomicAcrossPowerLoss() throws {
        // Whatever survives, the name points at a whole old or a whole new file, never nothing.
        var outcomes: Set<[UInt8]> = []
        for seed in UInt64(0)..<200 {
            let fs = InMemoryFileSystem()
            try fs.createFile(atPath: "/d/value", contents: Data([1, 1, 1]))
            try write(fs, "/d/tmp", [2, 2, 2])
            try fs.rename("/d/tmp", "/d/value")
            try write(fs, "/d/tmp2", [3, 3, 3])
            try fs.rename("/d/tmp2", "/d/value")
            let mode: InMemoryFileSystem.UnsyncedMetadata = seed % 2 == 0 ? .random : .orderedPrefix
            fs.simulatePowerLoss(seed: seed, data: .randomWithGarbage, metadata: mode)
            let value = try #require(fs.contents(atPath: "/d/value"))
            outcomes.insert([UInt8](value))
            let names = Set(try fs.contentsOfDirectory("/d"))
            #expect(names.isSubset(of: ["value", "tmp", "tmp2"]))
        }
        #expect(outcomes == [[1, 1, 1], [2, 2, 2], [3, 3, 3]])
    }

    @Test func orderedPrefixNeverReordersDirectoryChanges() throws {
        for seed in UInt64(0)..<100 {
            let fs = InMemoryFileSystem()
            try fs.createDirectory(atPath: "/d")
            for i in 0..<6 { try write(fs, "/d/\(i)", [UInt8(i)]) }
            fs.simulatePowerLoss(seed: seed, data: .keep, metadata: .orderedPrefix)
            let survivors = try fs.contentsOfDirectory("/d").compactMap(Int.init).sorted()
            #expect(survivors == Array(0..<survivors.count))  // a prefix: 0…k-1
        }
    }

    @Test func unsyncedWritesAreKeptDroppedOrGarbledBySector() throws {
        var sawKept = false
        var sawDropped = false
        var sawGarbage = false
        for seed in UInt64(0)..<40 {
            let fs = InMemoryFileSystem()
            try fs.createFile(atPath: "/f", contents: Data(repeating: 0xAA, count: 8192))
            let fd = try fs.open("/f", create: false, exclusive: false, mode: 0o600)
            try [UInt8](repeating: 0xBB, count: 8192).withUnsafeBytes { try fs.writeAll(fd, $0, at: 0, path: "/f") }
            fs.simulatePowerLoss(seed: seed, data: .randomWithGarbage, metadata: .keep)
            let value = try #require(fs.contents(atPath: "/f"))
            #expect(value.count == 8192)
            for sector in [value[0..<4096], value[4096..<8192]] {
                if sector.allSatisfy({ $0 == 0xBB }) {
                    sawKept = true
                } else if sector.allSatisfy({ $0 == 0xAA }) {
                    sawDropped = true
                } else {
                    sawGarbage = true
                }
            }
        }
        #expect(sawKept && sawDropped && sawGarbage)
    }

    @Test func theSameSeedGivesTheSameCrash() throws {
        func run(_ seed: UInt64) throws -> [String: Data] {
            let fs = InMemoryFileSystem()
            try fs.createDirectory(atPath: "/d")
            for i in 0..<20 { try write(fs, "/d/\(i)", [UInt8](repeating: UInt8(i), count: 5000), sync: i % 2 == 0) }
            fs.simulatePowerLoss(seed: seed, data: .randomWithGarbage, metadata: .random)
            var result: [String: Data] = [:]
            for path in fs.allPaths() { result[path] = fs.contents(atPath: path) }
            return result
        }
        #expect(try run(42) == run(42))
        #expect(try run(42) != run(43))
    }
}
