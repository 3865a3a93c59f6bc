// `coffer-bench` (`swift run -c release coffer-bench`): the developers' suite. The hot
// read/write paths, the large opens and the KDF presets, measured next to peers in the same run.
// The harness, the table, JSON and SVG, and the rows `coffer bench` also prints (vault writes
// and reads, the fsync floor, the KDF presets) are in CofferBenchHarness.
//
// What one operation is, per name:
//   stored.read               read a loaded memory-backed `@Stored` Int
//   computed.read             read an up-to-date `@Computed` Int (one `@Stored` input)
//   peer.mutex.read           `Mutex<Int>.withLock { $0 }`, same loop
//   peer.observable.read      an Int property of Swift's own `@Observable` class (Observation's
//                             `access` plus a plain load: the floor of any observable read)
//   peer.userdefaults.read    Foundation `UserDefaults.integer(forKey:)`
//   peer.userdefaults.write   Foundation `UserDefaults.set(_:forKey:)` (no synchronize)
//   keyvalue.write            `KeyValueFileStrategy.save` of an 8-byte value, `.coalesced`
//   keyvalue.write.durable    the same, `.immediate` (fdatasync before returning)
//   keyvalue.write.exclusive  `keyvalue.write` on a suite opened `exclusive: true` (one process; no lock per write)
//   keyvalue.write.durable.exclusive  `keyvalue.write.durable` on an exclusive suite: pwrite + fdatasync
//   vault.write               `Vault.set` of a 32-byte secret to one item, `.coalesced`
//   vault.write.durable       the same, `.immediate`
//   vault.read                `Vault.data(service:account:)` of a 32-byte secret, unlocked
//   peer.fsync.floor          pwrite of 100 bytes into a preallocated file + fdatasync
//   vault.seal.1MiB           `Vault.set` of a 1 MiB secret as a new item, `.coalesced`: the
//                             vault's whole write path (copies, seal, CRC-32C, write to the kernel)
//   peer.libsodium.seal.1MiB  `XChaCha20Poly1305.seal(_:key:nonce:associatedData:into:)` on raw
//                             buffers: crypto_aead_xchacha20poly1305_ietf_encrypt plus a length check
//   keyvalue.open.10k         open a 10,000-key suite and read one key (then close)
//   vault.open.10k            open a 10,000-item vault with a raw key (no KDF), read one secret
//   peer.crypto.open.10k      the cryptography of vault.open.10k alone, one thread, raw buffers:
//                             10,000 XChaCha20-Poly1305 opens and keyed BLAKE2b chain steps
//   vault.open.identity       open a one-item vault with an X25519 identity (a recipient slot), read the item
//   vault.rotate.10k          `Vault.rotate()` of a 10,000-item vault: new master key, every item
//                             re-sealed, the file rewritten (one op per run)
//   kdf.interactive           Argon2id at the interactive preset (one passphrase unlock's KDF)
//   kdf.moderate              Argon2id at the moderate preset
//   keyvalue.change.latency, vault.change.latency, watch.idle.1000keys   see BenchChange.swift
//   cli.run.overhead          what `coffer run` adds to starting a program: `coffer --key-file K
//                             run --env X=coffer://bench/run -- env true` (start, unlock, read one
//                             secret, spawn, relay, wait) minus `env true` alone, in the same run
//   peer.env.true             starting `env true` and waiting for it (posix_spawnp + waitpid)
//   keys.*                    keys chosen at run time, 1k to 100k live entries: see BenchKeys.swift

import Coffer
import CofferBenchHarness
import CofferCrypto
import Foundation
import Observation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs the benchmark suite and prints its table (or JSON, and an SVG chart when asked).
func runBenchmarks(json: Bool, quick: Bool, svg: String?) throws {
    let directory = try BenchDirectory()
    defer { directory.remove() }
    let suite = BenchSuite(runner: BenchRunner(quick: quick), directory: directory.url, progress: isatty(STDERR_FILENO) == 1)
    let started = monotonicNanoseconds()
    let results = try suite.run()
    let seconds = Double(monotonicNanoseconds() - started) / 1e9
    if json {
        writeOut(BenchReport.json(results))
    } else {
        writeOut(BenchReport.table(results, title: "coffer-bench", quick: quick, seconds: seconds))
    }
    if let svg {
        let text = BenchReport.svg(results, title: "coffer-bench")
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: svg), options: .atomic)
        } catch {
            throw BenchError("cannot write the chart to \(svg): \(error.localizedDescription)")
        }
        if !json { writeOut("chart written to \(svg)\n") }
    }
}

/// The model the reactive benchmarks read: one memory-backed `@Stored`, one `@Computed` on it.
final class BenchModel {
    @Stored var count = 0
    @Computed var doubled: Int

    init() {
        $doubled = Computed { [$count] in $count.wrappedValue &* 2 }
    }
}

/// Swift's own observable model: what the `@Observable` macro makes of a plain property (not
/// thread-safe, no persistence). Its read is Observation's `access` and a load.
@Observable
final class ObservableBox {
    var count = 0
}

/// `Mutex<Int>` in a class, as a model would hold it.
final class MutexBox: Sendable {
    let value = Mutex(0)
}

struct BenchSuite {
    let runner: BenchRunner
    let directory: URL
    let progress: Bool

    /// The issue's order, which the table and the JSON keep.
    static let names = [
        "stored.read", "computed.read", "peer.mutex.read", "peer.observable.read", "peer.userdefaults.read",
        "peer.userdefaults.write",
        "keyvalue.write", "keyvalue.write.durable", "keyvalue.write.exclusive", "keyvalue.write.durable.exclusive",
        "vault.write", "vault.write.durable", "vault.read",
        "peer.fsync.floor", "vault.seal.1MiB", "peer.libsodium.seal.1MiB", "keyvalue.open.10k", "vault.open.10k",
        "peer.crypto.open.10k", "vault.open.identity", "vault.rotate.10k", "kdf.interactive", "kdf.moderate", "keyvalue.change.latency", "vault.change.latency", "watch.idle.1000keys",
        "cli.run.overhead", "peer.env.true",
    ] + keyNames

    /// Names to run, for profiling one benchmark: `COFFER_BENCH_FILTER=vault.write,kdf.` (prefixes;
    /// a name ending in `$` is matched whole: `vault.write$` leaves out `vault.write.durable`).
    static var filter: [String]? {
        ProcessInfo.processInfo.environment["COFFER_BENCH_FILTER"].map { $0.split(separator: ",").map(String.init) }
    }

    func run() throws -> [BenchResult] {
        // Each group's runs are interleaved, so the ratios inside a group (Coffer against its
        // peer) come from the same moments of the machine's load and the disk's queue.
        let groups: [([String], ([String]) throws -> [BenchResult])] = [
            (["stored.read", "computed.read", "peer.mutex.read", "peer.observable.read", "peer.userdefaults.read"], reads),
            (
                ["keyvalue.write", "keyvalue.write.exclusive", "vault.write", "vault.read", "peer.userdefaults.write"],
                coalescedWrites
            ),
            (["keyvalue.write.durable", "keyvalue.write.durable.exclusive", "vault.write.durable", "peer.fsync.floor"], durableWrites),
            (["vault.seal.1MiB", "peer.libsodium.seal.1MiB"], seal1MiB),
            (["keyvalue.open.10k", "vault.open.10k", "peer.crypto.open.10k"], opens10k),
            (["vault.open.identity", "vault.rotate.10k"], keySlots),
            (["kdf.interactive", "kdf.moderate"], kdf),
            (["keyvalue.change.latency", "vault.change.latency", "watch.idle.1000keys"], changeLatency),
            (["cli.run.overhead", "peer.env.true"], runOverhead),
            (Self.keyNames, keysScaling),
        ]
        let filter = Self.filter
        func wanted(_ name: String) -> Bool {
            filter.map { $0.contains { $0.hasSuffix("$") ? name == $0.dropLast() : name.hasPrefix($0) } } ?? true
        }
        // cli.run.overhead starts the `coffer` beside this program: look for it before minutes
        // of other benchmarks, not after.
        if wanted("cli.run.overhead") { _ = try cofferExecutable() }
        var results: [BenchResult] = []
        for (names, group) in groups {
            let selected = names.filter(wanted)
            if selected.isEmpty { continue }
            if progress { writeError("\r\u{1B}[K  running \(selected.joined(separator: ", "))…") }
            results += try group(selected)
        }
        if progress { writeError("\r\u{1B}[K") }
        return results.sorted { (Self.names.firstIndex(of: $0.name) ?? 99) < (Self.names.firstIndex(of: $1.name) ?? 99) }
    }

    // MARK: - Reads

    private func reads(_ selected: [String]) throws -> [BenchResult] {
        let context = CofferContext(directory: directory.appendingPathComponent("context"))
        let model = CofferContext.$current.withValue(context) { BenchModel() }
        model.count = 21
        let box = MutexBox()
        box.value.withLock { $0 = 21 }
        let observable = ObservableBox()
        observable.count = 21
        guard model.count == 21, model.doubled == 42 else {
            throw BenchError("bench: the reactive model returned a wrong value")
        }
        let name = "coffer-bench-\(getpid())"
        guard let defaults = UserDefaults(suiteName: name) else {
            throw BenchError("bench: Foundation refused a UserDefaults suite")
        }
        defer { defaults.removePersistentDomain(forName: name) }
        defaults.set(21, forKey: "count")
        let specs = [
            BenchSpec(name: "stored.read") { n in sumOfReads(n) { model.count } },
            BenchSpec(name: "computed.read") { n in sumOfReads(n) { model.doubled } },
            BenchSpec(name: "peer.mutex.read") { n in sumOfReads(n) { box.value.withLock { $0 } } },
            BenchSpec(name: "peer.observable.read") { n in sumOfReads(n) { observable.count } },
            BenchSpec(name: "peer.userdefaults.read") { n in sumOfReads(n) { defaults.integer(forKey: "count") } },
        ]
        return try runner.measureGroup(specs.filter { selected.contains($0.name) })
    }

    // MARK: - Writes

    /// A key-value suite writer: an 8-byte value (a counter, so never an unchanged value) to one key.
    private func keyValueWriter(
        _ name: String, _ durability: Durability, exclusive: Bool = false
    ) throws -> (BenchSpec, KeyValueFileStrategy) {
        let store = try KeyValueFileStrategy(directory: directory, suite: name, durability: durability, exclusive: exclusive)
        var value: UInt64 = 0
        let spec = BenchSpec(name: name, maxIterations: 5_000_000) { n in
            for _ in 0..<n {
                value &+= 1
                try store.save(withUnsafeBytes(of: value) { Data($0) }, for: "counter")
            }
            return value
        }
        return (spec, store)
    }

    /// The rows `coffer bench` prints too, built the same way.
    var user: UserBenchmarks { UserBenchmarks(runner: runner, directory: directory) }

    private func coalescedWrites(_ selected: [String]) throws -> [BenchResult] {
        let key = try SecureBytes.random(count: 32)
        let (keyValue, store) = try keyValueWriter("keyvalue.write", .coalesced)
        let (exclusive, exclusiveStore) = try keyValueWriter("keyvalue.write.exclusive", .coalesced, exclusive: true)
        let (vaultWrite, vault) = try user.vaultWriter("vault.write", .coalesced, key: key)
        try vault.set(Data(repeating: 7, count: 32), service: "bench", account: "item")
        let read = user.vaultRead(vault)
        let name = "coffer-bench-\(getpid())"
        guard let defaults = UserDefaults(suiteName: name) else {
            throw BenchError("bench: Foundation refused a UserDefaults suite")
        }
        defer { defaults.removePersistentDomain(forName: name) }
        var next = 0
        let userDefaults = BenchSpec(name: "peer.userdefaults.write", maxIterations: 2_000_000) { n in
            for _ in 0..<n {
                next &+= 1
                defaults.set(next, forKey: "count")
            }
            return UInt64(truncatingIfNeeded: next)
        }
        let results = try runner.measureGroup(
            [keyValue, exclusive, vaultWrite, read, userDefaults].filter { selected.contains($0.name) })
        try store.flush()
        try exclusiveStore.flush()
        try vault.flush()
        return results
    }

    private func durableWrites(_ selected: [String]) throws -> [BenchResult] {
        let key = try SecureBytes.random(count: 32)
        let (keyValue, _) = try keyValueWriter("keyvalue.write.durable", .immediate)
        let (exclusive, _) = try keyValueWriter("keyvalue.write.durable.exclusive", .immediate, exclusive: true)
        let (vault, _) = try user.vaultWriter("vault.write.durable", .immediate, key: key)
        let floor = try FsyncFloor(directory: directory)
        return try withExtendedLifetime(floor) {
            try runner.measureGroup([keyValue, exclusive, vault, floor.spec].filter { selected.contains($0.name) })
        }
    }

    // MARK: - Sealing 1 MiB

    private func seal1MiB(_ selected: [String]) throws -> [BenchResult] {
        let size = 1 << 20
        let key = try SecureBytes.random(count: 32)
        let plaintext = [UInt8]((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let secret = Data(plaintext)
        // The vault's path: each op stores a new item, so no compaction ever runs; a fresh vault
        // before each run keeps the file and the index small.
        let url = directory.appendingPathComponent("seal.coffervault")
        var vault: Vault?
        var item = 0
        let viaVault = BenchSpec(
            name: "vault.seal.1MiB", maxIterations: 64,
            prepare: {
                vault = nil
                try? FileManager.default.removeItem(at: url)
                vault = try Vault.create(at: url, unlock: .key(key), durability: .coalesced)
            }
        ) { n in
            guard let vault else { fatalError("the vault is created before each run") }
            for _ in 0..<n {
                item += 1
                try vault.set(secret, service: "seal", account: "item-\(item)")
            }
            return UInt64(item)
        }
        // The floor: libsodium's seal on raw buffers (a fresh nonce per op).
        var nonce = [UInt8](repeating: 0, count: XChaCha20Poly1305.nonceLength)
        var output = [UInt8](repeating: 0, count: size + XChaCha20Poly1305.tagLength)
        var counter: UInt64 = 0
        let raw = BenchSpec(name: "peer.libsodium.seal.1MiB", maxIterations: 10_000) { n in
            var sum: UInt64 = 0
            for _ in 0..<n {
                counter &+= 1
                withUnsafeBytes(of: counter.littleEndian) { nonce.replaceSubrange(0..<8, with: $0) }
                try plaintext.withUnsafeBytes { message in
                    try nonce.withUnsafeBytes { nonceBytes in
                        try output.withUnsafeMutableBytes { out in
                            try XChaCha20Poly1305.seal(
                                message, key: key, nonce: nonceBytes,
                                associatedData: UnsafeRawBufferPointer(start: nil, count: 0), into: out)
                        }
                    }
                }
                sum &+= UInt64(output[size])
            }
            return sum
        }
        let results = try runner.measureGroup([viaVault, raw].filter { selected.contains($0.name) })
        vault = nil
        return results
    }

    // MARK: - Opening 10,000 items

    private func opens10k(_ selected: [String]) throws -> [BenchResult] {
        let count = 10_000
        let probe = "item-\(count / 2)"
        // The key-value suite: 10,000 8-byte values, one record each.
        do {
            let store = try KeyValueFileStrategy(directory: directory, suite: "open10k")
            for start in stride(from: 0, to: count, by: 1000) {
                try store.saveBatch((start..<(start + 1000)).map { i in ("item-\(i)", withUnsafeBytes(of: UInt64(i)) { Data($0) }) })
            }
            try store.flush()
        }
        let keyValue = BenchSpec(name: "keyvalue.open.10k", maxIterations: 1000) { n in
            try sumOfReads(n) {
                try KeyValueFileStrategy(directory: directory, suite: "open10k").load(probe)?.count ?? 0
            }
        }
        // The vault: 10,000 items of 32 bytes, unlocked with a raw key (no KDF).
        let key = try SecureBytes.random(count: 32)
        let url = directory.appendingPathComponent("open10k.coffervault")
        do {
            let vault = try Vault.create(at: url, unlock: .key(key), durability: .coalesced)
            let secret = [UInt8](repeating: 0x5A, count: 32)
            for start in stride(from: 0, to: count, by: 1000) {
                try vault.apply(
                    (start..<(start + 1000)).map { i in
                        .set(service: "bench", account: "item-\(i)", secret: secret, label: nil, comment: nil)
                    })
            }
            try vault.flush()
        }
        let vault = BenchSpec(name: "vault.open.10k", maxIterations: 1000) { n in
            try sumOfReads(n) {
                try Vault.open(at: url, unlock: .key(key)).data(service: "bench", account: probe)?.count ?? 0
            }
        }
        return try runner.measureGroup([keyValue, vault, try vaultOpenCryptoFloor(count: count, file: url)].filter {
            selected.contains($0.name)
        })
    }

    /// `peer.crypto.open.10k`: the cryptography `vault.open.10k` cannot skip, alone, on one
    /// thread and raw buffers: for each of `count` records the size of the vault file's average
    /// one, an XChaCha20-Poly1305 open (with 48 bytes of associated data, as a record's) and the
    /// keyed BLAKE2b step of the chain over its tag. Any open of a file of individually sealed,
    /// authenticated records pays this; the vault spreads it over two threads.
    private func vaultOpenCryptoFloor(count: Int, file: URL) throws -> BenchSpec {
        // The bytes the records take: the file without the zeros preallocated past its data (its
        // header area, a few KiB, adds under a byte to each record's share).
        let image = try Data(contentsOf: file)
        let dataBytes = (image.lastIndex { $0 != 0 } ?? image.startIndex) - image.startIndex + 1
        let tag = XChaCha20Poly1305.tagLength
        let nonceLength = XChaCha20Poly1305.nonceLength
        // A record's frame header (12 bytes), nonce and tag around its plaintext.
        let plaintextCount = max(16, dataBytes / count - 12 - nonceLength - tag)
        let recordCount = nonceLength + plaintextCount + tag
        let key = try SecureBytes.random(count: 32)
        let chainKey = try SecureBytes.random(count: 32)
        let associatedData = [UInt8](repeating: 0xAD, count: 48)
        var records = [UInt8](repeating: 0, count: count * recordCount)
        let plaintext = [UInt8](repeating: 0x5A, count: plaintextCount)
        try records.withUnsafeMutableBytes { records in
            for i in 0..<count {
                let record = UnsafeMutableRawBufferPointer(rebasing: records[(i * recordCount)..<((i + 1) * recordCount)])
                SecureRandom.fill(UnsafeMutableRawBufferPointer(rebasing: record[..<nonceLength]))
                try plaintext.withUnsafeBytes { message in
                    try associatedData.withUnsafeBytes { data in
                        try XChaCha20Poly1305.seal(
                            message, key: key, nonce: UnsafeRawBufferPointer(rebasing: record[..<nonceLength]),
                            associatedData: data, into: UnsafeMutableRawBufferPointer(rebasing: record[nonceLength...]))
                    }
                }
            }
        }
        var output = [UInt8](repeating: 0, count: plaintextCount)
        var chain = [UInt8](repeating: 0, count: 32 + tag)
        return BenchSpec(name: "peer.crypto.open.10k", maxIterations: 1000) { n in
            var sum: UInt64 = 0
            for _ in 0..<n {
                try records.withUnsafeBytes { records in
                    try associatedData.withUnsafeBytes { data in
                        try output.withUnsafeMutableBytes { out in
                            try chain.withUnsafeMutableBytes { chain in
                                for i in 0..<count {
                                    let record = UnsafeRawBufferPointer(rebasing: records[(i * recordCount)..<((i + 1) * recordCount)])
                                    try XChaCha20Poly1305.open(
                                        UnsafeRawBufferPointer(rebasing: record[nonceLength...]), key: key,
                                        nonce: UnsafeRawBufferPointer(rebasing: record[..<nonceLength]),
                                        associatedData: data, into: out)
                                    UnsafeMutableRawBufferPointer(rebasing: chain[32...]).copyMemory(
                                        from: UnsafeRawBufferPointer(rebasing: record[(recordCount - tag)...]))
                                    try BLAKE2b.hash(
                                        UnsafeRawBufferPointer(chain), key: chainKey,
                                        into: UnsafeMutableRawBufferPointer(rebasing: chain[..<32]))
                                }
                            }
                        }
                    }
                }
                sum &+= UInt64(output[0]) &+ UInt64(chain[0])
            }
            return sum
        }
    }

    // MARK: - Identities and rotation

    private func keySlots(_ selected: [String]) throws -> [BenchResult] {
        var results: [BenchResult] = []
        if selected.contains("vault.open.identity") {
            // A vault with a raw-key slot and a recipient slot; opened with the identity: one
            // X25519 and the slot's AEAD where a passphrase would run Argon2id.
            let identity = try X25519Identity.generate()
            let url = directory.appendingPathComponent("identity.coffervault")
            do {
                let vault = try Vault.create(at: url, unlock: .key(try SecureBytes.random(count: 32)))
                try vault.set(Data(repeating: 0x5A, count: 32), service: "bench", account: "probe")
                try vault.addRecipient(identity.recipient)
            }
            let open = BenchSpec(name: "vault.open.identity", maxIterations: 10_000) { n in
                try sumOfReads(n) {
                    try Vault.open(at: url, unlock: .identities([identity])).data(service: "bench", account: "probe")?.count ?? 0
                }
            }
            results += try runner.measureGroup([open])
        }
        if selected.contains("vault.rotate.10k") {
            let key = try SecureBytes.random(count: 32)
            let url = directory.appendingPathComponent("rotate10k.coffervault")
            let vault = try Vault.create(at: url, unlock: .key(key), durability: .coalesced)
            let secret = [UInt8](repeating: 0x5A, count: 32)
            for start in stride(from: 0, to: 10_000, by: 1000) {
                try vault.apply(
                    (start..<(start + 1000)).map { i in
                        .set(service: "bench", account: "item-\(i)", secret: secret, label: nil, comment: nil)
                    })
            }
            try vault.flush()
            results.append(
                try runner.measureSingle("vault.rotate.10k") {
                    UInt64(try vault.rotate().items)
                })
        }
        return results
    }

    // MARK: - coffer run

    /// `cli.run.overhead` and `peer.env.true`: each run times `coffer run … -- env true` and
    /// `env true` (the same number of starts, one after the other, so both see the same load);
    /// the overhead of that run is the difference per start.
    private func runOverhead(_ selected: [String]) throws -> [BenchResult] {
        let keyFile = directory.appendingPathComponent("run.key")
        let vaultURL = directory.appendingPathComponent("run.coffervault")
        let key = try SecureBytes.random(count: 32)
        guard FileManager.default.createFile(
            atPath: keyFile.path, contents: key.withUnsafeBytes { Data($0) }, attributes: [.posixPermissions: 0o600])
        else { throw BenchError("bench: cannot write \(keyFile.path)") }
        do {
            let vault = try Vault.create(at: vaultURL, unlock: .keyFile(keyFile))
            try vault.set(Data(repeating: 0x5A, count: 32), service: "bench", account: "run")
            try vault.flush()
        }
        let coffer = try cofferExecutable()
        let viaCoffer = [
            coffer, "--vault", vaultURL.path, "--key-file", keyFile.path, "run", "--env", "BENCH_SECRET=coffer://bench/run",
            "--", "env", "true",
        ]
        let plain = ["env", "true"]
        /// Starts `arguments` (found on PATH) with output to /dev/null, waits; nanoseconds taken.
        func startAndWait(_ arguments: [String], times: Int) throws -> Double {
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
            let argv = arguments.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            let start = monotonicNanoseconds()
            for _ in 0..<times {
                var pid: pid_t = 0
                let result = posix_spawnp(&pid, arguments[0], &actions, nil, argv, environ)
                guard result == 0 else {
                    throw BenchError("bench: cannot start \(arguments[0]): \(String(cString: strerror(result)))")
                }
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                guard status == 0 else {
                    throw BenchError("bench: \(arguments.joined(separator: " ")) ended with wait status \(status)")
                }
            }
            return Double(monotonicNanoseconds() - start) / Double(times)
        }
        _ = try startAndWait(viaCoffer, times: 1)  // warm-up: page cache, dynamic loader
        _ = try startAndWait(plain, times: 1)
        let times = runner.quick ? 1 : 5
        var overhead: [Double] = []
        var peer: [Double] = []
        for _ in 0..<runner.runs {
            let withCoffer = try startAndWait(viaCoffer, times: times)
            let alone = try startAndWait(plain, times: times)
            overhead.append(max(withCoffer - alone, 1))
            peer.append(alone)
        }
        func result(_ name: String, _ samples: [Double]) -> BenchResult {
            let sorted = samples.sorted()
            return BenchResult(
                name: name, nsPerOp: sorted[sorted.count / 2], minNs: sorted[0], maxNs: sorted[sorted.count - 1],
                runs: sorted.count)
        }
        return [result("cli.run.overhead", overhead), result("peer.env.true", peer)].filter { selected.contains($0.name) }
    }

    // MARK: - Argon2id

    private func kdf(_ selected: [String]) throws -> [BenchResult] { try user.kdf(selected) }
}
