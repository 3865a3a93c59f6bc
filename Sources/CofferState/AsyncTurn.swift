// One async holder at a time, in arrival order, with a deadline for each waiter: how a cell's
// remote updates in one process take turns instead of racing each other's compare-and-swap.
import CofferCore

/// Async callers take turns: ``enter(until:)`` returns `true` once it is the caller's turn (in
/// arrival order), `false` when the deadline passed first; ``leave()`` hands the turn to the next
/// waiter. No thread is held while waiting.
final class AsyncTurn: Sendable {
    private struct State {
        var held = false
        var next: UInt64 = 0
        var waiters: [(id: UInt64, resume: CheckedContinuation<Bool, Never>)] = []
        /// Waiters whose deadline passed before they were queued.
        var abandoned: Set<UInt64> = []
    }

    private let state = Locked(State())

    init() {}

    /// Waits for the turn until `deadline` (or until the caller's task is cancelled).
    func enter(until deadline: ContinuousClock.Instant) async -> Bool {
        let id = state.withLock { s -> UInt64? in
            guard s.held else {
                s.held = true
                return nil
            }
            s.next += 1
            return s.next
        }
        guard let id else { return true }
        let timer = Task {
            do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }  // it was our turn
            self.abandon(id)
        }
        let entered = await withTaskCancellationHandler {
            await withCheckedContinuation { (resume: CheckedContinuation<Bool, Never>) in
                let now = state.withLock { s -> Bool? in
                    if s.abandoned.remove(id) != nil { return false }
                    guard s.held else {
                        s.held = true
                        return true
                    }
                    s.waiters.append((id, resume))
                    return nil
                }
                if let now { resume.resume(returning: now) }
            }
        } onCancel: {
            abandon(id)  // a cancelled caller stops waiting at once
        }
        // Once the timer has ended, nothing gives this waiter up any more: forget it.
        timer.cancel()
        await timer.value
        state.withLock { _ = $0.abandoned.remove(id) }
        return entered
    }

    /// Ends the caller's turn: the next waiter's begins.
    func leave() {
        let next = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard !s.waiters.isEmpty else {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst().resume  // `held` stays: the turn is handed over
        }
        next?.resume(returning: true)
    }

    private func abandon(_ id: UInt64) {
        let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard let index = s.waiters.firstIndex(where: { $0.id == id }) else {
                s.abandoned.insert(id)  // not queued yet: it gives up when it is
                return nil
            }
            return s.waiters.remove(at: index).resume
        }
        waiter?.resume(returning: false)
    }
}
