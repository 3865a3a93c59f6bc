// `coffer run --watch`: following the referenced items, and reading their secrets again when
// one changes (RunSupervisor.run restarts the child then).

import Coffer
import CofferCrypto
import CofferInterchange

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension RunSupervisor {
    #if COFFER_TEST_HOOKS
    /// Test builds only (COFFER_TEST_HOOKS: debug builds, Package.swift), absent from --help:
    /// with `COFFER_TEST_RUN_PAUSE=PATH`, `--watch`
    /// creates `PATH.waiting` after reading the secrets and before watching for changes, then
    /// waits (a minute at most) until PATH exists, so a test can change an item in between
    /// (Tests/CofferCLITests/RunTests.swift). It reveals nothing and only delays this process.
    static func testPauseBeforeWatching() {
        guard let path = getenv("COFFER_TEST_RUN_PAUSE").map({ String(cString: $0) }) else { return }
        let fd = open(path + ".waiting", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
        for _ in 0..<3000 where access(path, F_OK) != 0 { usleep(20_000) }
    }
    #endif

    /// Starts telling `notify` (one byte written) when an item of `items` changes, or anything
    /// may have.
    static func observe(_ store: any Keychain, items: Set<VaultItemID>, notify fd: Int32) -> StoreObservation {
        store.observeChanges { changed in
            if let changed, changed.isDisjoint(with: items) { return }
            var byte: UInt8 = 1
            _ = write(fd, &byte, 1)  // full pipe: a change is pending anyway
        }
    }

    /// Empties the change pipe; whether it held anything.
    static func drainChanges(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 256)
        var any = false
        while read(fd, &buffer, buffer.count) > 0 { any = true }
        return any
    }

    /// Reads every referenced secret again; true when one differs from what the child has
    /// (the next child then gets the new values). A secret that can no longer be read keeps its
    /// old value, and coffer says so.
    func reread(announce: Bool = true) -> Bool {
        guard let store else { return false }
        var changed: [SecretReference] = []
        var fresh = values
        for reference in references {
            do {
                guard let secret = try store.secret(service: reference.service, account: reference.account) else {
                    writeError("coffer: \(reference) was removed; the command keeps its value\n")
                    continue
                }
                if secret.withUnsafeBytes({ $0.contains(0) }) {
                    writeError("coffer: \(reference) now holds a NUL byte, which an environment variable cannot hold; the command keeps its value\n")
                    continue
                }
                if values[reference].map({ $0 != secret }) ?? true {
                    fresh[reference] = secret
                    changed.append(reference)
                }
            } catch {
                let text = (error as? CofferError).map { message(for: $0) } ?? "\(error)"
                writeError("coffer: cannot read \(reference) after a change (\(text)); the command keeps running\n")
                return false
            }
        }
        guard !changed.isEmpty else { return false }
        // The old values stay concealed too, for as long as the output is relayed: a process an
        // earlier child left behind (started in the background) may still write them.
        if configuration.masking { concealed.add(changed.compactMap { fresh[$0] }) }
        values = fresh
        guard announce else { return true }
        let names = changed.map(\.description).joined(separator: ", ")
        writeError("coffer: \(names) changed: restarting \(quotedName(configuration.arguments[0]))\n")
        return true
    }
}
