import CofferCore
import CofferCrypto
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The secret values `coffer run` conceals in its child's output, shared by the two relays and
/// replaced when `--watch` restarts the child.
final class ConcealedValues: Sendable {
    private let values = Locked<[SecureBytes]>([])

    /// Conceals exactly `values` from now on (empty ones are ignored).
    func replace(with values: [SecureBytes]) {
        let kept = values.filter { $0.count > 0 }
        self.values.withLock { $0 = kept }
    }

    /// The values now concealed.
    var current: [SecureBytes] { values.withLock { $0 } }
}

/// Replaces every occurrence of a secret value in a stream of bytes by
/// ``OutputMasker/replacement``, also when the stream splits the value across reads.
///
/// Bytes are written as soon as they are known not to begin a secret: only a trailing fragment
/// that is the start of some secret is held back, until the next bytes show whether the secret
/// follows (then the replacement is written) or not (then the fragment is), or the stream ends.
/// A line is therefore never delayed unless its end is itself the start of a secret. Matches
/// that overlap (of one secret or of several: `abc` and `bcdefgh` in `abcdefgh`) are replaced
/// together, by one replacement for the whole run they cover, so no byte of any secret is
/// written; a run that a secret still arriving could extend is held whole.
///
/// The bytes pass through one buffer of its own, wiped after every step and when released.
final class OutputMasker {
    /// What a secret value becomes.
    static let replacement = Array("<concealed by coffer>".utf8)

    /// The largest read.
    static let chunk = 64 * 1024

    private var storage: UnsafeMutableRawBufferPointer
    /// Held bytes at the start of `storage`.
    private var held = 0

    init() {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 16)
    }

    deinit {
        SecureMemory.zero(storage)
        storage.deallocate()
    }

    /// Room for the held bytes and one read beside them, for secrets up to `longest` bytes.
    private func reserve(longest: Int) {
        let needed = max(longest, held) + Self.chunk
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
        reserve(longest: secrets.map(\.count).max() ?? 0)
        let n = read(fd, storage.baseAddress! + held, min(Self.chunk, storage.count - held))
        if n < 0 { return n }
        process(count: held + n, secrets: secrets, final: n == 0, emit: emit)
        return n
    }

    /// Writes whatever is held (the stream ended, or is abandoned).
    func finish(secrets: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) {
        process(count: held, secrets: secrets, final: true, emit: emit)
    }

    /// Feeds `bytes` as if read (for tests of the masking itself and for callers without a
    /// descriptor).
    func feed(_ bytes: UnsafeRawBufferPointer, secrets: [SecureBytes], emit: (UnsafeRawBufferPointer) -> Void) {
        var offset = 0
        while offset < bytes.count {
            reserve(longest: secrets.map(\.count).max() ?? 0)
            let n = min(Self.chunk, storage.count - held, bytes.count - offset)
            (storage.baseAddress! + held).copyMemory(from: bytes.baseAddress! + offset, byteCount: n)
            offset += n
            process(count: held + n, secrets: secrets, final: false, emit: emit)
        }
    }

    /// Scans the first `count` bytes of `storage`: writes the bytes and replacements it can,
    /// keeps a trailing fragment that may begin a secret or extend a match (unless `final`),
    /// wipes the rest.
    ///
    /// Matches may overlap (secrets `abc` and `bcdefgh` in `abcdefgh`): every maximal run of
    /// bytes covered by overlapping matches becomes one replacement, so no part of any secret
    /// is written. Adjacent matches that do not overlap are replaced one by one.
    private func process(count: Int, secrets: [SecureBytes], final: Bool, emit: (UnsafeRawBufferPointer) -> Void) {
        let base = UnsafeRawPointer(storage.baseAddress!)
        // Bytes before `written` have been written (or replaced).
        var written = 0
        // The run of overlapping matches being scanned, `nil` outside one.
        var run: (start: Int, end: Int)?
        // Where the held fragment starts; `count` when nothing is held.
        var holdFrom = count
        var index = 0
        scanning: while index < count {
            if let current = run, index >= current.end {
                // No match overlaps the run any more: it is replaced as one.
                if current.start > written { emit(UnsafeRawBufferPointer(start: base + written, count: current.start - written)) }
                Self.replacement.withUnsafeBytes { emit($0) }
                written = current.end
                run = nil
            }
            let byte = base.load(fromByteOffset: index, as: UInt8.self)
            var longest = 0
            for secret in secrets {
                let matched = secret.withUnsafeBytes { value -> Int in
                    guard value.count > 0, value[0] == byte else { return 0 }
                    let available = count - index
                    if value.count <= available {
                        return memcmp(base + index, value.baseAddress!, value.count) == 0 ? value.count : 0
                    }
                    // The stream ends inside the value: a fragment, unless the stream is over.
                    return !final && memcmp(base + index, value.baseAddress!, available) == 0 ? -1 : 0
                }
                if matched < 0 {
                    // Held from here on, or from the start of the run it may extend.
                    holdFrom = run?.start ?? index
                    run = nil
                    break scanning
                }
                longest = max(longest, matched)
            }
            if longest > 0 {
                if let current = run {
                    run = (current.start, max(current.end, index + longest))
                } else {
                    run = (index, index + longest)
                }
            }
            index += 1
        }
        if let current = run {
            // The scan reached the end inside a run that nothing can extend (a secret that
            // could was a fragment, and held): it ends at `count`.
            if current.start > written { emit(UnsafeRawBufferPointer(start: base + written, count: current.start - written)) }
            Self.replacement.withUnsafeBytes { emit($0) }
            written = current.end
        }
        if holdFrom > written { emit(UnsafeRawBufferPointer(start: base + written, count: holdFrom - written)) }
        // Keep the fragment at the front, and wipe everything after it.
        held = count - holdFrom
        if held > 0 { storage.baseAddress!.copyMemory(from: base + holdFrom, byteCount: held) }
        SecureMemory.zero(UnsafeMutableRawBufferPointer(rebasing: storage[held..<max(count, held)]))
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
