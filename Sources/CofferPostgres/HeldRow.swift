#if Postgres
import CofferCore
import Foundation

/// A transaction held open, its row locked, while its caller decides what to write
/// (``KeyLockingPersistenceStrategy``): the transaction runs as a task of its own, offers the
/// row's value and waits for the decision; the caller transforms the value in its own context
/// (on its own thread, in its own task) and hands the decision back.
///
/// The wait for the decision is bounded by the transaction's answer deadline
/// (``PostgresConfiguration/timeout``): past it the connection is closed, the server rolls the
/// transaction back and ``store(_:)`` throws.
final class HeldRow: KeyLock {
    enum Decision: Sendable {
        case store(Data?)
        case release
    }

    let current: Data?
    private let decision: Verdict<Decision>
    private let outcome: Verdict<Result<Void, any Error>>

    private init(current: Data?, decision: Verdict<Decision>, outcome: Verdict<Result<Void, any Error>>) {
        self.current = current
        self.decision = decision
        self.outcome = outcome
    }

    /// Starts `transaction` and returns once it offers its row's value (or throws what ended
    /// it before). `transaction` calls its argument once, with the row locked, and writes what
    /// it returns (`.release`: nothing) before it commits.
    static func hold(
        _ transaction: @escaping @Sendable (_ offer: @escaping @Sendable (Data?) async throws -> Decision) async throws -> Void
    ) async throws -> HeldRow {
        let offered = Verdict<Result<Data?, any Error>>()
        let decision = Verdict<Decision>()
        let outcome = Verdict<Result<Void, any Error>>()
        let offers = Guarded(0)
        // Coffer's task (as every PostgreSQL call's work): a synchronous caller blocked on a
        // cooperative thread waiting for the offer must not be what it waits behind.
        Offload.startBesideCaller {
            do {
                try await transaction { current in
                    // A transaction tried again after its offer (the vault's keys rotated
                    // meanwhile) would write a decision made from a value it no longer holds.
                    guard offers.withLock({ count -> Bool in
                        count += 1
                        return count == 1
                    }) else {
                        throw CofferError(.busy, "the locked value changed before the update was written; nothing was written")
                    }
                    offered.settle(.success(current))
                    return await decision.value
                }
                outcome.settle(.success(()))
            } catch {
                offered.settle(.failure(error))
                outcome.settle(.failure(error))
            }
        }
        switch await offered.value {
        case .success(let current): return HeldRow(current: current, decision: decision, outcome: outcome)
        case .failure(let error): throw error
        }
    }

    func store(_ new: Data?) async throws {
        decision.settle(.store(new))
        try await outcome.value.get()
    }

    func release() async {
        decision.settle(.release)
        _ = await outcome.value
    }

    /// A lock dropped undecided is released (settling again does nothing).
    deinit { decision.settle(.release) }
}
#endif
