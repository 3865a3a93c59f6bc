import CofferCore
import CofferRuntime
import CofferTesting
import Foundation
import Testing

/// DurableIO.atomicReplace under every failure it can meet, on the in-memory file system.
///
/// The save is first run once to record its calls; then, for every failable call it made (each
/// open, pwrite, fsync, rename, fsyncDirectory … by index), a fresh file system fails exactly
/// that call with ENOSPC and with EIO.
@Suite("DurableIO with injected faults")
struct DurableIOFaultTests {
    static let directory = "/store"
    static let path = "/store/value"
    static let old = Data("the previous value".utf8)
    static let new = Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })

    /// A file system holding the old value, durably.
    static func makeFileSystem() throws -> InMemoryFileSystem {
        let fs = InMemoryFileSystem()
        try fs.createFile(atPath: path, contents: old)
        return fs
    }

    /// Every (operation, index) the save calls, in the order it makes them.
    static func failurePoints() throws -> [(operation: InMemoryFileSystem.Operation, index: Int)] {
        let fs = try makeFileSystem()
        fs.resetCalls()
        try DurableIO.atomicReplace(path, with: new, fileSystem: fs)
        var seen: [InMemoryFileSystem.Operation: Int] = [:]
        var points: [(InMemoryFileSystem.Operation, Int)] = []
        for call in fs.calls where call.operation != .close && call.operation != .unlock {
            seen[call.operation, default: 0] += 1
            points.append((call.operation, seen[call.operation] ?? 0))
        }
        return points
    }

    @Test func theSaveMakesTheExpectedCalls() throws {
        let operations = try Self.failurePoints().map(\.operation)
        #expect(operations.first == .open)
        #expect(operations.contains(.pwrite))
        #expect(operations.contains(.fsync))
        #expect(operations.contains(.rename))
        #expect(operations.last == .fsyncDirectory)
    }

    @Test(arguments: [Int32(28), Int32(5)])
    func everyCallFailing(errno: Int32) throws {
        let points = try Self.failurePoints()
        #expect(points.count >= 5)
        for (operation, index) in points {
            let fs = try Self.makeFileSystem()
            fs.inject(.fail(operation, occurrence: index, errno: errno))
            let label = Comment(rawValue: "\(operation) #\(index) failing with errno \(errno)")
            let error = try #require(throws: CofferError.self, label) {
                try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
            }
            #expect(error.code == .io, label)
            #expect(error.errno == errno, label)
            #expect(error.path != nil, label)
            let visible = fs.contents(atPath: Self.path)
            if operation == .fsyncDirectory {
                // The rename already happened: the new value is visible, but the call still throws
                // because its durability is unknown — after a power loss either value may be found.
                #expect(visible == Self.new, label)
                fs.simulatePowerLoss(seed: UInt64(index), data: .randomWithGarbage, metadata: .random)
                let after = fs.contents(atPath: Self.path)
                #expect(after == Self.old || after == Self.new, label)
            } else {
                #expect(visible == Self.old, label)
            }
            #expect(try fs.contentsOfDirectory(Self.directory) == ["value"], label)  // no temporary left behind
            #expect(fs.openDescriptorCount == 0, label)
            #expect(fs.permissions(atPath: Self.path) == 0o600, label)
        }
    }

    @Test(arguments: [1, 100, 4096, 9_999])
    func shortWriteThenDiskFull(bytes: Int) throws {
        let fs = try Self.makeFileSystem()
        fs.inject(.shortWrite(bytes: bytes, thenErrno: 28))
        let error = try #require(throws: CofferError.self) {
            try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
        }
        #expect(error.errno == 28)
        #expect(fs.contents(atPath: Self.path) == Self.old)
        #expect(try fs.contentsOfDirectory(Self.directory) == ["value"])
        #expect(fs.openDescriptorCount == 0)
        // Space is back: the next save succeeds.
        try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
        #expect(fs.contents(atPath: Self.path) == Self.new)
    }

    @Test(arguments: [0, 1, 5_000, 9_999])
    func diskFullBudget(remaining: Int) throws {
        let fs = try Self.makeFileSystem()
        fs.setDiskSpace(remaining: remaining)
        let error = try #require(throws: CofferError.self) {
            try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
        }
        #expect(error.errno == 28)
        #expect(fs.contents(atPath: Self.path) == Self.old)
        #expect(try fs.contentsOfDirectory(Self.directory) == ["value"])
        fs.setDiskSpace(remaining: Self.new.count)
        try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
        #expect(fs.contents(atPath: Self.path) == Self.new)
    }

    @Test func faultsOnlyForMatchingPaths() throws {
        let fs = try Self.makeFileSystem()
        try fs.createDirectory(atPath: "/other")
        fs.inject(.fail(.fsync, errno: 5, persistent: true, where: { $0.hasPrefix("/other/") }))
        try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
        #expect(throws: CofferError.self) {
            try DurableIO.atomicReplace("/other/value", with: Self.new, fileSystem: fs)
        }
        #expect(throws: CofferError.self) {
            try DurableIO.atomicReplace("/other/value", with: Self.new, fileSystem: fs)
        }
        #expect(try fs.contentsOfDirectory("/other").isEmpty)
        fs.removeAllFaults()
        try DurableIO.atomicReplace("/other/value", with: Self.new, fileSystem: fs)
    }

    @Test func aReturnedSaveSurvivesAnyPowerLoss() throws {
        for seed in UInt64(0)..<50 {
            let fs = try Self.makeFileSystem()
            try DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
            #expect(fs.isDurable(Self.path))
            fs.simulatePowerLoss(seed: seed, data: .randomWithGarbage, metadata: .random)
            #expect(fs.contents(atPath: Self.path) == Self.new)
            fs.simulatePowerLoss(seed: seed, data: .drop, metadata: .drop)
            #expect(fs.contents(atPath: Self.path) == Self.new)
        }
    }

    @Test func aCrashAtAnyPointLeavesOldOrNewNeverAMix() throws {
        // Crash just before each call of the save (by failing it with EIO and cutting power).
        let points = try Self.failurePoints()
        var sawOld = false
        var sawNew = false
        for (operation, index) in points {
            for seed in UInt64(0)..<20 {
                let fs = try Self.makeFileSystem()
                fs.inject(.fail(operation, occurrence: index, errno: 5))
                _ = try? DurableIO.atomicReplace(Self.path, with: Self.new, fileSystem: fs)
                fs.simulatePowerLoss(seed: seed, data: .randomWithGarbage, metadata: .random)
                let value = fs.contents(atPath: Self.path)
                #expect(value == Self.old || value == Self.new, "\(operation) #\(index), seed \(seed)")
                if value == Self.old { sawOld = true }
                if value == Self.new { sawNew = true }
            }
        }
        #expect(sawOld && sawNew)
    }

    @Test func removeSurvivesPowerLossOnlyAfterTheDirectorySync() throws {
        let fs = try Self.makeFileSystem()
        try DurableIO.remove(Self.path, fileSystem: fs)
        fs.simulatePowerLoss(seed: 1, data: .drop, metadata: .drop)
        #expect(fs.contents(atPath: Self.path) == nil)

        let unsynced = try Self.makeFileSystem()
        try unsynced.unlink(Self.path)  // a bare unlink, no directory fsync
        unsynced.simulatePowerLoss(seed: 1, data: .drop, metadata: .drop)
        #expect(unsynced.contents(atPath: Self.path) == Self.old)
    }

    @Test func aFileSavedInANewDirectorySurvivesPowerLoss() throws {
        // With a journaled file system (ext4, XFS: metadata commits in order) it does…
        for seed in UInt64(0)..<20 {
            let fs = InMemoryFileSystem()
            try DurableIO.ensureDirectory("/data/app", fileSystem: fs)
            try DurableIO.atomicReplace("/data/app/value", with: Self.new, fileSystem: fs)
            fs.simulatePowerLoss(seed: seed, data: .drop, metadata: .orderedPrefix)
            #expect(fs.contents(atPath: "/data/app/value") == Self.new)
        }
        // …and under strict POSIX too: ensureDirectory syncs each new directory's entry in its parent.
        let fs = InMemoryFileSystem()
        try DurableIO.ensureDirectory("/data/app", fileSystem: fs)
        try DurableIO.atomicReplace("/data/app/value", with: Self.new, fileSystem: fs)
        #expect(fs.isDurable("/data/app/value"))
        fs.simulatePowerLoss(seed: 1, data: .drop, metadata: .drop)
        #expect(fs.contents(atPath: "/data/app/value") == Self.new)
    }
}
