import CofferCore
import CofferJournal
import CofferCrypto
import CofferVault
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The fuzz targets. Each takes one input and must return without crashing, whatever the bytes;
/// a violated invariant calls `fatalError`, which libFuzzer reports as a crash.
enum FuzzTarget: String, CaseIterable {
    /// The journal frame scanner (`Journal.scanFrames`), strict and salvaging.
    case frames
    /// One vault header copy (`VaultHeader.parse`), its key slots and a record body (`VaultRecordBody.decode`).
    case header
    /// A whole vault file opened with a raw key (no Argon2id), every item and secret read.
    case vault

    func run(_ input: UnsafeRawBufferPointer) {
        switch self {
        case .frames: Self.frames(input)
        case .header: Self.header(input)
        case .vault: Self.vault(input)
        }
    }

    // MARK: frames

    /// Input: one flag byte, then a byte image scanned from offset 0.
    /// Flag bit 0: salvage. Bit 1: first make every plausible frame's checksums valid, so the
    /// fuzzer reaches the commit, torn-tail and damage logic instead of stopping at a CRC.
    static func frames(_ input: UnsafeRawBufferPointer) {
        guard let flags = input.first else { return }
        var bytes = [UInt8](input.dropFirst())
        if flags & 2 != 0 { fixFrameChecksums(&bytes, from: 0) }
        bytes.withUnsafeBytes { image in
            for salvage in [false, true] {
                let scan = Journal.scanFrames(image, from: 0, maxPayload: 1 << 30, salvage: salvage)
                check(scan, count: image.count, salvage: salvage)
            }
            // A small maximum payload must only turn frames into damage or tails, never crash.
            _ = Journal.scanFrames(image, from: 0, maxPayload: 16, salvage: flags & 1 != 0)
        }
    }

    static func check(_ scan: Journal.Scan, count: Int, salvage: Bool) {
        guard scan.end >= 0, scan.end <= max(count, 0), scan.garbageEnd >= scan.end || !scan.damage.isEmpty,
            scan.garbageEnd <= count
        else { fatalError("scan bounds: end \(scan.end) garbageEnd \(scan.garbageEnd) count \(count)") }
        var last: Int64 = -1
        for frame in scan.frames {
            guard frame.offset > last, frame.start == Int(frame.offset) + 12, frame.start + frame.count <= count,
                frame.count > 0
            else { fatalError("record out of order or out of bounds at \(frame.offset)") }
            last = frame.offset
        }
        if !salvage, let first = scan.damage.first, let lastRecord = scan.frames.last,
            lastRecord.offset >= Int64(first)
        {
            fatalError("strict scan kept a record after the damage at \(first)")
        }
    }

    /// Walks `bytes` as frames and rewrites each one's payload and header checksums.
    static func fixFrameChecksums(_ bytes: inout [UInt8], from start: Int) {
        var offset = start
        while offset + 12 <= bytes.count {
            let word = UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
                | UInt32(bytes[offset + 3]) << 24
            let length = Int(word & 0x7FFF_FFFF)
            guard length >= 1, length <= bytes.count - offset - 12 else { return }
            put32(CRC32C.checksum(Array(bytes[(offset + 12)..<(offset + 12 + length)])), into: &bytes, at: offset + 4)
            put32(CRC32C.checksum(Array(bytes[offset..<(offset + 8)])), into: &bytes, at: offset + 8)
            offset += 12 + length
        }
    }

    static func put32(_ value: UInt32, into bytes: inout [UInt8], at offset: Int) {
        for i in 0..<4 { bytes[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(i))) }
    }

    // MARK: header

    /// Input: one flag byte, then up to 2,048 bytes of a header copy (zero-padded), then the
    /// rest is a record body. Flag bit 0: fix the copy's CRC first, so parsing goes past it.
    static func header(_ input: UnsafeRawBufferPointer) {
        guard let flags = input.first else { return }
        let rest = Array(input.dropFirst())
        var copy = Array(rest.prefix(2048))
        copy += [UInt8](repeating: 0, count: 2048 - copy.count)
        if flags & 1 != 0 { put32(CRC32C.checksum(Array(copy[0..<2044])), into: &copy, at: 2044) }
        _ = VaultHeader.parse(copy: copy[...])
        // The input as a row store's copy (any length; flag bit 1: its last 4 bytes made its CRC).
        var row = rest
        if flags & 2 != 0, row.count >= 4 {
            put32(CRC32C.checksum(Array(row[0..<(row.count - 4)])), into: &row, at: row.count - 4)
        }
        _ = VaultHeader.parse(copy: row[...], inRow: true)
        // A slot on its own, from the start of the slot area.
        _ = KeySlot.parse(copy[48..<176])
        // The record body: the bytes after the header copy, or the whole input when it is short.
        let body = rest.count > 2048 ? Array(rest[2048...]) : rest
        _ = VaultRecordBody.decode(body)
    }

    // MARK: vault

    /// The raw key the seed vaults are created with (32 bytes of 0x42): unlocking runs
    /// BLAKE2b, not Argon2id, so an input costs microseconds.
    static let rawKey: SecureBytes = {
        do { return try SecureBytes(copying: [UInt8](repeating: 0x42, count: 32)) } catch { fatalError("\(error)") }
    }()

    static let scratch: String = {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        let path = "\(base)/coffer-fuzz-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }()

    /// Input: one flag byte, then a whole vault file. Flag bit 0: fix the journal header's CRC
    /// and both header copies' CRCs first; bit 1: also fix the frames' checksums.
    static func vault(_ input: UnsafeRawBufferPointer) {
        guard let flags = input.first else { return }
        var bytes = [UInt8](input.dropFirst())
        if flags & 1 != 0 {
            if bytes.count >= 32 { put32(CRC32C.checksum(Array(bytes[0..<28])), into: &bytes, at: 28) }
            for copy in 0..<2 {
                let start = 32 + copy * 2048
                if bytes.count >= start + 2048 {
                    put32(CRC32C.checksum(Array(bytes[start..<(start + 2044)])), into: &bytes, at: start + 2044)
                }
            }
        }
        if flags & 2 != 0 { fixFrameChecksums(&bytes, from: 32 + 4096) }
        let path = scratch + "/v"
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { fatalError("cannot write \(path)") }
        do {
            let vault = try Vault.open(at: URL(fileURLWithPath: path), unlock: .key(rawKey))
            for item in try vault.items() {
                _ = try vault.data(service: item.service, account: item.account)
            }
            _ = try vault.info()
            vault.lock()
        } catch is CofferError {
            // Rejected: what a damaged or hostile file must do.
        } catch {
            fatalError("an error that is not a CofferError: \(type(of: error))")
        }
    }
}
