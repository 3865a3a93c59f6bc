public import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A `Mutex` that ThreadSanitizer can see.
///
/// On Linux, `Synchronization.Mutex` locks with futex calls made inside the (uninstrumented)
/// standard library, so ThreadSanitizer sees no ordering between two critical sections and
/// reports every access inside them as a race. When the program runs under ThreadSanitizer
/// (its runtime exports `__tsan_acquire`/`__tsan_release`), each lock owns a one-byte token and
/// each critical section tells ThreadSanitizer "acquire" on entry and "release" on exit, on that
/// token. Otherwise this is exactly a `Mutex`, plus one test of a `nil` field.
///
/// Every lock in Coffer's modules is a `Locked` (CofferCrypto's included: this module sits below
/// both it and CofferCore), so `make test-tsan` reports real races only.
/// Package-internal: not part of the public API.
@usableFromInline
package struct Locked<State: ~Copyable>: ~Copyable {
    @usableFromInline package let mutex: Mutex<State>
    /// What ThreadSanitizer synchronises on; `nil` when it is not running.
    @usableFromInline package let token: SanitizerToken?

    // Inlinable, and no `deinit` of its own (the token frees itself): making and dropping a
    // lock is then specialised for `State` where it is used. Unspecialised, each one looked up
    // `Locked<State>`'s generic metadata at run time, a cost every new `@Stored` cell paid on
    // its several locks, and again on release.
    @inlinable
    package init(_ initialValue: consuming sending State) {
        mutex = Mutex(initialValue)
        token = sanitizerHooks == nil ? nil : SanitizerToken()
    }

    // Inlinable so that a read from another module is specialised for its value type.
    @inlinable @inline(__always)
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending State) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        guard let token else { return try mutex.withLock(body) }
        return try withLockAnnotated(token.address, body)
    }

    /// Runs `body` under the lock when no one holds it; `nil`, at once, when someone does.
    @usableFromInline
    package borrowing func withLockIfAvailable<Result: ~Copyable, E: Error>(
        _ body: (inout sending State) throws(E) -> sending Result
    ) throws(E) -> sending Result? {
        guard let token, let hooks = sanitizerHooks else { return try mutex.withLockIfAvailable(body) }
        let address = token.address
        return try mutex.withLockIfAvailable { (state: inout sending State) throws(E) -> sending Result in
            hooks.acquire(address)
            defer { hooks.release(address) }
            return try body(&state)
        }
    }

    @usableFromInline
    package borrowing func withLockAnnotated<Result: ~Copyable, E: Error>(
        _ token: UnsafeMutableRawPointer, _ body: (inout sending State) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        guard let hooks = sanitizerHooks else { return try mutex.withLock(body) }
        return try mutex.withLock { (state: inout sending State) throws(E) -> sending Result in
            hooks.acquire(token)
            defer { hooks.release(token) }
            return try body(&state)
        }
    }
}

extension Locked: @unchecked Sendable where State: ~Copyable {}

/// ThreadSanitizer's annotation entry points, when its runtime is loaded.
@usableFromInline
struct SanitizerHooks: Sendable {
    typealias Hook = @convention(c) (UnsafeMutableRawPointer?) -> Void
    let acquire: Hook
    let release: Hook

    static func load() -> SanitizerHooks? {
        guard let process = dlopen(nil, RTLD_NOW) else { return nil }
        defer { dlclose(process) }
        guard let acquire = dlsym(process, "__tsan_acquire"), let release = dlsym(process, "__tsan_release") else {
            return nil
        }
        return SanitizerHooks(
            acquire: unsafeBitCast(acquire, to: Hook.self), release: unsafeBitCast(release, to: Hook.self))
    }
}

@usableFromInline let sanitizerHooks = SanitizerHooks.load()

/// The byte a ``Locked`` tells ThreadSanitizer to synchronise on, freed with the lock.
@usableFromInline
package final class SanitizerToken: @unchecked Sendable {
    // @unchecked Sendable: the address is never written through; only its value is used.
    @usableFromInline let address = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)

    @usableFromInline init() {}

    deinit { address.deallocate() }
}
