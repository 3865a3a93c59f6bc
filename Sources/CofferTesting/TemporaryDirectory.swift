// A private temporary directory for a test, removed with its contents when released.
import CofferCore
public import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A private (`0700`) directory under the system temporary directory, removed with everything
/// in it by ``remove()`` or when the last reference goes away.
///
/// ```swift
/// let directory = try TemporaryDirectory()
/// let store = try DiskStrategy(directory: directory.url)
/// ```
public final class TemporaryDirectory: Sendable {
    /// The directory's absolute path.
    public let path: String
    private let removed = Locked(false)

    /// Creates the directory with `mkdtemp`, which makes it `0700` whatever the umask.
    /// - Throws: ``CofferError`` with code ``CofferError/Code/io`` when it cannot be created.
    /// - Parameter base: the directory to make it in; the system's temporary directory unless
    ///   given (`/dev/shm`, for a test that needs tmpfs).
    public init(prefix: String = "coffer-test", in base: String? = nil) throws {
        let base = base ?? FileManager.default.temporaryDirectory.path
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }
        guard let created else {
            throw CofferError.io("mkdtemp", path: base, errno: errno)
        }
        path = String(cString: created)
    }

    /// A directory for one test, named after it: `coffer-<name>-XXXXXX`, so a directory left by a
    /// crashed run says which test made it.
    /// - Throws: as ``init(prefix:)``.
    public convenience init(_ name: String) throws {
        try self.init(prefix: "coffer-\(name)")
    }

    deinit { try? remove() }

    /// The directory as a file URL.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    /// The path of `name` inside the directory.
    public func path(_ name: String) -> String { path + "/" + name }

    /// The URL of `name` inside the directory.
    public func url(_ name: String) -> URL { url.appendingPathComponent(name) }

    /// Deletes the directory and its contents; later calls do nothing.
    /// - Throws: the file manager's error when removal fails.
    public func remove() throws {
        let wasRemoved = removed.withLock { removed in
            defer { removed = true }
            return removed
        }
        guard !wasRemoved else { return }
        try FileManager.default.removeItem(atPath: path)
    }
}
