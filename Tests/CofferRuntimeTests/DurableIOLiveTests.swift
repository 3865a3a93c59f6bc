import CofferCore
import CofferRuntime
import CofferTesting
import Foundation
import Testing

/// DurableIO against the real kernel, in a private temporary directory.
///
/// The umask is process-global and tests run in parallel, so these tests never change it. They
/// check the resulting modes instead; umask-independence follows from how the files are made:
/// `open(…, O_CREAT, 0600)` and `mkdir(…, 0700)` can only lose bits to the umask, never gain
/// them, so no umask makes a Coffer file or directory readable by others. (The in-memory file
/// system, whose umask is per instance, checks the same with umask 0 in `InMemoryFileSystemTests`.)
@Suite("DurableIO on the live file system")
struct DurableIOLiveTests {
    let fs = LiveFileSystem()

    @Test func atomicReplaceCreatesPrivateFilesAndLeavesNoTemporaries() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("value")
        try DurableIO.atomicReplace(path, with: Data("first".utf8), fileSystem: fs)
        let first = try #require(try fs.stat(path))
        #expect(first.mode == 0o600)
        #expect(!first.isDirectory)
        #expect(try DurableIO.readFile(path, fileSystem: fs) == Data("first".utf8))

        try DurableIO.atomicReplace(path, with: [UInt8](repeating: 7, count: 100_000), fileSystem: fs)
        let second = try #require(try fs.stat(path))
        #expect(second.mode == 0o600)
        #expect(second.size == 100_000)
        #expect(second.inode != first.inode, "replace must be a rename of a new file, not an in-place write")
        #expect(try DurableIO.readFile(path, fileSystem: fs) == Data(repeating: 7, count: 100_000))

        try DurableIO.atomicReplace(path, with: Data(), fileSystem: fs)
        #expect(try DurableIO.readFile(path, fileSystem: fs) == Data())
        #expect(try fs.contentsOfDirectory(directory.path) == ["value"])
    }

    @Test func atomicReplaceTightensAPermissiveExistingFile() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("loose")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("old".utf8), attributes: [.posixPermissions: 0o644]))
        try DurableIO.atomicReplace(path, with: Data("new".utf8), fileSystem: fs)
        #expect(try fs.stat(path)?.mode == 0o600)
    }

    @Test func ensureDirectoryCreatesPrivateParents() throws {
        let directory = try TemporaryDirectory()
        let deep = directory.path("a/b/c")
        try DurableIO.ensureDirectory(deep, fileSystem: fs)
        for path in [directory.path("a"), directory.path("a/b"), deep] {
            let status = try #require(try fs.stat(path))
            #expect(status.isDirectory)
            #expect(status.mode == 0o700)
        }
        try DurableIO.ensureDirectory(deep, fileSystem: fs)  // idempotent
        #expect(try fs.stat(directory.path)?.mode == 0o700)  // TemporaryDirectory is private too
    }

    @Test func ensureDirectoryRefusesAFileInTheWay() throws {
        let directory = try TemporaryDirectory()
        try DurableIO.atomicReplace(directory.path("file"), with: Data([1]), fileSystem: fs)
        #expect {
            try DurableIO.ensureDirectory(directory.path("file/sub"), fileSystem: fs)
        } throws: { ($0 as? CofferError)?.errno == 20 }
        #expect {
            try DurableIO.ensureDirectory(directory.path("file"), fileSystem: fs)
        } throws: { ($0 as? CofferError)?.errno == 20 }
    }

    @Test func readAndRemoveMissingFiles() throws {
        let directory = try TemporaryDirectory()
        #expect(try DurableIO.readFile(directory.path("missing"), fileSystem: fs) == nil)
        try DurableIO.remove(directory.path("missing"), fileSystem: fs)
        try DurableIO.atomicReplace(directory.path("present"), with: Data([1, 2]), fileSystem: fs)
        try DurableIO.remove(directory.path("present"), fileSystem: fs)
        #expect(try DurableIO.readFile(directory.path("present"), fileSystem: fs) == nil)
        #expect(try fs.contentsOfDirectory(directory.path).isEmpty)
    }

    @Test func atomicReplaceIntoMissingDirectoryFailsWithENOENT() throws {
        let directory = try TemporaryDirectory()
        #expect {
            try DurableIO.atomicReplace(directory.path("nope/value"), with: Data([1]), fileSystem: fs)
        } throws: { ($0 as? CofferError)?.errno == 2 && ($0 as? CofferError)?.code == .io }
    }

    @Test func temporaryDirectoryRemovesItself() throws {
        var path = ""
        do {
            let directory = try TemporaryDirectory()
            path = directory.path
            try DurableIO.atomicReplace(directory.path("x"), with: Data([1]), fileSystem: fs)
            #expect(try fs.stat(path) != nil)
        }
        #expect(try fs.stat(path) == nil)
        let explicit = try TemporaryDirectory()
        try explicit.remove()
        try explicit.remove()
        #expect(try fs.stat(explicit.path) == nil)
    }

    @Test func aPathWithNULIsRefused() throws {
        let directory = try TemporaryDirectory()
        var opened: Int32?
        do { opened = try fs.open(directory.path("a\0b"), create: true, exclusive: false, mode: 0o600) } catch {}
        if let opened { fs.close(opened) }
        let names = try fs.contentsOfDirectory(directory.path)
        // C stops at the first NUL, so "a\0b" would open "a": LiveFileSystem refuses it instead.
        #expect(opened == nil, "a path with NUL must fail with EINVAL, as InMemoryFileSystem does")
        #expect(names.isEmpty)
    }
}
