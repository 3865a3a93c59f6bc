// Loading: the first read's load (one thread loads, the others wait for it), `load()`, and
// adopting what the store holds as the value in memory.
import CofferCore
import Foundation

extension StoredCell {
    /// The first load. A failure keeps the initial value and sets ``error`` without a
    /// notification: nobody can have read the value or the error before (both load first).
    ///
    /// Nothing here runs under the cell's lock but the last step: resolving (which may open a
    /// vault), subscribing and reading the store happen first, and the first result to arrive
    /// is kept. A remote store is not read here at all: the value stays the initial one, and a
    /// background load brings the stored one (``isLoading`` meanwhile).
    func loadIfNeeded() {
        guard !state.withLock({ $0.loaded }) else { return }
        let binding: StoreBinding
        switch self.binding() {
        case .failure(let error):
            mutate { s in
                guard !s.loaded else { return }
                s.loaded = true
                s.error = error
                s.loadError = error
            }
            return
        case .success(nil):
            mutate { $0.loaded = true }
            return
        case .success(let resolved?):
            binding = resolved
        }
        if let remote = binding.remote {
            let start = mutate { s -> Bool in
                guard !s.loaded else { return false }
                s.loaded = true
                s.isLoading = true
                return true
            }
            if start { startBackgroundLoad(remote, key: binding.key) }
            return
        }
        // One thread loads; the others that read first wait for its result rather than read
        // the store again (a vault decrypts on every load). A local store answers in
        // microseconds, so the wait is as short as the lock it replaces; the state lock is
        // not held, so writes and reads of loaded cells go on. The loading thread itself
        // (a strategy that reads this property while loading it) never waits for itself.
        let gate = mutate { s -> FirstLoadGate?? in
            if s.loaded { return .some(nil) }
            if let gate = s.firstLoad { return gate.isOwnedByCurrentThread ? nil : .some(gate) }
            s.firstLoad = FirstLoadGate()
            return nil
        }
        if case .some(let running) = gate {
            running?.wait()
            return
        }
        let loaded: Result<Value?, CofferError>
        do {
            loaded = .success(try binding.strategy.load(binding.key).map { try decodeValue($0, as: binding.encoding) })
        } catch {
            loaded = .failure(.wrapping(error, "loading \(backing)"))
        }
        let finished = mutate { s -> FirstLoadGate? in
            let gate = s.firstLoad
            s.firstLoad = nil
            guard !s.loaded else { return gate }
            s.loaded = true
            switch loaded {
            case .success(let value?): s.value = value
            case .success(nil): break
            case .failure(let error):
                s.error = error
                s.loadError = error
            }
            return gate
        }
        finished?.open()
    }

    /// Reads the value from the strategy now, replacing the one in memory.
    ///
    /// A missing key gives ``initialValue``. Observers are notified when the value changes.
    /// - Returns: The loaded value.
    /// - Throws: ``CofferError`` when the backing cannot be resolved, the strategy cannot read,
    ///   or the stored bytes are not a `Value` (``CofferError/Code/decoding``). The value in
    ///   memory is then unchanged, and ``error`` holds the failure.
    @discardableResult
    func load() throws -> Value {
        try load(keepingUnsavedWrite: false)
    }

    /// ``load()``; with `keepingUnsavedWrite` (a reload because the store changed elsewhere), a
    /// write made here that is not persisted yet — inside a batch, or between the setter and its
    /// save — is newer than what the store holds and is kept: it is about to be written over the
    /// other writer's value (the last write wins). Without this, a reload racing a batch put the
    /// older stored value back in memory and the batch then found nothing left to persist.
    func load(keepingUnsavedWrite: Bool) throws -> Value {
        let resolved: StoreBinding?
        switch binding() {
        case .failure(let error):
            setLoadError(error)
            throw error
        case .success(let binding): resolved = binding
        }
        if let resolved, let remote = resolved.remote {
            // A synchronous caller of a remote store: the async load, on Coffer's threads.
            return try Offload.wait { try await self.loadRemote(remote, key: resolved.key) }
        }
        let outcome: Result<(value: Value, changed: Bool), CofferError> = persistLock.withLock { _ in
            guard let binding = resolved else {
                return .success((mutate { s in s.loaded = true; return s.value }, false))
            }
            let loaded: Value
            do {
                loaded = try binding.strategy.load(binding.key).map { try decodeValue($0, as: binding.encoding) } ?? initialValue
            } catch {
                mutate { $0.loaded = true }
                return .failure(.wrapping(error, "loading \(backing)"))
            }
            let (value, changed) = mutate { s -> (Value, Bool) in
                guard let changed = adoptStored(loaded, in: &s, keepingUnsavedWrite: keepingUnsavedWrite) else {
                    return (s.value, false)
                }
                return (loaded, changed)
            }
            return .success((value, changed))
        }
        switch outcome {
        case .success(let result):
            setLoadError(nil)
            if result.changed { valueDidChange() }
            return result.value
        case .failure(let error):
            setLoadError(error)
            throw error
        }
    }

    /// Makes `value`, which the store now holds, the value in memory; returns whether it
    /// changed. A write made here meanwhile and not saved yet is newer, and is kept.
    func adopt(_ value: Value) -> Bool {
        mutate { s in adoptStored(value, in: &s, keepingUnsavedWrite: true) ?? false }
    }

    /// ``adopt(_:)`` unless a write was made here since `writes` counted it (it may already be
    /// stored, after the value being adopted: it is the newer one).
    func adopt(_ value: Value, ifNoWriteSince writes: UInt64) -> Bool {
        mutate { s in
            guard s.writes == writes else { return false }
            return adoptStored(value, in: &s, keepingUnsavedWrite: true) ?? false
        }
    }

    /// Makes `value`, which the store holds, the value in `s`, and records that the store holds
    /// it; returns whether it changed, or `nil` when `keepingUnsavedWrite` kept a newer write
    /// made here that is not saved yet.
    func adoptStored(_ value: Value, in s: inout State, keepingUnsavedWrite: Bool) -> Bool? {
        if keepingUnsavedWrite, s.loaded, s.version != s.persistedVersion { return nil }
        s.loaded = true
        let changed = !isEqualValues(s.value, value)
        if changed {
            s.value = value
            s.version += 1
        }
        s.persistedVersion = s.version
        return changed
    }

    /// Decodes stored bytes as a `Value`; a failure names the backing and the type.
    func decodeValue(_ data: Data, as encoding: ValueEncoding) throws -> Value {
        guard let coding else { throw notCodable() }
        return try coding.decode(Value.self, from: data, as: encoding, source: backing.description)
    }

    /// Unreachable through the public initialisers (a non-`Codable` value is memory-only), but a
    /// `Backing` is a value anyone can build: say what is wrong rather than trap.
    func notCodable() -> CofferError {
        CofferError(
            .invalidArgument,
            "\(backing) cannot store a \(Value.self): it is not Codable. Make it Codable, or keep the property in memory"
        )
    }
}

/// The first load of a cell from a local store, for the threads that wait for it.
final class FirstLoadGate: @unchecked Sendable {
    // @unchecked Sendable: `isOpen` is guarded by `condition`; `owner` never changes.
    private let condition = NSCondition()
    private var isOpen = false
    private let owner = pthread_self()

    /// Whether the calling thread is the one loading.
    var isOwnedByCurrentThread: Bool { pthread_equal(owner, pthread_self()) != 0 }

    /// Waits until the load has stored its result.
    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }
}
