import CofferCore
import Synchronization
import Testing

/// Coffer's own threads (``BlockingPool``, ``Offload``): what they keep after a job.
@Suite("Coffer's threads keep nothing a finished job captured")
struct BlockingPoolTests {
    /// Stands for what a caller hands to a write: a secret on its way into a vault.
    final class Captured: Sendable {}

    struct Weak: Sendable {
        weak var object: Captured?
    }

    @Test("A job's captures are released when it ends, while the pool's threads stay alive and idle")
    func finishedJobsAreReleased() async throws {
        // Several jobs, so the slots are not all trimmed by the queue's compaction.
        let weakOnes = Locked<[Weak]>([])
        for _ in 0..<8 {
            let captured = Captured()
            weakOnes.withLock { $0.append(Weak(object: captured)) }
            let seen = try await Offload.run { ObjectIdentifier(captured) }
            #expect(seen == ObjectIdentifier(captured))
        }
        // A job's caller resumes from inside the job, so the job may still be ending: give it a
        // moment. The pool's thread then waits for more work (it exits only after seconds idle),
        // which is when the queue used to keep the last 64 jobs and all they captured.
        var kept = 0
        for _ in 0..<200 {
            kept = weakOnes.withLock { ones in ones.filter { $0.object != nil }.count }
            if kept == 0 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(kept == 0, "\(kept) finished job(s) still hold what they captured")
    }
}
