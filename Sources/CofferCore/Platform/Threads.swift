// The platform layer's thread calls: a pointer per thread (a pthread key), a thread's identity, and giving up the processor.

// `package` imports: `ThreadLocalSlot.value` is inlined into CofferState's read path.
#if canImport(Glibc)
package import Glibc
#elseif canImport(Musl)
package import Musl
#elseif canImport(Darwin)
package import Darwin
#endif

/// One pointer per thread, `nil` until that thread sets it (a pthread key): for state that
/// belongs to the thread that set it, such as CofferState's batch scope and the stack of
/// computations being refreshed. A slot lives as long as the process (the key is never
/// deleted), so make it once, in a global.
package struct ThreadLocalSlot: Sendable {
    @usableFromInline package let key: pthread_key_t

    package init() {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "Coffer: pthread_key_create failed: \(errnoDescription(status))")
        self.key = key
    }

    /// This thread's pointer. Setting it changes no other thread's. Inlinable: every `@Stored`
    /// and `@Computed` read asks it whether a computation is tracking, and a call across modules
    /// there would cost the read path a tenth.
    @inlinable package var value: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        nonmutating set { pthread_setspecific(key, newValue) }
    }
}

/// Lets another thread run before this one continues (`sched_yield`): for a short wait on a
/// value another thread is about to publish.
package func yieldProcessor() {
    sched_yield()
}

/// A thread's identity (`pthread_t`), to tell whether a call comes from the watcher thread.
package struct ThreadIdentity: Equatable, @unchecked Sendable {
    // @unchecked Sendable: an opaque handle, compared and never dereferenced.
    let handle: pthread_t

    package static var current: ThreadIdentity { ThreadIdentity(handle: pthread_self()) }

    package static func == (a: ThreadIdentity, b: ThreadIdentity) -> Bool { pthread_equal(a.handle, b.handle) != 0 }
}
