// `coffer run`: the thread its children are started from, in a session keyring of their own.

import CKeyring
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A thread that joins a new anonymous session keyring of its own (KEYCTL_JOIN_SESSION_KEYRING,
/// which changes the calling thread's credentials only) as it starts, and then runs what it is
/// given: `coffer run` starts every child from it, so the child's session keyring is that new,
/// empty one and the vault keys `coffer unlock` keeps in coffer's session keyring (possessor
/// only) are out of the child's reach, while coffer itself keeps them.
final class IsolatedSpawner: @unchecked Sendable {
    // @unchecked Sendable: `job` and `finished` are guarded by `condition`; `joinError` is
    // written before `init` returns and only read after.
    private let condition = NSCondition()
    private var job: (() -> Void)?
    private var finished = false
    /// The errno of joining the new keyring; 0 when it was joined.
    private(set) var joinError: Int32 = 0

    init() {
        let started = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            if coffer_key_join_session(nil) < 0 { joinError = errno }
            started.signal()
            loop()
        }
        thread.start()
        started.wait()
    }

    /// Runs jobs until the process ends.
    private func loop() {
        condition.lock()
        while true {
            while job == nil { condition.wait() }
            let next = job!
            job = nil
            condition.unlock()
            next()
            condition.lock()
            finished = true
            condition.broadcast()
        }
    }

    /// Runs `body` on the thread, waits for it, and returns what it returned.
    func perform<T>(_ body: () -> T) -> T {
        var result: T?
        withoutActuallyEscaping(body) { body in
            condition.lock()
            job = { result = body() }
            finished = false
            condition.broadcast()
            while !finished { condition.wait() }
            condition.unlock()
        }
        return result!
    }
}
