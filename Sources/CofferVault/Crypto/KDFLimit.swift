// The Argon2id cost limit an unlock applies to passphrase slots: checking a slot against it, raising it, saying it.
import CofferCrypto

extension KeySlot {
    /// Whether running this slot's key derivation stays within `limit`: always for a key file
    /// or raw key (a hash), and for a passphrase when neither its passes nor its memory exceeds
    /// the limit's.
    func isWithin(_ limit: Argon2idParameters) -> Bool {
        kind != .passphrase || (opsLimit <= limit.opsLimit && memLimitBytes <= limit.memLimitBytes)
    }
}

extension Argon2idParameters {
    /// Each limit raised to at least `other`'s.
    func raised(to other: Argon2idParameters) -> Argon2idParameters {
        Argon2idParameters(
            opsLimit: max(opsLimit, other.opsLimit), memLimitBytes: max(memLimitBytes, other.memLimitBytes))
    }
}

/// Argon2id's cost in words: "1 GiB and 4 passes", "64 MiB and 1 pass", "8 KiB and 2 passes".
func describeCost(_ passes: UInt64, _ memory: UInt64) -> String {
    let units: [(UInt64, String)] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
    var size = "\(memory) bytes"
    for (unit, name) in units where memory >= unit {
        var whole = memory / unit
        var tenth = (memory % unit * 10 + unit / 2) / unit  // no overflow: memory % unit < 2^30
        if tenth == 10 { (whole, tenth) = (whole + 1, 0) }
        size = tenth == 0 ? "\(whole) \(name)" : "\(whole).\(tenth) \(name)"
        // Not exact to a tenth (1 GiB + 1 byte, say): the exact count too, so a cost just over
        // a limit never reads as equal to it.
        let (product, overflow) = (whole * 10 + tenth).multipliedReportingOverflow(by: unit)
        if overflow || product / 10 != memory || product % 10 != 0 { size = "\(memory) bytes (about \(size))" }
        break
    }
    return "\(size) and \(passes) pass\(passes == 1 ? "" : "es")"
}
