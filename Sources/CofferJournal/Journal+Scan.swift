// Journal: catching up — a file replaced by compaction, reading every frame, judging a torn tail.
import CofferCore
import CofferRuntime
import Foundation

extension Journal {
    /// If another process replaced the file (compaction), switches to the new one and returns
    /// all of its records with `reset`.
    func reopenIfReplaced() throws -> JournalChanges? {
        guard let current = try fs.stat(path) else {
            throw CofferError(.notFound, "the store file was removed while it was open", path: path, errno: ENOENT_)
        }
        if current.inode == identity.inode && current.device == identity.device {
            // Coffer never shortens a store file (a compaction renames a new one into place), so
            // one now shorter than its records was cut short from outside. Appending at the old
            // end would leave a hole of zeros that a later open takes for a torn tail, dropping
            // every commit after it.
            guard current.size >= dataEnd else {
                throw CofferError(
                    .corrupted,
                    "the store file was cut short while it was open (it holds \(current.size) bytes; its records "
                        + "ended at byte \(dataEnd)); nothing was written: open it again to see what it still holds",
                    path: path, offset: current.size)
            }
            identityCheckedAt = CoarseClock.nanoseconds
            return nil
        }
        let newFD =
            readOnlyReason == nil
            ? try fs.open(path, create: false, exclusive: false, mode: DurableIO.fileMode) : try fs.openReadOnly(path)
        // Switch to the new file only once it has been read whole: a failure leaves this
        // journal on the old file with its old view, to be retried by the next call.
        let saved = (fd, identity, headerArea, coalescedWriters, dataEnd, allocatedSize)
        fd = newFD
        do {
            let records = try readAllLocked()
            tail = nil  // it maps the old file
            lockCheckedForFile = false
            fs.close(saved.0)
            identityCheckedAt = CoarseClock.nanoseconds
            return JournalChanges(reset: true, records: records)
        } catch {
            fs.close(newFD)
            (fd, identity, headerArea, coalescedWriters, dataEnd, allocatedSize) = saved
            throw error
        }
    }

    /// Rereads the whole current file: header area and every committed record.
    func readAllLocked() throws -> JournalRecords {
        let status = try fs.fstat(fd)
        identity = status
        let image = try Journal.readImage(fd, size: status.size, fs: fs, path: path)
        let header = try Journal.parseFileHeader(
            Array(image.prefix(Journal.fileHeaderSize + options.headerAreaSize)), options: options, path: path)
        headerArea = header.headerArea
        coalescedWriters = header.coalescedWriters
        let scan = image.withUnsafeBytes {
            Journal.scanFrames(
                $0, from: header.dataStart, maxPayload: options.maxPayload, salvage: false,
                lenientTail: header.coalescedWriters)
        }
        if let damaged = scan.damage.first {
            throw CofferError(.corrupted, "record at byte \(damaged) fails its checksum", path: path, offset: Int64(damaged))
        }
        dataEnd = Int64(scan.end)
        allocatedSize = Int64(image.count)
        return JournalRecords(bytes: image, frames: scan.frames)
    }

    /// Reads committed frames from `dataEnd` on. With `repair` (write lock held) an invalid frame
    /// is judged: a torn tail is wiped; damage followed by intact records throws.
    /// `dataEnd` moves only when this returns: after a failure the commits read so far are
    /// read again by the next call (the caller never saw them).
    func readForward(repair: Bool) throws -> JournalRecords {
        // The payloads are read one after another into `bytes`; `committed` frames (and
        // `committedBytes` bytes) belong to whole commits, the rest to the commit being read.
        var bytes: [UInt8] = []
        var frames: [JournalFrame] = []
        var committed = 0
        var committedBytes = 0
        var end = dataEnd  // just past the last whole commit read
        var offset = dataEnd
        var header = [UInt8](repeating: 0, count: Journal.frameHeaderSize)
        func wholeCommits() -> JournalRecords {
            frames.removeSubrange(committed...)
            bytes.removeSubrange(committedBytes...)
            // A vault's index keeps slices of these bytes: grown by appending, the buffer can
            // be twice what it holds, so a loose one is copied to its size (as the image read
            // at an open is, by construction).
            if bytes.capacity - bytes.count > bytes.count / 4 {
                let loose = bytes
                bytes = [UInt8](unsafeUninitializedCapacity: loose.count) { buffer, initialized in
                    _ = buffer.initialize(from: loose)
                    initialized = loose.count
                }
            }
            return JournalRecords(bytes: bytes, frames: frames)
        }
        while true {
            let inCommit = frames.count > committed
            let n = try header.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: offset) }
            if n == 0 || (n == header.count && header.allSatisfy({ $0 == 0 }) && !inCommit) { break }
            // A frame whose "continues" flag contradicts its place is invalid, as in scanFrames.
            guard n == header.count, let frame = Journal.parseFrameHeader(header, maxPayload: options.maxPayload),
                frame.continues == inCommit
            else {
                try judgeTail(from: end, repair: repair)
                dataEnd = end
                return wholeCommits()
            }
            let start = bytes.count
            let got = try readPayload(of: frame.length, at: offset + Int64(Journal.frameHeaderSize), into: &bytes)
            let crcOK = got == frame.length && bytes.withUnsafeBytes {
                CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[start...])) == frame.payloadCRC
            }
            guard crcOK else {
                try judgeTail(from: end, repair: repair)
                dataEnd = end
                return wholeCommits()
            }
            frames.append(JournalFrame(offset: offset, start: start, count: frame.length))
            offset += Int64(Journal.frameHeaderSize + frame.length)
            if !frame.continued {
                committed = frames.count
                committedBytes = bytes.count
                end = offset
            }
        }
        dataEnd = end
        return wholeCommits()
    }

    /// Appends to `bytes` the payload of `length` bytes at `offset`, or as much of it as the file
    /// holds; returns how many bytes were read. The length comes from a frame header, which a
    /// writer may be in the middle of, or damage or a hostile edit may have set to anything up
    /// to `maxPayload` (1 GiB): a length over ``firstPayloadChunk`` is first checked against the
    /// file's size (one `fstat`), and a frame the file does not hold (yet) is not read at all,
    /// so nothing is ever allocated for bytes that are not there. Up to that size (every usual
    /// frame) it is one read, as before, and a large frame the file holds is read in one piece
    /// into a buffer of its exact size.
    private func readPayload(of length: Int, at offset: Int64, into bytes: inout [UInt8]) throws -> Int {
        if length > Self.firstPayloadChunk {
            let available = try fs.fstat(fd).size - offset
            guard available >= Int64(length) else { return 0 }
        }
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: length))
        let got = try bytes.withUnsafeMutableBytes {
            try fs.readFully(fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[start...]), at: offset)
        }
        if got < length { bytes.removeSubrange((start + got)...) }
        return got
    }

    /// The longest payload a catch-up reads without first checking that the file holds it
    /// (``readPayload(of:at:into:)``).
    static let firstPayloadChunk = 1 << 20

    /// Decides what an invalid frame at `start` (the end of the commits read) is. Without the
    /// lock it may be a write in progress, so nothing is concluded. With it, the rest of the
    /// file is scanned.
    func judgeTail(from start: Int64, repair: Bool) throws {
        guard repair else { return }
        let size = try fs.fstat(fd).size
        allocatedSize = size
        let length = Int(size - start)
        guard length > 0 else { return }
        var bytes = [UInt8](repeating: 0, count: length)
        let n = try bytes.withUnsafeMutableBytes { try fs.readFully(fd, into: $0, at: start) }
        bytes.removeSubrange(n...)
        let scan = bytes.withUnsafeBytes {
            Journal.scanFrames(
                $0, from: 0, maxPayload: options.maxPayload, salvage: false, lenientTail: coalescedWriters)
        }
        if let damaged = scan.damage.first {
            let after =
                scan.intactAfterDamage > 0
                ? "\(scan.intactAfterDamage) intact record(s) follow it"
                : "it is not a torn write (no all-zero sector inside it)"
            throw CofferError(
                .corrupted, "record at byte \(start + Int64(damaged)) fails its checksum; \(after)",
                path: path, offset: start + Int64(damaged))
        }
        // No intact frame follows: a crashed writer's torn tail. Wipe it.
        if scan.garbageEnd > 0 {
            try zero(from: start, to: start + Int64(scan.garbageEnd))
            try fs.fdatasync(fd)
        }
    }
}
