// Where Coffer runs work that blocks a thread (an fsync, Argon2id, a synchronous caller waiting on
// the network), so that it never occupies a thread of Swift's cooperative pool, and how a
// synchronous caller waits for async work without needing that pool either.
import Foundation

/// Threads of Coffer's own for work that blocks: made on demand up to ``maximumThreads``, and
/// ended after ``idleSeconds`` without work. Also a `TaskExecutor`, so the jobs of a task started
/// for a blocked synchronous caller (``Offload/wait(_:)``) run here, never on the cooperative pool
/// whose threads that caller may be holding.
package final class BlockingPool: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: every field is guarded by `condition`.
    package static let shared = BlockingPool(maximumThreads: 512)

    /// Threads for the short jobs of tasks that wait on a network for async callers
    /// (``Offload/startBesideCaller(_:)``): one per core, and never more. What runs there never
    /// blocks (an `update` transform of the caller's own is the exception the documentation
    /// asks to keep short); a synchronous caller's work never runs there.
    package static let jobs = BlockingPool(maximumThreads: max(2, ProcessInfo.processInfo.activeProcessorCount))

    package let maximumThreads: Int
    package let idleSeconds: Double
    private let condition = NSCondition()
    private var work: [@Sendable () -> Void] = []
    private var head = 0
    private var threads = 0
    private var idle = 0

    package init(maximumThreads: Int, idleSeconds: Double = 10) {
        self.maximumThreads = max(1, maximumThreads)
        self.idleSeconds = idleSeconds
    }

    /// Runs `body` on a pool thread as soon as one is free.
    package func submit(_ body: @escaping @Sendable () -> Void) {
        condition.lock()
        work.append(body)
        // A thread for every queued job no idle thread is free to take: a job may block until a
        // later one has run (a synchronous caller waiting on async work), so work never queues
        // behind a busy thread while the pool may grow.
        let start = work.count - head > idle && threads < maximumThreads
        if start { threads += 1 }
        condition.signal()
        condition.unlock()
        guard start else { return }
        let thread = Thread { [self] in serve() }
        thread.name = "coffer.blocking"
        thread.start()
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        submit { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Marks the threads of every pool, so work can tell whether it runs on one.
    private static let marker = ThreadLocalSlot()

    /// Whether the calling thread is a thread of a ``BlockingPool``.
    package static var isCurrentThread: Bool { marker.value != nil }

    /// Whether the calling thread is a thread of ``jobs``.
    package static var isJobsThread: Bool { marker.value == Unmanaged.passUnretained(jobs).toOpaque() }

    /// What a slot of ``work`` holds once its job was taken: captures nothing.
    private static let finished: @Sendable () -> Void = {}

    private func serve() {
        Self.marker.value = Unmanaged.passUnretained(self).toOpaque()
        condition.lock()
        while true {
            if head < work.count {
                let body = work[head]
                // The queue lets go of the job at once: what it captured (a caller's Data or
                // SecureBytes on its way into a vault) is released when the job ends, never
                // kept by the queue until the slot is reused or trimmed.
                work[head] = Self.finished
                head += 1
                if head > 64 && head * 2 > work.count {
                    work.removeFirst(head)
                    head = 0
                }
                condition.unlock()
                body()
                condition.lock()
                continue
            }
            idle += 1
            let woken = condition.wait(until: Date() + idleSeconds)
            idle -= 1
            if !woken && head >= work.count {
                threads -= 1
                condition.unlock()
                return
            }
        }
    }
}

/// Moves blocking work off the cooperative pool, and lets a blocking caller wait for async work.
package enum Offload {
    /// Runs `body`, which may block (an fsync, a KDF, a lock held by another process), on a
    /// thread of ``BlockingPool``; the calling task suspends meanwhile and holds no thread.
    package static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            BlockingPool.shared.submit { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Starts `operation` as a task of Coffer's (a background write, a load, a change feed, a
    /// connection pool) whose jobs run on ``BlockingPool``: it makes progress even while every
    /// thread of the cooperative pool is held by callers blocked in ``wait(_:)``.
    @discardableResult
    package static func start(_ operation: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        Task(executorPreference: BlockingPool.shared) { await operation() }
    }

    /// Starts `operation` as a task for an async caller's work that waits on a network (a
    /// PostgreSQL call): on ``BlockingPool/jobs``, a pool of as many threads as cores that never
    /// grows, unless the caller runs on a Coffer thread (a synchronous caller's work, which
    /// stays on ``BlockingPool/shared``, as ``start(_:)``).
    ///
    /// Such a task resumes often (a lease, a reply) and each resumption is a short job: on a
    /// few threads that are already running, the next job is taken without waking a thread,
    /// where the growing pool woke one of its many threads for each. Those hand-offs were most
    /// of the cost of a PostgreSQL write from async code (BENCHMARKS.md, "Fleet writes from
    /// async code, third round"). The global concurrent executor would do as well, but a caller that blocks
    /// cooperative threads (a sleep, a process wait) would then stall these tasks while they hold
    /// pooled connections that other callers wait for.
    @discardableResult
    package static func startBesideCaller(_ operation: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        if BlockingPool.isCurrentThread { return start(operation) }
        return Task(executorPreference: BlockingPool.jobs) { await operation() }
    }

    /// Runs `operation` to completion for a synchronous caller, blocking the calling thread.
    ///
    /// The operation's jobs run on ``BlockingPool`` (its task prefers that executor), so they
    /// never need a cooperative thread, which the caller may be one of. Every operation Coffer
    /// passes here ends by a deadline of its own (PostgreSQL: see `PostgresConfiguration.timeout`).
    package static func wait<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let outcome = Locked<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        // The task takes the operation out of `holder` and drops it before signalling: a closure
        // of the caller's (``WhileBlocked``, a `withoutActuallyEscaping` one) must not outlive
        // this call.
        let holder = OperationHolder(operation)
        Task(executorPreference: BlockingPool.shared) {
            let result = await holder.run()
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}

/// The operation of one ``Offload/wait(_:)``, run once and released as it ends.
private final class OperationHolder<T: Sendable>: Sendable {
    private let operation: Locked<(@Sendable () async throws -> T)?>

    init(_ operation: @escaping @Sendable () async throws -> T) {
        self.operation = Locked(operation)
    }

    func run() async -> Result<T, any Error> {
        guard let body = operation.withLock({ $0.take() }) else { return .failure(CancellationError()) }
        return await Self.call(body)
    }

    /// Calls `body`; its last reference goes when this returns.
    private static func call(_ body: consuming @escaping @Sendable () async throws -> T) async -> Result<T, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }
}

/// A value — a closure of a synchronous caller — lent to async work that runs while that caller
/// waits for it, and taken back when the caller stops waiting (``revoke()``): work that is still
/// running past its deadline then finds nothing to call, and the caller's closure does not
/// outlive its `withoutActuallyEscaping` scope.
package final class WhileBlocked<Value>: @unchecked Sendable {
    // @unchecked Sendable: `lent` and `inUse` are guarded by `condition`; the closure it holds is
    // called by one task at a time, while the thread that lent it waits.
    private let condition = NSCondition()
    private var lent: Value?
    private var inUse = 0

    package init(_ value: Value) { lent = value }

    /// Calls `body` with the value, unless it was taken back (then it throws). ``revoke()`` waits
    /// for a call in progress, so the value is never used after it returns.
    package func call<R>(_ body: (Value) throws -> R) throws -> R {
        guard let value = borrow() else {
            throw CofferError(.io, "the call was abandoned at its deadline; its transform was not run")
        }
        defer { giveBack() }
        return try Self.use(value, body)
    }

    private static func use<R>(_ value: consuming Value, _ body: (Value) throws -> R) throws -> R {
        try body(value)
    }

    private func borrow() -> Value? {
        condition.lock()
        defer { condition.unlock() }
        guard let lent else { return nil }
        inUse += 1
        return lent
    }

    private func giveBack() {
        condition.lock()
        inUse -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Takes the value back, once no call is using it; later calls throw.
    package func revoke() {
        condition.lock()
        while inUse > 0 { condition.wait() }
        let value = lent
        lent = nil
        condition.unlock()
        withExtendedLifetime(value) {}  // released outside the lock
    }
}

/// The writes to remote stores (``AsyncPersistenceStrategy``) that `@Stored` setters started and
/// that are still on their way: a graceful shutdown waits for them before the process exits.
///
/// Public because a program that runs no `CofferService` (a command-line tool, a job) has no
/// other single call that waits for every property's background write before `main` returns;
/// `try await $x.flush()` waits for one property's.
public enum RemoteWrites: Sendable {
    private static let running = Locked(0)

    /// How many background writers are running now.
    public static var inFlight: Int { running.withLock { $0 } }

    /// Waits until no background write is in flight — acknowledged or failed, those started
    /// meanwhile included — or `timeout` passes (each write ends within its store's own
    /// deadlines). Returns whether none is left. A write that failed is not retried here: its
    /// property's `saveError` says so.
    ///
    /// ```swift
    /// model.flag = true                       // a .postgres property: on its way
    /// _ = await RemoteWrites.settle()         // before the process exits
    /// ```
    @discardableResult
    public static func settle(timeout: Duration = .seconds(30)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while inFlight > 0 {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }

    /// Runs a write in the calling task, counted while it runs.
    package static func counting<T>(_ writer: () async -> T) async -> T {
        running.withLock { $0 += 1 }
        defer { running.withLock { $0 -= 1 } }
        return await writer()
    }

    /// Runs a background writer, counted while it runs.
    package static func run(_ writer: @escaping @Sendable () async -> Void) {
        running.withLock { $0 += 1 }
        Offload.start {
            await writer()
            running.withLock { $0 -= 1 }
        }
    }
}
