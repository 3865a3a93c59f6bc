import CofferCore
import CofferRuntime
import CofferJournal
import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Files planted beside a store by someone else: a symlink or a hard link at the lock file's
/// name, another user's file, a FIFO or a directory where the store belongs, two paths to one
/// store, and a store that cannot be written.
@Suite("Store files: planted links, aliases, read-only use")
struct FileHardeningTests {
    let fs = LiveFileSystem()
    static let victimBytes = Data("precious bytes someone else owns\n".utf8)

    private func suite(_ directory: String, _ name: String = "s") throws -> KeyValueFileStrategy {
        try KeyValueFileStrategy(
            directory: URL(fileURLWithPath: directory), suite: name, durability: .immediate, lockTimeout: .seconds(2))
    }

    @Test func aSymlinkAtTheLockFileIsNeverFollowed() throws {
        let scratch = try Scratch("lock-symlink")
        let victim = scratch.path("victim")
        try Self.victimBytes.write(to: URL(fileURLWithPath: victim))
        // Before the store exists (`init`) and after (a read-only `get`).
        try FileManager.default.createSymbolicLink(atPath: scratch.path("s.cofferkv.lock"), withDestinationPath: victim)
        let error = #expect(throws: CofferError.self) { try suite(scratch.path) }
        #expect(error?.errno == ELOOP)
        #expect(error?.message.contains("symbolic link") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Self.victimBytes)

        try FileManager.default.removeItem(atPath: scratch.path("s.cofferkv.lock"))
        try suite(scratch.path).save(Data("v".utf8), for: "k")
        try FileManager.default.removeItem(atPath: scratch.path("s.cofferkv.lock"))
        try FileManager.default.createSymbolicLink(atPath: scratch.path("s.cofferkv.lock"), withDestinationPath: victim)
        #expect(throws: CofferError.self) { try suite(scratch.path) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Self.victimBytes)
    }

    @Test func aHardLinkOrAnotherUsersFileAtTheLockFileIsRefused() throws {
        let scratch = try Scratch("lock-hardlink")
        let victim = scratch.path("victim")
        try Self.victimBytes.write(to: URL(fileURLWithPath: victim))
        try FileManager.default.linkItem(atPath: victim, toPath: scratch.path("s.cofferkv.lock"))
        let linked = #expect(throws: CofferError.self) { try suite(scratch.path) }  // it cannot be created
        #expect(linked?.message.contains("hard links") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Self.victimBytes)

        try FileManager.default.removeItem(atPath: scratch.path("s.cofferkv.lock"))
        try Self.victimBytes.write(to: URL(fileURLWithPath: scratch.path("s.cofferkv.lock")))
        let other: uid_t = geteuid() == 65534 ? 65533 : 65534
        #expect(chown(scratch.path("s.cofferkv.lock"), other, gid_t(other)) == 0)
        let foreign = #expect(throws: CofferError.self) { try suite(scratch.path) }
        #expect(foreign?.message.contains("owned by user \(other)") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: scratch.path("s.cofferkv.lock"))) == Self.victimBytes)
    }

    @Test func aFIFOOrADirectoryWhereTheStoreBelongsIsRefusedWithoutALockFile() throws {
        let scratch = try Scratch("fifo")
        #expect(mkfifo(scratch.path("s.cofferkv"), 0o600) == 0)
        let fifo = #expect(throws: CofferError.self) { try suite(scratch.path) }  // must not hang either
        #expect(fifo?.code == .invalidArgument)
        #expect(fifo?.message.contains("FIFO") == true)
        #expect(!FileManager.default.fileExists(atPath: scratch.path("s.cofferkv.lock")))

        try FileManager.default.createDirectory(atPath: scratch.path("d.cofferkv"), withIntermediateDirectories: false)
        let directory = #expect(throws: CofferError.self) { try suite(scratch.path, "d") }
        #expect(directory?.message.contains("a directory") == true)
        #expect(!FileManager.default.fileExists(atPath: scratch.path("d.cofferkv.lock")))

        // A FIFO as the whole journal path, opened the way `Journal` users do.
        let options = JournalOptions(application: 0x4B56)
        let error = #expect(throws: CofferError.self) {
            _ = try Journal.open(path: scratch.path("s.cofferkv"), options: options, fileSystem: fs, create: .openExisting)
        }
        #expect(error?.code == .invalidArgument)
    }

    @Test func twoPathsToOneStoreShareOneLockAndLoseNothing() throws {
        let scratch = try Scratch("aliases")
        let real = scratch.path("a")
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: scratch.path("b"), withIntermediateDirectories: false)
        let direct = try suite(real)
        try FileManager.default.createSymbolicLink(
            atPath: scratch.path("b/s.cofferkv"), withDestinationPath: real + "/s.cofferkv")
        try FileManager.default.createSymbolicLink(atPath: scratch.path("c"), withDestinationPath: real)
        let viaFileLink = try suite(scratch.path("b"))
        let viaDirectoryLink = try suite(scratch.path("c"))
        #expect(viaFileLink.path == direct.path || viaFileLink.path.hasSuffix("b/s.cofferkv"))

        // Interleaved writers through three names: with a lock per name, each one's stale view of
        // the end of the file made it write over the others' records.
        for round in 0..<20 {
            try direct.save(Data("a\(round)".utf8), for: "a\(round)")
            try viaFileLink.save(Data("b\(round)".utf8), for: "b\(round)")
            try viaDirectoryLink.save(Data("c\(round)".utf8), for: "c\(round)")
        }
        #expect(!FileManager.default.fileExists(atPath: scratch.path("b/s.cofferkv.lock")))
        #expect(FileManager.default.fileExists(atPath: real + "/s.cofferkv.lock"))

        // A compaction through the symlink replaces the file it points to, not the link.
        try viaFileLink.compact()
        let attributes = try FileManager.default.attributesOfItem(atPath: scratch.path("b/s.cofferkv"))
        #expect(attributes[.type] as? FileAttributeType == .typeSymbolicLink)

        let reopened = try suite(real)
        #expect(try reopened.keys().count == 60)
        for round in 0..<20 {
            for prefix in ["a", "b", "c"] {
                #expect(try reopened.load("\(prefix)\(round)") == Data("\(prefix)\(round)".utf8))
            }
        }
        #expect(try viaDirectoryLink.load("b19") == Data("b19".utf8))
    }

    @Test func aHardLinkedStoreFileIsReadButNeverWritten() throws {
        let scratch = try Scratch("store-hardlink")
        try suite(scratch.path).save(Data("v".utf8), for: "k")
        try FileManager.default.createDirectory(atPath: scratch.path("other"), withIntermediateDirectories: false)
        try FileManager.default.linkItem(atPath: scratch.path("s.cofferkv"), toPath: scratch.path("other/s.cofferkv"))
        let linked = try suite(scratch.path("other"))
        #expect(try linked.load("k") == Data("v".utf8))
        let error = #expect(throws: CofferError.self) { try linked.save(Data("w".utf8), for: "k") }
        #expect(error?.message.contains("2 names") == true)
        #expect(try suite(scratch.path).load("k") == Data("v".utf8))
    }

    @Test func anotherUsersStoreIsRefusedBeforeALockFileIsMade() throws {
        // Root touching a user's store used to leave a root-owned lock file that locked the user out.
        let scratch = try Scratch("foreign-store")
        try suite(scratch.path).save(Data("v".utf8), for: "k")
        try FileManager.default.removeItem(atPath: scratch.path("s.cofferkv.lock"))
        let other: uid_t = geteuid() == 65534 ? 65533 : 65534
        #expect(chown(scratch.path("s.cofferkv"), other, gid_t(other)) == 0)
        let error = #expect(throws: CofferError.self) { try suite(scratch.path) }
        #expect(error?.message.contains("owned by user \(other)") == true)
        #expect(!FileManager.default.fileExists(atPath: scratch.path("s.cofferkv.lock")))
    }

    @Test func aHugeSparseStoreFileIsRefusedWithoutAllocating() throws {
        let scratch = try Scratch("sparse")
        try suite(scratch.path).save(Data("v".utf8), for: "k")
        #expect(truncate(scratch.path("s.cofferkv"), 64 << 30) == 0)  // 64 GiB, sparse
        let error = #expect(throws: CofferError.self) { try suite(scratch.path) }  // used to trap
        #expect(error?.code == .limitExceeded)
        let disk = try DiskStrategy(directory: scratch.url.appendingPathComponent("files"))
        try disk.save(Data("x".utf8), for: "big")
        let file = try #require(
            try FileManager.default.contentsOfDirectory(atPath: scratch.path("files")).first { !$0.hasPrefix(".") })
        #expect(truncate(scratch.path("files/\(file)"), 64 << 30) == 0)
        let diskError = #expect(throws: CofferError.self) { try disk.load("big") }
        #expect(diskError?.code == .limitExceeded)
    }

    @Test func aWritableDirectoryAboveTheStoreIsWarnedAbout() throws {
        let scratch = try Scratch("shared-ancestor")
        try FileManager.default.createDirectory(atPath: scratch.path("team/app"), withIntermediateDirectories: true)
        #expect(chmod(scratch.path("team"), 0o777) == 0)
        #expect(chmod(scratch.path("team/app"), 0o700) == 0)
        WarningLog.install()
        _ = try suite(scratch.path("team/app"))
        let told = WarningLog.shared.withLock { $0.filter { $0.path == scratch.path("team") } }
        #expect(told.count == 1)
        #expect(told.first?.message.contains("sticky") == true)
    }

    @Test func aStoreWhoseLockFileCannotBeCreatedIsReadOnly() throws {
        // As on a read-only mount or directory: creating the lock file fails with EROFS.
        let memory = InMemoryFileSystem()
        let directory = URL(fileURLWithPath: "/data")
        do {
            let store = try KeyValueFileStrategy(directory: directory, suite: "s", fileSystem: memory)
            try store.save(Data("kept".utf8), for: "k")
            try store.flush()
        }
        try memory.unlink("/data/s.cofferkv.lock")
        memory.inject(.fail(.open, errno: EROFS, persistent: true))
        let store = try KeyValueFileStrategy(directory: directory, suite: "s", fileSystem: memory)
        #expect(try store.load("k") == Data("kept".utf8))
        let refused = #expect(throws: CofferError.self) { try store.save(Data("new".utf8), for: "k") }
        #expect(refused?.code == .io)
        #expect(refused?.errno == EROFS)
        #expect(refused?.message.contains("read-only") == true)
        #expect(try memory.stat("/data/s.cofferkv.lock") == nil)

        // A missing store on such a mount says why it cannot be created.
        let missing = #expect(throws: CofferError.self) {
            try KeyValueFileStrategy(directory: directory, suite: "t", fileSystem: memory)
        }
        #expect(missing?.message.contains("cannot create") == true)
    }

    @Test func aStoreWhoseLockFileExistsButCannotBeWrittenIsReadOnly() throws {
        let memory = InMemoryFileSystem()
        let directory = URL(fileURLWithPath: "/data")
        do {
            let store = try KeyValueFileStrategy(directory: directory, suite: "s", fileSystem: memory)
            try store.save(Data("kept".utf8), for: "k")
        }
        memory.inject(.fail(.open, errno: EACCES, persistent: true))
        let store = try KeyValueFileStrategy(directory: directory, suite: "s", fileSystem: memory)
        #expect(try store.load("k") == Data("kept".utf8))
        #expect(throws: CofferError.self) { try store.remove("k") }
        let reopened = try KeyValueFileStrategy(directory: directory, suite: "s", fileSystem: memory)
        #expect(try reopened.load("k") == Data("kept".utf8))
    }

    @Test func aDirectoryOthersCanWriteIsWarnedAboutOnce() throws {
        let scratch = try Scratch("shared-dir")
        #expect(chmod(scratch.path, 0o777) == 0)
        WarningLog.install()
        _ = try suite(scratch.path)
        _ = try suite(scratch.path, "t")
        let told = WarningLog.shared.withLock { $0.filter { $0.path == scratch.path } }
        #expect(told.count == 1)
        #expect(told.first?.kind == .sharedDirectory)
        #expect(told.first?.message.contains("777") == true)
    }

    @Test func absurdLockTimeoutsNeverTrap() throws {
        let scratch = try Scratch("timeouts")
        // Duration holds no NaN or infinity; the largest values it holds are waits capped at "forever".
        for timeout: Duration in [.seconds(1e10), .seconds(Int64.max), .init(secondsComponent: Int64.max, attosecondsComponent: 999_999_999_999_999_999)] {
            let store = try KeyValueFileStrategy(
                directory: scratch.url, suite: "s", durability: .immediate, lockTimeout: timeout)
            try store.save(Data("v".utf8), for: "k")
        }
        let error = #expect(throws: CofferError.self) {
            try KeyValueFileStrategy(directory: scratch.url, suite: "s", lockTimeout: .seconds(-1))
        }
        #expect(error?.code == .invalidArgument)
    }
}
