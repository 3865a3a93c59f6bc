// A child process for Coffer's multi-process and crash tests. Not part of the public API.
//
//   CofferTestHelper kv-write DIR SUITE COUNT PREFIX [immediate|coalesced]
//       writes COUNT keys "<PREFIX><i>" = i, printing "ack <i>" after each returns.
//   CofferTestHelper kv-increment DIR SUITE KEY TIMES
//       increments the integer at KEY TIMES times, each read-modify-write under the store's lock.
//   CofferTestHelper kv-hold DIR SUITE KEY
//       takes the store's lock (an update of KEY), prints "holding" and waits there for good
//       (the parent kills it: a process that dies holding the store's mutex).
//   CofferTestHelper stored-increment DIR TIMES [vault]
//       increments `@Stored(backed: .keyValue(key: "counter"))` (or a `.vault` item unlocked by a
//       32-byte key of 0x5a) with `$counter.update { $0 += 1 }` TIMES times, after printing
//       "ready" and reading one line of standard input (StoredIncrement.swift).
//   CofferTestHelper default-context [APP-NAME]
//       writes two properties made outside any context (standard context; set XDG_DATA_HOME) and
//       reports where they went and the warnings told (DefaultContext.swift).
//   CofferTestHelper stored-converge DIR INDEX WRITES
//       one of several writers to a shared key and its own, each following the others by watching.
//   CofferTestHelper stored-follow DIR
//       follows a key another process writes (run with COFFER_WATCH=poll for the fallback).
//   CofferTestHelper watch-release DIR
//       observes a property twice and reports the watcher thread and descriptors (StoredIncrement.swift).
//   CofferTestHelper vault-update PATH TIMES
//       increments the vault counter (counter, update) TIMES times with Vault.update, after printing
//       "ready" and reading one line of standard input (VaultUpdate.swift).
//   CofferTestHelper vault-compact PATH PASSPHRASE compact|remove SERVICE
//       opens the vault, prints "ready", waits for a line, then compacts it or removes every item
//       of SERVICE (automatic compaction), and prints "done" (VaultHeaderRace.swift).
//   CofferTestHelper crash-kv|crash-vault|vault-increment|vault-read-loop|secure-*|memscan …
//       the reliability children (Crash.swift, MemoryScan.swift; see RELIABILITY.md).
//   CofferTestHelper mlock-limit [default] | mlock-ok
//       secrets under a zero lock limit, and what SecureMemory reports (MemoryLock.swift).
//   CofferTestHelper log-warnings DIR | lifecycle-serve DIR
//       the integration children, built with their package traits (Integrations.swift).
//   CofferTestHelper pg-increment|pg-follow URL …
//       the fleet store's children (PostgresFleet.swift; built with the Postgres trait).
//   CofferTestHelper vault-vectors DIR
//       writes the vault vector files and their manifest (Vectors/vault/); run once per format version.
//   CofferTestHelper kv-increment-ack DIR SUITE KEY TIMES TIMEOUT-MS [reopen|exclusive-reopen]
//       increments the integer at KEY TIMES times, printing "ack <value written>" after each update
//       returns; "busy" after each open or update that failed with `busy` (retried, for 120 s at most).
//       With `reopen`, the store is opened and closed around each update (StoreMutexAttackTests).
//   CofferTestHelper kv-open-race DIR ROUNDS INDEX PEERS TIMEOUT-MS
//       for each round, meets PEERS-1 other children at a file barrier, then opens the brand-new
//       suite "r<round>" and writes "p<INDEX>" = round, keeping every suite open; prints
//       "error <round> <error>" for a failure and "done" at the end (StoreMutexAttackTests).
import CofferCore
import CofferStorage
import CofferCrypto
import CofferVault
import Foundation

/// Writes one line straight to standard output (unbuffered: the parent reads each ack at once).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: CofferTestHelper COMMAND …") }

do {
    switch arguments[1] {
    case "kv-write":
        guard arguments.count >= 6, let count = Int(arguments[4]) else { fail("usage: kv-write DIR SUITE COUNT PREFIX") }
        let durability: Durability = arguments.count > 6 && arguments[6] == "immediate" ? .immediate : .coalesced
        let store = try KeyValueFileStrategy(
            directory: URL(fileURLWithPath: arguments[2]), suite: arguments[3], durability: durability)
        for i in 0..<count {
            try store.set(i, for: "\(arguments[5])\(i)")
            say("ack \(i)")
        }
        try store.flush()
    case "kv-increment":
        guard arguments.count >= 6, let times = Int(arguments[5]) else { fail("usage: kv-increment DIR SUITE KEY TIMES") }
        let store = try KeyValueFileStrategy(directory: URL(fileURLWithPath: arguments[2]), suite: arguments[3])
        for _ in 0..<times {
            try store.update(arguments[4]) { (value: Int?) in (value ?? 0) + 1 }
        }
        try store.flush()
    case "kv-hold":
        guard arguments.count >= 5 else { fail("usage: kv-hold DIR SUITE KEY") }
        let store = try KeyValueFileStrategy(directory: URL(fileURLWithPath: arguments[2]), suite: arguments[3])
        try store.update(arguments[4]) { (value: Int?) -> Int in
            say("holding")
            while true { sleep(60) }
        }
    case "stored-increment":
        guard arguments.count >= 4, let times = Int(arguments[3]) else { fail("usage: stored-increment DIR TIMES [vault]") }
        try storedIncrement(directory: arguments[2], times: times, vault: arguments.count > 4 && arguments[4] == "vault")
    case "default-context":
        try defaultContext(appName: arguments.count > 2 ? arguments[2] : nil)
    case "stored-converge":
        guard arguments.count >= 5, let index = Int(arguments[3]), let writes = Int(arguments[4]) else {
            fail("usage: stored-converge DIR INDEX WRITES")
        }
        try storedConverge(directory: arguments[2], index: index, writes: writes)
    case "stored-follow":
        guard arguments.count >= 3 else { fail("usage: stored-follow DIR") }
        try storedFollow(directory: arguments[2])
    case "watch-release":
        guard arguments.count >= 3 else { fail("usage: watch-release DIR") }
        try watchRelease(directory: arguments[2])
    case "vault-update":
        guard arguments.count >= 4, let times = Int(arguments[3]) else { fail("usage: vault-update PATH TIMES") }
        try vaultUpdateIncrement(path: arguments[2], times: times)
    case "vault-compact":
        guard arguments.count >= 6 else { fail("usage: vault-compact PATH PASSPHRASE compact|remove SERVICE") }
        try vaultCompactAfterGo(path: arguments[2], passphrase: arguments[3], mode: arguments[4], service: arguments[5])
    case "crash-kv", "crash-kv-mapped", "crash-vault", "crash-vault-rotate", "vault-increment", "vault-read-loop", "secure-overread", "secure-underread",
        "secure-write", "memscan":
        try reliabilityCommand(arguments)
    case "mlock-limit", "mlock-ok":
        memoryLockCommand(arguments)
    case "log-warnings", "lifecycle-serve":
        runIntegrationCommand(arguments)
    case "pg-increment", "pg-follow":
        try postgresCommand(arguments)
    case "kv-increment-ack":
        guard arguments.count >= 7, let times = Int(arguments[5]), let milliseconds = Int(arguments[6]) else {
            fail("usage: kv-increment-ack DIR SUITE KEY TIMES TIMEOUT-MS [reopen|exclusive-reopen]")
        }
        let mode = arguments.count > 7 ? arguments[7] : ""
        let timeout = Duration.milliseconds(milliseconds)
        func open() throws -> KeyValueFileStrategy {
            try KeyValueFileStrategy(
                directory: URL(fileURLWithPath: arguments[2]), suite: arguments[3], lockTimeout: timeout,
                exclusive: mode == "exclusive-reopen")
        }
        let deadline = ContinuousClock.now + .seconds(120)
        var kept: KeyValueFileStrategy?
        while mode.isEmpty, kept == nil {
            do {
                kept = try open()
            } catch let error as CofferError where error.code == .busy && ContinuousClock.now < deadline {
                say("busy")
            }
        }
        var done = 0
        while done < times {
            do {
                let store = try kept ?? open()
                var written = 0
                try store.update(arguments[4]) { (value: Int?) -> Int in
                    written = (value ?? 0) + 1
                    return written
                }
                say("ack \(written)")
                done += 1
                if !mode.isEmpty { try store.flush() }
            } catch let error as CofferError where error.code == .busy && ContinuousClock.now < deadline {
                say("busy")
            }
        }
        try kept?.flush()
        kept = nil
    case "kv-open-race":
        guard arguments.count >= 7, let rounds = Int(arguments[3]), let index = Int(arguments[4]),
            let peers = Int(arguments[5]), let milliseconds = Int(arguments[6])
        else { fail("usage: kv-open-race DIR ROUNDS INDEX PEERS TIMEOUT-MS") }
        let directory = arguments[2]
        var open: [KeyValueFileStrategy] = []
        for round in 0..<rounds {
            // A barrier of files: each child marks its arrival, then waits (10 s at most) for all.
            _ = FileManager.default.createFile(atPath: "\(directory)/barrier-\(round)-\(index)", contents: nil)
            let deadline = ContinuousClock.now + .seconds(10)
            while (0..<peers).contains(where: { !FileManager.default.fileExists(atPath: "\(directory)/barrier-\(round)-\($0)") }),
                ContinuousClock.now < deadline
            {
                usleep(50)
            }
            do {
                let store = try KeyValueFileStrategy(
                    directory: URL(fileURLWithPath: directory), suite: "r\(round)", durability: .immediate,
                    lockTimeout: .milliseconds(milliseconds))
                try store.set(round, for: "p\(index)")
                open.append(store)
            } catch {
                say("error \(round) \(error)")
            }
        }
        say("done \(open.count)")
    case "vault-vectors":
        guard arguments.count >= 3 else { fail("usage: vault-vectors DIR") }
        try writeVaultVectors(to: URL(fileURLWithPath: arguments[2]))
    default:
        fail("unknown command \(arguments[1])")
    }
} catch {
    fail("error: \(error)")
}
