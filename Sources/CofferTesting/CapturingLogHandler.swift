// A swift-log handler that hands each entry to a closure, for CofferTestHelper's integration
// children, the integration tests and the PostgreSQL tests. Built only with the Logging,
// ServiceLifecycle or Postgres trait (swift-log is a dependency of this target only then).
// Package-only.
#if Logging || ServiceLifecycle || Postgres
package import Logging

/// Hands each entry to `seen`: its level, its message, and its metadata (the handler's merged
/// with the entry's) as `key=value` pairs sorted by key and joined by spaces.
package struct CapturingLogHandler: LogHandler {
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .trace
    /// Takes an entry's level, message and `key=value` fields.
    package typealias Seen = @Sendable (_ level: Logger.Level, _ message: Logger.Message, _ fields: String) -> Void
    private let seen: Seen

    package init(_ seen: @escaping Seen) { self.seen = seen }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        seen(event.level, event.message, all.keys.sorted().map { "\($0)=\(all[$0]!)" }.joined(separator: " "))
    }
}
#endif
