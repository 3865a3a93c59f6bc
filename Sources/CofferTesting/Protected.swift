// A value behind a lock that tests share by reference. Package-only.
import CofferCore

/// A value behind a ``Locked`` that tests share by reference: captured by threads, tasks and
/// observation callbacks, which a (noncopyable) `Locked` cannot be. `Locked`, not
/// `Synchronization.Mutex`: ThreadSanitizer sees it, and these tests must run clean under
/// `--sanitize=thread`.
package final class Protected<Value: Sendable>: Sendable {
    private let state: Locked<Value>

    package init(_ value: Value) { state = Locked(value) }

    package func withLock<Result: Sendable, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        try state.withLock { (value: inout sending Value) throws(E) -> sending Result in try body(&value) }
    }
}
