// Resolving a cell's backing: once, into an immutable binding that every later load, write,
// update and batch uses as it is.
import CofferCore
import Foundation

/// Where a cell's value persists, resolved once from its ``Backing``: the strategy, the key, and
/// what the strategy is, asked once instead of on every write (its value encoding, whether it
/// waits on a network, which store it is).
///
/// Immutable: a cell keeps the binding its first successful resolution made for as long as it
/// lives. A failed resolution leaves no binding; the next use of the cell tries again.
final class StoreBinding: Sendable {
    /// The store.
    let strategy: any PersistenceStrategy
    /// The key of the value in ``strategy``.
    let key: String
    /// How typed values become the strategy's bytes (``PersistenceStrategy/valueEncoding``).
    let encoding: ValueEncoding
    /// The strategy, when it waits on a network (StoredCell+RemoteWrites.swift); `nil` for a
    /// local store, written and read before the call returns.
    let remote: (any AsyncPersistenceStrategy)?
    /// Which store it is (``PersistenceStrategy/id``), asked once: a ``StoredMap``'s `changes`
    /// are told by store.
    let storeID: StoreID?

    init(strategy: any PersistenceStrategy, key: String) {
        self.strategy = strategy
        self.key = key
        self.storeID = strategy.id
        self.encoding = strategy.valueEncoding
        self.remote = strategy as? any AsyncPersistenceStrategy
    }
}

extension StoredCell {
    /// The binding, resolving the backing on first use (and again after a failure); `nil` for
    /// memory.
    ///
    /// Resolving runs with no lock held (opening a context's vault runs Argon2id); when two
    /// threads resolve at once, the first result stored is used by both. The thread that stores
    /// it subscribes the cell to outside changes, also with no lock held.
    func binding() -> Result<StoreBinding?, CofferError> {
        if let known = state.withLock({ Self.known($0.resolution) }) { return known }
        let made: Result<StoreBinding?, CofferError>
        do {
            made = .success(try backing.resolve(context).map { StoreBinding(strategy: $0.strategy, key: $0.key) })
        } catch {
            made = .failure(.wrapping(error, "opening \(backing)"))
        }
        let (result, shouldSubscribe) = state.withLock { s -> (Result<StoreBinding?, CofferError>, Bool) in
            if let known = Self.known(s.resolution) { return (known, false) }
            switch made {
            case .success(let binding?):
                s.resolution = .store(binding)
                let subscribe = !s.detached && s.subscription == nil && !s.subscribing
                if subscribe { s.subscribing = true }
                return (made, subscribe)
            case .success(nil):
                s.resolution = .memory
            case .failure:
                s.resolution = .failed
            }
            return (made, false)
        }
        if shouldSubscribe, case .success(let binding?) = result { subscribe(to: binding) }
        return result
    }

    /// The outcome of a resolution that is final, or `nil` when one must be tried.
    private static func known(_ resolution: Resolution) -> Result<StoreBinding?, CofferError>? {
        switch resolution {
        case .store(let binding): .success(binding)
        case .memory: .success(nil)
        case .unresolved, .failed: nil
        }
    }

    /// Whether the backing is resolved (to a store, or to memory).
    var isResolved: Bool {
        state.withLock { Self.known($0.resolution) != nil }
    }

    /// The binding; resolving (which may open a vault with Argon2id) runs on Coffer's threads
    /// when the backing is not resolved yet, never on the caller's cooperative thread.
    func bindingOffPool() async -> Result<StoreBinding?, CofferError> {
        if isResolved { return binding() }
        switch try? await Offload.run({ self.binding() }) {
        case .success?:
            // The binding is taken from the cell, through its lock, not from the hand-off: the
            // lock orders the binding's initialisation before this read for ThreadSanitizer too
            // (a continuation resumed from a Coffer thread is not seen as ordering it).
            return state.withLock { Self.known($0.resolution) } ?? binding()
        case .failure(let error)?: return .failure(error)
        case nil: return binding()
        }
    }
}
