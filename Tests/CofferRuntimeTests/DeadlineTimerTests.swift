import CofferCore
import CofferRuntime
import Foundation
import Testing

/// The process's one timer for call deadlines (PostgreSQL leases and statements): a deadline
/// fires once, in deadline order, never before it passes; one disarmed first never fires.
@Suite("DeadlineTimer")
struct DeadlineTimerTests {
    @Test func deadlinesFireInOrderAndNeverEarly() {
        let timer = DeadlineTimer(slack: .milliseconds(5))
        let fired = Locked<[(Int, ContinuousClock.Instant)]>([])
        let done = DispatchSemaphore(value: 0)
        let start = ContinuousClock.now
        // Armed out of order: the heap serves them by deadline.
        let offsets = [60, 10, 40, 20, 50, 30]
        for offset in offsets {
            timer.arm(at: start + .milliseconds(offset)) {
                fired.withLock { $0.append((offset, .now)) }
                done.signal()
            }
        }
        for _ in offsets { done.wait() }
        let seen = fired.withLock { $0 }
        #expect(seen.map(\.0) == offsets.sorted())
        for (offset, at) in seen { #expect(at >= start + .milliseconds(offset)) }
        #expect(timer.armed == 0)
    }

    @Test func aDisarmedDeadlineNeverFires() {
        let timer = DeadlineTimer(slack: .milliseconds(1))
        let fired = Locked(0)
        let later = DispatchSemaphore(value: 0)
        let token = timer.arm(at: .now + .milliseconds(20)) { fired.withLock { $0 += 1 } }
        #expect(timer.disarm(token))
        #expect(!timer.disarm(token))  // once only
        // A later deadline fires: the disarmed one before it was passed over, not run.
        timer.arm(at: .now + .milliseconds(40)) { later.signal() }
        later.wait()
        #expect(fired.withLock { $0 } == 0)
        #expect(timer.armed == 0)
    }

    @Test func anEarlierDeadlineWakesTheTimer() {
        let timer = DeadlineTimer(slack: .milliseconds(1))
        let done = DispatchSemaphore(value: 0)
        let far = timer.arm(at: .now + .seconds(3600)) {}
        let start = ContinuousClock.now
        timer.arm(at: start + .milliseconds(10)) { done.signal() }
        // Woken for the nearer deadline rather than sleeping toward the far one (a generous
        // bound: a loaded machine may be slow, never an hour).
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(timer.disarm(far))
    }
}
