// Children for the reliability tests (RELIABILITY.md): kill -9 loops, a vault counter, guard
// pages, and a scan of the process's own memory after Vault.lock().
import CofferCore
import CofferRuntime
import CofferJournal
import CofferCrypto
import CofferStorage
import CofferTesting  // crashValue, which the crash-loop tests check against
import CofferVault
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `crash-kv DIR SUITE`: commits forever (immediate mode). Commit i is one batch:
/// `k<i mod 64>` = crashValue(i), `x` = crashValue(i), `last` = i; then prints `ack <i>`. Every 7th
/// commit also compacts. Prints `ready <first i>` once the store is open.
func crashKeyValue(directory: String, suite: String) throws -> Never {
    let store = try KeyValueFileStrategy(
        directory: URL(fileURLWithPath: directory), suite: suite, durability: .immediate, lockTimeout: .seconds(5))
    var i = (try store.get(Int.self, for: "last")).map { $0 + 1 } ?? 0
    say("ready \(i)")
    while true {
        let value = Data(crashValue(i))
        try store.saveBatch([("k\(i % 64)", value), ("x", value), ("last", try ValueCodec.encode(i))])
        say("ack \(i)")
        if i % 7 == 6 { try store.compact() }
        i += 1
    }
}

/// `crash-kv-mapped DIR SUITE`: crash-kv on a suite opened exclusively in coalesced mode, whose
/// appends are stores into a mapping of the file where the file system allows. Before each
/// commit i's batch, `single` = i is saved alone (a one-record commit, written in place).
func crashKeyValueMapped(directory: String, suite: String) throws -> Never {
    let store = try KeyValueFileStrategy(
        directory: URL(fileURLWithPath: directory), suite: suite, durability: .coalesced, lockTimeout: .seconds(5),
        exclusive: true)
    var i = (try store.get(Int.self, for: "last")).map { $0 + 1 } ?? 0
    say("ready \(i)")
    while true {
        let value = Data(crashValue(i))
        try store.save(try ValueCodec.encode(i), for: "single")
        try store.saveBatch([("k\(i % 64)", value), ("x", value), ("last", try ValueCodec.encode(i))])
        say("ack \(i)")
        if i % 7 == 6 { try store.compact() }
        i += 1
    }
}

/// Parses 64 hex digits into a raw vault key.
func rawKey(hex: String) throws -> SecureBytes {
    var bytes: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        guard let byte = UInt8(hex[index..<next], radix: 16) else { fail("bad hex key") }
        bytes.append(byte)
        index = next
    }
    defer { SecureMemory.zero(&bytes) }
    return try SecureBytes(copying: bytes)
}

/// `crash-vault PATH KEYHEX`: like crash-kv on a vault (created with the raw key when missing):
/// commit i is one `apply` of items (crash, k<i mod 64>), (crash, x) and (crash, last) = "<i>".
/// With `rotate`, the master key is rotated (every item re-sealed, the slots re-wrapped)
/// after every second commit instead of compacting after every seventh.
func crashVault(path: String, keyHex: String, rotate: Bool = false) throws -> Never {
    let url = URL(fileURLWithPath: path)
    let key = try rawKey(hex: keyHex)
    let vault =
        try Vault.exists(at: url)
        ? try Vault.open(at: url, unlock: .key(key), lockTimeout: .seconds(5))
        : try Vault.create(at: url, unlock: .key(key), lockTimeout: .seconds(5))
    var i = (try vault.string(service: "crash", account: "last")).flatMap { Int($0) }.map { $0 + 1 } ?? 0
    say("ready \(i)")
    while true {
        let value = crashValue(i)
        try vault.apply([
            .set(service: "crash", account: "k\(i % 64)", secret: value, label: "k\(i)", comment: nil),
            .set(service: "crash", account: "x", secret: value, label: "x\(i)", comment: nil),
            .set(service: "crash", account: "last", secret: Array("\(i)".utf8), label: nil, comment: nil),
        ])
        say("ack \(i)")
        if rotate {
            if i % 2 == 1 { try vault.rotate() }
        } else if i % 7 == 6 {
            try vault.compact()
        }
        i += 1
    }
}

/// `vault-increment PATH KEYHEX TIMES`: increments the counter item (counter, n) TIMES.
///
/// Each increment holds an application lock (`<path>.counter-lock`, a CofferCore FileLock)
/// from a plain read to a plain write, so what is tested is that each process sees the other's
/// writes (the reader test runs beside it). `vault-update` (VaultUpdate.swift) tests the
/// vault's own atomic `update`.
func vaultIncrement(path: String, keyHex: String, times: Int) throws {
    let url = URL(fileURLWithPath: path)
    let vault = try Vault.open(at: url, unlock: .key(try rawKey(hex: keyHex)), lockTimeout: .seconds(30))
    let lock = try FileLock(path: path + ".counter-lock", fileSystem: LiveFileSystem())
    for _ in 0..<times {
        try lock.withLock(timeout: .seconds(30)) {
            let current = try vault.string(service: "counter", account: "n").flatMap { Int($0) } ?? 0
            try vault.set("\(current + 1)", service: "counter", account: "n")
        }
    }
}

/// `vault-read-loop PATH KEYHEX`: reads the counter until it reaches `until`, checking each
/// value is a whole number that never goes down; prints `reads <n>` at the end.
func vaultReadLoop(path: String, keyHex: String, until: Int) throws {
    let vault = try Vault.open(at: URL(fileURLWithPath: path), unlock: .key(try rawKey(hex: keyHex)), lockTimeout: .seconds(30))
    var last = 0
    var reads = 0
    while last < until {
        guard let text = try vault.string(service: "counter", account: "n") else {
            reads += 1
            continue
        }
        guard let value = Int(text), value >= last else { fail("read a torn or older value: \(text) after \(last)") }
        last = value
        reads += 1
    }
    say("reads \(reads)")
}

/// `secure-overread`: reads the byte just past a SecureBytes buffer. Must die with SIGSEGV
/// (libsodium places the buffer against a PROT_NONE guard page).
func secureOverread() -> Never {
    let count = Int(CommandLine.arguments.count > 2 ? CommandLine.arguments[2] : "32") ?? 32
    do {
        let secret = try SecureBytes.random(count: count)
        say("allocated \(count)")
        let byte = secret.withUnsafeBytes { buffer in
            // One byte past the end, through a raw pointer: what an off-by-one in C would do.
            UnsafeRawPointer(buffer.baseAddress!).load(fromByteOffset: buffer.count, as: UInt8.self)
        }
        say("read past the end: \(byte)")  // never reached when the guard page works
        exit(0)
    } catch {
        fail("error: \(error)")
    }
}

/// `secure-underread`: reads the byte just before the canary and padding — the page before it
/// is a guard page too. Reads `start - (distance to the page boundary) - 1`.
func secureUnderread() -> Never {
    do {
        let secret = try SecureBytes.random(count: 32)
        say("allocated 32")
        let byte = secret.withUnsafeBytes { buffer -> UInt8 in
            let address = UInt(bitPattern: buffer.baseAddress!)
            let pageStart = address & ~UInt(getpagesize() - 1)
            return UnsafeRawPointer(bitPattern: pageStart - 1)!.load(as: UInt8.self)
        }
        say("read before the start: \(byte)")
        exit(0)
    } catch {
        fail("error: \(error)")
    }
}

/// `secure-write`: writes into a SecureBytes buffer after it was filled (it is read-only).
func secureWrite() -> Never {
    do {
        let secret = try SecureBytes.random(count: 32)
        say("allocated 32")
        secret.withUnsafeBytes { buffer in
            UnsafeMutableRawPointer(mutating: buffer.baseAddress!).storeBytes(of: 0, as: UInt8.self)
        }
        say("wrote into a read-only secret")
        exit(0)
    } catch {
        fail("error: \(error)")
    }
}

/// Dispatches the reliability commands (main.swift's switch sends them here).
func reliabilityCommand(_ arguments: [String]) throws {
    func argument(_ i: Int) -> String {
        guard arguments.count > i else { fail("missing argument \(i) for \(arguments[1])") }
        return arguments[i]
    }
    switch arguments[1] {
    case "crash-kv": try crashKeyValue(directory: argument(2), suite: argument(3))
    case "crash-kv-mapped": try crashKeyValueMapped(directory: argument(2), suite: argument(3))
    case "crash-vault": try crashVault(path: argument(2), keyHex: argument(3))
    case "crash-vault-rotate": try crashVault(path: argument(2), keyHex: argument(3), rotate: true)
    case "vault-increment": try vaultIncrement(path: argument(2), keyHex: argument(3), times: Int(argument(4)) ?? 0)
    case "vault-read-loop": try vaultReadLoop(path: argument(2), keyHex: argument(3), until: Int(argument(4)) ?? 0)
    case "secure-overread": secureOverread()
    case "secure-underread": secureUnderread()
    case "secure-write": secureWrite()
    case "memscan": try memoryScan(directory: argument(2))
    default: fail("unknown command \(arguments[1])")
    }
}
