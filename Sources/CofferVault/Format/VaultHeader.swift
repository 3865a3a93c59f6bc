import CofferCore
import CofferJournal

/// The vault's header, as bytes (docs/FORMAT.md, "Vault header"). Pure: no crypto, no I/O.
///
/// The journal reserves a 4,096-byte header area; it holds two copies of the header, 2,048
/// bytes each (a row store keeps one copy, as long as its slots need: ``rowBytes()``). A change writes the copy that is not current, fsyncs, then the other: a crash
/// at any moment leaves at least one intact copy, the old or the new.
package struct VaultHeader: Equatable {
    static let copySize = 2048
    static let areaSize = 2 * copySize
    static let magic: [UInt8] = Array("CFVH".utf8)
    /// The newest version this Coffer reads and writes. A header is written as the oldest
    /// version that can hold it: 1, or 2 when it holds a recipient slot (kind 4), or 3 when a
    /// slot has a label or there are more than 8 slots. A vault that needs nothing newer still
    /// opens in an older Coffer, and one that does is "unsupported" there, never "damaged".
    static let formatVersion: UInt16 = 3
    /// Versions 1 and 2: eight slot places, the MAC at 1,072.
    static let maximumClassicSlots = 8
    /// Version 3 in a file (the 2,048-byte copy): 48 + 192 n + 32 ≤ 2,044.
    static let maximumFileSlots = 10
    /// Version 3 in a row store (PostgreSQL), whose copy is as long as its slots need.
    static let maximumRowSlots = 1000
    static let slotsOffset = 48
    static let macOffset = slotsOffset + maximumClassicSlots * KeySlot.size  // 1072, versions 1 and 2
    static let macLength = 32
    static let crcOffset = copySize - 4
    /// Version 3: each slot's label, UTF-8, zero-padded, after the slots.
    static let labelSize = 64

    var sequence: UInt64
    var vaultID: [UInt8]  // 16 bytes
    var epoch: [UInt8]  // 16 bytes, new at each compaction
    var slots: [KeySlot]
    var mac: [UInt8]  // BLAKE2b-256 keyed with the header subkey over the authenticated bytes

    /// The version this header is written as (see ``formatVersion``).
    var version: UInt16 {
        if slots.count > Self.maximumClassicSlots || slots.contains(where: { !$0.label.isEmpty }) { return 3 }
        return slots.contains { $0.kind == .recipient } ? 2 : 1
    }

    /// Where the MAC lies in a copy of `version` with `count` slots: 1,072 for versions 1 and 2,
    /// 48 + 192 × count for version 3 (slots, then labels).
    static func macOffset(version: UInt16, count: Int) -> Int {
        version >= 3 ? slotsOffset + count * (KeySlot.size + labelSize) : macOffset
    }

    /// The bytes the MAC covers, as this header encodes them (for a new MAC). A header read
    /// from a file is verified over its bytes as stored (``storedAuthenticatedBytes(of:)``);
    /// for every copy ``parse(copy:)`` accepts, the two are identical.
    func authenticatedBytes() -> [UInt8] {
        var bytes = Self.magic
        appendLE(version, to: &bytes)
        appendLE(UInt16(slots.count), to: &bytes)
        appendLE(sequence, to: &bytes)
        bytes += vaultID
        bytes += epoch
        for slot in slots { bytes += slot.bytes() }
        if version >= 3 {
            for slot in slots {
                let label = Array(slot.label.utf8)
                bytes += label + [UInt8](repeating: 0, count: Self.labelSize - label.count)
            }
        } else {
            bytes += [UInt8](repeating: 0, count: Self.macOffset - bytes.count)
        }
        return bytes
    }

    /// One 2,048-byte copy, as a file holds it. Version 3 fits at most ``maximumFileSlots``.
    func copyBytes() -> [UInt8] {
        var bytes = authenticatedBytes()
        bytes += mac
        bytes += [UInt8](repeating: 0, count: Self.crcOffset - bytes.count)
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        return bytes
    }

    /// The copy a row store keeps: a file's 2,048 bytes for versions 1 and 2 (so older Coffers
    /// read it), and for version 3 exactly as long as its slots need (no padding): MAC, then
    /// the CRC of everything before it.
    func rowBytes() -> [UInt8] {
        guard version >= 3 else { return copyBytes() }
        var bytes = authenticatedBytes()
        bytes += mac
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        return bytes
    }

    /// Whether `label` holds no control, format (bidirectional overrides among them), line or
    /// paragraph separator character: what a terminal would act on rather than show.
    static func isPrintableLabel(_ label: String) -> Bool {
        !label.unicodeScalars.contains {
            switch $0.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator: true
            default: false
            }
        }
    }

    /// The end of the authenticated bytes of a stored copy, from its own version and slot count
    /// (call on a copy ``parse(copy:)`` accepted).
    private static func storedMACOffset(of copy: ArraySlice<UInt8>) -> Int {
        let b = copy.startIndex
        let version = UInt16(copy[b + 4]) | UInt16(copy[b + 5]) << 8
        let count = Int(UInt16(copy[b + 6]) | UInt16(copy[b + 7]) << 8)
        return macOffset(version: version, count: count)
    }

    /// The bytes of one stored copy that the MAC covers, `[0, MAC offset)`, exactly as stored.
    static func storedAuthenticatedBytes(of copy: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        copy[copy.startIndex..<(copy.startIndex + storedMACOffset(of: copy))]
    }

    /// The MAC field of one stored copy.
    static func storedMAC(of copy: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        let offset = copy.startIndex + storedMACOffset(of: copy)
        return copy[offset..<(offset + macLength)]
    }

    /// The whole header area: both copies identical (used when a file is created or rewritten).
    func areaBytes() -> [UInt8] { copyBytes() + copyBytes() }

    package enum ParseResult {
        case header(VaultHeader)
        case unsupported(UInt16)
        case damaged(String)
    }

    /// The most passphrase slots (kind 1) a header may hold: each is an Argon2id run when a
    /// passphrase is tried, and the MAC can only be checked after a slot opened, so a header
    /// written by someone without the key must not be able to ask for more.
    static let maximumPassphraseSlots = 8

    /// Parses one copy: a file's 2,048 bytes (any version), or, `inRow`, what a row store keeps
    /// (``rowBytes()``: 2,048 bytes for versions 1 and 2, `84 + 192 n` for version 3). A bad
    /// checksum or layout is damage; a known-good checksum with a newer version is "unsupported".
    package static func parse(copy bytes: ArraySlice<UInt8>, inRow: Bool = false) -> ParseResult {
        let b = Array(bytes)
        let padded = b.count == copySize
        // The CRC is the last 4 bytes of an unpadded copy whatever its version, so a newer
        // version of another length is "unsupported", never "damaged".
        guard padded || (inRow && b.count >= slotsOffset + macLength + 4) else { return .damaged("wrong size") }
        let crcAt = padded ? crcOffset : b.count - 4
        guard CRC32C.checksum(Array(b[0..<crcAt])) == readLE32(b, crcAt) else {
            return .damaged("checksum mismatch")
        }
        guard Array(b[0..<4]) == magic else { return .damaged("wrong magic bytes") }
        let version = UInt16(b[4]) | UInt16(b[5]) << 8
        guard (1...formatVersion).contains(version) else { return .unsupported(version) }
        let count = Int(UInt16(b[6]) | UInt16(b[7]) << 8)
        // One encoding per header: in a row, version 3 unpadded and exactly as long as its slots
        // need, versions 1 and 2 in 2,048 bytes.
        if inRow, (version >= 3) == padded { return .damaged("wrong size for version \(version)") }
        if !padded, b.count != macOffset(version: 3, count: count) + macLength + 4 { return .damaged("wrong size") }
        let limit = version < 3 ? maximumClassicSlots : padded ? maximumFileSlots : maximumRowSlots
        guard (1...limit).contains(count) else { return .damaged("slot count \(count) out of range") }
        var slots: [KeySlot] = []
        for i in 0..<count {
            let start = slotsOffset + i * KeySlot.size
            guard var slot = KeySlot.parse(b[start..<(start + KeySlot.size)]) else {
                return .damaged("key slot \(i) is malformed")
            }
            if version >= 3 {
                let field = slotsOffset + count * KeySlot.size + i * labelSize
                let raw = b[field..<(field + labelSize)]
                let length = raw.firstIndex(of: 0).map { $0 - field } ?? labelSize
                guard raw.dropFirst(length).allSatisfy({ $0 == 0 }),
                    let label = String(validating: raw.prefix(length), as: UTF8.self),
                    isPrintableLabel(label)
                else { return .damaged("the label of key slot \(i) is malformed") }
                slot.label = label
            }
            slots.append(slot)
        }
        guard slots.filter({ $0.kind == .passphrase }).count <= maximumPassphraseSlots else {
            return .damaged("more than \(maximumPassphraseSlots) passphrase slots")
        }
        let mac = macOffset(version: version, count: count)
        // Every byte Coffer writes as zero must be zero: the unused slots and the padding after
        // the MAC. They are authenticated anyway (the MAC covers the copy as stored, unused
        // slots included), but a copy that differs from its own re-encoding is not one Coffer
        // wrote, and refusing it here keeps "the bytes as stored" and "the header as parsed" one
        // and the same thing for every reader.
        if version < 3 {
            guard b[(slotsOffset + count * KeySlot.size)..<mac].allSatisfy({ $0 == 0 }) else {
                return .damaged("an unused key slot is not zero")
            }
        }
        let header = VaultHeader(
            sequence: readLE64(b, 8), vaultID: Array(b[16..<32]), epoch: Array(b[32..<48]), slots: slots,
            mac: Array(b[mac..<(mac + macLength)]))
        // The version is the one its slots call for, so a header is its own re-encoding.
        guard version == header.version else {
            return .damaged(
                "version \(version) does not match its key slots (version 2 is for a recipient slot, 3 for labels or "
                    + "more than 8 slots)")
        }
        guard b[(mac + macLength)..<crcAt].allSatisfy({ $0 == 0 }) else {
            return .damaged("the reserved bytes after the MAC are not zero")
        }
        return .header(header)
    }
}

/// How a key slot turns its unlock source into the key that unwraps the master key.
enum KeySlotKind: UInt8 {
    case passphrase = 1  // Argon2id13 over the passphrase
    case keyFile = 2  // BLAKE2b-256 over a key file's bytes
    case rawKey = 3  // keyed BLAKE2b-256 under a 32-byte key
    case recipient = 4  // X25519 with a recipient's public key (format version 2)

    /// As ``KeySlotInfo/kind`` names it.
    var name: String {
        switch self {
        case .passphrase: "passphrase"
        case .keyFile: "keyFile"
        case .rawKey: "key"
        case .recipient: "recipient"
        }
    }
}

/// One 128-byte key slot: the master key wrapped under a key derived from one unlock source.
package struct KeySlot: Equatable {
    static let size = 128
    static let saltLength = 16
    static let nonceLength = 24
    static let wrappedLength = 48  // 32-byte master key + 16-byte tag

    var kind: KeySlotKind
    var opsLimit: UInt64 = 0  // kind 1
    var memLimitBytes: UInt64 = 0  // kind 1
    var salt: [UInt8] = []  // kinds 1–3: 16 bytes
    var nonce: [UInt8] = []  // kinds 1–3: 24 bytes (kind 4 derives its nonce)
    var wrappedKey: [UInt8]
    /// Kind 4: the ephemeral X25519 public key of the wrapping (32 bytes).
    var ephemeralKey: [UInt8] = []
    /// Kind 4: the recipient's X25519 public key (32 bytes).
    var recipientKey: [UInt8] = []
    /// What the operator calls this slot (a machine's name): in the header's label table
    /// (version 3), authenticated with it, never in the slot's 128 bytes. Empty: none.
    var label = ""

    /// Bytes 0..<40 (kind, then parameters and salt, or the ephemeral key): bound into the
    /// wrapping's associated data.
    func parameterBytes() -> [UInt8] {
        var bytes: [UInt8] = [kind.rawValue] + [UInt8](repeating: 0, count: 7)
        if kind == .recipient {
            bytes += ephemeralKey
        } else {
            appendLE(opsLimit, to: &bytes)
            appendLE(memLimitBytes, to: &bytes)
            bytes += salt
        }
        return bytes
    }

    func bytes() -> [UInt8] {
        var bytes = parameterBytes()
        bytes += kind == .recipient ? recipientKey + wrappedKey : nonce + wrappedKey
        bytes += [UInt8](repeating: 0, count: Self.size - bytes.count)
        return bytes
    }

    package static func parse(_ bytes: ArraySlice<UInt8>) -> KeySlot? {
        let b = Array(bytes)
        guard b.count == size, let kind = KeySlotKind(rawValue: b[0]), b[1..<8].allSatisfy({ $0 == 0 }) else { return nil }
        if kind == .recipient {
            guard b[120..<128].allSatisfy({ $0 == 0 }) else { return nil }
            return KeySlot(
                kind: kind, wrappedKey: Array(b[72..<120]), ephemeralKey: Array(b[8..<40]), recipientKey: Array(b[40..<72]))
        }
        guard b[112..<128].allSatisfy({ $0 == 0 }) else { return nil }
        return KeySlot(
            kind: kind, opsLimit: readLE64(b, 8), memLimitBytes: readLE64(b, 16), salt: Array(b[24..<40]),
            nonce: Array(b[40..<64]), wrappedKey: Array(b[64..<112]))
    }
}

func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
}

func readLE32(_ b: [UInt8], _ o: Int) -> UInt32 {
    UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24
}

func readLE64(_ b: [UInt8], _ o: Int) -> UInt64 {
    var value: UInt64 = 0
    for i in 0..<8 { value |= UInt64(b[o + i]) << (8 * UInt64(i)) }
    return value
}
