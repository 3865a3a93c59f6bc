import CofferCore
import Synchronization
import CofferStorage
import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The store lock of stores open in shared mode: a robust, process-shared mutex in the lock
/// file's control page (docs/FORMAT.md, "Writing": the mutex), beside the lock file's `flock`, which
/// every such store holds shared while open.
@Suite("Key-value store: the store's mutex across processes")
struct StoreMutexTests {
    private func suite(_ directory: String, lockTimeout: Duration) throws -> KeyValueFileStrategy {
        try KeyValueFileStrategy(
            directory: URL(fileURLWithPath: directory), suite: "s", durability: .immediate, lockTimeout: lockTimeout)
    }

    /// A process killed while it holds the store's lock (mid-update): another process waits for
    /// it while it lives, then takes the lock over once it is dead (the robust mutex), and every
    /// value committed before is there; the killed update is not.
    @Test(.timeLimit(.minutes(5)))
    func aProcessKilledHoldingTheLockLeavesItToTheNext() async throws {
        let dir = try Scratch("mutex-owner-dies")
        let store = try suite(dir.path, lockTimeout: .milliseconds(200))
        try store.set(1, for: "before")
        try store.set(5, for: "counter")
        let child = try HelperChild(["kv-hold", dir.path, "s", "counter"], standardError: .capture)
        #expect(try await child.waitForLine(startingWith: "holding", seconds: 120) != nil, "\(child.transcript)")
        // The child holds it: a write here waits its timeout and says the store is busy.
        #expect {
            try store.set(2, for: "during")
        } throws: { error in
            (error as? CofferError)?.code == .busy
        }
        #expect(kill(child.process.processIdentifier, SIGKILL) == 0)
        _ = try await child.waitForExit(seconds: 120)
        // Dead: the next locker takes the mutex over (EOWNERDEAD, made consistent).
        let patient = try suite(dir.path, lockTimeout: .seconds(60))
        try patient.set(3, for: "after")
        try store.set(4, for: "again")
        #expect(try store.get(Int.self, for: "after") == 3)
        let reopened = try suite(dir.path, lockTimeout: .seconds(60))
        #expect(try reopened.get(Int.self, for: "before") == 1)
        #expect(try reopened.get(Int.self, for: "counter") == 5)
        #expect(try reopened.get(Int.self, for: "during") == nil)
        #expect(try reopened.get(Int.self, for: "again") == 4)
    }

    /// Openers that all find the page not set up (a new store, a new lock file) race for the
    /// exclusive lock to set it up; the one that loses looks at the page again instead of waiting
    /// out the winner's shared hold, which lasts as long as the winner stays open.
    @Test func openersRacingToSetThePageUpAllOpen() throws {
        let dir = try Scratch("mutex-race-open")
        for round in 0..<20 {
            let path = dir.path("r\(round)")
            // `Locked`, not `Mutex`: ThreadSanitizer cannot see a `Mutex`'s futex on Linux and
            // reported these appends as a race (a CI run of make test-tsan).
            let failures = Locked([String]())
            let opened = Locked([KeyValueFileStrategy]())
            DispatchQueue.concurrentPerform(iterations: 3) { i in
                do {
                    let store = try suite(path, lockTimeout: .seconds(30))
                    try store.set(i, for: "k\(i)")
                    opened.withLock { $0.append(store) }  // kept open: the race is against open stores
                } catch {
                    failures.withLock { $0.append("round \(round), opener \(i): \(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [])
            let stores = opened.withLock { $0 }
            for store in stores {
                for i in 0..<3 { #expect(try store.get(Int.self, for: "k\(i)") == i) }
            }
        }
    }

    /// The page is a page of a file: the kernel may write it back while a writer holds the
    /// mutex, and after a crash it comes back from the disk held by a thread that is gone (no
    /// `EOWNERDEAD`: only a death the kernel sees marks a mutex). Such a page is of another boot,
    /// so it is set up again, and writers do not wait on the dead hold.
    @Test(.timeLimit(.minutes(5)))
    func aPageHeldInAnEarlierBootIsSetUpAgain() async throws {
        let dir = try Scratch("mutex-earlier-boot")
        let lockPath = dir.path("s.cofferkv.lock")
        do {
            let store = try suite(dir.path, lockTimeout: .seconds(5))
            try store.set(1, for: "before")
        }
        let child = try HelperChild(["kv-hold", dir.path, "s", "counter"], standardError: .capture)
        #expect(try await child.waitForLine(startingWith: "holding", seconds: 120) != nil, "\(child.transcript)")
        // What the disk would hold had the page been written back now: the mutex held.
        var page = try Data(contentsOf: URL(fileURLWithPath: lockPath)).prefix(4096)
        #expect(kill(child.process.processIdentifier, SIGKILL) == 0)
        _ = try await child.waitForExit(seconds: 120)
        // ... read back after a reboot: the boot words (12, 13) are another boot's.
        page.replaceSubrange((12 * 8)..<(14 * 8), with: [UInt8](repeating: 0xA5, count: 16))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: lockPath))
        try handle.write(contentsOf: page)
        try handle.close()
        let store = try suite(dir.path, lockTimeout: .seconds(5))
        try store.set(2, for: "after")
        #expect(try store.get(Int.self, for: "before") == 1)
        #expect(try suite(dir.path, lockTimeout: .seconds(5)).get(Int.self, for: "after") == 2)
    }

    /// While a store is open in shared mode, nobody takes the lock file's `flock` exclusively (an
    /// exclusive opener, a Coffer before the mutex writing): they could not see the mutex. And
    /// while someone holds it exclusively, a shared opener waits and says the store is busy.
    @Test func theFlockExcludesWhoeverCannotSeeTheMutex() throws {
        let dir = try Scratch("mutex-flock")
        let lockPath = dir.path("s.cofferkv.lock")
        do {
            let store = try suite(dir.path, lockTimeout: .seconds(5))
            try store.set(1, for: "k")
            let fd = open(lockPath, O_RDWR)
            #expect(fd >= 0)
            defer { close(fd) }
            #expect(flock(fd, LOCK_EX | LOCK_NB) != 0, "an exclusive flock beside an open shared store")
            #expect(flock(fd, LOCK_SH | LOCK_NB) == 0, "a shared one is fine (a read-only opener)")
            flock(fd, LOCK_UN)
            // An exclusive opener waits, then fails, rather than writing between its writes.
            #expect {
                _ = try KeyValueFileStrategy(
                    directory: URL(fileURLWithPath: dir.path), suite: "s", lockTimeout: .milliseconds(100), exclusive: true)
            } throws: { error in
                (error as? CofferError)?.code == .busy
            }
            try store.set(2, for: "k")
        }
        // Closed: the flock is free again, and held exclusively it keeps a shared opener out.
        let fd = open(lockPath, O_RDWR)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0, "the closed store still holds the lock file's flock")
        #expect {
            _ = try suite(dir.path, lockTimeout: .milliseconds(100))
        } throws: { error in
            (error as? CofferError)?.code == .busy
        }
        flock(fd, LOCK_UN)
        #expect(try suite(dir.path, lockTimeout: .seconds(5)).get(Int.self, for: "k") == 2)
    }
}
