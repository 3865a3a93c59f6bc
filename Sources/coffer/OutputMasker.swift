import CofferCore
import CofferCrypto
import CofferInterchange
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The secret values `coffer run` conceals in its child's output, shared by the two relays.
///
/// Values are only ever added, never dropped: `--watch` adds each child's new values, and every
/// value any child was given stays concealed for as long as the relays run, since a process an
/// earlier child left behind (one it started in the background) may still write to the same
/// pipes.
final class ConcealedValues: Sendable {
    private let values = Locked<[SecureBytes]>([])

    /// Conceals `values` too from now on (empty ones, and ones concealed already, are ignored).
    func add(_ values: [SecureBytes]) {
        self.values.withLock { kept in
            for value in values where value.count > 0 && !kept.contains(where: { $0 == value }) { kept.append(value) }
        }
    }

    /// The values now concealed, in the order they were added.
    var current: [SecureBytes] { values.withLock { $0 } }
}

/// An Aho-Corasick automaton over a set of secret values: fed a stream one byte at a time, it
/// knows after each byte the longest end of the stream that is the beginning of some value (its
/// state), and the longest value the stream now ends with.
///
/// The trie's nodes, their failure links and the labels (the values' bytes) live in one
/// allocation of its own, wiped when released. A transition costs a walk along failure links,
/// each shortening the state by at least one byte, and a scan of a node's children (at most 256):
/// over a stream, a constant amount of work per byte.
final class ConcealmentAutomaton {
    /// The longest value's length.
    let longest: Int

    private let memory: UnsafeMutableRawBufferPointer
    /// Per node (the root is node 0, which is no node's child: 0 also means "none"):
    private let firstChild: UnsafeMutablePointer<Int32>
    private let nextSibling: UnsafeMutablePointer<Int32>
    private let parent: UnsafeMutablePointer<Int32>
    private let failure: UnsafeMutablePointer<Int32>
    private let depth: UnsafeMutablePointer<Int32>
    /// The length of the longest value the node's bytes end with; 0 for none.
    private let matched: UnsafeMutablePointer<Int32>
    private let label: UnsafeMutablePointer<UInt8>
    /// The root's children by byte (the root is where most steps of a stream begin).
    private let fromRoot: UnsafeMutablePointer<Int32>

    /// The automaton for the non-empty ones of `values`; `nil` when there are none.
    init?(_ values: [SecureBytes]) {
        let total = values.reduce(0) { $0 + $1.count }
        guard total > 0 else { return nil }
        longest = values.map(\.count).max() ?? 0
        let capacity = total + 1
        let table = 6 * capacity + 256
        memory = UnsafeMutableRawBufferPointer.allocate(byteCount: 4 * table + capacity, alignment: 16)
        memory.initializeMemory(as: UInt8.self, repeating: 0)
        let words = memory.baseAddress!.bindMemory(to: Int32.self, capacity: table)
        firstChild = words
        nextSibling = words + capacity
        parent = words + 2 * capacity
        failure = words + 3 * capacity
        depth = words + 4 * capacity
        matched = words + 5 * capacity
        fromRoot = words + 6 * capacity
        label = (memory.baseAddress! + 4 * table).bindMemory(to: UInt8.self, capacity: capacity)
        var count: Int32 = 1
        var ignored = 0
        for value in values {
            value.withUnsafeBytes { bytes in
                var node: Int32 = 0
                for byte in bytes {
                    var next = child(of: node, byte, steps: &ignored)
                    if next == 0 {
                        next = count
                        count += 1
                        label[Int(next)] = byte
                        parent[Int(next)] = node
                        depth[Int(next)] = depth[Int(node)] + 1
                        if node == 0 {
                            fromRoot[Int(byte)] = next
                        } else {
                            nextSibling[Int(next)] = firstChild[Int(node)]
                            firstChild[Int(node)] = next
                        }
                    }
                    node = next
                }
                if node != 0 { matched[Int(node)] = depth[Int(node)] }
            }
        }
        // Failure links breadth first: a node's link is the longest proper end of its bytes that
        // is a node too, and it ends with every value that link ends with.
        var queue: [Int32] = []
        queue.reserveCapacity(Int(count))
        for byte in 0..<256 where fromRoot[byte] != 0 { queue.append(fromRoot[byte]) }
        var head = 0
        while head < queue.count {
            let node = queue[head]
            head += 1
            var next = firstChild[Int(node)]
            while next != 0 {
                let byte = label[Int(next)]
                var candidate = failure[Int(node)]
                while true {
                    let found = child(of: candidate, byte, steps: &ignored)
                    if found != 0 {
                        failure[Int(next)] = found
                        break
                    }
                    if candidate == 0 { break }
                    candidate = failure[Int(candidate)]
                }
                if matched[Int(next)] == 0 { matched[Int(next)] = matched[Int(failure[Int(next)])] }
                queue.append(next)
                next = nextSibling[Int(next)]
            }
        }
    }

    deinit {
        SecureMemory.zero(memory)
        memory.deallocate()
    }

    /// `node`'s child for `byte`; 0 when it has none. Counts the children looked at in `steps`.
    @inline(__always)
    private func child(of node: Int32, _ byte: UInt8, steps: inout Int) -> Int32 {
        if node == 0 { return fromRoot[Int(byte)] }
        var next = firstChild[Int(node)]
        while next != 0 {
            steps += 1
            if label[Int(next)] == byte { return next }
            next = nextSibling[Int(next)]
        }
        return 0
    }

    /// The state after `state` and `byte`; `steps` counts the work done.
    @inline(__always)
    func next(_ state: Int32, _ byte: UInt8, steps: inout Int) -> Int32 {
        var node = state
        while true {
            steps += 1
            let found = child(of: node, byte, steps: &steps)
            if found != 0 { return found }
            if node == 0 { return 0 }
            node = failure[Int(node)]
        }
    }

    /// How many of the stream's last bytes `state` stands for.
    @inline(__always)
    func depth(_ state: Int32) -> Int { Int(depth[Int(state)]) }

    /// The length of the longest value the stream ends with in `state`; 0 for none.
    @inline(__always)
    func matched(_ state: Int32) -> Int { Int(matched[Int(state)]) }

    /// Writes the ``depth(_:)`` bytes `state` stands for to the start of `buffer`.
    func bytes(of state: Int32, into buffer: UnsafeMutableRawBufferPointer) {
        var node = state
        var index = depth(state)
        while node != 0 {
            index -= 1
            buffer[index] = label[Int(node)]
            node = parent[Int(node)]
        }
    }
}

/// Replaces every occurrence of a secret value in a stream of bytes by
/// ``OutputMasker/replacement``, also when the stream splits the value across reads.
///
/// Matches that overlap (of one secret or of several: `abc` and `bcdefgh` in `abcdefgh`) are
/// replaced together, by one replacement for the whole run they cover, so no byte of any secret
/// is written; matches that only touch (`abcabc`) are replaced one by one.
///
/// The stream goes through a ``ConcealmentAutomaton`` once, a constant amount of work per byte,
/// and every byte is written (or replaced) as soon as it is known, whatever follows, not to be
/// part of a secret (or to be): only the stream's last bytes that may still begin a secret are
/// held back, fewer than the longest secret, until the next bytes show whether the secret follows
/// (then they are replaced) or not (then written), or the stream ends (then written). A line is
/// therefore never delayed unless its end is itself the start of a secret. The replacement for a
/// run is written as soon as the run's start is certain; bytes that later extend it (a secret
/// overlapping it, `aaaa` in a long run of `a`) are dropped, without a second replacement.
///
/// The held bytes live in one buffer of its own, wiped after every step and when released.
final class OutputMasker {
    /// What a secret value becomes.
    static let replacement = Array("<concealed by coffer>".utf8)

    /// The largest read.
    static let chunk = 64 * 1024

    /// The stream's bytes from `scan.origin` on: the held ones, then the ones being scanned.
    private var storage: UnsafeMutableRawBufferPointer
    /// Held bytes at the start of `storage`: the stream's bytes from `scan.decided` to `scan.position`.
    private var held = 0
    /// The automaton for `secrets`, `nil` when there is none.
    private var automaton: ConcealmentAutomaton?
    /// The values `automaton` was built for (the same objects: a change is seen by identity).
    private var secrets: [SecureBytes] = []
    private var scan = Scan()

    /// The work done so far: automaton transitions and nodes looked at (for tests, which check
    /// that it grows with the stream's length, not faster).
    var steps: Int { scan.steps }
    /// The bytes now held back (for tests: fewer than the longest secret, always).
    var heldCount: Int { held }

    init() {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 16)
    }

    deinit {
        SecureMemory.zero(storage)
        storage.deallocate()
    }

    /// Room for the held bytes and one read beside them.
    private func reserve() {
        let needed = held + Self.chunk
        guard storage.count < needed else { return }
        let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: needed, alignment: 16)
        if held > 0 { bigger.baseAddress!.copyMemory(from: storage.baseAddress!, byteCount: held) }
        SecureMemory.zero(storage)
        storage.deallocate()
        storage = bigger
    }

    /// Reads once from `fd` (up to ``chunk`` bytes) and writes what can be written through
    /// `emit`. Returns the byte count `read` returned (0 at the end of the stream, -1 with `errno`
    /// on an error); at the end, the held bytes are written too.
    func pump(from fd: Int32, secrets: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) -> Int {
        conceal(secrets, emit: emit)
        reserve()
        let n = read(fd, storage.baseAddress! + held, Self.chunk)
        if n < 0 { return n }
        process(count: n, final: n == 0, emit: emit)
        return n
    }

    /// Writes whatever is held (the stream ended, or is abandoned).
    func finish(secrets: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) {
        conceal(secrets, emit: emit)
        process(count: 0, final: true, emit: emit)
    }

    /// Feeds `bytes` as if read (for tests of the masking itself and for callers without a
    /// descriptor).
    func feed(_ bytes: UnsafeRawBufferPointer, secrets: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) {
        conceal(secrets, emit: emit)
        var offset = 0
        while offset < bytes.count {
            reserve()
            let n = min(Self.chunk, bytes.count - offset)
            (storage.baseAddress! + held).copyMemory(from: bytes.baseAddress! + offset, byteCount: n)
            offset += n
            process(count: n, final: false, emit: emit)
        }
    }

    /// Conceals `values` (the non-empty ones) from now on; nothing when they are the ones
    /// concealed already.
    ///
    /// A new automaton starts from the bytes the old state stands for (the stream's last bytes
    /// that may begin a secret; the earlier ones are written or replaced already): scanning
    /// them again finds every match of a value concealed before that is still to come, and the
    /// runs not yet replaced. (A new value that began in bytes already written cannot be taken
    /// back: only its bytes still held are replaced.)
    private func conceal(_ values: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) {
        let values = values.filter { $0.count > 0 }
        if values.count == secrets.count && zip(values, secrets).allSatisfy({ $0 === $1 }) { return }
        let context = UnsafeMutableRawBufferPointer.allocate(byteCount: max(automaton?.longest ?? 0, 1), alignment: 1)
        defer {
            SecureMemory.zero(context)
            context.deallocate()
        }
        let known = automaton?.depth(scan.state) ?? 0
        automaton?.bytes(of: scan.state, into: context)
        automaton = ConcealmentAutomaton(values)
        secrets = values
        var scan = take()
        scan.restart()
        scan.position -= known
        withoutActuallyEscaping(emit) { emit in
            let output = Output(base: UnsafeRawPointer(storage.baseAddress!), emit: emit)
            if let automaton {
                for index in 0..<known { scan.step(context[index], automaton, output) }
            } else {
                scan.decided = scan.position
            }
            scan.writeDecided(output)
        }
        self.scan = scan
        keepHeld(scanned: held)
    }

    /// Scans the `count` bytes after the held ones in `storage`: writes what is decided, keeps
    /// the rest at the front (all of it is decided when `final`: the stream ended).
    private func process(count: Int, final: Bool, emit: (UnsafeRawBufferPointer) -> Void) {
        let base = UnsafeRawPointer(storage.baseAddress!)
        var scan = take()
        withoutActuallyEscaping(emit) { emit in
            let output = Output(base: base, emit: emit)
            if let automaton {
                for index in held..<(held + count) { scan.step(base.load(fromByteOffset: index, as: UInt8.self), automaton, output) }
            } else {
                scan.position += count
                scan.decided = scan.position
            }
            if final { scan.end(output) }
            scan.writeDecided(output)
        }
        self.scan = scan
        keepHeld(scanned: held + count)
    }

    /// `scan`, moved out (so that the scan's loop changes a value of its own, never a copy
    /// shared with `self`); put back when done.
    private func take() -> Scan {
        var taken = Scan()
        swap(&taken, &scan)
        return taken
    }

    /// Keeps the undecided bytes at the front of `storage` and wipes the `scanned` bytes after them.
    private func keepHeld(scanned: Int) {
        let from = scan.decided - scan.origin
        let kept = scan.position - scan.decided
        if kept > 0, from > 0 { storage.baseAddress!.copyMemory(from: storage.baseAddress! + from, byteCount: kept) }
        SecureMemory.zero(UnsafeMutableRawBufferPointer(rebasing: storage[kept..<max(scanned, kept)]))
        held = kept
        scan.origin = scan.decided
    }

    /// Where the scan writes from and to: the stream's bytes (`storage`), and `emit` (which does
    /// not outlive the call it came with).
    private struct Output {
        let base: UnsafeRawPointer
        let emit: (UnsafeRawBufferPointer) -> Void
    }

    /// A run of overlapping matches, by position in the stream.
    private struct Run {
        var start: Int
        var end: Int
    }

    /// How far the stream is scanned, written and replaced (positions count the stream's bytes
    /// from its start).
    private struct Scan {
        var state: Int32 = 0
        /// The bytes of the stream scanned so far.
        var position = 0
        /// Every byte before `decided` is known to be written or to be replaced; the bytes from
        /// `written` to `decided` are to be written and not yet.
        var decided = 0
        var written = 0
        /// The stream position of the masker's `storage`'s first byte.
        var origin = 0
        /// The end of the last run replaced: a match starting before it extends that run.
        var replacedEnd = 0
        /// Runs found whose start may still move back (a longer match may begin earlier), in
        /// order, from `pendingHead` on; none overlaps another.
        var pending: [Run] = []
        var pendingHead = 0
        var steps = 0

        /// A new automaton: its state is the root, and the runs pending are found again.
        mutating func restart() {
            state = 0
            pending.removeAll()
            pendingHead = 0
        }

        /// One byte of the stream through the automaton.
        @inline(__always)
        mutating func step(_ byte: UInt8, _ automaton: ConcealmentAutomaton, _ output: Output) {
            state = automaton.next(state, byte, steps: &steps)
            position += 1
            let length = automaton.matched(state)
            // No match still to come starts before `settled`: a byte before it is now known to
            // be written or replaced.
            let settled = position - automaton.depth(state)
            if length == 0 && pendingHead == pending.count {
                // Nothing found, nothing pending: the common case, kept short.
                if settled > decided { decided = settled }
                return
            }
            if length > 0 { found(Run(start: position - length, end: position), output) }
            while pendingHead < pending.count, pending[pendingHead].start <= settled {
                replace(pending[pendingHead], output)
                pendingHead += 1
            }
            if pendingHead > 0, pendingHead == pending.count || (pendingHead > 64 && 2 * pendingHead > pending.count) {
                pending.removeFirst(pendingHead)
                pendingHead = 0
            }
            let plain = pendingHead < pending.count ? min(settled, pending[pendingHead].start) : settled
            if plain > decided { decided = plain }
        }

        /// A match, the longest that ends where the stream now does: it extends the run replaced
        /// last, or joins the pending runs it overlaps, or is a pending run of its own.
        @inline(__always)
        mutating func found(_ match: Run, _ output: Output) {
            // Bytes already decided (only when a new automaton scans the held bytes again).
            if match.end <= decided { return }
            if match.start < replacedEnd {
                // It overlaps the run already replaced, and covers everything after it (every
                // pending run ends by the match's end): nothing more is written for the run.
                writeDecided(output)
                replacedEnd = match.end
                if pendingHead < pending.count {
                    pending.removeAll(keepingCapacity: true)
                    pendingHead = 0
                }
                decided = match.end
                written = match.end
                return
            }
            var run = Run(start: max(match.start, decided), end: match.end)
            while pending.count > pendingHead, pending[pending.count - 1].end > run.start {
                run.start = min(run.start, pending.removeLast().start)
            }
            pending.append(run)
        }

        /// Writes the decided bytes before `run`, then one replacement for the run.
        mutating func replace(_ run: Run, _ output: Output) {
            if run.start > decided { decided = run.start }
            writeDecided(output)
            OutputMasker.replacement.withUnsafeBytes { output.emit($0) }
            decided = max(decided, run.end)
            written = decided
            replacedEnd = run.end
        }

        /// The stream ended: every run found is replaced, every other byte written.
        mutating func end(_ output: Output) {
            while pendingHead < pending.count {
                replace(pending[pendingHead], output)
                pendingHead += 1
            }
            restart()
            decided = position
        }

        /// Writes the bytes from `written` to `decided`.
        mutating func writeDecided(_ output: Output) {
            guard decided > written else { return }
            output.emit(UnsafeRawBufferPointer(start: output.base + (written - origin), count: decided - written))
            written = decided
        }
    }
}

/// Copies one output stream of the child (a pipe) to coffer's own (standard output or error)
/// through an ``OutputMasker``, on a thread of its own, until the pipe's end.
final class OutputRelay: @unchecked Sendable {
    // @unchecked Sendable: `masker` and the descriptors are used by the relay's thread only
    // (after `start`); `abandoned` is atomic and `finished` a semaphore.
    private let source: Int32
    private let destination: Int32
    private let values: ConcealedValues
    private let masker = OutputMasker()
    private let abandoned = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Relays `source` (the read end of the child's pipe, which the relay closes) to `destination`.
    init(from source: Int32, to destination: Int32, concealing values: ConcealedValues) {
        self.source = source
        self.destination = destination
        self.values = values
    }

    func start() {
        Thread.detachNewThread { [self] in
            relay()
            finished.signal()
        }
    }

    /// Waits for the end of the pipe; after `grace` seconds (every process holding the pipe's
    /// write end has not closed it: a background process the child left behind), takes what the
    /// pipe holds at most ``drainLimit`` bytes of it, without waiting for more, and stops. A
    /// process that goes on writing cannot keep coffer running.
    func finish(grace: Double) {
        if finished.wait(timeout: .now() + grace) == .timedOut {
            abandoned.store(true, ordering: .relaxed)
            finished.wait()
        }
    }

    private func relay() {
        defer { close(source) }
        var writable = true
        let emit: (UnsafeRawBufferPointer) -> Void = { [destination] bytes in
            if writable, !writeAll(destination, bytes) {
                // Coffer's own output is gone (a closed pipe): stop reading, so the child's next
                // write fails as it would have without coffer in between.
                writable = false
            }
        }
        while writable {
            if abandoned.load(ordering: .relaxed) {
                // The grace is over: what the pipe holds now (up to a bound: a writer may be
                // filling it as fast as it is read), without waiting, then what is held.
                _ = fcntl(source, F_SETFL, fcntl(source, F_GETFL) | O_NONBLOCK)
                var taken = 0
                while writable, taken < Self.drainLimit {
                    let n = masker.pump(from: source, secrets: values.current, emit: emit)
                    if n < 0, errno == EINTR { continue }
                    guard n > 0 else { break }
                    taken += n
                }
                break
            }
            var entry = pollfd(fd: source, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, 100)
            if ready < 0, errno != EINTR { break }
            if ready <= 0 { continue }
            let n = masker.pump(from: source, secrets: values.current, emit: emit)
            if n == 0 { return }
            if n < 0, errno != EINTR, errno != EAGAIN { break }
        }
        masker.finish(secrets: values.current, emit: emit)
    }

    /// The most read from the pipe once the grace is over.
    static let drainLimit = 1024 * 1024
}
