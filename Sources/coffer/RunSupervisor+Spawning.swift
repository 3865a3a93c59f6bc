// `coffer run`: starting the child, as `execvp` and a shell would (its environment, its signal
// state, its session keyring), and finding the program on PATH.

import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension RunSupervisor {
    /// Starts the child with the current secrets in its environment (and nowhere else): the
    /// environment block is built in memory that is wiped as soon as the child has started.
    ///
    /// As `execvp` does, a file the kernel cannot execute (ENOEXEC: a script without `#!`) is
    /// run by `/bin/sh` instead: `/bin/sh FILE ARGUMENTS…`. The child is started from
    /// ``IsolatedSpawner``'s thread, so its session keyring is a new empty one.
    func spawn(arguments: [UnsafeMutablePointer<CChar>?], outputs: [Int32]) throws -> pid_t {
        let block = WipingBuffer(capacity: 4096)
        var offsets: [Int] = []
        for (name, entry) in configuration.environment.ordered {
            offsets.append(block.count)
            switch entry.value {
            case .plain(let bytes):
                for byte in bytes { block.append(byte) }
            case .reference(let reference):
                for byte in name { block.append(byte) }
                block.append(UInt8(ascii: "="))
                values[reference]?.withUnsafeBytes { for byte in $0 { block.append(byte) } }
            }
            block.append(0)
        }
        var pid: pid_t = 0
        var result: Int32 = 0
        block.withUnsafeBytes { raw in
            let base = UnsafeMutablePointer(mutating: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            let environment: [UnsafeMutablePointer<CChar>?] = offsets.map { base + $0 } + [nil]
            result = spawner.perform {
                startProcess(&pid, configuration.executable, arguments: arguments, environment: environment, outputs: outputs)
            }
            if result == ENOEXEC {
                let shell: [UnsafeMutablePointer<CChar>?] =
                    [strdup(Self.shell), strdup(configuration.executable)] + arguments.dropFirst()
                defer {
                    free(shell[0])
                    free(shell[1])
                }
                result = spawner.perform {
                    startProcess(&pid, Self.shell, arguments: shell, environment: environment, outputs: outputs)
                }
            }
        }
        guard result == 0 else {
            let reason = String(cString: strerror(result))
            let command = quotedName(configuration.arguments[0])
            if result == ENOENT { throw RunExit(status: 127, message: "cannot run \(command): \(reason)") }
            throw RunExit(status: 126, message: "cannot run \(command): \(reason)")
        }
        return pid
    }

    /// The shell `execvp` runs a file without `#!` with.
    static let shell = "/bin/sh"

    /// The search path `execvp` uses when PATH is unset (glibc's).
    static let defaultPath = "/bin:/usr/bin"

    /// One `posix_spawn`: `outputs` (when two) become the child's standard output and error;
    /// the child's signal mask is empty and the signals coffer handles are back to their
    /// default actions, except those ignored when coffer started, which stay ignored. Returns
    /// `posix_spawn`'s result.
    private func startProcess(
        _ pid: inout pid_t, _ path: String, arguments: [UnsafeMutablePointer<CChar>?],
        environment: [UnsafeMutablePointer<CChar>?], outputs: [Int32]
    ) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if outputs.count == 2 {
            posix_spawn_file_actions_adddup2(&actions, outputs[0], STDOUT_FILENO)
            posix_spawn_file_actions_adddup2(&actions, outputs[1], STDERR_FILENO)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The signal state a shell gives a command: nothing blocked, the signals coffer handles
        // back to their default actions, and those ignored on entry still ignored (an ignored
        // signal stays ignored across exec).
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in Self.forwardedSignals + [SIGCHLD, SIGPIPE] where !ignoredSignals.contains(number) {
            sigaddset(&defaults, number)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        // With the core size limit coffer was started with (Hardening keeps the hard limit):
        // the command may write the core files its user asked for.
        return Hardening.withOriginalCoreLimit { posix_spawn(&pid, path, &actions, &attributes, arguments, environment) }
    }

    /// Refuses to start a child that could reach the vault keys `coffer unlock` keeps: when
    /// ``IsolatedSpawner``'s thread could not join a keyring of its own (the kernel has no
    /// keyrings, or refuses them here), the child would share coffer's session keyring, which
    /// is harmless only while it holds no such key.
    func checkKeyringIsolation() throws {
        let code = spawner.joinError
        guard code != 0 else { return }
        if let kept = try? SessionKeyring.cofferKeys(), !kept.isEmpty {
            throw CLIError(
                .failure,
                "cannot give the command a session keyring of its own (\(String(cString: strerror(code)))): it could read "
                    + "the vault keys coffer unlock keeps there; run coffer lock first")
        }
    }

    /// The program `command` names, found as `execvp` finds it: a name with a `/` is a path;
    /// otherwise the first executable regular file of that name in the directories of `path`
    /// (an empty entry is the current directory; without PATH, glibc's ``defaultPath``).
    static func resolve(_ command: String, path: [UInt8]?) throws -> String {
        func executable(_ candidate: String) -> (found: Bool, runnable: Bool) {
            var status = stat()
            guard stat(candidate, &status) == 0 else { return (false, false) }
            return (true, status.st_mode & S_IFMT == S_IFREG && access(candidate, X_OK) == 0)
        }
        let shown = quotedName(command)
        if command.contains("/") {
            let (found, runnable) = executable(command)
            guard found else { throw RunExit(status: 127, message: "cannot run \(shown): no such file") }
            guard runnable else { throw RunExit(status: 126, message: "cannot run \(shown): not an executable file") }
            return command
        }
        var sawUnrunnable = false
        if !command.isEmpty {
            let directories = String(decoding: path ?? Array(defaultPath.utf8), as: UTF8.self)
            for directory in directories.split(separator: ":", omittingEmptySubsequences: false) {
                let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + command
                let (found, runnable) = executable(candidate)
                if runnable { return candidate }
                if found { sawUnrunnable = true }
            }
        }
        if sawUnrunnable { throw RunExit(status: 126, message: "cannot run \(shown): permission denied (not an executable file)") }
        throw RunExit(status: 127, message: "\(shown): command not found (searched PATH)")
    }
}
