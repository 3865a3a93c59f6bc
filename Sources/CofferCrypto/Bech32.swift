/// Bech32 (BIP 173) as age uses it: the checksum of BIP 173, without its 90-character limit,
/// one case throughout (mixed case is refused), and strict padding when 5-bit groups are read
/// back as bytes.
///
/// It works on ASCII bytes, never a `String`, so an identity's secret can be decoded from
/// guarded memory and every temporary copy wiped.
package enum Bech32 {
    static let charset: [UInt8] = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l".utf8)

    /// The value (0…31) of each lowercase ASCII character of ``charset``, else -1.
    static let values: [Int8] = {
        var table = [Int8](repeating: -1, count: 128)
        for (index, character) in charset.enumerated() { table[Int(character)] = Int8(index) }
        return table
    }()

    static func polymod(_ values: [UInt8]) -> UInt32 {
        let generator: [UInt32] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3]
        var check: UInt32 = 1
        for value in values {
            let top = check >> 25
            check = (check & 0x1ff_ffff) << 5 ^ UInt32(value)
            for i in 0..<5 where (top >> UInt32(i)) & 1 == 1 { check ^= generator[i] }
        }
        return check
    }

    static func expand(_ hrp: [UInt8]) -> [UInt8] {
        hrp.map { $0 >> 5 } + [0] + hrp.map { $0 & 31 }
    }

    /// Regroups bits (8 → 5 with padding, 5 → 8 without); `nil` when 5 → 8 leaves a padding
    /// that is not zero or longer than 4 bits.
    static func convert(_ data: [UInt8], from: Int, to: Int, pad: Bool) -> [UInt8]? {
        var accumulator = 0
        var bits = 0
        var output: [UInt8] = []
        output.reserveCapacity(data.count * from / to + 1)
        let mask = (1 << to) - 1
        for value in data {
            accumulator = (accumulator << from) | Int(value)
            bits += from
            while bits >= to {
                bits -= to
                output.append(UInt8((accumulator >> bits) & mask))
            }
            accumulator &= (1 << bits) - 1  // keep only the bits not yet written
        }
        if pad {
            if bits > 0 { output.append(UInt8((accumulator << (to - bits)) & mask)) }
        } else if bits >= from || (accumulator << (to - bits)) & mask != 0 {
            SecureMemory.zero(&output)
            return nil
        }
        accumulator = 0
        return output
    }

    /// `hrp` ‖ "1" ‖ data ‖ checksum, as ASCII bytes; upper case throughout when `hrp` is upper case.
    package static func encode(hrp: [UInt8], data: [UInt8]) -> [UInt8] {
        let upper = hrp.contains { (65...90).contains($0) }
        let lowerHRP = hrp.map { (65...90).contains($0) ? $0 + 32 : $0 }
        var groups = convert(data, from: 8, to: 5, pad: true)!
        defer { SecureMemory.zero(&groups) }
        var checked = expand(lowerHRP)
        checked.reserveCapacity(checked.count + groups.count + 6)
        checked += groups
        checked += [0, 0, 0, 0, 0, 0]
        defer { SecureMemory.zero(&checked) }
        let check = polymod(checked) ^ 1
        var output = lowerHRP + [UInt8(ascii: "1")]
        output.reserveCapacity(output.count + groups.count + 6)
        for group in groups { output.append(charset[Int(group)]) }
        for i in 0..<6 { output.append(charset[Int((check >> UInt32(5 * (5 - i))) & 31)]) }
        if upper {
            // In place: no lower-case copy of what may be a secret is left behind.
            for i in output.indices where (97...122).contains(output[i]) { output[i] -= 32 }
        }
        return output
    }

    /// Why a string is not Bech32 (says nothing of its content: it may be a secret).
    package enum Failure: Error, Equatable {
        case mixedCase
        case separator
        case character
        case checksum
        case padding
    }

    /// The human-readable part (as written: its case kept) and the data bytes.
    package static func decode(_ text: [UInt8]) throws(Failure) -> (hrp: [UInt8], data: [UInt8]) {
        let hasLower = text.contains { (97...122).contains($0) }
        let hasUpper = text.contains { (65...90).contains($0) }
        guard !(hasLower && hasUpper) else { throw .mixedCase }
        guard let separator = text.lastIndex(of: UInt8(ascii: "1")), separator >= 1, separator + 7 <= text.count
        else { throw .separator }
        let hrp = Array(text[..<separator])
        guard hrp.allSatisfy({ (33...126).contains($0) }) else { throw .character }
        var groups: [UInt8] = []
        groups.reserveCapacity(text.count - separator - 1)
        defer { SecureMemory.zero(&groups) }
        for character in text[(separator + 1)...] {
            let lower = (65...90).contains(character) ? character + 32 : character
            guard lower < 128, Self.values[Int(lower)] >= 0 else { throw .character }
            groups.append(UInt8(Self.values[Int(lower)]))
        }
        let lowerHRP = hrp.map { (65...90).contains($0) ? $0 + 32 : $0 }
        var checked = expand(lowerHRP)
        checked.reserveCapacity(checked.count + groups.count)
        checked += groups
        defer { SecureMemory.zero(&checked) }
        guard polymod(checked) == 1 else { throw .checksum }
        var payload = Array(groups[..<(groups.count - 6)])
        defer { SecureMemory.zero(&payload) }
        guard let data = convert(payload, from: 5, to: 8, pad: false) else { throw .padding }
        return (hrp, data)
    }
}
