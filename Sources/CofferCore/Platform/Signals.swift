// The platform layer's signal calls: installing a handler with sigaction, and putting back the action it replaced.

// `package` imports: the saved action (`sigaction`) is part of these functions' signatures.
#if canImport(Glibc)
package import Glibc
#elseif canImport(Musl)
package import Musl
#elseif canImport(Darwin)
package import Darwin
#endif

/// Process-wide signal handlers, for the few places that install their own: the crash handlers
/// of ``ProcessHardening/suppressCrashReports(message:)`` and the `coffer` command's terminal
/// guard around a passphrase prompt. One place spells `sigaction`'s handler field, which Darwin
/// and Glibc name differently.
package enum SignalHandlers {
    /// Makes `handler` the action for signal `number`, with no signal blocked while it runs and
    /// `flags` (`SA_…`; 0 for none: then no `SA_RESTART`, so a blocked `read` returns `EINTR`).
    ///
    /// - Returns: The action it replaced, for ``restore(_:for:)``.
    @discardableResult
    package static func install(
        _ handler: @escaping @convention(c) (Int32) -> Void, for number: Int32, flags: Int32 = 0
    ) -> sigaction {
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
        return replaced
    }

    /// Puts back `action` (one ``install(_:for:flags:)`` returned) for signal `number`.
    package static func restore(_ action: sigaction, for number: Int32) {
        var action = action
        sigaction(number, &action, nil)
    }
}
