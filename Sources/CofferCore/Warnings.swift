import Synchronization

/// Something Coffer tells the application without failing the call: a store in a directory
/// other users can write to, a lock file that could not be created (read-only use).
///
/// Holds a kind, a sentence and a path, never a stored value, a key or a passphrase. Each goes to
/// the handler ``setHandler(_:)`` sets (by default, one line on standard error).
public struct CofferWarning: Sendable, Hashable, CustomStringConvertible {
    /// What kind of warning this is. New kinds may be added.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        private init(_ name: String) { self.name = name }

        /// The directory holding a store is writable by users other than its owner: any of them
        /// could replace the store's files (Coffer never follows a symlink there, but it cannot
        /// stop a rename).
        public static let sharedDirectory = Kind("shared directory")
        /// The store's lock file could not be created (read-only file system or directory, a
        /// full disk): the store was opened for reading without it, and cannot be written.
        public static let readOnlyWithoutLock = Kind("read-only without a lock file")
        /// Changes made by other processes cannot be watched for (the inotify watch limit, a
        /// network file system, a platform without a watcher): they are found by polling.
        public static let watchFallback = Kind("watching falls back to polling")
        /// A store could not be watched for changes made elsewhere at all (its observation
        /// failed to start, a missing directory, say): properties on it keep working but do not
        /// follow other writers until a later property's attempt succeeds.
        public static let watchFailed = Kind("changes made elsewhere are not followed")
        /// The compaction that follows a write failed (a full disk, say); the write itself
        /// succeeded, and the next write tries again.
        public static let compactionFailed = Kind("compaction failed")
        /// A damaged store was opened with `recovery: .salvage`: the intact records were kept,
        /// the damaged ones dropped, and the damaged file set aside.
        public static let salvaged = Kind("salvaged a damaged store")
        /// A secret's memory could not be locked into RAM (past `ulimit -l`): it may be written
        /// to swap (told by the vault's modules; see `SecureMemory` in CofferCrypto).
        public static let memoryNotLocked = Kind("secret memory not locked")
        /// A test (XCTest or Swift Testing) opened a store in ``CofferContext/standard``: it
        /// reads and writes the user's real data folder. Told once per process.
        public static let standardContextInTests = Kind("default context used in a test")

        public var description: String { name }
    }

    public let kind: Kind
    /// A sentence a person can act on.
    public let message: String
    /// The file or directory concerned.
    public let path: String?

    public init(_ kind: Kind, _ message: String, path: String?) {
        self.kind = kind
        self.message = message
        self.path = path
    }

    public var description: String {
        path.map { "\(message) [path: \($0)]" } ?? message
    }
}

// Where warnings go: one handler per process, on the warning type itself. Each distinct warning
// (kind and path) is told once per process.
extension CofferWarning {
    private struct State {
        var handler: (@Sendable (CofferWarning) -> Void)? = CofferWarning.standardError
        var told: Set<CofferWarning> = []
    }

    private static let state = Locked(State())

    /// Replaces the handler Coffer's warnings go to; `nil` silences them. Each distinct warning
    /// (kind and path) is told once per process.
    ///
    /// The default handler writes one line to standard error (`coffer: warning: …`); an
    /// application with a logger replaces it:
    ///
    /// ```swift
    /// CofferWarning.setHandler { warning in logger.warning("\(warning)") }
    /// ```
    ///
    /// The handler is called on the thread that met the condition, without Coffer's locks held:
    /// log, count or set a flag, and do not call back into Coffer from it.
    public static func setHandler(_ handler: (@Sendable (CofferWarning) -> Void)?) {
        let previous = state.withLock { s in
            defer { s.handler = handler }
            return s.handler
        }
        withExtendedLifetime(previous) {}
    }

    /// Tells `warning` to the handler unless the same warning was already told in this process.
    @usableFromInline package static func warn(_ warning: CofferWarning) {
        let handler = state.withLock { s -> (@Sendable (CofferWarning) -> Void)? in
            guard s.told.insert(warning).inserted else { return nil }
            return s.handler
        }
        handler?(warning)
    }

    static let standardError: @Sendable (CofferWarning) -> Void = { warning in
        let line = Array("coffer: warning: \(warning)\n".utf8)
        line.withUnsafeBytes { writeToStandardError($0) }
    }
}
