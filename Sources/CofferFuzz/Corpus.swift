import CofferCore
import CofferJournal
import CofferCrypto
import CofferVault
import Foundation

/// Writes the seed corpus: valid files made through the public API, and the tamper cases the
/// unit tests use (a truncated tail, a zeroed sector, a flipped byte, a damaged header copy).
func makeCorpus(in directory: String) throws {
    let fm = FileManager.default
    let work = NSTemporaryDirectory() + "coffer-corpus-\(getpid())"
    try? fm.removeItem(atPath: work)
    try fm.createDirectory(atPath: work, withIntermediateDirectories: true)
    defer { try? fm.removeItem(atPath: work) }
    for target in FuzzTarget.allCases {
        try fm.createDirectory(atPath: "\(directory)/\(target.rawValue)", withIntermediateDirectories: true)
    }
    func write(_ target: FuzzTarget, _ name: String, _ bytes: [UInt8]) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: "\(directory)/\(target.rawValue)/\(name)"))
    }
    func field(_ bytes: [UInt8]) -> [UInt8] {
        let n = UInt32(bytes.count)
        return [UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + bytes
    }
    func le64(_ v: Int64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }

    // Vaults opened with the fuzz key: two items; with a passphrase slot too; compacted; after a removal.
    let key = FuzzTarget.rawKey
    var vaults: [(String, [UInt8])] = []
    func makeVault(_ name: String, _ build: (Vault) throws -> Void) throws {
        let url = URL(fileURLWithPath: "\(work)/\(name).coffer")
        let vault = try Vault.create(at: url, unlock: .key(key), kdf: .minimum)
        try build(vault)
        vault.lock()
        vaults.append((name, Array(try Data(contentsOf: url))))
    }
    try makeVault("two-items") { v in
        try v.set("first-secret", service: "svc", account: "one", label: "One", comment: "c")
        try v.set(Data([0, 1, 2, 3]), service: "svc", account: "two")
    }
    try makeVault("passphrase-slot") { v in
        try v.addKeySlot(.passphrase("pw"), kdf: .minimum)
        try v.set("x", service: "s", account: "a")
    }
    try makeVault("compacted") { v in
        for i in 0..<5 { try v.set("value-\(i)", service: "s", account: "a\(i % 2)") }
        _ = try v.remove(service: "s", account: "a0")
        try v.compact()
        try v.set("after", service: "t", account: "b")
    }
    try makeVault("batch-and-delete") { v in
        try v.apply([
            .set(service: "a", account: "1", secret: Array("one".utf8), label: "L", comment: nil),
            .set(service: "b", account: "2", secret: [], label: nil, comment: "empty secret"),
        ])
        _ = try v.remove(service: "a", account: "1")
    }
    let recordsStart = 32 + 4096
    for (name, bytes) in vaults {
        try write(.vault, name, [0] + bytes)
        try write(.vault, name + "-fix", [3] + bytes)
        // The frames alone, for the scanner.
        let frames = Array(bytes[recordsStart...])
        try write(.frames, "vault-" + name, [0] + frames)
        // Each header copy, and the first with a record-body-shaped tail.
        try write(.header, "copy1-" + name, [0] + Array(bytes[32..<2080]))
        try write(.header, "copy2-" + name, [0] + Array(bytes[2080..<4128]))
        // Tamper cases.
        var flipped = bytes
        flipped[recordsStart + 40] ^= 0x01
        try write(.vault, name + "-flipped-record", [0] + flipped)
        var damagedCopy = bytes
        damagedCopy[100] ^= 0xFF
        try write(.vault, name + "-damaged-copy1", [0] + damagedCopy)
        let used = (bytes.lastIndex { $0 != 0 } ?? 0) + 1
        try write(.vault, name + "-truncated", [0] + Array(bytes[0..<(used - 7)]))
        var torn = bytes
        for i in max(recordsStart, (used - 1) / 512 * 512)..<used { torn[i] = 0 }
        try write(.vault, name + "-torn-sector", [0] + torn)
    }
    // An absurd passphrase slot (Argon2id memory 2^40, ops 2^32), with a fixed CRC so the parser sees it.
    do {
        var bytes = vaults[1].1
        let slot = 32 + 48 + 128  // the second slot of copy 1 (the passphrase one)
        for (i, b) in le64(1 << 32).enumerated() { bytes[slot + 8 + i] = b }
        for (i, b) in le64(1 << 40).enumerated() { bytes[slot + 16 + i] = b }
        try write(.vault, "absurd-kdf", [1] + bytes)
        try write(.header, "absurd-kdf", [1] + Array(bytes[32..<2080]))
    }
    // Key-value journal frames: records, a batch (continued frames), torn and damaged tails.
    var frames: [UInt8] = []
    func frame(_ payload: [UInt8], continued: Bool = false) {
        let word = UInt32(payload.count) | (continued ? 0x8000_0000 : 0)
        var header: [UInt8] = (0..<4).map { UInt8(truncatingIfNeeded: word >> (8 * UInt32($0))) }
        let crc = CRC32C.checksum(payload)
        header += (0..<4).map { UInt8(truncatingIfNeeded: crc >> (8 * UInt32($0))) }
        let check = CRC32C.checksum(header)
        header += (0..<4).map { UInt8(truncatingIfNeeded: check >> (8 * UInt32($0))) }
        frames += header + payload
    }
    frame([1, 3] + Array("key".utf8) + [5] + Array("value".utf8))
    frame([1, 1, 0x41, 2, 0, 0, 0, 0, 0, 0, 0, 42], continued: true)
    frame([2, 1, 0x42])
    frame([1, 4] + Array("long".utf8) + [UInt8](repeating: 0xAB, count: 700))
    try write(.frames, "kv", [0] + frames + [UInt8](repeating: 0, count: 300))
    try write(.frames, "kv-salvage", [1] + frames)
    try write(.frames, "kv-truncated", [0] + Array(frames.dropLast(5)))
    var damaged = frames
    damaged[20] ^= 0x10
    try write(.frames, "kv-damaged-first", [2] + damaged)
    var tornKV = frames
    for i in (tornKV.count - 1) / 512 * 512..<tornKV.count { tornKV[i] = 0 }
    try write(.frames, "kv-torn", [0] + tornKV)
    // Record bodies (the plaintext inside a sealed record), after a zero header copy.
    let put: [UInt8] =
        [1] + field(Array("svc".utf8)) + field(Array("acct".utf8)) + field(Array("label".utf8)) + field([])
        + le64(1_700_000_000_000) + le64(1_700_000_000_001) + field(Array("secret".utf8))
    let delete: [UInt8] = [2] + field(Array("svc".utf8)) + field(Array("acct".utf8))
    try write(.header, "body-put", [0] + put)
    try write(.header, "body-delete", [0] + delete)
    try write(.header, "body-huge-length", [0] + [1, 0xFF, 0xFF, 0xFF, 0xFF] + Array("svc".utf8))
}
