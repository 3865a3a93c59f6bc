#if canImport(Glibc)
public import Glibc
#elseif canImport(Musl)
public import Musl
#elseif canImport(Darwin)
public import Darwin
#endif

/// The calling thread, as a number no other live thread has (its `pthread_t`); never 0.
///
/// For a lock's holder to recognise itself: a call made from inside a body that already holds
/// the lock (an `update` transform calling `set` on the same store) is told so, where a
/// `Mutex` would trap ("Recursive call to lock Mutex").
@inlinable @inline(__always)
package func currentThreadIdentity() -> UInt {
    // An integer on glibc; a pointer on Musl and Darwin.
    #if canImport(Glibc)
    UInt(pthread_self())
    #else
    UInt(bitPattern: pthread_self())
    #endif
}
