// Journal: the file format as pure functions (bytes in, values out), and little-endian helpers.
import CofferCore
import Foundation

extension Journal {
    static func fileImage(
        options: JournalOptions, headerArea: [UInt8], payloads: [Data], coalescedWriters: Bool
    ) -> [UInt8] {
        var bytes: [UInt8] = []
        let framesSize = payloads.reduce(0) { $0 + $1.count + frameHeaderSize }
        let used = fileHeaderSize + headerArea.count + framesSize
        let preallocation = max(4096 - used % 4096, min(used / 8, 8 << 20))
        bytes.reserveCapacity(used + preallocation)
        bytes += magic
        appendLE(formatVersion, to: &bytes)
        appendLE(options.application, to: &bytes)
        appendLE(UInt32(headerArea.count), to: &bytes)
        bytes.append(coalescedWriters ? coalescedWritersFlag : 0)
        bytes += [UInt8](repeating: 0, count: 11)
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        bytes += headerArea
        for payload in payloads {
            payload.withUnsafeBytes { appendFrame($0, continued: false, continues: false, to: &bytes) }
        }
        bytes += [UInt8](repeating: 0, count: preallocation)
        return bytes
    }

    struct FileHeader {
        var dataStart: Int
        var headerArea: [UInt8]
        var coalescedWriters: Bool
    }

    static func parseFileHeader(_ bytes: [UInt8], options: JournalOptions, path: String) throws -> FileHeader {
        let areaSize = try checkFileHeader(bytes, options: options, path: path)
        guard bytes.count >= fileHeaderSize + areaSize else {
            throw CofferError(.corrupted, "the file ends inside its header area", path: path, offset: Int64(bytes.count))
        }
        return FileHeader(
            dataStart: fileHeaderSize + areaSize,
            headerArea: Array(bytes[fileHeaderSize..<(fileHeaderSize + areaSize)]),
            coalescedWriters: bytes[16] & coalescedWritersFlag != 0)
    }

    /// The checks of the 32-byte file header, in order (magic, CRC, version, application, header
    /// area size), without its area; returns the area's size.
    static func checkFileHeader(_ bytes: [UInt8], options: JournalOptions, path: String) throws -> Int {
        guard bytes.count >= fileHeaderSize else {
            throw CofferError(
                .corrupted, "the file is \(bytes.count) bytes, shorter than a Coffer file header", path: path, offset: 0)
        }
        guard Array(bytes[0..<8]) == magic else {
            throw CofferError(.corrupted, "not a Coffer store file (wrong magic bytes)", path: path, offset: 0)
        }
        let crc = readLE(bytes, 28, as: UInt32.self)
        guard CRC32C.checksum(Array(bytes[0..<28])) == crc else {
            throw CofferError(.corrupted, "the file header fails its checksum", path: path, offset: 0)
        }
        let version = readLE(bytes, 8, as: UInt16.self)
        guard version == formatVersion else {
            throw CofferError(
                .unsupportedVersion,
                "the file has format version \(version); this Coffer reads version \(formatVersion)", path: path)
        }
        let application = readLE(bytes, 10, as: UInt16.self)
        guard application == options.application else {
            throw CofferError(
                .invalidArgument,
                "the file holds another kind of store (application \(application), expected \(options.application))",
                path: path)
        }
        let areaSize = Int(readLE(bytes, 12, as: UInt32.self))
        guard areaSize == options.headerAreaSize else {
            throw CofferError(
                .corrupted, "the header area is \(areaSize) bytes, expected \(options.headerAreaSize)", path: path,
                offset: 12)
        }
        return areaSize
    }

    struct FrameHeader {
        var length: Int
        var continued: Bool
        var continues: Bool
        var payloadCRC: UInt32
    }

    /// A frame header, or `nil` when its check fails or its length is out of range.
    static func parseFrameHeader(_ h: UnsafeRawBufferPointer, maxPayload: Int) -> FrameHeader? {
        guard h.count >= frameHeaderSize else { return nil }
        let word = loadLE(h, 0)
        let payloadCRC = loadLE(h, 4)
        let check = loadLE(h, 8)
        guard CRC32C.checksum(UnsafeRawBufferPointer(rebasing: h[0..<8])) == check else { return nil }
        let length = Int(word & lengthMask)
        guard length >= 1, length <= maxPayload else { return nil }
        return FrameHeader(
            length: length, continued: word & continuedFlag != 0, continues: word & continuesFlag != 0,
            payloadCRC: payloadCRC)
    }

    static func parseFrameHeader(_ h: [UInt8], maxPayload: Int) -> FrameHeader? {
        h.withUnsafeBytes { parseFrameHeader($0, maxPayload: maxPayload) }
    }

    /// Lays out one frame at the start of `buffer` (at least ``frameHeaderSize`` +
    /// `payloadCount` bytes): `fill` writes the payload after the header, then the header is
    /// written over it with the payload's checksum. Returns the frame's size.
    static func writeFrame(
        payloadCount: Int, continued: Bool, continues: Bool, into buffer: UnsafeMutableRawBufferPointer,
        _ fill: (UnsafeMutableRawBufferPointer) -> Void
    ) -> Int {
        let payload = UnsafeMutableRawBufferPointer(rebasing: buffer[frameHeaderSize..<(frameHeaderSize + payloadCount)])
        fill(payload)
        let word = UInt32(payloadCount) | (continued ? continuedFlag : 0) | (continues ? continuesFlag : 0)
        buffer.storeBytes(of: word.littleEndian, toByteOffset: 0, as: UInt32.self)
        buffer.storeBytes(
            of: CRC32C.checksum(UnsafeRawBufferPointer(payload)).littleEndian, toByteOffset: 4, as: UInt32.self)
        let check = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[0..<8]))
        buffer.storeBytes(of: check.littleEndian, toByteOffset: 8, as: UInt32.self)
        return frameHeaderSize + payloadCount
    }

    static func appendFrame(
        _ payload: UnsafeRawBufferPointer, continued: Bool, continues: Bool, to bytes: inout [UInt8]
    ) {
        let start = bytes.count
        appendLE(
            UInt32(payload.count) | (continued ? continuedFlag : 0) | (continues ? continuesFlag : 0), to: &bytes)
        appendLE(CRC32C.checksum(payload), to: &bytes)
        let check = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[start..<(start + 8)])) }
        appendLE(check, to: &bytes)
        bytes.append(contentsOf: payload)
    }

    /// The result of scanning frames in a byte image.
    package struct Scan {
        /// Where the intact records lie in the bytes scanned (``JournalRecords``' frames).
        package var frames: [JournalFrame] = []
        /// Offset just past the last committed frame (relative to the image).
        package var end: Int
        /// Offset just past the last non-zero byte of a torn tail (== end when clean).
        package var garbageEnd: Int
        /// Offsets of damaged frames that intact frames follow.
        package var damage: [Int] = []
        /// Intact records after the first damage (counted in strict mode, kept in salvage mode).
        package var intactAfterDamage = 0
        /// The scan's budget (``searchBudget(_:)``) ran out: what follows the damage was not
        /// examined, so `intactAfterDamage` is a lower bound and salvage would lose records.
        /// Honest files never get here; a file crafted to make the scan quadratic does.
        package var exhausted = false
    }

    /// What one scan may still spend (see ``searchBudget(_:)``), and whether it ever fell short.
    struct Budget {
        var left: Int
        var ranOut = false

        /// Pays `cost` when there is enough left; otherwise notes that the budget ran out.
        mutating func pay(_ cost: Int) -> Bool {
            guard cost <= left else {
                ranOut = true
                return false
            }
            left -= cost
            return true
        }
    }

    /// Scans frames from `start`. Pure: used by open, by the tail repair and by the fuzzer.
    ///
    /// An invalid frame (bad header check, length out of range, payload CRC mismatch, a commit
    /// left unfinished or frames out of commit order) ends the data where its commit began when
    /// it *looks torn* (``looksTorn(_:frameAt:maxPayload:)``) and either nothing intact follows
    /// it or `lenientTail` is set (coalesced writers use the file, so a power loss may persist a
    /// later unsynced commit and not an earlier one). Otherwise it is damage: strict scanning
    /// stops there; salvage skips to the next intact commit. The search for that commit is
    /// bounded (``searchBudget(_:)``); when it runs out, the frame is damage, nothing after it is
    /// kept, and the scan says so (``Scan/exhausted``).
    ///
    /// The records are not copied: ``Scan/frames`` says where each lies in `bytes` (with
    /// ``JournalRecords`` over the `Data` that holds them, the owner reads them in place).
    package static func scanFrames(
        _ bytes: UnsafeRawBufferPointer, from start: Int, maxPayload: Int, salvage: Bool, lenientTail: Bool = false
    ) -> Scan {
        var budget = Budget(left: searchBudget(bytes.count))
        var scan = scanFrames(
            bytes, from: start, maxPayload: maxPayload, salvage: salvage, lenientTail: lenientTail, budget: &budget)
        scan.exhausted = budget.ranOut
        return scan
    }

    /// Bytes one scan may checksum (every frame's payload, and the searches for an intact frame
    /// after damage) and examine for torn sectors: twice the file, plus 64 MiB. An honest file
    /// is checksummed about once (each damaged frame adds its own length at most twice), and candidates whose header check passes at a place that is no
    /// frame are one in 2³² in real files, so an honest scan stays far below it; a crafted file
    /// can put a passing header every 12 bytes, each claiming the rest of the file, and
    /// checking them all took n²/24 bytes of CRC (46 s for 1 MiB, hours for 16 MiB).
    static func searchBudget(_ count: Int) -> Int { 2 * count + (64 << 20) }

    /// Where the search for the next intact frame after damage ended.
    enum NextFrame: Equatable {
        case at(Int)
        case none
        /// The budget ran out first: something intact may follow, so the damage is not taken for
        /// a torn tail (unless `lenientTail` says any torn-looking frame is one), and the scan
        /// is marked ``Scan/exhausted``: open refuses to salvage such a file.
        case unknown
    }

    private static func scanFrames(
        _ bytes: UnsafeRawBufferPointer, from start: Int, maxPayload: Int, salvage: Bool, lenientTail: Bool,
        budget: inout Budget
    ) -> Scan {
        var scan = Scan(end: start, garbageEnd: start)
        var offset = start
        // The frames of the commit being read are appended as they come; `committed` of them
        // belong to whole commits.
        var committed = 0
        var groupStart = start
        var group: Bool { scan.frames.count > committed }
        let count = bytes.count
        while true {
            if offset >= count || (count - offset < frameHeaderSize) {
                if !group && isZero(bytes, from: offset) { break }
            } else if let frame = intactFrame(bytes, at: offset, maxPayload: maxPayload, budget: &budget) {
                let body = offset + frameHeaderSize
                let next = body + frame.length
                if frame.continues != group {
                    // Out of commit order: a continuation with no start, or a start inside a commit.
                    if judge() { break } else { continue }
                }
                scan.frames.append(JournalFrame(offset: Int64(offset), start: body, count: frame.length))
                offset = next
                if !frame.continued {
                    committed = scan.frames.count
                    groupStart = offset
                    scan.end = offset
                    scan.garbageEnd = offset
                }
                continue
            } else if !group && isZero(bytes, from: offset) {
                break
            }
            if judge() { break }
        }
        scan.frames.removeSubrange(committed...)
        return scan

        /// Judges the invalid frame at `offset` (its commit began at `groupStart`). Returns
        /// whether the scan ends; otherwise it resumes at the next intact frame (salvage).
        func judge() -> Bool {
            let search = nextIntactFrame(bytes, after: offset, maxPayload: maxPayload, budget: &budget)
            let torn = looksTorn(bytes, frameAt: offset, maxPayload: maxPayload, budget: &budget)
            if torn && (search == .none || lenientTail) {
                scan.garbageEnd = lastNonZero(bytes, from: groupStart).map { $0 + 1 } ?? groupStart
                scan.end = groupStart
                return true
            }
            scan.damage.append(groupStart)
            scan.frames.removeSubrange(committed...)
            guard case .at(let next) = search else {
                // Damage in the last commit (not a torn write): salvage drops it.
                scan.end = groupStart
                scan.garbageEnd = lastNonZero(bytes, from: groupStart).map { $0 + 1 } ?? groupStart
                return true
            }
            if !salvage {
                scan.intactAfterDamage = scanFrames(
                    bytes, from: next, maxPayload: maxPayload, salvage: true, lenientTail: false, budget: &budget
                ).frames.count
                scan.end = groupStart
                scan.garbageEnd = groupStart
                return true
            }
            offset = next
            groupStart = next
            return false
        }
    }

    /// The frame at `offset` when it is intact (header check, length, payload CRC).
    ///
    /// The payload checksummed is paid from `budget`. An honest scan checksums each byte of the
    /// file about once; a crafted one, in which every other frame fails its CRC while claiming the
    /// rest of the file, would checksum the rest of the file at each (quadratic). A frame the
    /// budget cannot pay for is not intact: damage, never wiped.
    private static func intactFrame(
        _ bytes: UnsafeRawBufferPointer, at offset: Int, maxPayload: Int, budget: inout Budget
    ) -> FrameHeader? {
        guard offset >= 0, bytes.count - offset >= frameHeaderSize,
            let frame = parseFrameHeader(
                UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + frameHeaderSize)]), maxPayload: maxPayload),
            frame.length <= bytes.count - offset - frameHeaderSize,
            budget.pay(frame.length)
        else { return nil }
        guard
            CRC32C.checksum(
                UnsafeRawBufferPointer(
                    rebasing: bytes[(offset + frameHeaderSize)..<(offset + frameHeaderSize + frame.length)]))
                == frame.payloadCRC
        else { return nil }
        return frame
    }

    /// Sector size assumed by the torn-write model: a device persists whole sectors, in any
    /// order, so a write cut short by power loss leaves some of its sectors unwritten — still
    /// zero, because the space after the last commit is always zero — or the file ends inside it.
    static let sectorSize = 512

    /// Whether the invalid frame at `offset` can be an append cut short by a crash rather than
    /// damage: the file ends inside it; or its header is all zero; or a sector-aligned 512-byte
    /// block inside it (the last one possibly shorter, ending at the frame's end) is all zero.
    /// With a header that fails its check the frame's extent is unknown, so only the header's
    /// own bytes are judged.
    ///
    /// Each sector examined is paid from `budget` (the search's, ``searchBudget(_:)``): a crafted
    /// file of many invalid frames, each claiming the rest of the file, would otherwise cost a
    /// walk over the rest of the file at every one of them (quadratic). When the budget cannot
    /// pay, the frame is not taken for a torn write: it is damage, which is never wiped.
    static func looksTorn(
        _ bytes: UnsafeRawBufferPointer, frameAt offset: Int, maxPayload: Int, budget: inout Budget
    ) -> Bool {
        let count = bytes.count
        if offset >= count || count - offset < frameHeaderSize { return true }
        let header = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + frameHeaderSize)])
        if isAllZero(header) { return true }
        let end: Int
        if let frame = parseFrameHeader(header, maxPayload: maxPayload) {
            if frame.length > count - offset - frameHeaderSize { return true }
            end = offset + frameHeaderSize + frame.length
        } else {
            end = offset + frameHeaderSize
        }
        var boundary = (offset / sectorSize + 1) * sectorSize
        while boundary < end {
            if !budget.pay(sectorSize) { return false }
            let blockEnd = min(boundary + sectorSize, end)
            if isAllZero(UnsafeRawBufferPointer(rebasing: bytes[boundary..<blockEnd])) { return true }
            boundary += sectorSize
        }
        return false
    }

    /// The offset of the next intact frame after `offset` that starts a commit (K = 0). Intact
    /// continuation frames are skipped: they may be the rest of the very commit being judged.
    /// Each payload checksummed is paid from `budget` (see ``searchBudget(_:)``).
    private static func nextIntactFrame(
        _ bytes: UnsafeRawBufferPointer, after offset: Int, maxPayload: Int, budget: inout Budget
    ) -> NextFrame {
        var p = offset + 1
        while p + frameHeaderSize <= bytes.count {
            // The length must fit in what is left before any checksum is worth computing: at
            // almost every offset of damaged bytes it does not, so the search stays cheap.
            let length = Int(loadLE(bytes, p) & lengthMask)
            if length >= 1, length <= bytes.count - p - frameHeaderSize,
                parseFrameHeader(
                    UnsafeRawBufferPointer(rebasing: bytes[p..<(p + frameHeaderSize)]), maxPayload: maxPayload) != nil
            {
                if length > budget.left {
                    budget.ranOut = true
                    return .unknown
                }
                if let frame = intactFrame(bytes, at: p, maxPayload: maxPayload, budget: &budget), !frame.continues {
                    // The scan resumes there and checks this frame again: it is paid once.
                    budget.left += frame.length
                    return .at(p)
                }
            }
            p += 1
        }
        return .none
    }

    private static func isZero(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Bool {
        offset >= bytes.count || isAllZero(UnsafeRawBufferPointer(rebasing: bytes[max(offset, 0)...]))
    }

    /// Whether every byte is zero, eight at a time (the scans above ask this of whole tails and
    /// sectors).
    static func isAllZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let count = bytes.count
        while count - i >= 8 {
            if bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self) != 0 { return false }
            i += 8
        }
        while i < count {
            if bytes[i] != 0 { return false }
            i += 1
        }
        return true
    }

    /// The offset of the last non-zero byte at or after `offset`, searching backwards eight bytes
    /// at a time.
    private static func lastNonZero(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Int? {
        var end = bytes.count  // bytes[end...] are known zero
        let start = max(offset, 0)
        while end - start >= 8 {
            if bytes.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self) != 0 { break }
            end -= 8
        }
        var i = end - 1
        while i >= start {
            if bytes[i] != 0 { return i }
            i -= 1
        }
        return nil
    }
}

@inline(__always)
package func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
}

@inline(__always)
package func readLE<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as: T.Type) -> T {
    var value: T = 0
    for i in 0..<MemoryLayout<T>.size { value |= T(bytes[offset + i]) << (8 * i) }
    return value
}

@inline(__always)
package func loadLE(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
    UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
        | UInt32(bytes[offset + 3]) << 24
}
