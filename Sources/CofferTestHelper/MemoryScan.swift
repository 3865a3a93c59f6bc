// `memscan DIR`: after Vault.lock(), does the process's readable anonymous memory still hold a
// copy of any key? (RELIABILITY.md, memory hygiene.)
import CofferCore
import CofferCrypto
import CofferVault
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A byte string to look for, kept only complemented (every bit flipped), so the needle itself
/// is never a copy of the secret the scan looks for.
struct Needle {
    var name: String
    var complement: [UInt8]

    init(_ name: String, _ bytes: UnsafeRawBufferPointer) {
        self.name = name
        complement = bytes.map { ~$0 }
    }
}

/// Readable private anonymous regions (heap, stack, mmap'd memory — where libsodium, Swift and
/// malloc keep data), as address ranges.
let debugScan = ProcessInfo.processInfo.environment["COFFER_SCAN_DEBUG"] != nil

func anonymousRegions() -> [(start: UInt, end: UInt, name: String)] {
    // Read with a loop: /proc files report size 0, and one-shot readers stop early.
    let fd = open("/proc/self/maps", O_RDONLY)
    guard fd >= 0 else { fail("cannot read /proc/self/maps") }
    var raw: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        raw += chunk[0..<n]
    }
    close(fd)
    let maps = String(decoding: raw, as: UTF8.self)
    var regions: [(UInt, UInt, String)] = []
    for line in maps.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 5 else { continue }
        let permissions = fields[1]
        let name = fields.count >= 6 ? String(fields[5]) : ""
        guard permissions.hasPrefix("r") else { continue }
        guard name.isEmpty || name == "[heap]" || name.hasPrefix("[stack") || name.hasPrefix("[anon") else { continue }
        let bounds = fields[0].split(separator: "-")
        guard bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16) else {
            continue
        }
        regions.append((start, end, name.isEmpty ? "anonymous" : name))
        if debugScan { say("region \(line)") }
    }
    return regions
}

/// Scans every readable anonymous region through /proc/self/mem for each needle. Returns the
/// hits per needle name and the bytes scanned. `buffer` is wiped afterwards.
func scanMemory(for needles: [Needle], buffer: UnsafeMutableRawBufferPointer) -> (hits: [String: [String]], bytes: Int) {
    let fd = open("/proc/self/mem", O_RDONLY)
    guard fd >= 0 else { fail("cannot open /proc/self/mem: errno \(errno)") }
    defer { close(fd) }
    var hits: [String: [String]] = [:]
    var scanned = 0
    let overlap = 64
    let bufferStart = UInt(bitPattern: buffer.baseAddress!)
    for region in anonymousRegions() {
        var address = region.start
        while address < region.end {
            // Skip the scan buffer itself: it holds copies of memory already scanned.
            if address >= bufferStart && address < bufferStart + UInt(buffer.count) {
                address = bufferStart + UInt(buffer.count)
                continue
            }
            var length = Int(min(UInt(buffer.count), region.end - address))
            if address < bufferStart && address + UInt(length) > bufferStart { length = Int(bufferStart - address) }
            let n = pread(fd, buffer.baseAddress, length, off_t(Int64(bitPattern: UInt64(address))))
            if n <= 0 {
                if debugScan { say("unreadable \(region.name) 0x\(String(address, radix: 16)) errno \(errno)") }
                address += UInt(max(length, 4096))
                continue
            }
            scanned += n
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            for needle in needles {
                let first = Int32(~needle.complement[0])
                var offset = 0
                while offset + needle.complement.count <= n {
                    guard let found = memchr(chunk.baseAddress! + offset, first, n - offset - needle.complement.count + 1)
                    else { break }
                    let at = UnsafeRawPointer(found) - chunk.baseAddress!
                    var match = true
                    for i in 1..<needle.complement.count where chunk[at + i] != ~needle.complement[i] {
                        match = false
                        break
                    }
                    if match {
                        hits[needle.name, default: []].append(
                            "\(region.name) 0x\(String(address + UInt(at), radix: 16))")
                    }
                    offset = at + 1
                }
            }
            address += UInt(n <= overlap ? n : n - overlap)
        }
    }
    SecureMemory.zero(buffer)
    return (hits, scanned)
}

/// Derives the keys of a raw-key vault from its file, as docs/FORMAT.md says, into guarded
/// memory, and returns them as complemented needles (every plain copy is wiped).
func vaultKeyNeedles(path: String, rawKey: SecureBytes) throws -> [Needle] {
    let file = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    let copy = Array(file[32..<2080])
    let vaultID = Array(copy[16..<32])
    let slot = Array(copy[48..<176])
    guard slot[0] == 3 else { fail("slot 0 is not a raw-key slot") }
    var kekBytes = try BLAKE2b.hash(Array("coffer-raw-key-v1".utf8) + Array(slot[24..<40]), key: rawKey, outputLength: 32)
    let kek = try SecureBytes(copying: kekBytes)
    var needles: [Needle] = []
    kekBytes.withUnsafeBytes { needles.append(Needle("key-encryption key", $0)) }
    SecureMemory.zero(&kekBytes)
    let master = try XChaCha20Poly1305.openSecure(
        Array(slot[64..<112]), key: kek, nonce: Array(slot[40..<64]),
        associatedData: Array("coffer vault key slot v1".utf8) + vaultID + Array(slot[0..<40]))
    master.withUnsafeBytes { needles.append(Needle("master key", $0)) }
    for (id, context, name) in [(UInt64(1), "CFVrecrd", "record key"), (2, "CFVchain", "chain key"), (3, "CFVheadr", "header key")] {
        let subkey = try KeyDerivation.deriveSubkey(from: master, id: id, context: context, length: 32)
        subkey.withUnsafeBytes { needles.append(Needle(name, $0)) }
    }
    rawKey.withUnsafeBytes { needles.append(Needle("raw unlock key", $0)) }
    return needles
}

/// Creates a raw-key vault with one item, reads it, adds 20 more, opens the vault afresh (which
/// decrypts every record to authenticate it) and reads two, derives every key independently,
/// locks, and scans for the keys and the 20 secrets (their last 24 bytes). Prints
/// `before <needle> <hits>` (a control: the keys, and the secrets' own guarded copies, are
/// found while unlocked),
/// then `after <needle> <hits> [where…]`, then `scanned <bytes>`.
func memoryScan(directory: String) throws {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
    defer { buffer.deallocate() }
    let path = directory + "/scan.coffer"
    var needles: [Needle] = []
    var secretNeedle: Needle?
    var itemNeedles: [Needle] = []
    let itemSecretCount = 20
    // Everything that touches a key happens in this scope, so its values are released after it.
    try {
        let rawKey = try SecureBytes.random(count: 32)
        let secret = try SecureBytes.random(count: 40)
        secret.withUnsafeBytes { secretNeedle = Needle("item secret (set and read as SecureBytes)", $0) }
        let vault = try Vault.create(at: URL(fileURLWithPath: path), unlock: .key(rawKey), kdf: .minimum)
        try vault.set(secret, service: "svc", account: "acct")
        let readBack = try vault.secret(service: "svc", account: "acct")
        guard readBack == secret else { fail("secret did not read back") }
        // More items, then a fresh open: the open authenticates every record by decrypting it,
        // and a read decrypts one. Neither may leave a plaintext copy behind after lock().
        var others: [SecureBytes] = []  // alive until the control scan below, then released
        for i in 0..<itemSecretCount {
            let other = try SecureBytes.random(count: 40)
            others.append(other)
            // The last 24 bytes: a freed heap block's first bytes are overwritten by malloc's
            // own bookkeeping, so a needle of the whole secret could miss a freed copy.
            other.withUnsafeBytes {
                itemNeedles.append(Needle("opened item secret \(i)", UnsafeRawBufferPointer(rebasing: $0[16...])))
            }
            try vault.set(other, service: "svc", account: "item-\(i)")
        }
        vault.lock()
        let reopened = try Vault.open(at: URL(fileURLWithPath: path), unlock: .key(rawKey))
        _ = try reopened.secret(service: "svc", account: "acct")
        _ = try reopened.secret(service: "svc", account: "item-0")
        reopened.lock()
        try vault.unlock(.key(rawKey))
        _ = try vault.secret(service: "svc", account: "acct")
        needles = try vaultKeyNeedles(path: path, rawKey: rawKey)
        let before = scanMemory(for: needles + itemNeedles, buffer: buffer)
        for needle in needles { say("before \(needle.name.replacingOccurrences(of: " ", with: "_")) \(before.hits[needle.name]?.count ?? 0)") }
        // The control for the secrets: their guarded SecureBytes are still alive here.
        say("before opened_item_secrets \(itemNeedles.filter { before.hits[$0.name] != nil }.count)")
        others.removeAll()
        vault.lock()
    }()
    let after = scanMemory(for: needles + [secretNeedle!] + itemNeedles, buffer: buffer)
    for needle in needles + [secretNeedle!] {
        let found = after.hits[needle.name] ?? []
        say("after \(needle.name.replacingOccurrences(of: " ", with: "_")) \(found.count) \(found.prefix(3).joined(separator: ", "))")
    }
    let itemHits = itemNeedles.flatMap { after.hits[$0.name] ?? [] }
    say("after opened_item_secrets \(itemHits.count) \(itemHits.prefix(3).joined(separator: ", "))")
    say("scanned \(after.bytes)")
}
