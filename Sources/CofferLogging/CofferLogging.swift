#if Logging
public import CofferCore
import CofferCrypto
public import Logging

extension CofferWarning {
    /// Sends every Coffer warning to `logger` instead of standard error: a store in a directory
    /// others can write, read-only use, a watch falling back to polling, a failed compaction, a
    /// salvaged store, and secret memory that could not be locked into RAM.
    ///
    /// ```swift
    /// import CofferLogging
    ///
    /// CofferWarning.log(to: Logger(label: "com.example.app.coffer"))
    /// ```
    ///
    /// Each warning is one log entry: its sentence as the message, its kind under
    /// `coffer.warning` and the file concerned under `coffer.path` in the metadata. A warning
    /// holds a kind, a sentence and a path — never a stored value, a key or a passphrase — so
    /// neither does the entry. Each distinct warning is told once per process, as before.
    ///
    /// This replaces the process's warning handler (see ``CofferWarning/setHandler(_:)``). A
    /// lock-failure handler the application set itself with
    /// `SecureMemory.setLockFailureHandler(_:)` is kept; otherwise that failure is logged too.
    ///
    /// - Parameters:
    ///   - logger: Where the warnings go. Its own metadata is kept.
    ///   - level: The level of every entry; `.warning` unless given.
    public static func log(to logger: Logger, level: Logger.Level = .warning) {
        // CofferCrypto cannot tell CofferWarning itself (it does not import CofferCore); the
        // vault connects the two when it first opens, this makes sure of it from the start.
        SecureMemory.replaceDefaultLockFailureHandler { failure in
            CofferWarning.warn(CofferWarning(.memoryNotLocked, failure.description, path: nil))
        }
        setHandler { warning in
            var metadata: Logger.Metadata = ["coffer.warning": .string(warning.kind.name)]
            if let path = warning.path { metadata["coffer.path"] = .string(path) }
            logger.log(level: level, "\(warning.message)", metadata: metadata)
        }
    }
}
#endif
