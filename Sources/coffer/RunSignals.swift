// `coffer run`: the signals it passes on to the child, noted by handlers that write to a
// self-pipe (RunSupervisor.run polls it).

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The self-pipe the signal handlers of `coffer run` write to: two bytes per signal, its
/// number and whether the kernel sent it (`SI_KERNEL`: from a terminal, to a process group).
enum SignalPipe {
    /// Installs the handlers for `signals` and SIGCHLD, and unblocks them in the calling thread
    /// (SIGPIPE is ignored: a closed output is an error to report, not a reason to die and
    /// leave the child behind). A signal of `signals` that is ignored already (`nohup`, a
    /// background job of a non-interactive shell) is left ignored: no handler. Returns the
    /// pipe's read end (non-blocking), and the signals of `signals` and SIGPIPE that were ignored.
    ///
    /// (SIGQUIT is never found ignored: ``Hardening`` installs its crash handler for it at
    /// start-up, before this runs, and does not record what it replaced.)
    static func install(_ signals: [Int32]) throws -> (fd: Int32, ignored: Set<Int32>) {
        var fds: [Int32] = [-1, -1]
        guard c_pipe2(&fds, O_CLOEXEC | O_NONBLOCK) == 0 else {
            throw CLIError(.failure, "cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        signalPipeWriteEnd = fds[1]
        let ignored = Set((signals + [SIGPIPE]).filter(isIgnored))
        for number in signals + [SIGCHLD] where !ignored.contains(number) {
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = noteSignal
            sigemptyset(&action.sa_mask)
            // SA_RESTART: other threads' calls (the vault's watcher, the relays) are not interrupted.
            action.sa_flags = SA_SIGINFO | SA_RESTART | (number == SIGCHLD ? SA_NOCLDSTOP : 0)
            sigaction(number, &action, nil)
        }
        signal(SIGPIPE, SIG_IGN)
        // A parent may have started coffer with signals blocked (a test runner's threads do,
        // and a spawned process inherits the mask): these must be delivered.
        var handled = sigset_t()
        sigemptyset(&handled)
        for number in signals + [SIGCHLD] where !ignored.contains(number) { sigaddset(&handled, number) }
        pthread_sigmask(SIG_UNBLOCK, &handled, nil)
        return (fds[0], ignored)
    }

    /// Whether `number`'s disposition is SIG_IGN.
    static func isIgnored(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0, current.sa_flags & SA_SIGINFO == 0 else { return false }
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// Every signal noted since the last call: its number, and whether the kernel sent it.
    static func drain(_ fd: Int32) -> [(Int32, Bool)] {
        var noted: [(Int32, Bool)] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            // Each handler writes its two bytes at once (a pipe write of up to PIPE_BUF bytes
            // is atomic), so a read returns whole pairs.
            for pair in stride(from: 0, to: n - 1, by: 2) { noted.append((Int32(buffer[pair]), buffer[pair + 1] != 0)) }
        }
        return noted
    }
}

// Written before the handlers are installed; read by them.
nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1

/// The handler: one `write` (async-signal-safe), errno kept as it was.
private func noteSignal(_ number: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?) {
    let saved = errno
    let code: Int32 = info.map { $0.pointee.si_code } ?? 0
    let fromKernel: UInt16 = code == Int32(SI_KERNEL) ? 1 : 0
    var message = (UInt16(truncatingIfNeeded: number) & 0xFF | fromKernel << 8).littleEndian
    _ = write(signalPipeWriteEnd, &message, 2)
    errno = saved
}

// glibc's pipe2, which Swift's Glibc module does not import (it is behind _GNU_SOURCE).
@_silgen_name("pipe2") func c_pipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32
