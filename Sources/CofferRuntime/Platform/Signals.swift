// The platform layer's signal calls: installing a handler with sigaction, and putting back the action it replaced.

import CofferCore
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Process-wide signal handlers, for the few places that install their own: the crash handlers
/// of ``ProcessHardening/suppressCrashReports(message:)`` and the `coffer` command's terminal
/// guard around a passphrase prompt. One place spells `sigaction`'s handler field, which Darwin
/// and Glibc name differently.
package enum SignalHandlers {
    /// Makes `handler` the action for signal `number`, with no signal blocked while it runs and
    /// `flags` (`SA_…`; 0 for none: then no `SA_RESTART`, so a blocked `read` returns `EINTR`).
    ///
    /// - Returns: The action it replaced, which ``SavedSignalAction/restore()`` puts back.
    @discardableResult
    package static func install(
        _ handler: @escaping @convention(c) (Int32) -> Void, for number: Int32, flags: Int32 = 0
    ) -> SavedSignalAction {
        var action = sigaction()
        #if canImport(Darwin)
            action.__sigaction_u.__sa_handler = handler
        #else
            action.__sigaction_handler.sa_handler = handler
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = flags
        var replaced = sigaction()
        sigaction(number, &action, &replaced)
        return SavedSignalAction(number: number, action: replaced)
    }
}

/// A signal's action as it was before ``SignalHandlers/install(_:for:flags:)`` replaced it.
package struct SavedSignalAction {
    fileprivate let number: Int32
    fileprivate let action: sigaction

    /// Makes it the signal's action again.
    package func restore() {
        var action = action
        sigaction(number, &action, nil)
    }
}
