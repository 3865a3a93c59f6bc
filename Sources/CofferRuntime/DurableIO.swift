package import CofferCore
package import Foundation
import Synchronization

/// Crash-safe file operations shared by every strategy that writes files.
///
/// - ``atomicReplace(_:with:fileSystem:)``: a reader sees the old bytes or the new bytes, never a
///   mix, and once it returns the new bytes survive power loss.
/// - Files Coffer creates are `0600`; directories `0700`.
package enum DurableIO {
    /// Permission bits of every file Coffer creates.
    package static let fileMode: UInt32 = 0o600
    /// Permission bits of every directory Coffer creates.
    package static let directoryMode: UInt32 = 0o700

    /// A free name beside `path` for a damaged file set aside by a salvage:
    /// `<path>.damaged-<seconds since 1970><suffix>`, then `-2`, `-3`, … when that name is taken,
    /// so a second salvage within the same second never overwrites the first one's copy.
    package static func damagedCopyPath(for path: String, suffix: String = "", fileSystem fs: any FileSystem) throws
        -> String
    {
        let base = path + ".damaged-\(Int(Date().timeIntervalSince1970))\(suffix)"
        var candidate = base
        var attempt = 1
        while try fs.stat(candidate) != nil {
            attempt += 1
            candidate = base + "-\(attempt)"
        }
        return candidate
    }

    /// Replaces the file at `path` with `bytes`, atomically and durably.
    ///
    /// Writes a temporary file created `0600` beside it (`O_EXCL`), fsyncs it, renames it over
    /// `path`, then fsyncs the directory so the rename itself survives power loss. On any failure
    /// the temporary file is removed and the old file is untouched.
    /// - Throws: ``CofferError`` (``CofferError/Code/io`` with the errno) on failure.
    package static func atomicReplace(_ path: String, with bytes: UnsafeRawBufferPointer, fileSystem fs: any FileSystem)
        throws
    {
        let directory = parentDirectory(of: path)
        let temp = "\(directory)/.\(lastComponent(of: path)).\(randomSuffix()).tmp"
        let fd = try fs.open(temp, create: true, exclusive: true, mode: fileMode)
        do {
            try fs.writeAll(fd, bytes, at: 0, path: temp)
            try fs.fsync(fd)
            fs.close(fd)
        } catch {
            fs.close(fd)
            try? fs.unlink(temp)  // best effort: the original error is the one that matters
            throw withPath(error, temp)
        }
        do {
            try fs.rename(temp, path)
        } catch {
            try? fs.unlink(temp)
            throw error
        }
        try fs.fsyncDirectory(directory)
    }

    /// ``atomicReplace(_:with:fileSystem:)`` for `Data`.
    package static func atomicReplace(_ path: String, with data: Data, fileSystem fs: any FileSystem) throws {
        try data.withUnsafeBytes { try atomicReplace(path, with: $0, fileSystem: fs) }
    }

    /// ``atomicReplace(_:with:fileSystem:)`` for a byte array.
    package static func atomicReplace(_ path: String, with bytes: [UInt8], fileSystem fs: any FileSystem) throws {
        try bytes.withUnsafeBytes { try atomicReplace(path, with: $0, fileSystem: fs) }
    }

    /// Reads a whole file, or returns `nil` when it does not exist.
    /// - Throws: ``CofferError/Code/limitExceeded`` for a file larger than `maximumSize`
    ///   (checked before anything is allocated: a sparse file may claim any size).
    package static func readFile(
        _ path: String, maximumSize: Int64 = maximumReadSize, fileSystem fs: any FileSystem
    ) throws -> Data? {
        let fd: Int32
        do {
            fd = try fs.openReadOnly(path)
        } catch let error as CofferError where error.errno == ENOENT_ {
            return nil
        }
        defer { fs.close(fd) }
        let size = Int(try checkSize(try fs.fstat(fd).size, maximum: maximumSize, path: path))
        var data = Data(count: size)
        let n = try data.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: 0) }
        if n < size { data.removeSubrange(n...) }
        return data
    }

    /// The largest file Coffer reads whole into memory: 4 GiB (a store file at open, a salvage
    /// image, a disk strategy's value). Above it, ``CofferError/Code/limitExceeded``.
    package static let maximumReadSize: Int64 = 4 << 30

    /// `size`, or ``CofferError/Code/limitExceeded`` when it is above `maximum`.
    package static func checkSize(_ size: Int64, maximum: Int64 = maximumReadSize, path: String) throws -> Int64 {
        guard size > maximum else { return size }
        throw CofferError(
            .limitExceeded,
            "the file holds \(size) bytes, more than the \(maximum) bytes Coffer reads into memory; it is not a "
                + "store Coffer wrote (or it was padded, perhaps sparsely): nothing was read",
            path: path)
    }

    /// Removes a file durably (unlink, then fsync the directory). A missing file is not an error.
    package static func remove(_ path: String, fileSystem fs: any FileSystem) throws {
        guard try fs.stat(path) != nil else { return }
        try fs.unlink(path)
        try fs.fsyncDirectory(parentDirectory(of: path))
    }

    /// Creates `path` and any missing parents with mode `0700`; existing directories are left as they are.
    /// - Throws: ``CofferError`` when a component exists and is not a directory, or mkdir fails.
    package static func ensureDirectory(_ path: String, fileSystem fs: any FileSystem) throws {
        if let st = try fs.stat(path) {
            if st.isDirectory { return }
            throw CofferError(.io, "a file is in the way of the directory Coffer needs", path: path, errno: ENOTDIR_)
        }
        let parent = parentDirectory(of: path)
        if parent != path { try ensureDirectory(parent, fileSystem: fs) }
        try fs.mkdir(path, mode: directoryMode)
        // The new entry must survive power loss before anything saved inside it is promised to.
        try fs.fsyncDirectory(parent)
    }

    /// The directory part of a path (`/a/b` → `/a`; `/a` → `/`).
    package static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// The last component of a path.
    package static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36)
    }

    private static func withPath(_ error: any Error, _ path: String) -> any Error {
        guard var error = error as? CofferError, error.path == nil else { return error }
        error.path = path
        return error
    }
}
