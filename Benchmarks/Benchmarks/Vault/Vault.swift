// The vault: 32-byte item writes (coalesced and durable) and opens at 10, 1,000 and 100,000
// items (raw key, so no KDF), reads, sealing 1 MiB, and the Argon2id presets.

import Benchmark
import BenchSupport
import Coffer
import CofferCrypto
import Foundation

let benchmarks: @Sendable () -> Void = {
    configureSuite()
    let scratch = ScratchDirectory("bench-vault")
    let key: SecureBytes
    do { key = try SecureBytes.random(count: 32) } catch { fixtureFailed("a random key", error) }
    let secret = Data((0..<32).map { UInt8($0) })

    for count in scalingSizes {
        let size = sizeLabel(count)
        for (mode, durability) in [("coalesced", Durability.coalesced), ("durable", .immediate)] {
            var vault: Vault?
            Benchmark(
                "vault.write.\(mode).\(size)",
                configuration: configuration(scaling: durability == .immediate ? .one : .kilo, fsyncBound: durability == .immediate)
            ) { benchmark in
                guard let vault else { fatalError("set up before the run") }
                for _ in benchmark.scaledIterations {
                    // Overwrites one item: the vault keeps `count` live items.
                    try vault.set(secret, service: "bench", account: "item-0")
                }
            } setup: {
                do {
                    vault = try makeVault(
                        at: scratch.file("write-\(mode)-\(count).coffervault"), key: key, count: count,
                        durability: durability)
                } catch { fixtureFailed("vault of \(count)", error) }
            } teardown: {
                try? vault?.flush()
                vault = nil
            }
        }

        let url = scratch.file("open-\(count).coffervault")
        Benchmark("vault.open.\(size)", configuration: configuration(maxIterations: 100)) {
            benchmark in
            for _ in benchmark.scaledIterations {
                let vault = try Vault.open(at: url, unlock: .key(key))
                blackHole(try vault.data(service: "bench", account: "item-\(count / 2)"))
            }
        } setup: {
            do { _ = try makeVault(at: url, key: key, count: count, durability: .coalesced) }
            catch { fixtureFailed("vault of \(count)", error) }
        }
    }

    var reader: Vault?
    let accounts = (0..<1000).map { "item-\($0)" }
    Benchmark("vault.read.1k", configuration: configuration(scaling: .kilo)) { benchmark in
        guard let reader else { fatalError("set up before the run") }
        for i in benchmark.scaledIterations {
            blackHole(try reader.data(service: "bench", account: accounts[i % 1000]))
        }
    } setup: {
        do { reader = try makeVault(at: scratch.file("read.coffervault"), key: key, count: 1000, durability: .coalesced) }
        catch { fixtureFailed("vault", error) }
    } teardown: {
        reader = nil
    }

    // Sealing 1 MiB through the vault: each op stores a new item (no compaction), coalesced.
    var sealer: Vault?
    var item = 0
    let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    Benchmark(
        "vault.seal.1MiB",
        configuration: configuration(timeUnits: .microseconds, warmupIterations: 2, maxIterations: 200)
    ) { benchmark in
        guard let sealer else { fatalError("set up before the run") }
        for _ in benchmark.scaledIterations {
            item += 1
            try sealer.set(big, service: "seal", account: "item-\(item)")
        }
    } setup: {
        do { sealer = try Vault.create(at: scratch.file("seal.coffervault"), unlock: .key(key), durability: .coalesced) }
        catch { fixtureFailed("vault", error) }
    } teardown: {
        sealer = nil
    }

    // One passphrase unlock at each preset: opening a one-item vault whose slot was made with it
    // (Argon2id, then reading and authenticating a small file). Argon2id itself is not public
    // API; coffer-bench's kdf.* rows time it alone.
    let passphrase: SecureBytes
    do { passphrase = try SecureBytes(utf8: "coffer benchmark passphrase") } catch { fixtureFailed("passphrase", error) }
    for (name, parameters) in [("interactive", Argon2idParameters.interactive), ("moderate", .moderate)] {
        let file = scratch.file("kdf-\(name).coffervault")
        Benchmark(
            "kdf.\(name)",
            configuration: configuration(
                timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(3), maxIterations: 5)
        ) { benchmark in
            for _ in benchmark.scaledIterations {
                let vault = try Vault.open(at: file, unlock: .passphrase(passphrase), kdfLimit: parameters)
                blackHole(try vault.data(service: "kdf", account: "item"))
            }
        } setup: {
            do {
                if !FileManager.default.fileExists(atPath: file.path) {
                    let vault = try Vault.create(at: file, unlock: .passphrase(passphrase), kdf: parameters)
                    try vault.set(Data("secret".utf8), service: "kdf", account: "item")
                }
            } catch { fixtureFailed("vault with a \(name) passphrase slot", error) }
        }
    }
}
