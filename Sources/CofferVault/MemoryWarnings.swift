import CofferCore
import CofferCrypto

/// Sends `SecureMemory`'s lock-failure warning through ``CofferWarning``, so an application that
/// set one warning handler (a `Logger`, say) hears every warning. CofferCrypto cannot import
/// CofferCore, so the vault — the first module that knows both — connects them the first time it
/// opens, creates or unlocks a vault. A handler the application set with
/// `SecureMemory.setLockFailureHandler(_:)` is kept.
enum MemoryWarnings {
    private static let routed: Void = {
        SecureMemory.replaceDefaultLockFailureHandler { failure in
            CofferWarning.warn(CofferWarning(.memoryNotLocked, failure.description, path: nil))
        }
    }()

    static func route() { routed }
}
