import CofferCore
import CofferCrypto
import CofferRuntime
import CofferTesting
import Foundation
import Synchronization
import Testing

@testable import CofferVault

/// The file vault's `async` writes: what blocks a thread — the fsync that makes a write durable,
/// the wait for `<file>.lock` — runs on Coffer's own threads (``BlockingPool``), never on the
/// cooperative thread of the task that awaits the write. A file system that notes, at each
/// such call, whether it runs on a Coffer thread tells (thread identity, not time).
@Suite("Vault: async writes block no cooperative thread")
struct VaultAsyncWriteThreadTests {
    @Test("Every fsync and file lock of an async write runs on a Coffer thread")
    func asyncWritesSyncAndLockOffTheCooperativePool() async throws {
        let dir = try Scratch("async-write-thread")
        let noting = NotingFileSystem()
        let key = try SecureBytes.random(count: 32)
        let vault = try Vault.create(at: dir.url("v"), unlock: .key(key), fileSystem: noting)
        let seed = try SecureBytes(copying: Array("guarded".utf8))
        noting.calls.withLock { $0 = [] }

        try await vault.set(Data([1, 2, 3]), service: "s", account: "data", label: "L", comment: nil)
        try await vault.set("text", service: "s", account: "text")
        try await vault.set(seed, service: "s", account: "guarded")
        try await vault.apply([.set(service: "s", account: "batch", secret: [9], label: nil, comment: nil)])
        #expect(try await vault.add([.set(service: "s", account: "new", secret: [7], label: nil, comment: nil)]).isEmpty)
        try await vault.update(service: "s", account: "count") { (old: Data?) in
            // The transform itself runs there too, under the lock.
            #expect(BlockingPool.isCurrentThread)
            return Data([UInt8((old?.first ?? 0) + 1)])
        }
        #expect(try await vault.remove(service: "s", account: "text"))

        let calls = noting.calls.withLock { $0 }
        // Each of the seven writes took the file lock and synced (the default durability).
        #expect(calls.filter { $0.call == "lock" }.count >= 7)
        #expect(calls.filter { $0.call == "sync" }.count >= 7)
        let onCallersThread = calls.filter { !$0.onCofferThread }.map(\.call)
        #expect(onCallersThread.isEmpty, "ran on the awaiting task's thread: \(onCallersThread)")

        // The reads answer from memory, in the calling task.
        #expect(try await vault.data(service: "s", account: "data") == Data([1, 2, 3]))
        #expect(try await vault.data(service: "s", account: "count") == Data([1]))
        #expect(try await vault.items(service: "s").map(\.account) == ["batch", "count", "data", "guarded", "new"])
    }

    @Test("An async read behind a write that waits for <file>.lock is asked again on a Coffer thread, never waits in the task")
    func asyncReadBehindAWaitingWrite() async throws {
        let dir = try Scratch("async-read-behind-write")
        let noting = NotingFileSystem()
        let key = try SecureBytes.random(count: 32)
        let vault = try Vault.create(at: dir.url("v"), unlock: .key(key), fileSystem: noting)
        try await vault.set("before", service: "s", account: "a")
        // The next write stops in its wait for <file>.lock (as if another process held it),
        // holding the vault's index, until released.
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        noting.gate.withLock { $0 = Gate(entered: entered, release: release) }
        let writer = Thread { _ = try? vault.set("after", service: "s", account: "a") }
        writer.start()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                entered.wait()
                done.resume()
            }
        }
        // What the async forms ask of the synchronous one: answer at once or say it would wait.
        #expect(Self.readsWithoutWaiting(vault) == [true, true])
        // So the async read suspends while the write waits, and answers after it.
        let reader = Task { try await vault.string(service: "s", account: "a") }
        release.signal()
        #expect(try await reader.value == "after")
        // With no write in progress, an async read answers in the task.
        #expect(try await vault.items().map(\.account) == ["a"])
    }

    /// Whether each read the async forms make, asked not to wait, says at once that it would.
    static func readsWithoutWaiting(_ vault: Vault) -> [Bool] {
        Vault.readsMustNotWait.value = UnsafeMutableRawPointer(bitPattern: 1)
        defer { Vault.readsMustNotWait.value = nil }
        let reads: [() throws -> Void] = [
            { _ = try vault.string(service: "s", account: "a") },
            { _ = try vault.items() },
        ]
        return reads.map { read in
            do {
                try read()
                return false
            } catch {
                return error is Vault.ReadWouldWait
            }
        }
    }

    @Test("Creating, opening, unlocking and changing keys from async code, through their async forms")
    func asyncOpeningAndKeyChanges() async throws {
        let dir = try Scratch("async-open")
        let url = dir.url("v")
        let created = try await Vault.create(at: url, unlock: .passphrase("first"), kdf: .minimum)
        try await created.set("kept", service: "s", account: "a")
        created.lock()
        try await created.unlock(.passphrase("first"))
        try await created.changePassphrase(to: .passphrase("second"), kdf: .minimum)
        let key = try SecureBytes.random(count: 32)
        try await created.addKeySlot(.key(key), label: "machine")
        let reopened = try await Vault.open(at: url, unlock: .passphrase("second"))
        #expect(try await reopened.string(service: "s", account: "a") == "kept")
        let byKey = try await Vault.open(at: url, unlock: .key(key))
        #expect(try await byKey.string(service: "s", account: "a") == "kept")
        await #expect(throws: CofferError.self) { _ = try await Vault.open(at: url, unlock: .passphrase("first")) }
    }

    @Test("A coalesced vault's async flush syncs on a Coffer thread")
    func asyncFlushSyncsOffTheCooperativePool() async throws {
        let dir = try Scratch("async-flush-thread")
        let noting = NotingFileSystem()
        let key = try SecureBytes.random(count: 32)
        let vault = try Vault.create(at: dir.url("v"), unlock: .key(key), durability: .coalesced, fileSystem: noting)
        try await vault.set("pending", service: "s", account: "a")
        noting.calls.withLock { $0 = [] }

        try await vault.flush()

        let calls = noting.calls.withLock { $0 }
        #expect(calls.contains { $0.call == "sync" })
        #expect(calls.filter { !$0.onCofferThread }.isEmpty)
    }
}

/// The live file system, noting each fsync, fdatasync and `flock` with whether it ran on a
/// thread of ``BlockingPool``.
final class NotingFileSystem: FileSystem {
    struct Call: Sendable {
        var call: String
        var onCofferThread: Bool
    }

    let live = LiveFileSystem()
    let calls = Locked<[Call]>([])
    /// When set, the next `flock` says it has begun and waits to be released (taken once).
    let gate = Locked<Gate?>(nil)

    private func note(_ call: String) {
        let onCofferThread = BlockingPool.isCurrentThread
        calls.withLock { $0.append(Call(call: call, onCofferThread: onCofferThread)) }
        if call == "lock", let gate = gate.withLock({ gate in defer { gate = nil }; return gate }) {
            gate.entered.signal()
            gate.release.wait()
        }
    }

    func open(_ path: String, create: Bool, exclusive: Bool, mode: UInt32) throws -> Int32 {
        try live.open(path, create: create, exclusive: exclusive, mode: mode)
    }
    func openReadOnly(_ path: String) throws -> Int32 { try live.openReadOnly(path) }
    func close(_ fd: Int32) { live.close(fd) }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try live.pread(fd, into: buffer, at: offset)
    }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        try live.pwrite(fd, bytes, at: offset)
    }
    func fsync(_ fd: Int32) throws {
        note("sync")
        try live.fsync(fd)
    }
    func fdatasync(_ fd: Int32) throws {
        note("sync")
        try live.fdatasync(fd)
    }
    func ftruncate(_ fd: Int32, size: Int64) throws { try live.ftruncate(fd, size: size) }
    func fstat(_ fd: Int32) throws -> FileStatus { try live.fstat(fd) }
    func stat(_ path: String) throws -> FileStatus? { try live.stat(path) }
    func rename(_ from: String, _ to: String) throws { try live.rename(from, to) }
    func unlink(_ path: String) throws { try live.unlink(path) }
    func mkdir(_ path: String, mode: UInt32) throws { try live.mkdir(path, mode: mode) }
    func contentsOfDirectory(_ path: String) throws -> [String] { try live.contentsOfDirectory(path) }
    func fsyncDirectory(_ path: String) throws {
        note("sync")
        try live.fsyncDirectory(path)
    }
    func lock(_ fd: Int32, exclusive: Bool, timeout: Duration, path: String) throws {
        note("lock")
        try live.lock(fd, exclusive: exclusive, timeout: timeout, path: path)
    }
    func unlock(_ fd: Int32) { live.unlock(fd) }
    /// A shared journal's writes lock the control page's mutex, not the file: noted alike.
    func lockMutex(_ mutex: UnsafeMutableRawPointer, timeout: Duration, path: String) throws -> Bool {
        note("lock")
        return try live.lockMutex(mutex, timeout: timeout, path: path)
    }
    func unlockMutex(_ mutex: UnsafeMutableRawPointer) { live.unlockMutex(mutex) }
    func mapShared(_ fd: Int32, length: Int, path: String) throws -> (any SharedMapping)? {
        try live.mapShared(fd, length: length, path: path)
    }
    func resolve(_ path: String) throws -> String { try live.resolve(path) }
}

/// A write stopped in its wait for the file lock: it signals `entered`, then waits for `release`.
struct Gate: Sendable {
    let entered: DispatchSemaphore
    let release: DispatchSemaphore
}
