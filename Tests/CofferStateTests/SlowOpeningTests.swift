import CofferCore
import CofferCrypto
import CofferState
import CofferStorage
import CofferTesting
import CofferVault
import Foundation
import Testing

/// Opening a store (a vault's Argon2id, up to a second) runs under no lock that properties of
/// other stores need: a KDF never runs under a shared lock.
@Suite("Slow opening holds no shared lock")
struct SlowOpeningTests {
    @Test("A store being opened (blocked inside make) never delays a key-value property of the same context")
    func blockedOpenDelaysNoOneElse() throws {
        try CofferContext.$current.withValue(try .temporary()) {
            let context = CofferContext.current
            let release = DispatchSemaphore(value: 0)
            let entered = DispatchSemaphore(value: 0)
            let opened = Protected(false)
            let opener = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                _ = try? context.sharedStore(id: .inContext(["slow-store"])) { () -> MemoryStrategy in
                    entered.signal()
                    release.wait()  // "Argon2id": held until the other thread is done
                    return MemoryStrategy()
                }
                opened.withLock { $0 = true }
                opener.signal()
            }
            #expect(entered.wait(timeout: .now() + 10) == .success)
            // While the opener is inside `make`, another store of the context opens, writes, reads.
            let theme = Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
            for round in 0..<100 { theme.wrappedValue = "dark \(round)" }
            #expect(theme.wrappedValue == "dark 99")
            #expect(try theme.load() == "dark 99")
            #expect(!opened.withLock { $0 }, "the opener finished first: the test proved nothing")
            release.signal()
            #expect(opener.wait(timeout: .now() + 10) == .success)
            // A second caller for the same store gets the one opened, without opening again.
            let again = try context.sharedStore(id: .inContext(["slow-store"])) { () -> MemoryStrategy in
                Issue.record("opened twice")
                return MemoryStrategy()
            }
            _ = again
        }
    }

    @Test("A vault opened with a slow KDF on one thread; a key-value property of the same context reads and writes meanwhile")
    func slowKDFDoesNotBlockKeyValue() async throws {
        // Whether the key-value work finishes before the KDF depends on the machine: 50 writes,
        // each with an fdatasync, can take longer than one Argon2id on a loaded machine. A
        // property that waited for the KDF finishes after it at every cost, so the KDF is made
        // slower (4, 16, then 64 passes over 256 MiB: about 1, 4 and 16 s on an idle machine)
        // until the key-value work wins once; it never wins if it waits.
        var order: [String] = []
        var opened: CofferContext?
        for passes in [4, 16, 64] as [UInt64] {
            let base = try CofferContext.temporary()
            let slow = Argon2idParameters(opsLimit: passes, memLimitBytes: 256 << 20)
            let context = base.with(
                VaultConfiguration(unlock: .passphrase("correct horse battery staple"), createIfMissing: true, kdf: slow))
            let finished = Protected<[String]>([])
            let opening = Task.detached {
                _ = try await context.openVault()  // Argon2id on Coffer's threads
                finished.withLock { $0.append("vault") }
            }
            let theme = CofferContext.$current.withValue(context) {
                Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
            }
            // Give the opener a head start into its KDF, then write and read 50 times.
            try await Task.sleep(for: .milliseconds(50))
            for round in 0..<50 {
                theme.wrappedValue = "dark \(round)"
                _ = theme.wrappedValue
            }
            try await theme.save("done")
            finished.withLock { $0.append("keyValue") }
            try await opening.value
            order = finished.withLock { $0 }
            opened = context
            if order == ["keyValue", "vault"] { break }
        }
        #expect(order == ["keyValue", "vault"], "the key-value property waited for the KDF")
        // The vault is open and shared: a property on it needs no second KDF.
        let context = try #require(opened)
        let token = CofferContext.$current.withValue(context) {
            Stored<String?>(wrappedValue: nil, backed: .vault(service: "svc", account: "a"))
        }
        try await token.save("secret")
        #expect(try await token.load() == "secret")
    }
}
