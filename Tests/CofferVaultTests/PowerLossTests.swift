import CofferCore
import CofferRuntime
import CofferCrypto
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Testing

/// A ``FileSystem`` over an ``InMemoryFileSystem`` that loses power just before its k-th
/// mutating or syncing call (open-with-create, pwrite, ftruncate, fsync, fdatasync, rename,
/// unlink, mkdir, directory fsync): that call never happens, the inner file system becomes a
/// state a real machine could show after the cut (``InMemoryFileSystem/simulatePowerLoss(seed:data:metadata:)``),
/// and every later call fails — the process is gone, so it cannot react to the error.
final class PowerCutFileSystem: FileSystem {
    struct Plan: Sendable, CustomStringConvertible {
        var cutBefore: Int?
        var seed: UInt64
        var data: InMemoryFileSystem.UnsyncedData
        var metadata: InMemoryFileSystem.UnsyncedMetadata
        var description: String { "cut before point \(cutBefore.map(String.init) ?? "none"), seed \(seed), \(data)/\(metadata)" }
    }

    let inner: InMemoryFileSystem
    let plan: Plan
    private struct State {
        var armed = false
        var points = 0
        var dead = false
        var report: InMemoryFileSystem.PowerLossReport?
    }
    private let state = Locked(State())

    init(_ inner: InMemoryFileSystem, plan: Plan) {
        self.inner = inner
        self.plan = plan
    }

    /// Starts counting points (setup calls before this do not count).
    func arm() { state.withLock { $0.armed = true } }
    /// Points seen since ``arm()``.
    var points: Int { state.withLock { $0.points } }
    var isDead: Bool { state.withLock { $0.dead } }
    /// What the simulated power loss did (nil before it happened).
    var report: InMemoryFileSystem.PowerLossReport? { state.withLock { $0.report } }

    private func losePower() {
        let report = inner.simulatePowerLoss(seed: plan.seed, data: plan.data, metadata: plan.metadata)
        state.withLock { $0.report = report }
    }

    /// Cuts the power after the operation (for the "completed" case).
    func cutNow() {
        let cut = state.withLock { state -> Bool in
            guard !state.dead else { return false }
            state.dead = true
            return true
        }
        if cut { losePower() }
    }

    private func alive() throws {
        if isDead { throw CofferError(.io, "the power is off", errno: 5) }
    }

    private func point() throws {
        let cut = try state.withLock { state throws(CofferError) -> Bool in
            if state.dead { throw CofferError(.io, "the power is off", errno: 5) }
            guard state.armed else { return false }
            state.points += 1
            if state.points == plan.cutBefore {
                state.dead = true
                return true
            }
            return false
        }
        if cut {
            losePower()
            throw CofferError(.io, "the power went off", errno: 5)
        }
    }

    func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        if create { try point() } else { try alive() }
        return try inner.open(path, create: create, exclusive: exclusive, mode: mode)
    }
    func openReadOnly(_ path: String) throws -> Int32 {
        try alive()
        return try inner.openReadOnly(path)
    }
    func close(_ fd: Int32) { if !isDead { inner.close(fd) } }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try alive()
        return try inner.pread(fd, into: buffer, at: offset)
    }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        try point()
        return try inner.pwrite(fd, bytes, at: offset)
    }
    func fsync(_ fd: Int32) throws {
        try point()
        try inner.fsync(fd)
    }
    func fdatasync(_ fd: Int32) throws {
        try point()
        try inner.fdatasync(fd)
    }
    func ftruncate(_ fd: Int32, size: Int64) throws {
        try point()
        try inner.ftruncate(fd, size: size)
    }
    func fstat(_ fd: Int32) throws -> FileStatus {
        try alive()
        return try inner.fstat(fd)
    }
    func stat(_ path: String) throws -> FileStatus? {
        try alive()
        return try inner.stat(path)
    }
    func rename(_ from: String, _ to: String) throws {
        try point()
        try inner.rename(from, to)
    }
    func unlink(_ path: String) throws {
        try point()
        try inner.unlink(path)
    }
    func mkdir(_ path: String, mode: UInt32) throws {
        try point()
        try inner.mkdir(path, mode: mode)
    }
    func contentsOfDirectory(_ path: String) throws -> [String] {
        try alive()
        return try inner.contentsOfDirectory(path)
    }
    func fsyncDirectory(_ path: String) throws {
        try point()
        try inner.fsyncDirectory(path)
    }
    func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws {
        try alive()
        try inner.lock(fd, exclusive: exclusive, timeout: timeout, path: path)
    }
    func unlock(_ fd: Int32) { if !isDead { inner.unlock(fd) } }
    func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool {
        try inner.lockMutex(mutex, timeout: timeout, path: path)
    }
    func unlockMutex(_ mutex: UnsafeMutableRawPointer) { inner.unlockMutex(mutex) }
    func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
        try alive()
        return try inner.mapShared(fd, length: length, path: path)
    }
}

/// Power loss at every write, fsync and rename of a commit, a compaction and a passphrase
/// change, for several seeds and every mix of lost data and lost directory changes: the store
/// opens to exactly the state before or after the interrupted operation.
@Suite("Power loss at every point")
struct PowerLossTests {
    static let iterations = stressIterations
    /// Seeds per (point, data mode, metadata mode): 2 in make test, 50 in make stress.
    static let seeds = max(2, iterations / 20)
    static let dataModes: [InMemoryFileSystem.UnsyncedData] = [.random, .randomWithGarbage, .drop]
    static let metadataModes: [InMemoryFileSystem.UnsyncedMetadata] = [.drop, .orderedPrefix, .random]

    /// A store's contents, compared exactly.
    typealias Contents = [String: [UInt8]]

    struct Scenario: Sendable, CustomStringConvertible {
        var name: String
        /// Builds the state before the operation, on a fresh file system (durable when it returns).
        var setUp: @Sendable (InMemoryFileSystem) throws -> Void
        /// Opens the store on `fs` (not counted), then returns the operation to interrupt.
        var operation: @Sendable (PowerCutFileSystem) throws -> () throws -> Void
        /// Reads the store after the power came back: its contents (strict open), or throws.
        var read: @Sendable (any FileSystem, JournalRecovery) throws -> Contents
        var description: String { name }
    }

    struct Outcome {
        var before = 0
        var after = 0
        var reportedDamage = 0
        var damageFromGarbage = 0
        var damageWithoutGarbage = 0
        var salvagedToBefore = 0
        /// Garbage only after an intact commit (in the file's unsynced, zero-filled growth): the
        /// whole commit survived, so salvage keeps it.
        var salvagedToAfter = 0
        var salvagedToPartialCommit = 0
        var runs = 0
        var points = 0
    }

    static let kvDirectory = URL(fileURLWithPath: "/data")
    static let vaultURL = URL(fileURLWithPath: "/vaults/v.coffer")

    static func bytes(_ n: Int, _ seed: UInt8) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) } }

    static func kvRead(_ fs: any FileSystem, _ recovery: JournalRecovery) throws -> Contents {
        let store = try KeyValueFileStrategy(
            directory: kvDirectory, suite: "s", durability: .immediate, recovery: recovery, fileSystem: fs)
        var contents: Contents = [:]
        for key in try store.keys() { contents[key] = try store.load(key).map(Array.init) }
        return contents
    }

    static func kvSetUp(_ fs: InMemoryFileSystem) throws {
        let store = try KeyValueFileStrategy(directory: kvDirectory, suite: "s", durability: .immediate, fileSystem: fs)
        for i in 0..<12 { try store.save(Data(bytes(1 + i * 700, UInt8(i))), for: "k\(i)") }
        for i in 0..<6 { try store.save(Data(bytes(300, 99)), for: "k\(i)") }  // garbage for compaction
    }

    static func kvOpen(_ fs: PowerCutFileSystem) throws -> KeyValueFileStrategy {
        try KeyValueFileStrategy(directory: kvDirectory, suite: "s", durability: .immediate, fileSystem: fs)
    }

    /// Items as "service/account" → label ‖ 0 ‖ secret. Tries `passphrases` in order.
    static func vaultRead(
        _ fs: any FileSystem, passphrases: [String], recovery: JournalRecovery = .strict
    ) throws -> Contents {
        var lastError: (any Error)?
        for (index, passphrase) in passphrases.enumerated() {
            do {
                let vault = try Vault.open(
                    at: vaultURL, unlock: .passphrase(passphrase), recovery: recovery, fileSystem: fs)
                var contents: Contents = ["passphrase": Array("\(index)".utf8)]
                for item in try vault.items() {
                    let secret = try vault.data(service: item.service, account: item.account) ?? Data()
                    contents["\(item.service)/\(item.account)"] = Array(item.label.utf8) + [0] + Array(secret)
                }
                return contents
            } catch let error as CofferError where error.code == .wrongKey {
                lastError = error
            }
        }
        throw lastError!
    }

    static func vaultSetUp(_ fs: InMemoryFileSystem) throws {
        try fs.createDirectory(atPath: "/vaults")
        let vault = try Vault.create(at: vaultURL, unlock: .passphrase("old"), kdf: fastKDF, fileSystem: fs)
        for i in 0..<8 { try vault.set(Data(bytes(1 + i * 900, UInt8(i))), service: "s", account: "a\(i)", label: "L\(i)") }
        for i in 0..<4 { try vault.set(Data(bytes(200, 7)), service: "s", account: "a\(i)") }
    }

    static func vaultOpen(_ fs: PowerCutFileSystem) throws -> Vault {
        try Vault.open(at: vaultURL, unlock: .passphrase("old"), fileSystem: fs)
    }

    static let scenarios: [Scenario] = [
        Scenario(
            name: "key-value commit (batch of 3 spanning sectors)", setUp: kvSetUp,
            operation: { fs in
                let store = try kvOpen(fs)
                return {
                    try store.saveBatch([
                        ("big", Data(bytes(9000, 1))), ("k3", Data(bytes(17, 2))), ("k4", nil),
                    ])
                }
            }, read: kvRead),
        Scenario(
            name: "key-value commit that grows the file", setUp: kvSetUp,
            operation: { fs in
                let store = try kvOpen(fs)
                return { try store.save(Data(bytes(70_000, 3)), for: "huge") }
            }, read: kvRead),
        Scenario(
            // A record larger than the file's growth step (a quarter of the file) in the same
            // commit as one that fits in a single sector.
            name: "key-value commit of a 40 KB value and a 20-byte one", setUp: kvSetUp,
            operation: { fs in
                let store = try kvOpen(fs)
                return { try store.saveBatch([("large1", Data(bytes(40_000, 14))), ("k5", Data(bytes(20, 15)))]) }
            }, read: kvRead),
        Scenario(
            name: "key-value compaction", setUp: kvSetUp,
            operation: { fs in
                let store = try kvOpen(fs)
                return { try store.compact() }
            }, read: kvRead),
        Scenario(
            name: "vault commit (apply: 2 sets, 1 removal)", setUp: vaultSetUp,
            operation: { fs in
                let vault = try vaultOpen(fs)
                return {
                    try vault.apply([
                        .set(service: "s", account: "new", secret: bytes(6000, 5), label: "N", comment: nil),
                        .set(service: "s", account: "a1", secret: bytes(3, 6), label: nil, comment: nil),
                        .remove(service: "s", account: "a2"),
                    ])
                }
            }, read: { fs, recovery in try vaultRead(fs, passphrases: ["old"], recovery: recovery) }),
        Scenario(
            name: "vault commit (apply: a 40 KB secret, 1 removal)", setUp: vaultSetUp,
            operation: { fs in
                let vault = try vaultOpen(fs)
                return {
                    try vault.apply([
                        .set(service: "s", account: "huge", secret: bytes(40_000, 16), label: "H", comment: nil),
                        .remove(service: "s", account: "a5"),
                    ])
                }
            }, read: { fs, recovery in try vaultRead(fs, passphrases: ["old"], recovery: recovery) }),
        Scenario(
            name: "vault compaction", setUp: vaultSetUp,
            operation: { fs in
                let vault = try vaultOpen(fs)
                return { try vault.compact() }
            }, read: { fs, recovery in try vaultRead(fs, passphrases: ["old"], recovery: recovery) }),
        Scenario(
            name: "vault passphrase change", setUp: vaultSetUp,
            operation: { fs in
                let vault = try vaultOpen(fs)
                return { try vault.changePassphrase(to: "new") }
            },
            read: { fs, recovery in try vaultRead(fs, passphrases: ["old", "new"], recovery: recovery) }),
        Scenario(
            // Before: "other" opens (read tries it first). After: its slot is gone, "old" opens
            // a vault whose every item was re-sealed under a new master key.
            name: "vault rotation removing a slot",
            setUp: { fs in
                try vaultSetUp(fs)
                try Vault.open(at: vaultURL, unlock: .passphrase("old"), fileSystem: fs)
                    .addKeySlot(.passphrase("other"), kdf: fastKDF)
            },
            operation: { fs in
                let vault = try vaultOpen(fs)
                return { try vault.rotate(removing: [1]) }
            },
            read: { fs, recovery in try vaultRead(fs, passphrases: ["other", "old"], recovery: recovery) }),
    ]

    /// Contents before and after the operation, and its number of points, from an uncut run.
    static func probe(_ scenario: Scenario) throws -> (before: Contents, after: Contents, points: Int) {
        let inner = InMemoryFileSystem()
        try scenario.setUp(inner)
        let before = try scenario.read(inner, .strict)
        let fs = PowerCutFileSystem(inner, plan: .init(cutBefore: nil, seed: 0, data: .keep, metadata: .keep))
        let operation = try scenario.operation(fs)
        fs.arm()
        try operation()
        let points = fs.points
        let after = try scenario.read(inner, .strict)
        return (before, after, points)
    }

    @Test(arguments: scenarios)
    func powerLossAtEveryPointOpensToBeforeOrAfter(_ scenario: Scenario) throws {
        let (before, after, points) = try Self.probe(scenario)
        #expect(points >= 2)
        var outcome = Outcome(points: points)
        var damageCases: [String] = []
        for cut in 1...(points + 1) {  // points + 1: the operation completed, then the power went
            for data in Self.dataModes {
                for metadata in Self.metadataModes {
                    for seed in 0..<UInt64(Self.seeds) {
                        let plan = PowerCutFileSystem.Plan(
                            cutBefore: cut <= points ? cut : nil, seed: seed &* 7919 &+ UInt64(cut), data: data,
                            metadata: metadata)
                        let inner = InMemoryFileSystem()
                        try scenario.setUp(inner)
                        let fs = PowerCutFileSystem(inner, plan: plan)
                        do {
                            let operation = try scenario.operation(fs)
                            fs.arm()
                            try operation()
                            #expect(cut > points, "\(scenario) \(plan): the operation went through a cut")
                            fs.cutNow()
                        } catch let error as CofferError {
                            #expect(fs.isDead, "\(scenario) \(plan): failed without a cut: \(error)")
                        }
                        outcome.runs += 1
                        let seen: Contents
                        do {
                            seen = try scenario.read(inner, .strict)
                        } catch let error as CofferError where error.code == .corrupted {
                            outcome.reportedDamage += 1
                            #expect(cut <= points, "\(scenario) \(plan): damage after a completed operation")
                            if (fs.report?.garbledWrites ?? 0) > 0 {
                                // Unsynced sectors of the append came back as garbage: the format reads
                                // that as damage to the last record (docs/FORMAT.md §1), by design.
                                outcome.damageFromGarbage += 1
                            } else {
                                // No garbage: only whole sectors were lost, yet the file reads as damaged.
                                outcome.damageWithoutGarbage += 1
                                damageCases.append("\(plan) at byte \(error.offset ?? -1)")
                                // Hole 1 (fixed): any zero sector inside the last commit reads as torn.
                                Issue.record("\(scenario) \(plan): \(error.message)")
                            }
                            // Salvage (key-value and vault) must give the state before, or the state
                            // after when every frame of the commit survived and the garbage lies past it.
                            let salvaged = try? scenario.read(inner, .salvage)
                            if salvaged == before {
                                outcome.salvagedToBefore += 1
                            } else if salvaged == after {
                                outcome.salvagedToAfter += 1
                            } else {
                                outcome.salvagedToPartialCommit += 1
                                // Hole 2 (fixed): salvage never applies part of a commit.
                                Issue.record("\(scenario) \(plan): salvage gave neither before nor after")
                            }
                            continue
                        } catch {
                            Issue.record("\(scenario) \(plan): reopening failed: \(error)")
                            continue
                        }
                        if seen == after {
                            outcome.after += 1
                        } else if seen == before {
                            outcome.before += 1
                            #expect(cut <= points, "\(scenario) \(plan): a completed operation was lost")
                        } else {
                            Issue.record("\(scenario) \(plan): opened to a state that is neither before nor after")
                        }
                        #expect(!inner.allPaths().contains { $0.hasSuffix(".tmp") }, "\(scenario) \(plan): temp file left")
                    }
                }
            }
        }
        print(
            "RELIABILITY power loss, \(scenario): \(points) points × \(Self.dataModes.count) data modes × "
                + "\(Self.metadataModes.count) metadata modes × \(Self.seeds) seeds + completed = \(outcome.runs) runs: "
                + "before \(outcome.before), after\(before == after ? " (= before)" : "") \(outcome.after), "
                + "reported as damage \(outcome.reportedDamage) (garbage in unsynced sectors \(outcome.damageFromGarbage), "
                + "sectors lost without garbage \(outcome.damageWithoutGarbage)); of those, salvage gave before "
                + "\(outcome.salvagedToBefore), after \(outcome.salvagedToAfter), anything else \(outcome.salvagedToPartialCommit); other 0")
        if !damageCases.isEmpty { print("RELIABILITY   damage cases: \(damageCases.prefix(5).joined(separator: "; "))") }
    }

    /// Hole 1 and 2 (RELIABILITY.md), deterministically: a 3-frame batch whose 9 KB first frame
    /// spans three 4 KiB pages; the power goes before its fdatasync and only the middle page is
    /// lost (never written, so zero). The commit was never acknowledged, so the store must open
    /// to the state before it. Today strict open throws `.corrupted` ("fails its checksum with 2
    /// intact records after it": the batch's later frames survived), and salvage applies those
    /// two frames — half of an unacknowledged batch.
    @Test func tornMiddlePageOfABatchOpensToTheStateBefore() throws {
        let scenario = Self.scenarios[0]
        let inner = InMemoryFileSystem()
        try scenario.setUp(inner)
        let before = try scenario.read(inner, .strict)
        let fs = PowerCutFileSystem(inner, plan: .init(cutBefore: 3, seed: 3, data: .random, metadata: .drop))
        let operation = try scenario.operation(fs)
        fs.arm()
        #expect(throws: CofferError.self) { try operation() }
        #expect(fs.report?.garbledWrites == 0)
        #expect(try scenario.read(inner, .strict) == before)
        #expect(try scenario.read(inner, .salvage) == before)
    }
}
