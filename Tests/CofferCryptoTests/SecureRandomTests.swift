@testable import CofferCrypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `SecureRandom`: the kernel's generator through the vDSO's getrandom where the kernel has one.
/// What matters for nonces: every draw is fresh, on every thread, and in a forked child (whose
/// copy of the parent's memory would repeat the parent's next nonces if the generator were a
/// buffer or a state in ordinary memory).
@Suite("SecureRandom: fresh bytes on every thread and after fork")
struct SecureRandomTests {
    /// Linux's release as (major, minor), from `uname`.
    static func kernelRelease() -> (Int, Int)? {
        var names = utsname()
        guard uname(&names) == 0 else { return nil }
        let release = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        return parts.count == 2 ? (parts[0], parts[1]) : nil
    }

    #if os(Linux) && arch(x86_64)
    @Test("On Linux 6.11 or later (x86-64) with a vDSO mapped, the bytes come through it, with no system call")
    func usesTheVDSOWhereTheKernelHasIt() throws {
        let (major, minor) = try #require(Self.kernelRelease())
        // A kernel booted with `vdso=0`, or a process under valgrind, has no vDSO mapped at
        // all: the system call is then the right path.
        // (Read to the end: /proc files report a size of 0.)
        let maps = FileHandle(forReadingAtPath: "/proc/self/maps").map { String(decoding: $0.readDataToEndOfFile(), as: UTF8.self) } ?? ""
        let vdsoMapped = maps.contains("[vdso]")
        let expected = vdsoMapped && (major > 6 || (major == 6 && minor >= 11))
        #expect(SecureRandom.usesVDSO == expected, "kernel \(major).\(minor), vDSO mapped: \(vdsoMapped)")
    }
    #endif

    @Test func bytesAreRandom() {
        let a = SecureRandom.bytes(count: 64)
        let b = SecureRandom.bytes(count: 64)
        #expect(a.count == 64)
        let aIsAllZero = a.allSatisfy { $0 == 0 }
        #expect(!aIsAllZero)
        let same = a == b
        #expect(!same)
        #expect(SecureRandom.bytes(count: 0).isEmpty)
        #expect(SecureRandom.bytes(count: -5).isEmpty)
    }

    @Test func fillOverwritesTheWholeBuffer() {
        var buffer = [UInt8](repeating: 0, count: 1000)
        buffer.withUnsafeMutableBytes { SecureRandom.fill($0) }
        // Any 64-byte window staying zero has probability 2^-512.
        let zeroWindow = stride(from: 0, to: 1000, by: 64).contains { start in
            buffer[start..<min(start + 64, 1000)].allSatisfy { $0 == 0 }
        }
        #expect(!zeroWindow)
        SecureRandom.fill(UnsafeMutableRawBufferPointer(start: nil, count: 0))
    }

    @Test("Every length is filled, and no two draws are alike")
    func everyLengthIsFilledAndFresh() {
        #expect(SecureRandom.bytes(count: 0).isEmpty)
        var seen = Set<[UInt8]>()
        for count in [1, 7, 16, 24, 31, 32, 255, 256, 257, 4096, 65_537, 1 << 20] {
            let first = SecureRandom.bytes(count: count)
            let second = SecureRandom.bytes(count: count)
            #expect(first.count == count && second.count == count)
            if count >= 16 {
                #expect(first != second, "two draws of \(count) bytes are the same")
                #expect(seen.insert(first).inserted && seen.insert(second).inserted)
                // A fill that stopped early would leave the buffer's tail as it was: zeros.
                #expect(first.suffix(16) != [UInt8](repeating: 0, count: 16), "\(count) bytes end in zeros")
            }
        }
    }

    /// Draws collected from several threads.
    final class Draws: @unchecked Sendable {
        private let lock = NSLock()
        private var draws: [[UInt8]] = []
        func add(_ more: [[UInt8]]) { lock.withLock { draws += more } }
        var all: [[UInt8]] { lock.withLock { draws } }
    }

    @Test("Threads drawing at once, and threads that come and go, never get the same bytes")
    func threadsNeverShareAState() {
        // Each thread takes a state of its own and gives it back when it exits; a state used by
        // two threads at once, or handed out twice, would give two draws the same bytes.
        let draws = Draws()
        let together = DispatchGroup()
        for _ in 0..<8 {
            together.enter()
            Thread {
                draws.add((0..<2_000).map { _ in SecureRandom.bytes(count: 24) })
                together.leave()
            }.start()
        }
        #expect(together.wait(timeout: .now() + 300) == .success)
        // One after another: each exits (giving its state back) before the next starts.
        for _ in 0..<64 {
            let one = DispatchGroup()
            one.enter()
            Thread {
                draws.add([SecureRandom.bytes(count: 24)])
                one.leave()
            }.start()
            #expect(one.wait(timeout: .now() + 60) == .success)
        }
        let all = draws.all
        #expect(all.count == 8 * 2_000 + 64)
        #expect(Set(all).count == all.count, "a draw repeated")
    }

    #if canImport(Glibc)
    @Test("A forked child's next bytes are not its parent's next bytes")
    func aForkedChildDrawsFreshBytes() throws {
        // The parent's state is set up before the fork, so the child starts from a copy of it;
        // the kernel wipes that copy (MAP_DROPPABLE), and the child reseeds instead of repeating.
        // The child only draws into memory allocated before the fork and writes to a pipe.
        _ = SecureRandom.bytes(count: 32)
        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0)
        let childBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 8)
        defer { childBytes.deallocate() }
        let pid = fork()
        if pid == 0 {
            SecureRandom.fill(childBytes)
            _ = write(pipeEnds[1], childBytes.baseAddress, 64)
            _exit(0)
        }
        #expect(pid > 0)
        close(pipeEnds[1])
        let parentBytes = SecureRandom.bytes(count: 64)
        var got = 0
        while got < 64 {
            let n = read(pipeEnds[0], childBytes.baseAddress! + got, 64 - got)
            if n <= 0 { break }
            got += n
        }
        close(pipeEnds[0])
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        #expect(got == 64)
        #expect(Array(childBytes) != parentBytes, "the child repeated its parent's bytes")
        #expect(Array(childBytes) != [UInt8](repeating: 0, count: 64))
    }
    #endif
}
