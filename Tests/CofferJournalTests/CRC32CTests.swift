import CofferCore
import CofferJournal
import Foundation
import Testing

/// `CRC32C.checksum` (the CPU's instruction where there is one), the C target's portable table
/// and the Swift slicing-by-8 reference must agree bit for bit.
@Suite("CRC32C")
struct CRC32CTests {
    /// The three implementations of one buffer, continuing from `crc`.
    func all(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> [UInt32] {
        [
            CRC32C.checksum(bytes, continuing: crc),
            CRC32C.portableChecksum(bytes, continuing: crc),
            CRC32C.softwareChecksum(bytes, continuing: crc),
        ]
    }

    func all(_ bytes: [UInt8], continuing crc: UInt32 = 0) -> [UInt32] {
        bytes.withUnsafeBytes { all($0, continuing: crc) }
    }

    /// SplitMix64: reproducible "random" bytes.
    func bytes(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return UInt8(truncatingIfNeeded: z ^ (z >> 31))
        }
    }

    @Test func checkValue() {
        #expect(all(Array("123456789".utf8)) == [0xE306_9283, 0xE306_9283, 0xE306_9283])
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
    }

    /// RFC 3720 (iSCSI), appendix B.4.
    @Test func iSCSIVectors() {
        let vectors: [([UInt8], UInt32)] = [
            ([UInt8](repeating: 0, count: 32), 0x8A91_36AA),
            ([UInt8](repeating: 0xFF, count: 32), 0x62A8_AB43),
            (Array(0...31), 0x46DD_794E),
            (Array((0...31).reversed()), 0x113F_DB5C),
            (  // an iSCSI read command PDU
                [
                    0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
                    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                ], 0xD996_3A56
            ),
        ]
        for (input, expected) in vectors {
            #expect(all(input) == [expected, expected, expected], "\(input.count) bytes starting \(input[0])")
        }
    }

    @Test func emptyInputReturnsTheCRCItContinues() {
        for crc: UInt32 in [0, 1, 0xE306_9283, 0xFFFF_FFFF] {
            #expect(all(UnsafeRawBufferPointer(start: nil, count: 0), continuing: crc) == [crc, crc, crc])
            #expect(all([], continuing: crc) == [crc, crc, crc])
        }
    }

    /// Every length 0...300 at every address modulo 16 (the word loop, the byte tail and
    /// unaligned words), against the Swift reference.
    @Test func agreesAtEveryLengthAndAlignment() {
        let maxLength = 300
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maxLength + 64, alignment: 64)
        defer { buffer.deallocate() }
        for seed: UInt64 in [1, 0xC0FF_EE00] {
            buffer.copyBytes(from: bytes(count: buffer.count, seed: seed))
            var mismatches: [String] = []
            for offset in 0...15 {
                for length in 0...maxLength {
                    let slice = UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + length)])
                    let reference = CRC32C.softwareChecksum(slice)
                    let hardware = CRC32C.checksum(slice)
                    let portable = CRC32C.portableChecksum(slice)
                    let continued = CRC32C.checksum(slice, continuing: 0x1234_5678)
                    if hardware != reference || portable != reference
                        || continued != CRC32C.softwareChecksum(slice, continuing: 0x1234_5678)
                    {
                        mismatches.append("seed \(seed) offset \(offset) length \(length)")
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
        }
    }

    /// checksum(a + b) == checksum(b, continuing: checksum(a)), for every split.
    @Test func continuation() {
        let data = bytes(count: 777, seed: 42)
        let whole = all(data)
        #expect(Set(whole).count == 1)
        for split in 0...data.count {
            let head = Array(data[..<split])
            let tail = Array(data[split...])
            let first = CRC32C.checksum(head)
            #expect(all(tail, continuing: first) == whole, "split at \(split)")
        }
        // Three pieces, across the implementations.
        let a = Array(data[..<100])
        let b = Array(data[100..<413])
        let c = Array(data[413...])
        let ab = b.withUnsafeBytes { CRC32C.softwareChecksum($0, continuing: CRC32C.checksum(a)) }
        let abc = c.withUnsafeBytes { CRC32C.portableChecksum($0, continuing: ab) }
        #expect(abc == whole[0])
    }

    @Test func largeBuffer() {
        let data = bytes(count: (1 << 20) + 13, seed: 7)
        let sums = all(data)
        #expect(sums[0] == sums[1] && sums[0] == sums[2])
    }

    #if os(Linux)
        /// The run-time choice matches what the kernel reports for this CPU.
        @Test func hardwareDetectionMatchesTheCPU() throws {
            let cpuinfo = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            let flags = Set(
                cpuinfo.split(separator: "\n")
                    .filter { $0.hasPrefix("flags") || $0.hasPrefix("Features") }
                    .flatMap { $0.split(separator: ":").dropFirst().joined().split(separator: " ") }
                    .map(String.init)
            )
            #if arch(x86_64)
                #expect(CRC32C.isHardwareAccelerated == flags.contains("sse4_2"))
            #elseif arch(arm64)
                #expect(CRC32C.isHardwareAccelerated == flags.contains("crc32"))
            #else
                #expect(!CRC32C.isHardwareAccelerated)
            #endif
        }
    #endif
}
