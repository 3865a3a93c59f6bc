// One timer thread per process for the deadlines of calls that wait outside the process (a
// PostgreSQL lease or statement): arming a deadline is a heap insertion under a lock, and
// disarming it is a dictionary removal. Neither starts a task nor wakes a thread, where a
// watchdog task per call cost several thread hand-offs on every call (BENCHMARKS.md, "Never
// freezing the host").
import CofferCore
import Foundation

/// Deadlines of in-flight calls, served by one thread that sleeps until the earliest one.
///
/// A deadline fires its action on the timer thread, at most ``slack`` late; the action must be
/// short and must not block (it settles a race or closes a connection). A deadline disarmed
/// before it passes never fires.
package final class DeadlineTimer: @unchecked Sendable {
    // @unchecked Sendable: every field is guarded by `condition`.
    package static let shared = DeadlineTimer()

    /// How late a deadline may fire: the thread wakes once for every deadline this close
    /// together, so a steady stream of calls costs it a few wake-ups a second, not one per call.
    package let slack: Duration

    package struct Token: Sendable, Hashable {
        fileprivate let id: UInt64
    }

    private let condition = NSCondition()
    private var heap: [(deadline: ContinuousClock.Instant, id: UInt64)] = []
    private var actions: [UInt64: @Sendable () -> Void] = [:]
    private var nextID: UInt64 = 0
    private var threadRunning = false
    /// When the thread wakes next (`nil`: it waits for a first deadline).
    private var wakeAt: ContinuousClock.Instant?

    package init(slack: Duration = .milliseconds(20)) {
        self.slack = slack
    }

    /// Runs `action` at `deadline` (on the timer thread) unless ``disarm(_:)`` comes first.
    @discardableResult
    package func arm(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> Token {
        condition.lock()
        nextID &+= 1
        let id = nextID
        actions[id] = action
        push((deadline, id))
        // The thread is woken only when it would otherwise serve this deadline more than
        // `slack` late: a stream of calls with one timeout never wakes it.
        let wake = wakeAt.map { deadline + slack < $0 } ?? true
        let start = !threadRunning
        threadRunning = true
        if wake { condition.signal() }
        condition.unlock()
        if start {
            let thread = Thread { [self] in serve() }
            thread.name = "coffer.deadlines"
            thread.start()
        }
        return Token(id: id)
    }

    /// Cancels a deadline; returns whether it had not fired yet.
    @discardableResult
    package func disarm(_ token: Token) -> Bool {
        condition.lock()
        let action = actions.removeValue(forKey: token.id)
        condition.unlock()
        return action != nil
    }

    /// How many deadlines are armed (tests).
    package var armed: Int {
        condition.lock()
        defer { condition.unlock() }
        return actions.count
    }

    private func serve() {
        condition.lock()
        while true {
            // Entries disarmed meanwhile are dropped as they reach the top.
            while let top = heap.first, actions[top.id] == nil { pop() }
            guard let top = heap.first else {
                wakeAt = nil
                condition.wait()
                continue
            }
            let now = ContinuousClock.now
            if top.deadline <= now {
                var due: [@Sendable () -> Void] = []
                while let first = heap.first, first.deadline <= now {
                    pop()
                    if let action = actions.removeValue(forKey: first.id) { due.append(action) }
                }
                condition.unlock()
                for action in due { action() }
                condition.lock()
                continue
            }
            let wake = top.deadline + slack
            wakeAt = wake
            // In steps of at most a quarter second, measured on the continuous clock: the
            // condition's own timeout is on the wall clock, which may be set back.
            let step = min(now.duration(to: wake), .milliseconds(250))
            _ = condition.wait(until: Date() + step.inSeconds)
        }
    }

    // MARK: A binary min-heap on the deadline

    private func push(_ entry: (deadline: ContinuousClock.Instant, id: UInt64)) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func pop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count && heap[right].deadline < heap[smallest].deadline { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
