// CRC-32C, the journal's frame checksum: the CPU's instruction or a portable table.
import CCRC32C

/// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and LevelDB).
///
/// The journal's frame checksum: it detects torn writes and random damage, not tampering (the
/// vault authenticates every record with Poly1305 on top of it). Computed by the C target
/// `CCRC32C` with the CPU's CRC-32C instruction (x86_64 SSE4.2, ARMv8 CRC32), chosen at run time,
/// else by its portable slicing-by-8 table; `softwareChecksum` keeps the Swift slicing-by-8 as
/// the reference the tests compare both with.
package enum CRC32C {
    static let tables: [[UInt32]] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for i in 0..<256 {
            var crc = UInt32(i)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[0][i] = crc
        }
        for i in 0..<256 {
            for t in 1..<8 { tables[t][i] = (tables[t - 1][i] >> 8) ^ tables[0][Int(tables[t - 1][i] & 0xFF)] }
        }
        return tables
    }()
    static let flat: [UInt32] = tables.flatMap { $0 }

    /// The CRC-32C of `bytes`, continuing from `crc` (start with 0).
    package static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        coffer_crc32c(crc, bytes.baseAddress, bytes.count)
    }

    /// Whether `checksum` uses a CRC-32C instruction on this CPU.
    package static var isHardwareAccelerated: Bool { coffer_crc32c_hardware() != 0 }

    /// The C target's portable table, whichever path `checksum` takes (for tests).
    package static func portableChecksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        coffer_crc32c_portable(crc, bytes.baseAddress, bytes.count)
    }

    /// The same function in Swift, slicing-by-8 (the reference for tests).
    package static func softwareChecksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        var c = ~crc
        guard var p = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return crc }
        var n = bytes.count
        flat.withUnsafeBufferPointer { t in
            let t = t.baseAddress.unsafelyUnwrapped
            while n >= 8 {
                let lo = UInt32(p[0]) | UInt32(p[1]) << 8 | UInt32(p[2]) << 16 | UInt32(p[3]) << 24
                let x = c ^ lo
                c =
                    t[7 * 256 + Int(x & 0xFF)] ^ t[6 * 256 + Int((x >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((x >> 16) & 0xFF)] ^ t[4 * 256 + Int(x >> 24)]
                    ^ t[3 * 256 + Int(p[4])] ^ t[2 * 256 + Int(p[5])]
                    ^ t[1 * 256 + Int(p[6])] ^ t[0 * 256 + Int(p[7])]
                p += 8
                n -= 8
            }
            while n > 0 {
                c = (c >> 8) ^ t[Int((c ^ UInt32(p[0])) & 0xFF)]
                p += 1
                n -= 1
            }
        }
        return ~c
    }

    /// The CRC-32C of a byte array.
    package static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
