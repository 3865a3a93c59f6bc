#if Postgres
import CofferCore
import CofferCrypto
import CofferRuntime
import Foundation

/// A transaction held open, its row locked, while its caller decides what to write
/// (``KeyLockingPersistenceStrategy``): the transaction runs as a task of its own, offers the
/// row's value and waits for the decision; the caller transforms the value in its own context
/// (on its own thread, in its own task) and hands the decision back.
///
/// The wait for the lock and for the decision together end at `deadline` (given by the store:
/// its ``PostgresConfiguration/timeout`` after the call began, before the connection's own
/// answer deadline): past it the transaction rolls back and ``store(_:)`` throws
/// ``CofferError/Code/busy``, having written nothing.
final class HeldRow: KeyLock {
    enum Decision: Sendable {
        case store(Data?)
        case release
        /// The caller did not decide by the deadline.
        case expired
    }

    /// The value offered, zeroed once the lock is done with when it is a secret.
    private let offered: Guarded<Data?>
    private let secret: Bool
    private let decision: Verdict<Decision>
    private let outcome: Verdict<Result<Void, any Error>>

    var current: Data? { offered.withLock { $0 } }

    private init(
        current: Data?, secret: Bool, decision: Verdict<Decision>, outcome: Verdict<Result<Void, any Error>>
    ) {
        self.offered = Guarded(current)
        self.secret = secret
        self.decision = decision
        self.outcome = outcome
    }

    /// Starts `transaction` and returns once it offers its row's value (or throws what ended
    /// it before). `transaction` calls its argument once, with the row locked, and writes what
    /// it returns (`.release`: nothing) before it commits; `.expired` throws, rolling it back.
    ///
    /// - Parameters:
    ///   - secret: The value is a secret (a vault's): pass a copy of its own, which the lock
    ///     zeroes when it is stored, released or dropped.
    ///   - deadline: When the caller's decision is given up.
    static func hold(
        secret: Bool, until deadline: ContinuousClock.Instant,
        _ transaction: @escaping @Sendable (_ offer: @escaping @Sendable (Data?) async throws -> Decision) async throws -> Void
    ) async throws -> HeldRow {
        let offered = Verdict<Result<Data?, any Error>>()
        let decision = Verdict<Decision>()
        let outcome = Verdict<Result<Void, any Error>>()
        let offers = Guarded(0)
        let timer = DeadlineTimer.shared
        let expiry = timer.arm(at: deadline) { decision.settle(.expired) }
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
                    let decided = await decision.value
                    if case .expired = decided {
                        throw CofferError(
                            .busy,
                            "the update held the key locked for longer than the store's timeout "
                                + "(waiting for the lock, then for its transform); nothing was written")
                    }
                    return decided
                }
                outcome.settle(.success(()))
                // (A transaction that returned without offering would leave its caller waiting.)
                offered.settle(.failure(CofferError(.io, "the locked read ended without a value; nothing was written")))
            } catch {
                offered.settle(.failure(error))
                outcome.settle(.failure(error))
            }
            _ = timer.disarm(expiry)
        }
        switch await offered.value {
        case .success(let current):
            return HeldRow(current: current, secret: secret, decision: decision, outcome: outcome)
        case .failure(let error):
            throw error
        }
    }

    /// Stores `new`, commits and releases. Call one of ``store(_:)`` and ``release()``, once.
    func store(_ new: Data?) async throws {
        decision.settle(.store(new))
        let result = await outcome.value
        forget()
        try result.get()
    }

    /// Releases the lock, storing nothing. Call one of ``store(_:)`` and ``release()``, once.
    func release() async {
        decision.settle(.release)
        _ = await outcome.value
        forget()
    }

    /// Zeroes a secret value (the caller has made its decision from it).
    private func forget() {
        guard secret else { return }
        offered.withLock { value in
            SecureMemory.zero(&value)
            value = nil
        }
    }

    /// A lock dropped undecided is released (settling again does nothing).
    deinit {
        decision.settle(.release)
        forget()
    }
}
#endif
