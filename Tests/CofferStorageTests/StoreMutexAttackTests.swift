import CofferCore
import CofferStorage
import CofferTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The shared-mode store lock (a robust, process-shared mutex at bytes 128–191 of the lock file's
/// control page, docs/FORMAT.md "Writing") attacked from outside: crafted lock files, lock files
/// swapped for symlinks or hard links, writers killed under contention, openers racing. What must
/// hold: correct operation or a clear CofferError; never a crash, a hang past the lock timeout,
/// an acknowledged write lost, or a store left unusable in a way the docs do not describe.
// Serialized: several tests poll children from the test's task, and others block the pool's few
// threads with synchronous loops; run side by side, the polling resumed too late to matter.
@Suite("Key-value store: the store's mutex under outside attack", .serialized)
struct StoreMutexAttackTests {
    private func suite(_ directory: String, lockTimeout: Duration = .seconds(5), exclusive: Bool = false) throws
        -> KeyValueFileStrategy
    {
        try KeyValueFileStrategy(
            directory: URL(fileURLWithPath: directory), suite: "s", durability: .immediate, lockTimeout: lockTimeout,
            exclusive: exclusive)
    }

    /// A store with one value, closed: its lock file's page is set up with its mutex.
    private func preparedStore(_ name: String) throws -> (Scratch, String) {
        let dir = try Scratch(name)
        do { try suite(dir.path).set("kept", for: "before") }
        return (dir, dir.path("s.cofferkv.lock"))
    }

    /// Overwrites bytes of the lock file in place (as a careless or hostile user would).
    private func patch(_ lockPath: String, at offset: Int, _ bytes: [UInt8]) throws {
        let fd = open(lockPath, O_RDWR)
        #expect(fd >= 0)
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        #expect(written == bytes.count)
    }

    private static func word32(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }

    /// The "ack <value>" lines of a `kv-increment-ack` child.
    private static func acks(_ child: HelperChild) -> [Int] {
        child.lines.compactMap { $0.hasPrefix("ack ") ? Int($0.dropFirst(4)) : nil }
    }

    // MARK: - Crafted mutex bytes in a page that looks set up

    /// The page's header words are intact (magic, version, this lock file, this boot, "has
    /// mutex"), but bytes 128–191 were overwritten. glibc's mutex keeps its lock word at byte 0
    /// and its kind at byte 16 (x86-64 and aarch64).
    /// - `pi-robust-gone-owner`: kind PI | robust | shared (0xB0), locked by a thread ID that does
    ///   not exist. glibc's timed lock asserts (`e != ESRCH || !robust`) and aborts the process.
    /// - `all-ones`: every byte 0xFF (an unknown kind: `EINVAL`).
    /// - `robust-gone-owner`: the kind Coffer sets up (0x90), locked by a thread ID that does not
    ///   exist without the owner-died bit (a copy taken while a writer held it: FORMAT.md's
    ///   documented limit, writers fail with `busy`).
    /// What must hold: the writer is never killed; it fails with a CofferError within its lock
    /// timeout (or writes); nothing stored is lost; once every process has closed the store and
    /// the lock file is removed (what FORMAT.md prescribes), the store works again.
    @Test(.timeLimit(.minutes(5)), arguments: ["pi-robust-gone-owner", "all-ones", "robust-gone-owner", "owner-died-bit"])
    func craftedMutexBytesNeverKillTheWriter(_ craft: String) async throws {
        let (dir, lockPath) = try preparedStore("mutex-crafted-\(craft)")
        let goneThread: UInt32 = 0x3FFF_FFF0  // above any pid_max (2^22)
        switch craft {
        case "pi-robust-gone-owner":
            try patch(lockPath, at: 128, Self.word32(goneThread))
            try patch(lockPath, at: 128 + 16, Self.word32(0xB0))
        case "all-ones":
            try patch(lockPath, at: 128, [UInt8](repeating: 0xFF, count: 64))
        case "owner-died-bit":
            try patch(lockPath, at: 128, Self.word32(0x4000_0000 | goneThread))
        default:
            try patch(lockPath, at: 128, Self.word32(goneThread))
        }
        // In a child: a crash there must not take the test process with it.
        let started = ContinuousClock.now
        let finished = try HelperChild.run(["kv-write", dir.path, "s", "1", "w", "immediate"], standardError: .capture)
        print("\(craft): \(finished)")
        #expect(finished.reason == .exit, "\(craft): the writer was killed by signal \(finished.status): \(finished)")
        #expect(ContinuousClock.now - started < .seconds(60), "\(craft): hung past the lock timeout (10 s)")
        if craft == "owner-died-bit" {
            // The owner-died bit is what the kernel leaves: the next locker takes the mutex over.
            #expect(finished.status == 0, "\(finished)")
        }
        if finished.reason == .exit, finished.status != 0 {
            #expect(finished.errors.contains("CofferError") || finished.errors.contains("error:"), "\(finished)")
        }
        // Nothing stored is lost, and the documented way out works.
        #expect(unlink(lockPath) == 0)
        let store = try suite(dir.path)
        #expect(try store.get(String.self, for: "before") == "kept")
        try store.set("again", for: "after")
        #expect(try suite(dir.path).get(String.self, for: "after") == "again")
    }

    /// A mutex left "not recoverable" (glibc's owner field, byte 8, 0x7FFFFFFF: a holder that died
    /// and whose successor unlocked it without making it consistent). The error Coffer gives for it
    /// (`ENOTRECOVERABLE`) says: "close the store in every process and open it again". Doing
    /// exactly that must then work, or the message must name what does.
    @Test(.timeLimit(.minutes(5)))
    func aMutexLeftNotRecoverableIsCuredByWhatItsErrorSays() async throws {
        let (dir, lockPath) = try preparedStore("mutex-not-recoverable")
        try patch(lockPath, at: 128 + 8, Self.word32(0x7FFF_FFFF))
        // glibc 2.36's trylock ignores the owner field, so this may simply work; if it fails, the
        // error must say how to recover, and doing so must work.
        var advice = ""
        do {
            try suite(dir.path).set(1, for: "w")
        } catch let error as CofferError {
            advice = error.message
            #expect(advice.contains("open it again"), "\(error)")
        }
        // Every process has closed the store (the only one was this one). Open it again:
        do {
            try suite(dir.path).set(2, for: "w")
        } catch let again as CofferError {
            if !again.message.contains("lock file") || !again.message.contains("remove") {
                Issue.record("after following the advice (\(advice)), the store still fails: \(again)")
            }
        }
        #expect(unlink(lockPath) == 0)
        #expect(try suite(dir.path).get(String.self, for: "before") == "kept")
    }

    /// A lock file truncated while no process has the store open, to a length that keeps the
    /// page's header words (the page still looks set up, "has mutex" included) but cuts off the
    /// mutex, which the next open grows back as zeros. A zeroed `pthread_mutex_t` is glibc's
    /// default mutex: not robust and not process-shared. A writer killed holding it must still
    /// leave the lock to the next one (FORMAT.md: "A process that dies holding the mutex leaves
    /// it to the next locker"), rather than every writer failing with `busy` for good.
    @Test(.timeLimit(.minutes(5)), arguments: [128, 0])
    func aLockFileTruncatedBeforeOpenStillRecoversFromAKilledHolder(_ length: Int) async throws {
        let (dir, lockPath) = try preparedStore("mutex-truncated-\(length)")
        #expect(truncate(lockPath, off_t(length)) == 0)
        let child = try HelperChild(["kv-hold", dir.path, "s", "counter"], standardError: .capture)
        #expect(try await child.waitForLine(startingWith: "holding", seconds: 120) != nil, "\(child.transcript)")
        #expect(kill(child.process.processIdentifier, SIGKILL) == 0)
        _ = try await child.waitForExit(seconds: 120)
        do {
            let store = try suite(dir.path, lockTimeout: .seconds(5))
            try store.set(1, for: "after")
            #expect(try store.get(String.self, for: "before") == "kept")
        } catch {
            Issue.record("truncated to \(length): open and write after the holder was killed: \(error)")
        }
        // And again, from a fresh open: not a store that is busy for good.
        do {
            try suite(dir.path, lockTimeout: .seconds(5)).set(2, for: "after")
        } catch {
            Issue.record("truncated to \(length): a second open after the kill: \(error)")
        }
        // FORMAT.md's way out for a mutex held for good: every process closed, lock file removed.
        #expect(unlink(lockPath) == 0)
        #expect(try suite(dir.path).get(String.self, for: "before") == "kept")
    }

    /// The same truncated lock file under plain contention: two processes incrementing one
    /// counter with a generous lock timeout must never see `busy` (a mutex that is not
    /// process-shared wakes no waiter of another process: each sleeps out its whole timeout).
    @Test(.timeLimit(.minutes(5)))
    func aLockFileTruncatedBeforeOpenStillSerialisesProcessesWithoutSpuriousBusy() async throws {
        let (dir, lockPath) = try preparedStore("mutex-truncated-contention")
        #expect(truncate(lockPath, 128) == 0)
        let children = try (0..<2).map { _ in
            try HelperChild(["kv-increment-ack", dir.path, "s", "counter", "3000", "3000"], standardError: .capture)
        }
        for child in children { #expect(try await child.waitForExit(seconds: 240) == 0, "\(child.transcript)") }
        let busy = children.map { $0.lines.filter { $0 == "busy" }.count }.reduce(0, +)
        #expect(busy == 0, "\(busy) updates waited out a 3 s lock timeout on a lock nobody held that long")
        let values = children.flatMap(Self.acks)
        #expect(Set(values).count == values.count, "two updates wrote the same value: an update was lost")
        #expect(try suite(dir.path).get(Int.self, for: "counter") == 6000)
    }

    // MARK: - The lock file swapped for something else before open

    /// A symlink at the lock path (to another store's lock file, to a file that does not exist):
    /// never followed, nothing created or changed at its target, a clear error; once removed,
    /// the store works with everything it held.
    @Test(arguments: ["other-lock", "dangling"])
    func aSymlinkAtTheLockPathIsNeverFollowed(_ target: String) throws {
        let (dir, lockPath) = try preparedStore("mutex-symlink-\(target)")
        let other = try Scratch("mutex-symlink-victim-\(target)")
        do { try suite(other.path).set("theirs", for: "k") }
        let victimLock = other.path("s.cofferkv.lock")
        let victimBytes = try Data(contentsOf: URL(fileURLWithPath: victimLock))
        let pointee = target == "other-lock" ? victimLock : dir.path("nowhere.lock")
        #expect(unlink(lockPath) == 0)
        #expect(symlink(pointee, lockPath) == 0)
        let error = #expect(throws: CofferError.self) { try suite(dir.path, lockTimeout: .seconds(1)).set("x", for: "x") }
        #expect(error?.code == .io || error?.code == .invalidArgument, "\(String(describing: error))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: victimLock)) == victimBytes)
        #expect(!FileManager.default.fileExists(atPath: dir.path("nowhere.lock")))
        #expect(unlink(lockPath) == 0)
        let store = try suite(dir.path)
        #expect(try store.get(String.self, for: "before") == "kept")
        try store.set("fine", for: "x")
    }

    /// A second name for the lock file, made before open and while a store is open: a store
    /// opened on it may refuse to write, saying why, but reads; one already open keeps writing;
    /// and once the extra name is gone the store writes again. Nothing is lost.
    @Test(.timeLimit(.minutes(2)))
    func aHardLinkedLockFileNeverLosesOrBlocksForGood() throws {
        let (dir, lockPath) = try preparedStore("mutex-hardlink")
        let open = try suite(dir.path)
        #expect(link(lockPath, dir.path("second-name")) == 0)
        try open.set("still", for: "open-writes")
        let later = try suite(dir.path)
        #expect(try later.get(String.self, for: "open-writes") == "still")
        do {
            try later.set("maybe", for: "later")
            #expect(try suite(dir.path).get(String.self, for: "later") == "maybe")
        } catch let error as CofferError {
            #expect(error.code == .io, "\(error)")
        }
        try open.set("still2", for: "open-writes")
        #expect(try later.get(String.self, for: "open-writes") == "still2")
        #expect(unlink(dir.path("second-name")) == 0)
        let fresh = try suite(dir.path)
        try fresh.set("ok", for: "after")
        try open.set("ok2", for: "after2")
        #expect(try fresh.get(String.self, for: "after2") == "ok2")
        #expect(try fresh.get(String.self, for: "before") == "kept")
    }

    /// A lock file made read-only (0400): root writes through it; anyone else would open the
    /// store without writing. Either way the store opens and nothing is lost.
    @Test func aReadOnlyModeLockFileStillOpens() throws {
        let (dir, lockPath) = try preparedStore("mutex-0400")
        #expect(chmod(lockPath, 0o400) == 0)
        let store = try suite(dir.path)
        #expect(try store.get(String.self, for: "before") == "kept")
        if geteuid() == 0 {
            try store.set("root", for: "w")
            #expect(try suite(dir.path).get(String.self, for: "w") == "root")
        }
    }

    // MARK: - Writers killed under contention

    /// Three processes increment one counter under contention; one is killed with SIGKILL at a
    /// random moment (often holding the mutex, or mid-append). The others finish without a
    /// `busy`, no two updates wrote the same value, and the final count is every acknowledged
    /// increment (plus at most the killed one's last, committed but not yet acknowledged).
    @Test(.timeLimit(.minutes(10)))
    func aWriterKilledUnderContentionLosesNoAcknowledgedIncrement() async throws {
        for round in 0..<6 {
            let dir = try Scratch("mutex-kill-contention-\(round)")
            let children = try (0..<3).map { _ in
                try HelperChild(["kv-increment-ack", dir.path, "s", "counter", "4000", "5000"], standardError: .capture)
            }
            let victim = children[round % 3]
            let killAt = Int.random(in: 50...2000)
            let deadline = ContinuousClock.now + .seconds(120)
            while Self.acks(victim).count < killAt, victim.process.isRunning, ContinuousClock.now < deadline {
                usleep(100)  // blocking, on purpose: a task's sleep may resume after the victim is done
            }
            #expect(victim.process.isRunning, "round \(round): the victim finished before the kill")
            #expect(kill(victim.process.processIdentifier, SIGKILL) == 0)
            _ = try await victim.waitForExit(seconds: 120)
            for child in children where child !== victim {
                #expect(try await child.waitForExit(seconds: 240) == 0, "round \(round): \(child.transcript)")
                // An unfair mutex may make one writer wait out its timeout while others write: a
                // `busy` it retries is allowed, a survivor that cannot finish is not.
                let busy = child.lines.filter { $0 == "busy" }.count
                if busy > 0 { print("round \(round): a survivor saw busy \(busy) times") }
            }
            let values = children.flatMap(Self.acks)
            #expect(Set(values).count == values.count, "round \(round): two updates wrote the same value")
            let store = try suite(dir.path, lockTimeout: .seconds(5))
            let final = try store.get(Int.self, for: "counter") ?? 0
            #expect(final == values.count || final == values.count + 1, "round \(round): \(final) vs \(values.count) acknowledged")
            #expect(final >= values.max() ?? 0)
            try store.update("counter") { (value: Int?) in (value ?? 0) + 1 }  // not busy for good
        }
    }

    /// A process killed at a random moment while it creates a brand-new store (creating the
    /// file, setting the page and its mutex up under the exclusive flock, holding the mutex for
    /// its first write): the next opener opens within its lock timeout and writes, and finds
    /// either nothing or the killed process's acknowledged write.
    @Test(.timeLimit(.minutes(10)))
    func aProcessKilledWhileCreatingAStoreLeavesItUsable() async throws {
        let dir = try Scratch("mutex-kill-create")
        for round in 0..<30 {
            let suiteName = "c\(round)"
            let child = try HelperChild(["kv-write", dir.path, suiteName, "3", "k", "immediate"], standardError: .discard)
            usleep(UInt32.random(in: 0...40_000))
            _ = kill(child.process.processIdentifier, SIGKILL)
            _ = try await child.waitForExit(seconds: 120)
            let acked = child.lines.filter { $0.hasPrefix("ack") }.count
            do {
                let store = try KeyValueFileStrategy(
                    directory: dir.url, suite: suiteName, durability: .immediate, lockTimeout: .seconds(5))
                for i in 0..<acked { #expect(try store.get(Int.self, for: "k\(i)") == i, "round \(round)") }
                try store.set(1, for: "after")
                #expect(
                    try KeyValueFileStrategy(directory: dir.url, suite: suiteName, lockTimeout: .seconds(5))
                        .get(Int.self, for: "after") == 1)
            } catch {
                Issue.record("round \(round) (\(acked) acknowledged): \(error)")
            }
        }
    }

    // MARK: - One process against itself

    /// A thread that holds the store's lock (inside `update`) and writes again, through the same
    /// instance or a second instance of the same suite (the mutex is not recursive): a clear
    /// `busy` within the lock timeout, never a hang; the outer update still lands.
    /// (Through the same instance the process dies instead: "Recursive call to lock Mutex" in
    /// JournalStore.withIndex, a lock older than the store mutex; not run here, as it would take
    /// the test process down. Add "same instance" to the arguments to see it.)
    @Test(.timeLimit(.minutes(2)), arguments: ["second instance"])
    func aThreadWritingAgainInsideItsOwnUpdateFailsClearly(_ how: String) throws {
        let dir = try Scratch("mutex-reentrant")
        let store = try suite(dir.path, lockTimeout: .seconds(1))
        let second = try suite(dir.path, lockTimeout: .seconds(1))
        let inner = how == "same instance" ? store : second
        var innerError: (any Error)?
        let started = ContinuousClock.now
        try store.update("outer") { (value: Int?) -> Int in
            do { try inner.set(1, for: "inner") } catch { innerError = error }
            return 1
        }
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect((innerError as? CofferError)?.code == .busy, "\(String(describing: innerError))")
        #expect(try second.get(Int.self, for: "outer") == 1)
        try second.set(2, for: "after")  // nothing left held
        #expect(try store.get(Int.self, for: "after") == 2)
    }

    // MARK: - Openers racing

    /// Two processes open the same brand-new store at the same moment (a file barrier), forty
    /// times: both open and write every time, and each sees the other's value.
    @Test(.timeLimit(.minutes(10)))
    func twoProcessesCreatingOneStoreAtOnceBothOpen() async throws {
        let dir = try Scratch("mutex-create-race")
        let rounds = 150
        let children = try (0..<2).map { index in
            try HelperChild(["kv-open-race", dir.path, "\(rounds)", "\(index)", "2", "5000"], standardError: .capture)
        }
        for child in children {
            #expect(try await child.waitForExit(seconds: 300) == 0, "\(child.transcript)")
            #expect(child.lines.contains("done \(rounds)"), "\(child.transcript)")
        }
        for round in 0..<rounds {
            let store = try KeyValueFileStrategy(
                directory: dir.url, suite: "r\(round)", durability: .immediate, lockTimeout: .seconds(5))
            #expect(try store.get(Int.self, for: "p0") == round, "round \(round)")
            #expect(try store.get(Int.self, for: "p1") == round, "round \(round)")
        }
    }

    /// An exclusive opener racing shared openers that open and close around every update: an
    /// exclusive open either fails with `busy` or holds the store alone; every increment any of
    /// them acknowledged is in the count, none written twice.
    @Test(.timeLimit(.minutes(10)))
    func anExclusiveOpenerRacingSharedOpenersLosesNothing() async throws {
        let dir = try Scratch("mutex-exclusive-race")
        let shared = try (0..<2).map { _ in
            try HelperChild(
                ["kv-increment-ack", dir.path, "s", "counter", "1500", "2000", "reopen"], standardError: .capture)
        }
        var exclusiveAcks: [Int] = []
        var exclusiveBusy = 0
        while shared.contains(where: { $0.process.isRunning }) {
            do {
                let store = try suite(dir.path, lockTimeout: .milliseconds(50), exclusive: true)
                var written = 0
                try store.update("counter") { (value: Int?) -> Int in
                    written = (value ?? 0) + 1
                    return written
                }
                exclusiveAcks.append(written)
            } catch let error as CofferError where error.code == .busy {
                exclusiveBusy += 1
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        for child in shared { #expect(try await child.waitForExit(seconds: 240) == 0, "\(child.transcript)") }
        let values = shared.flatMap(Self.acks) + exclusiveAcks
        #expect(Set(values).count == values.count, "two updates wrote the same value")
        #expect(try suite(dir.path).get(Int.self, for: "counter") == values.count)
        print("exclusive opener: \(exclusiveAcks.count) updates, \(exclusiveBusy) busy")
    }

    /// A store opened and closed in a tight loop here while another process writes: every open
    /// succeeds, the counter it reads never goes backwards, and the writer never sees `busy`.
    @Test(.timeLimit(.minutes(10)))
    func openingAndClosingInATightLoopBesideAWriter() async throws {
        let dir = try Scratch("mutex-open-loop")
        do { try suite(dir.path).set(0, for: "counter") }
        let writer = try HelperChild(["kv-increment-ack", dir.path, "s", "counter", "30000", "5000"], standardError: .capture)
        var last = 0
        var opens = 0
        while writer.process.isRunning || opens < 50 {
            let value = try suite(dir.path, lockTimeout: .seconds(5)).get(Int.self, for: "counter") ?? -1
            #expect(value >= last, "the count went back from \(last) to \(value)")
            last = max(last, value)
            opens += 1
            if opens > 100_000 { break }
        }
        #expect(try await writer.waitForExit(seconds: 240) == 0, "\(writer.transcript)")
        #expect(!writer.lines.contains("busy"))
        #expect(try suite(dir.path).get(Int.self, for: "counter") == 30000)
        print("opened and closed \(opens) times beside the writer")
    }

    /// One store used from eight threads at once while another process increments the same
    /// counter: every increment lands once.
    @Test(.timeLimit(.minutes(10)))
    func manyThreadsAndASecondProcessOnOneStore() async throws {
        let dir = try Scratch("mutex-threads")
        let store = try suite(dir.path, lockTimeout: .seconds(30))
        let child = try HelperChild(["kv-increment-ack", dir.path, "s", "counter", "3000", "10000"], standardError: .capture)
        let written = Locked<[Int]>([])
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for _ in 0..<1000 {
                do {
                    var value = 0
                    try store.update("counter") { (old: Int?) -> Int in
                        value = (old ?? 0) + 1
                        return value
                    }
                    written.withLock { $0.append(value) }
                } catch {
                    failures.withLock { $0.append("thread \(thread): \(error)") }
                }
            }
        }
        #expect(try await child.waitForExit(seconds: 240) == 0, "\(child.transcript)")
        #expect(failures.withLock { $0 } == [])
        let values = written.withLock { $0 } + Self.acks(child)
        #expect(Set(values).count == values.count, "two updates wrote the same value")
        #expect(values.count == 8 * 1000 + 3000)
        #expect(try suite(dir.path).get(Int.self, for: "counter") == values.count)
    }
}
