import CofferCore
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Testing

/// A failure at any system call of a save surfaces with its errno and leaves the previous value
/// readable — from the same instance and after reopening.
@Suite("Fault injection")
struct FaultInjectionTests {
    static let errnos: [Int32] = [28 /* ENOSPC */, 5 /* EIO */]
    static let directory = "/data"

    /// Every fault of one kind for the calls a save makes on paths matching `path`.
    static func faults(for fs: InMemoryFileSystem, path: @escaping @Sendable (String) -> Bool) -> [InMemoryFileSystem.Fault] {
        var faults: [InMemoryFileSystem.Fault] = []
        for operation in [InMemoryFileSystem.Operation.open, .pwrite, .fsync, .fdatasync, .rename, .fsyncDirectory, .lock] {
            let count = fs.callCount(operation, where: path)
            for n in stride(from: 1, through: count, by: 1) {
                for errno in errnos { faults.append(.fail(operation, occurrence: n, errno: errno, where: path)) }
            }
        }
        for n in stride(from: 1, through: fs.callCount(.pwrite, where: path), by: 1) {
            for bytes in [1, 5, 12, 13, 20] { faults.append(.shortWrite(occurrence: n, bytes: bytes, where: path)) }
        }
        return faults
    }

    /// Runs `save` under every fault of the calls it makes on a store from `prepare` (holding
    /// an old value): counts those calls on one store, then, for each fault, injects it into a
    /// fresh one and saves. When the save fails, removes the fault and hands the error, the file
    /// system and the store to `surfaced`. Nearly every fault must surface (a short write of
    /// more than the frame does not).
    static func saveUnderEveryFault<Store>(
        prepare: () throws -> (InMemoryFileSystem, Store), save: (Store) throws -> Void,
        surfaced: (InMemoryFileSystem.Fault, CofferError, InMemoryFileSystem, Store) throws -> Void
    ) throws {
        let (probe, probeStore) = try prepare()
        probe.resetCalls()
        try save(probeStore)
        let faults = Self.faults(for: probe) { $0.hasPrefix(Self.directory) }
        #expect(faults.count >= 8)
        var surfacedCount = 0
        for fault in faults {
            let (fs, store) = try prepare()
            fs.inject(fault)
            let failure: CofferError
            do {
                try save(store)
                continue  // the fault hit a call this run did not make
            } catch let error as CofferError {
                failure = error
            }
            fs.removeAllFaults()
            surfacedCount += 1
            try surfaced(fault, failure, fs, store)
        }
        #expect(surfacedCount * 10 >= faults.count * 8, "\(surfacedCount) of \(faults.count) faults surfaced")
    }

    @Test(arguments: [Durability.immediate, .coalesced])
    func keyValueSaveFailures(durability: Durability) throws {
        // A store holding an old value.
        func prepared() throws -> (InMemoryFileSystem, KeyValueFileStrategy) {
            let fs = InMemoryFileSystem()
            let store = try KeyValueFileStrategy(
                directory: URL(fileURLWithPath: Self.directory), suite: "s", durability: durability, fileSystem: fs)
            try store.set("old", for: "k")
            try store.flush()
            return (fs, store)
        }
        try Self.saveUnderEveryFault(prepare: prepared) { store in
            try store.set(String(repeating: "new", count: 10), for: "k")
            try store.flush()
        } surfaced: { fault, error, fs, store in
            #expect(error.errno != nil, "\(fault): \(error)")
            if case .fail(let errno) = fault.effect { #expect(error.errno == errno, "\(fault)") }
            // The same instance still serves the old value, unless only the sync failed (the write's
            // fate is then unknown, and the value stays whichever the file holds).
            let value = try store.get(String.self, for: "k")
            let reopened = try KeyValueFileStrategy(
                directory: URL(fileURLWithPath: Self.directory), suite: "s", durability: durability, fileSystem: fs)
            let after = try reopened.get(String.self, for: "k")
            let syncFault = fault.operation == .fsync || fault.operation == .fdatasync
            if syncFault {
                #expect(after == "old" || after == String(repeating: "new", count: 10), "\(fault)")
            } else {
                #expect(value == "old", "\(fault)")
                #expect(after == "old", "\(fault)")
            }
            // The store accepts writes again once reopened.
            try reopened.set("later", for: "k")
            #expect(try reopened.get(String.self, for: "k") == "later")
        }
    }

    @Test func diskSaveFailures() throws {
        func prepared() throws -> (InMemoryFileSystem, DiskStrategy) {
            let fs = InMemoryFileSystem()
            let store = try DiskStrategy(directory: URL(fileURLWithPath: Self.directory), fileSystem: fs)
            try store.set("old", for: "k")
            return (fs, store)
        }
        try Self.saveUnderEveryFault(prepare: prepared) { store in
            try store.set("new", for: "k")
        } surfaced: { fault, error, fs, store in
            #expect(error.errno != nil, "\(fault): \(error)")
            let value = try store.get(String.self, for: "k")
            // Only a failure after the rename (the directory fsync) may leave the new value visible.
            if fault.operation == .fsyncDirectory {
                #expect(value == "old" || value == "new", "\(fault)")
            } else {
                #expect(value == "old", "\(fault)")
            }
            // No temporary file is left behind.
            let leftovers = fs.allPaths().filter { $0.hasSuffix(".tmp") }
            #expect(leftovers.isEmpty, "\(fault): \(leftovers)")
        }
    }

    @Test func permissionsInMemory() throws {
        let fs = InMemoryFileSystem(umask: 0)
        let kv = try KeyValueFileStrategy(directory: URL(fileURLWithPath: "/a/b"), suite: "s", fileSystem: fs)
        try kv.set(1, for: "x")
        try kv.compact()
        let disk = try DiskStrategy(directory: URL(fileURLWithPath: "/a/c"), fileSystem: fs)
        try disk.set(1, for: "x")
        for path in fs.allPaths() where path.hasPrefix("/a") {
            let mode = try #require(fs.permissions(atPath: path))
            let isDirectory = try fs.stat(path)?.isDirectory ?? false
            #expect(mode == (isDirectory ? 0o700 : 0o600), "\(path): \(String(mode, radix: 8))")
        }
    }

    /// A write fails part-way and so does the wipe of its partial commit. Another process then
    /// judges that torn tail, removes it and commits over it. The first process's next write must
    /// catch up and keep that commit, not wipe the range it once failed to write (it used to).
    @Test func aFailedWipeNeverErasesAnotherProcesssCommit() throws {
        let fs = InMemoryFileSystem()
        let url = URL(fileURLWithPath: Self.directory)
        let first = try KeyValueFileStrategy(directory: url, suite: "s", durability: .immediate, fileSystem: fs)
        let second = try KeyValueFileStrategy(directory: url, suite: "s", durability: .immediate, fileSystem: fs)
        try first.set("before", for: "k")
        // The next pwrite lands 100 bytes of a 4 KB record, the one after fails (the rest of the
        // record), and so does the third (the wipe).
        fs.inject(.shortWrite(occurrence: 1, bytes: 100, thenErrno: 5))
        fs.inject(.fail(.pwrite, occurrence: 3, errno: 5))
        #expect(throws: CofferError.self) { try first.set(String(repeating: "x", count: 4000), for: "big") }
        fs.removeAllFaults()
        // The other process: the 100 bytes look torn (whole zero blocks follow), so it zeroes
        // them and appends its own commit where they were.
        try second.set("theirs", for: "other")
        // The first process writes again.
        try first.set("mine", for: "k")
        let reader = try KeyValueFileStrategy(directory: url, suite: "s", fileSystem: fs)
        #expect(try reader.get(String.self, for: "other") == "theirs")
        #expect(try reader.get(String.self, for: "k") == "mine")
        #expect(try reader.get(String.self, for: "big") == nil)
        #expect(try first.get(String.self, for: "other") == "theirs")
    }
}
