import CofferCore
import CofferRuntime
import CofferJournal
import CofferTesting
import Foundation
import Testing

/// `flock` semantics, on the kernel and on the in-memory model: a lock belongs to an open file
/// description, so two `FileLock`s on one path in one process exclude each other exactly as two
/// processes would.
@Suite("FileLock")
struct FileLockTests {
    enum Kind: String, CaseIterable, CustomStringConvertible {
        case live, inMemory
        var description: String { rawValue }
    }

    /// A file system and a lock path on it; the directory lives as long as the fixture.
    struct Fixture {
        let fs: any FileSystem
        let path: String
        let directory: TemporaryDirectory?

        init(_ kind: Kind) throws {
            switch kind {
            case .live:
                let directory = try TemporaryDirectory()
                self.directory = directory
                fs = LiveFileSystem()
                path = directory.path("store.lock")
            case .inMemory:
                let memory = InMemoryFileSystem()
                try memory.createDirectory(atPath: "/locks")
                directory = nil
                fs = memory
                path = "/locks/store.lock"
            }
        }
    }

    @Test(arguments: Kind.allCases)
    func twoLocksInOneProcessExcludeEachOther(kind: Kind) throws {
        let fixture = try Fixture(kind)
        let a = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let b = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        #expect(try fixture.fs.stat(fixture.path)?.mode == 0o600)
        try a.withLock(timeout: .seconds(1)) {
            let start = ContinuousClock.now
            let error = try #require(throws: CofferError.self) {
                try b.withLock(timeout: .seconds(0.2)) {}
            }
            let waited = ContinuousClock.now - start
            #expect(error.code == .busy)
            #expect(error.path == fixture.path)
            #expect(waited >= .milliseconds(190), "gave up after \(waited), before the timeout")
            #expect(waited < .seconds(3))
        }
        // Released: b gets it at once, and a is excluded in turn.
        try b.withLock(timeout: .seconds(0)) {
            #expect(throws: CofferError.self) { try a.withLock(timeout: .seconds(0)) {} }
            return ()
        }
    }

    @Test(arguments: Kind.allCases)
    func sharedLocksCoexistAndExcludeWriters(kind: Kind) throws {
        let fixture = try Fixture(kind)
        let a = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let b = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let c = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        try a.withLock(exclusive: false, timeout: .seconds(0)) {
            try b.withLock(exclusive: false, timeout: .seconds(0)) {
                #expect(throws: CofferError.self) { try c.withLock(exclusive: true, timeout: .seconds(0.05)) {} }
                return ()
            }
        }
        try a.withLock(exclusive: true, timeout: .seconds(0)) {
            #expect(throws: CofferError.self) { try b.withLock(exclusive: false, timeout: .seconds(0.05)) {} }
            return ()
        }
        try c.withLock(exclusive: true, timeout: .seconds(0)) {}
    }

    @Test(arguments: Kind.allCases)
    func aWaiterGetsTheLockWhenItIsReleased(kind: Kind) async throws {
        let fixture = try Fixture(kind)
        let a = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let b = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let held = DispatchSemaphore(value: 0)
        let holder = Thread {
            try? a.withLock(timeout: .seconds(1)) {
                held.signal()
                Thread.sleep(forTimeInterval: 0.15)
            }
        }
        holder.start()
        held.wait()
        let start = ContinuousClock.now
        let result = try b.withLock(timeout: .seconds(5)) { 42 }
        #expect(result == 42)
        #expect(ContinuousClock.now - start >= .milliseconds(50))
    }

    @Test(arguments: Kind.allCases)
    func lockIsReleasedWhenTheBodyThrows(kind: Kind) throws {
        struct Boom: Error {}
        let fixture = try Fixture(kind)
        let a = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let b = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        #expect(throws: Boom.self) { try a.withLock(timeout: .seconds(0)) { throw Boom() } }
        try b.withLock(timeout: .seconds(0)) {}
    }

    @Test(arguments: Kind.allCases)
    func oneFileLockSharedByTwoThreads(kind: Kind) throws {
        // flock belongs to the open file description, so FileLock must itself keep a second thread
        // using the *same* instance (same descriptor) out, and honour its timeout while doing so.
        let fixture = try Fixture(kind)
        let shared = try FileLock(path: fixture.path, fileSystem: fixture.fs)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = Thread {
            try? shared.withLock(timeout: .seconds(1)) {
                entered.signal()
                release.wait()
            }
        }
        holder.start()
        entered.wait()
        var secondGotIn = false
        let error = #expect(throws: CofferError.self) { secondGotIn = try shared.withLock(timeout: .seconds(0.1)) { true } }
        #expect(error?.code == .busy)
        #expect(!secondGotIn)
        release.signal()
        // Once released, the same instance is usable from this thread.
        #expect(try shared.withLock(timeout: .seconds(5)) { true })
    }

    @Test func mutualExclusionUnderContention() throws {
        // Eight threads, each with its own FileLock, increment a non-atomic counter file.
        let fs = InMemoryFileSystem()
        try fs.createDirectory(atPath: "/d")
        try fs.createFile(atPath: "/d/counter", contents: Data([0, 0]))
        let failures = FailureLog()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            do {
                let lock = try FileLock(path: "/d/counter.lock", fileSystem: fs)
                for _ in 0..<25 {
                    try lock.withLock(timeout: .seconds(10)) {
                        let value = try DurableIO.readFile("/d/counter", fileSystem: fs) ?? Data([0, 0])
                        let count = (Int(value[0]) | (Int(value[1]) << 8)) + 1
                        try DurableIO.atomicReplace(
                            "/d/counter", with: [UInt8(count & 0xFF), UInt8(count >> 8)], fileSystem: fs)
                    }
                }
            } catch {
                failures.record("\(error)")
            }
        }
        #expect(failures.messages.isEmpty)
        let value = try #require(fs.contents(atPath: "/d/counter"))
        #expect((Int(value[0]) | (Int(value[1]) << 8)) == 200)
    }
}

/// Messages collected from several threads.
final class FailureLog: Sendable {
    private let stored = Locked<[String]>([])
    func record(_ message: String) { stored.withLock { $0.append(message) } }
    var messages: [String] { stored.withLock { $0 } }
}
