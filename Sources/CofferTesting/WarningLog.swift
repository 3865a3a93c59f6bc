// Collects the process's Coffer warnings for tests (warnings are process-wide, told once each).
package import CofferCore

/// Every warning told while the tests run. Install once; tests filter by kind and path.
package enum WarningLog {
    package static let shared = Locked<[CofferWarning]>([])
    private static let installed = Locked(false)

    package static func install() {
        let first = installed.withLock { done in
            defer { done = true }
            return !done
        }
        if first { CofferWarning.setHandler { warning in shared.withLock { $0.append(warning) } } }
    }
}
