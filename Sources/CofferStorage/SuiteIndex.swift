// The index of a key-value suite: a hash table of where each live record's name and value lie,
// not of decoded copies of them.
import CofferCore
import Foundation

/// The live values of a key-value suite, by name: an open-addressing table (linear probing,
/// at most three quarters full) whose slots say where a record's name and value lie, inside
/// the bytes of the batch of records they were read in (a *segment*: for an open, the file's
/// records in one copy), or in a segment of their own for a value written here.
///
/// Why not `[ExactKey: Data]`: an open indexes every record of the file, and a dictionary of
/// names and values made a `String` and a `Data` of each record, hashed it through a
/// `Hashable` key, kept 32 bytes a slot, and released every name and value when the suite
/// went away: 220–260 ns a key, twice MMKV's open (BENCHMARKS.md). Here an open copies the
/// records once, validates each name where it lies, hashes it and stores 24 bytes; a value is
/// copied out only when it is read.
///
/// Names are hashed with SipHash-1-3 (the function of Swift's `Hasher`) under a random key of
/// each table's own: names may come from users, so the hash is keyed against collision floods,
/// and a table's iteration order (that of a compaction's rewrite) must not cluster another
/// table's probes. It is written out here so that it inlines into the probe: `Hasher`'s
/// calls into the runtime were a tenth of an open.
///
/// A value type over memory it manages, so that the hot paths, reached through the suite's
/// `inout` access, carry no runtime exclusivity checks or reference counting (as a class they
/// were a fifth of an open). The memory is freed by the ``Memory`` it holds, when the last copy
/// goes. Copies share the memory: only one copy, the suite's, may change it (a closure handed the
/// index to read must not keep it). Changed only under its suite's lock, like the rest of the
/// suite (`JournalIndex`'s rule); a read changes nothing, so the lock is all the
/// synchronisation it needs.
struct SuiteIndex: @unchecked Sendable {
    /// One slot: empty when `segment` is ``Slot/none``, else the name is `nameCount` bytes at
    /// `offset` in segment `segment`, and the value the `valueCount` bytes right after it (a
    /// record's layout). `hash` is the low half of the name's hash: its home slot is
    /// `hash & mask`, so neither a growth nor a removal hashes a name again.
    struct Slot {
        var hash: UInt32
        var nameCount: UInt32
        var valueCount: UInt32
        var segment: UInt32
        var offset: Int

        static let none = UInt32.max
        static let empty = Slot(hash: 0, nameCount: 0, valueCount: 0, segment: none, offset: 0)
        var isEmpty: Bool { segment == Self.none }
    }

    /// Bytes records lie in, and how many slots point into them; freed when none does.
    struct Segment {
        var base: UnsafeMutableRawPointer?
        var live: Int
        var count: Int
    }

    /// Owns the table and the segments: frees them when the index goes.
    final class Memory: @unchecked Sendable {
        var slots: UnsafeMutablePointer<Slot>
        var segments: UnsafeMutablePointer<Segment>
        /// Segments in use or free (`segments[0..<segmentCount]`).
        var segmentCount = 0

        init(slots: UnsafeMutablePointer<Slot>, segments: UnsafeMutablePointer<Segment>) {
            self.slots = slots
            self.segments = segments
        }

        deinit {
            for i in 0..<segmentCount { segments[i].base?.deallocate() }
            segments.deallocate()
            slots.deallocate()
        }
    }

    private var slots: UnsafeMutablePointer<Slot>
    /// The table's size minus one (a power of two minus one).
    private var mask: Int
    /// How many names have a value.
    private(set) var count = 0
    private var segments: UnsafeMutablePointer<Segment>
    private var segmentCount = 0
    private var segmentCapacity = 4
    private var freeSegments: [UInt32] = []
    /// The bytes the segments hold, and those of them the live names and values take (each
    /// counted with ``recordOverhead``): what ``compactSegmentsIfWorthIt()`` weighs.
    private var segmentBytes = 0
    private var liveBytes = 0
    /// The hash's key.
    private let k0: UInt64
    private let k1: UInt64
    private let memory: Memory

    init(capacity: Int = 0) {
        let size = Self.tableSize(for: capacity)
        slots = .allocate(capacity: size)
        slots.initialize(repeating: .empty, count: size)
        mask = size - 1
        segments = .allocate(capacity: segmentCapacity)
        memory = Memory(slots: slots, segments: segments)
        var random = SystemRandomNumberGenerator()
        k0 = random.next()
        k1 = random.next()
    }

    /// The smallest power of two, at least 16, that holds `count` names at most three quarters full.
    private static func tableSize(for count: Int) -> Int {
        var size = 16
        while size - size / 4 < count { size <<= 1 }
        return size
    }

    /// Forgets every name and frees every segment.
    mutating func removeAll() {
        for i in 0..<segmentCount { segments[i].base?.deallocate() }
        segmentCount = 0
        memory.segmentCount = 0
        freeSegments = []
        segmentBytes = 0
        liveBytes = 0
        slots.update(repeating: .empty, count: mask + 1)
        count = 0
    }

    /// Makes room for `count` names without growing on the way.
    mutating func reserveCapacity(_ count: Int) {
        if count > mask + 1 - (mask + 1) / 4 { resize(to: Self.tableSize(for: count)) }
    }

    // MARK: - Hashing

    /// SipHash-1-3 of `name` under the table's key (the low 32 bits).
    @inline(__always)
    private func hash(_ name: UnsafeRawBufferPointer) -> UInt32 {
        var v0 = k0 ^ 0x736f_6d65_7073_6575
        var v1 = k1 ^ 0x646f_7261_6e64_6f6d
        var v2 = k0 ^ 0x6c79_6765_6e65_7261
        var v3 = k1 ^ 0x7465_6462_7974_6573
        @inline(__always) func round() {
            v0 &+= v1; v1 = v1.rotatedLeft(13); v1 ^= v0; v0 = v0.rotatedLeft(32)
            v2 &+= v3; v3 = v3.rotatedLeft(16); v3 ^= v2
            v0 &+= v3; v3 = v3.rotatedLeft(21); v3 ^= v0
            v2 &+= v1; v1 = v1.rotatedLeft(17); v1 ^= v2; v2 = v2.rotatedLeft(32)
        }
        let count = name.count
        var offset = 0
        while count - offset >= 8 {
            let m = UInt64(littleEndian: name.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            v3 ^= m
            round()
            v0 ^= m
            offset += 8
        }
        var last = UInt64(truncatingIfNeeded: count) << 56
        var shift: UInt64 = 0
        while offset < count {
            last |= UInt64(name[offset]) << shift
            shift += 8
            offset += 1
        }
        v3 ^= last
        round()
        v0 ^= last
        v2 ^= 0xFF
        round()
        round()
        round()
        return UInt32(truncatingIfNeeded: v0 ^ v1 ^ v2 ^ v3)
    }

    // MARK: - Reading

    @inline(__always)
    private func name(of slot: Slot) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: segments[Int(slot.segment)].base! + slot.offset, count: Int(slot.nameCount))
    }

    @inline(__always)
    private func value(of slot: Slot) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(
            start: segments[Int(slot.segment)].base! + slot.offset + Int(slot.nameCount), count: Int(slot.valueCount))
    }

    /// The slot holding `name` (hashed `hash`), or, not found, the empty slot where it would go.
    @inline(__always)
    private func find(_ name: UnsafeRawBufferPointer, hash: UInt32) -> (found: Bool, at: Int) {
        var at = Int(hash) & mask
        while true {
            let slot = slots[at]
            if slot.isEmpty { return (false, at) }
            if slot.hash == hash, Int(slot.nameCount) == name.count,
                name.count == 0 || ExactKey.bytesEqual(self.name(of: slot), name)
            {
                return (true, at)
            }
            at = (at + 1) & mask
        }
    }

    /// `key`'s value, a copy, or `nil`.
    func value(for key: String) -> Data? {
        var key = key
        return key.withUTF8 { bytes -> Data? in
            let name = UnsafeRawBufferPointer(bytes)
            let (found, at) = find(name, hash: hash(name))
            guard found else { return nil }
            let value = value(of: slots[at])
            return value.isEmpty ? Data() : Data(bytes: value.baseAddress!, count: value.count)
        }
    }

    /// The size of `key`'s value, or `nil`.
    func valueCount(for key: String) -> Int? {
        var key = key
        return key.withUTF8 { bytes -> Int? in
            let name = UnsafeRawBufferPointer(bytes)
            let (found, at) = find(name, hash: hash(name))
            return found ? Int(slots[at].valueCount) : nil
        }
    }

    /// Calls `body` with each name and value, in the table's order.
    func forEach(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Void) rethrows {
        for at in 0...mask where !slots[at].isEmpty {
            try body(name(of: slots[at]), value(of: slots[at]))
        }
    }

    /// Every name.
    var keys: [String] {
        var keys: [String] = []
        keys.reserveCapacity(count)
        forEach { name, _ in keys.append(String(decoding: name, as: UTF8.self)) }
        return keys
    }

    // MARK: - Segments

    /// A new segment holding a copy of `bytes`. Until a slot points into it, only
    /// ``releaseIfUnused(_:)`` frees it.
    mutating func addSegment(copying bytes: UnsafeRawBufferPointer) -> UInt32 {
        let segment = addSegment(count: bytes.count)
        if bytes.count > 0 { base(of: segment).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
        return segment
    }

    /// A new segment of `count` bytes, uninitialised.
    private mutating func addSegment(count: Int) -> UInt32 {
        let new = Segment(base: .allocate(byteCount: max(count, 1), alignment: 8), live: 0, count: count)
        segmentBytes += count
        if let reused = freeSegments.popLast() {
            segments[Int(reused)] = new
            return reused
        }
        precondition(segmentCount < Int(Slot.none), "too many segments")
        if segmentCount == segmentCapacity {
            segmentCapacity *= 2
            let grown = UnsafeMutablePointer<Segment>.allocate(capacity: segmentCapacity)
            grown.moveInitialize(from: segments, count: segmentCount)
            segments.deallocate()
            segments = grown
            memory.segments = grown
        }
        (segments + segmentCount).initialize(to: new)
        segmentCount += 1
        memory.segmentCount = segmentCount
        return UInt32(segmentCount - 1)
    }

    /// Where `segment`'s bytes start.
    func base(of segment: UInt32) -> UnsafeMutableRawPointer { segments[Int(segment)].base! }

    /// Frees `segment` if no slot points into it.
    mutating func releaseIfUnused(_ segment: UInt32) {
        guard segments[Int(segment)].live == 0, let base = segments[Int(segment)].base else { return }
        base.deallocate()
        segments[Int(segment)].base = nil
        segmentBytes -= segments[Int(segment)].count
        freeSegments.append(segment)
    }

    /// The bytes the segments hold (for tests: what compaction bounds).
    var retainedBytes: Int { segmentBytes }

    /// What a live name and value are counted with besides their bytes: about what surrounds
    /// them in a batch (a frame header, the record's operation and the name's length).
    static let recordOverhead = 16

    /// A batch's segment stays while any of its records is live, with every superseded record
    /// in it. When the segments hold more than twice what is live and 256 KiB besides, the live
    /// names and values are copied into one new segment and the old ones freed, so the memory a
    /// suite keeps is bounded by what it holds, as its file is by compaction. An open of a file
    /// with little garbage never does this.
    mutating func compactSegmentsIfWorthIt() {
        guard segmentBytes > 2 * liveBytes + 256 * 1024 else { return }
        var total = 0
        for at in 0...mask where !slots[at].isEmpty { total += Int(slots[at].nameCount) + Int(slots[at].valueCount) }
        let old = (segments: segments, count: segmentCount)
        // The new segment goes into a fresh array: the old one is freed after the copy.
        segments = .allocate(capacity: max(4, segmentCapacity))
        segmentCount = 0
        freeSegments = []
        segmentBytes = 0
        let fresh = addSegment(count: total)
        let base = self.base(of: fresh)
        var offset = 0
        for at in 0...mask where !slots[at].isEmpty {
            let slot = slots[at]
            let bytes = Int(slot.nameCount) + Int(slot.valueCount)
            if bytes > 0 { (base + offset).copyMemory(from: old.segments[Int(slot.segment)].base! + slot.offset, byteCount: bytes) }
            slots[at].segment = fresh
            slots[at].offset = offset
            offset += bytes
        }
        segments[Int(fresh)].live = count
        for i in 0..<old.count { old.segments[i].base?.deallocate() }
        old.segments.deallocate()
        memory.segments = segments
        memory.segmentCount = segmentCount
    }

    // MARK: - Changing

    /// Sets the name at `offset` in `segment` (`nameCount` bytes, its value the `valueCount`
    /// after them) to that value. Returns the size of the value it replaces, or `nil`.
    @discardableResult
    mutating func set(segment: UInt32, offset: Int, nameCount: Int, valueCount: Int) -> Int? {
        let name = UnsafeRawBufferPointer(start: segments[Int(segment)].base! + offset, count: nameCount)
        let hash = hash(name)
        let (found, at) = find(name, hash: hash)
        return set(
            segment: segment, offset: offset, nameCount: nameCount, valueCount: valueCount, hash: hash, found: found,
            at: at)
    }

    /// ``set(segment:offset:nameCount:valueCount:)`` with the name already hashed and looked up.
    private mutating func set(
        segment: UInt32, offset: Int, nameCount: Int, valueCount: Int, hash: UInt32, found: Bool, at: Int
    ) -> Int? {
        var at = at
        segments[Int(segment)].live += 1
        let new = Slot(
            hash: hash, nameCount: UInt32(nameCount), valueCount: UInt32(valueCount), segment: segment, offset: offset)
        liveBytes += nameCount + valueCount + Self.recordOverhead
        if found {
            let old = slots[at]
            slots[at] = new
            liveBytes -= Int(old.nameCount) + Int(old.valueCount) + Self.recordOverhead
            segments[Int(old.segment)].live -= 1
            releaseIfUnused(old.segment)
            return Int(old.valueCount)
        }
        if count + 1 > mask + 1 - (mask + 1) / 4 {
            resize(to: (mask + 1) * 2)
            let name = UnsafeRawBufferPointer(start: segments[Int(segment)].base! + offset, count: nameCount)
            at = find(name, hash: hash).at
        }
        slots[at] = new
        count += 1
        return nil
    }

    /// Removes `name`. Returns the size of the value it had, or `nil`.
    @discardableResult
    mutating func remove(_ name: UnsafeRawBufferPointer) -> Int? {
        let (found, at) = find(name, hash: hash(name))
        guard found else { return nil }
        let old = slots[at]
        deleteSlot(at)
        liveBytes -= Int(old.nameCount) + Int(old.valueCount) + Self.recordOverhead
        segments[Int(old.segment)].live -= 1
        releaseIfUnused(old.segment)
        return Int(old.valueCount)
    }

    /// Sets `key` to `value` (written here): both are copied into a segment of their own.
    /// Returns the size of the value it replaces, or `nil`.
    ///
    /// A value of the same size as the one it replaces, when that one was written here too (a
    /// segment holding nothing but that name and value), is stored over it instead: a setter
    /// writing one key again and again allocates and frees nothing.
    @discardableResult
    mutating func set(_ key: String, _ value: Data) -> Int? {
        var key = key
        return key.withUTF8 { name in
            value.withUnsafeBytes { value in
                let hash = hash(UnsafeRawBufferPointer(name))
                let (found, at) = find(UnsafeRawBufferPointer(name), hash: hash)
                if found {
                    let slot = slots[at]
                    let segment = segments[Int(slot.segment)]
                    if Int(slot.valueCount) == value.count, slot.offset == 0, segment.live == 1,
                        segment.count == name.count + value.count
                    {
                        if value.count > 0 {
                            (segment.base! + name.count).copyMemory(from: value.baseAddress!, byteCount: value.count)
                        }
                        return value.count
                    }
                }
                let segment = addSegment(count: name.count + value.count)
                let base = self.base(of: segment)
                if name.count > 0 { base.copyMemory(from: name.baseAddress!, byteCount: name.count) }
                if value.count > 0 { (base + name.count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
                // The lookup above still holds: adding a segment moves no slot.
                return set(
                    segment: segment, offset: 0, nameCount: name.count, valueCount: value.count, hash: hash,
                    found: found, at: at)
            }
        }
    }

    /// Removes `key`. Returns the size of the value it had, or `nil`.
    @discardableResult
    mutating func remove(_ key: String) -> Int? {
        var key = key
        return key.withUTF8 { remove(UnsafeRawBufferPointer($0)) }
    }

    /// Empties slot `hole`, moving back the slots after it whose probe passed over it (linear
    /// probing's deletion: no tombstones, so lookups never slow down with removals).
    private mutating func deleteSlot(_ hole: Int) {
        var hole = hole
        var at = (hole + 1) & mask
        while !slots[at].isEmpty {
            // `at` moves into the hole unless its home lies cyclically in (hole, at].
            let home = Int(slots[at].hash) & mask
            if (at - home) & mask >= (at - hole) & mask {
                slots[hole] = slots[at]
                hole = at
            }
            at = (at + 1) & mask
        }
        slots[hole] = .empty
        count -= 1
    }

    private mutating func resize(to size: Int) {
        let old = slots
        let oldSize = mask + 1
        slots = .allocate(capacity: size)
        slots.initialize(repeating: .empty, count: size)
        mask = size - 1
        for i in 0..<oldSize where !old[i].isEmpty {
            var at = Int(old[i].hash) & mask
            while !slots[at].isEmpty { at = (at + 1) & mask }
            slots[at] = old[i]
        }
        old.deallocate()
        memory.slots = slots
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotatedLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
