// Peers, measured by the same harness: Mutex, Foundation UserDefaults, SQLite (WAL, synchronous
// NORMAL and FULL), LMDB (default durable commits, and MDB_NOSYNC), raw libsodium, and the
// fsync floor. Each key-value peer writes an 8-byte value to one key, as Coffer's benchmarks do.

import Benchmark
import BenchSupport
import CLMDB
import CSQLite
import CSodiumPeer
import Coffer
import CofferCrypto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

final class MutexBox: Sendable {
    let value = Mutex(21)
}

let benchmarks: @Sendable () -> Void = {
    configureSuite()
    let scratch = ScratchDirectory("bench-peers")
    // Every write stores a new value (a write of an unchanged value may be skipped by a peer).
    var next = 0

    // MARK: Mutex

    let box = MutexBox()
    Benchmark("peer.mutex.read", configuration: configuration(scaling: .mega)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(box.value.withLock { $0 }) }
    }

    // MARK: UserDefaults

    let suiteName = "coffer-bench-\(getpid())"
    let defaults = UserDefaults(suiteName: suiteName)!
    defaults.set(21, forKey: "count")
    Benchmark("peer.userdefaults.read", configuration: configuration(scaling: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(defaults.integer(forKey: "count")) }
    }
    Benchmark("peer.userdefaults.write", configuration: configuration(scaling: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations {
            next &+= 1
            defaults.set(next, forKey: "count")
        }
    }
    Benchmark("peer.userdefaults.write.synchronize", configuration: configuration(maxIterations: 500, fsyncBound: true)) { benchmark in
        for _ in benchmark.scaledIterations {
            next &+= 1
            defaults.set(next, forKey: "count")
            blackHole(defaults.synchronize())
        }
    } teardown: {
        defaults.removePersistentDomain(forName: suiteName)
    }

    // MARK: SQLite

    for synchronous in ["NORMAL", "FULL"] {
        var db: SQLite?
        Benchmark(
            "peer.sqlite.wal.\(synchronous.lowercased()).upsert",
            configuration: configuration(scaling: synchronous == "FULL" ? .one : .kilo, fsyncBound: synchronous == "FULL")
        ) { benchmark in
            guard let db else { fatalError("set up before the run") }
            for _ in benchmark.scaledIterations {
                next &+= 1
                db.upsert("item-0", UInt64(next))
            }
        } setup: {
            db = SQLite(path: scratch.file("sqlite-\(synchronous).db").path, synchronous: synchronous)
            db?.fill(1000)
        } teardown: {
            db = nil
        }
    }
    var reader: SQLite?
    Benchmark("peer.sqlite.read.1k", configuration: configuration(scaling: .kilo)) { benchmark in
        guard let reader else { fatalError("set up before the run") }
        for _ in benchmark.scaledIterations { blackHole(reader.read("item-500")) }
    } setup: {
        reader = SQLite(path: scratch.file("sqlite-read.db").path, synchronous: "NORMAL")
        reader?.fill(1000)
    } teardown: {
        reader = nil
    }

    // MARK: LMDB

    for (mode, flags) in [("durable", UInt32(0)), ("nosync", UInt32(MDB_NOSYNC))] {
        var env: LMDB?
        Benchmark("peer.lmdb.put.\(mode)", configuration: configuration(scaling: flags == 0 ? .one : .kilo, fsyncBound: flags == 0)) {
            benchmark in
            guard let env else { fatalError("set up before the run") }
            for _ in benchmark.scaledIterations {
                next &+= 1
                env.put("item-0", UInt64(next))
            }
        } setup: {
            let directory = scratch.file("lmdb-\(mode)")
            try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            env = LMDB(directory: directory.path, flags: flags)
            env?.fill(1000)
        } teardown: {
            env = nil
        }
    }
    var lmdbReader: LMDB?
    Benchmark("peer.lmdb.get.1k", configuration: configuration(scaling: .kilo)) { benchmark in
        guard let lmdbReader else { fatalError("set up before the run") }
        for _ in benchmark.scaledIterations { blackHole(lmdbReader.get("item-500")) }
    } setup: {
        let directory = scratch.file("lmdb-read")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        lmdbReader = LMDB(directory: directory.path, flags: 0)
        lmdbReader?.fill(1000)
    } teardown: {
        lmdbReader = nil
    }

    // MARK: The fsync floor

    Benchmark("peer.fsync.floor", configuration: configuration(fsyncBound: true)) { benchmark in
        let path = scratch.file("fsync-floor").path
        let fd = open(path, O_RDWR | O_CREAT, 0o600)
        guard fd >= 0 else { fatalError("open: \(errno)") }
        defer { close(fd) }
        let size = 4 << 20
        let zeros = [UInt8](repeating: 0, count: size)
        guard zeros.withUnsafeBytes({ pwrite(fd, $0.baseAddress, size, 0) }) == size, fsync(fd) == 0 else {
            fatalError("preallocate: \(errno)")
        }
        let record = [UInt8](repeating: 0xA5, count: 100)
        var offset = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            guard record.withUnsafeBytes({ pwrite(fd, $0.baseAddress, 100, off_t(offset)) }) == 100, fdatasync(fd) == 0
            else { fatalError("write: \(errno)") }
            offset = (offset + 100) % (size - 100)
        }
        benchmark.stopMeasurement()
    }

    // MARK: Raw libsodium

    var key = [UInt8](repeating: 0, count: Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES))
    guard sodium_init() >= 0 else { fixtureFailed("libsodium", CocoaError(.featureUnsupported)) }
    randombytes_buf(&key, key.count)
    let plaintext = [UInt8]((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    var output = [UInt8](repeating: 0, count: (1 << 20) + Int(crypto_aead_xchacha20poly1305_ietf_ABYTES))
    var nonce = [UInt8](repeating: 0, count: Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES))
    var counter: UInt64 = 0
    Benchmark(
        "peer.libsodium.seal.1MiB",
        configuration: configuration(timeUnits: .microseconds, warmupIterations: 2, maxIterations: 500)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            counter &+= 1
            withUnsafeBytes(of: counter) { nonce.replaceSubrange(0..<8, with: $0) }
            var written: UInt64 = 0
            guard
                crypto_aead_xchacha20poly1305_ietf_encrypt(
                    &output, &written, plaintext, UInt64(plaintext.count), nil, 0, nil, nonce, key) == 0
            else { fatalError("libsodium refused to seal") }
            blackHole(output[0])
        }
    }
}

// MARK: - Minimal peer wrappers (benchmarks only: a failure is fatal)

/// One SQLite database in WAL mode with a `kv` table and prepared statements.
final class SQLite {
    private var db: OpaquePointer?
    private var upsertStatement: OpaquePointer?
    private var readStatement: OpaquePointer?

    init(path: String, synchronous: String) {
        guard sqlite3_open(path, &db) == SQLITE_OK else { fatalError("sqlite3_open failed") }
        exec("PRAGMA journal_mode=WAL")
        exec("PRAGMA synchronous=\(synchronous)")
        exec("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID")
        upsertStatement = prepare(
            "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        readStatement = prepare("SELECT value FROM kv WHERE key = ?1")
    }

    deinit {
        sqlite3_finalize(upsertStatement)
        sqlite3_finalize(readStatement)
        sqlite3_close(db)
    }

    func fill(_ count: Int) {
        exec("BEGIN")
        for i in 0..<count { upsert("item-\(i)", UInt64(i)) }
        exec("COMMIT")
    }

    /// One autocommit transaction.
    func upsert(_ key: String, _ value: UInt64) {
        var value = value
        let status = key.withCString { k in
            withUnsafeBytes(of: &value) { v in
                sqlite3_bind_text(upsertStatement, 1, k, -1, nil)
                sqlite3_bind_blob(upsertStatement, 2, v.baseAddress, Int32(v.count), nil)
                return sqlite3_step(upsertStatement)
            }
        }
        sqlite3_reset(upsertStatement)
        guard status == SQLITE_DONE else { fatalError("sqlite upsert: \(status)") }
    }

    func read(_ key: String) -> Int {
        let bytes = key.withCString { k -> Int in
            sqlite3_bind_text(readStatement, 1, k, -1, nil)
            guard sqlite3_step(readStatement) == SQLITE_ROW else { return -1 }
            return Int(sqlite3_column_bytes(readStatement, 0))
        }
        sqlite3_reset(readStatement)
        return bytes
    }

    private func exec(_ sql: String) {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { fatalError("sqlite: \(sql)") }
    }

    private func prepare(_ sql: String) -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else { fatalError("sqlite: \(sql)") }
        return statement
    }
}

/// One LMDB environment with its unnamed database; each put is its own write transaction.
final class LMDB {
    private var env: OpaquePointer?
    private var dbi: MDB_dbi = 0

    init(directory: String, flags: UInt32) {
        check(mdb_env_create(&env), "env_create")
        check(mdb_env_set_mapsize(env, 1 << 30), "set_mapsize")
        check(mdb_env_open(env, directory, flags, 0o600), "env_open")
        var txn: OpaquePointer?
        check(mdb_txn_begin(env, nil, 0, &txn), "txn_begin")
        check(mdb_dbi_open(txn, nil, 0, &dbi), "dbi_open")
        check(mdb_txn_commit(txn), "commit")
    }

    deinit { mdb_env_close(env) }

    func fill(_ count: Int) {
        for i in 0..<count { put("item-\(i)", UInt64(i)) }
    }

    func put(_ key: String, _ value: UInt64) {
        var value = value
        var txn: OpaquePointer?
        check(mdb_txn_begin(env, nil, 0, &txn), "txn_begin")
        var keyBytes = Array(key.utf8)
        keyBytes.withUnsafeMutableBytes { k in
            withUnsafeMutableBytes(of: &value) { v in
                var mk = MDB_val(mv_size: k.count, mv_data: k.baseAddress)
                var mv = MDB_val(mv_size: v.count, mv_data: v.baseAddress)
                check(mdb_put(txn, dbi, &mk, &mv, 0), "put")
            }
        }
        check(mdb_txn_commit(txn), "commit")
    }

    func get(_ key: String) -> Int {
        var txn: OpaquePointer?
        check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "txn_begin")
        defer { mdb_txn_abort(txn) }
        var keyBytes = Array(key.utf8)
        return keyBytes.withUnsafeMutableBytes { k in
            var mk = MDB_val(mv_size: k.count, mv_data: k.baseAddress)
            var mv = MDB_val()
            return mdb_get(txn, dbi, &mk, &mv) == 0 ? mv.mv_size : -1
        }
    }

    private func check(_ status: Int32, _ what: String) {
        if status != 0 { fatalError("lmdb \(what): \(String(cString: mdb_strerror(status)))") }
    }
}
