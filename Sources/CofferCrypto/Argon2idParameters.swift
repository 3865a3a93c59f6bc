internal import CSodium

/// Argon2id cost parameters as libsodium's `crypto_pwhash` takes them.
///
/// Values read from a file must go through ``validated()`` before use (``PasswordHash`` does this
/// itself), so a hostile header cannot make an unlock allocate or compute without bound.
///
/// ```swift
/// let kek = try PasswordHash.deriveKey(length: 32, passphrase: passphrase, salt: salt, parameters: .moderate)
/// ```
public struct Argon2idParameters: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Number of passes over memory (Argon2 `t`).
    public var opsLimit: UInt64
    /// Memory to use, in bytes; Argon2 uses `memLimitBytes / 1024` KiB (`m`). Lanes (`p`) are always 1.
    public var memLimitBytes: UInt64

    /// Creates parameters; they are checked by ``validated()``, not here.
    public init(opsLimit: UInt64, memLimitBytes: UInt64) {
        self.opsLimit = opsLimit
        self.memLimitBytes = memLimitBytes
    }

    /// libsodium's `OPSLIMIT_INTERACTIVE`/`MEMLIMIT_INTERACTIVE`: 2 passes, 64 MiB.
    public static let interactive = Argon2idParameters(
        opsLimit: UInt64(crypto_pwhash_argon2id_opslimit_interactive()),
        memLimitBytes: UInt64(crypto_pwhash_argon2id_memlimit_interactive()))

    /// libsodium's `OPSLIMIT_MODERATE`/`MEMLIMIT_MODERATE`: 3 passes, 256 MiB.
    public static let moderate = Argon2idParameters(
        opsLimit: UInt64(crypto_pwhash_argon2id_opslimit_moderate()),
        memLimitBytes: UInt64(crypto_pwhash_argon2id_memlimit_moderate()))

    /// libsodium's `OPSLIMIT_SENSITIVE`/`MEMLIMIT_SENSITIVE`: 4 passes, 1 GiB.
    public static let sensitive = Argon2idParameters(
        opsLimit: UInt64(crypto_pwhash_argon2id_opslimit_sensitive()),
        memLimitBytes: UInt64(crypto_pwhash_argon2id_memlimit_sensitive()))

    /// libsodium's lower bounds, `OPSLIMIT_MIN`/`MEMLIMIT_MIN`: 1 pass, 8192 bytes. For tests only.
    public static let minimum = Argon2idParameters(
        opsLimit: UInt64(crypto_pwhash_argon2id_opslimit_min()),
        memLimitBytes: UInt64(crypto_pwhash_argon2id_memlimit_min()))

    /// The largest parameters Coffer accepts, in particular from a file: 64 passes, 4 GiB.
    ///
    /// libsodium itself accepts up to 2³²−1 passes and 4 TiB, so a hostile vault header could
    /// otherwise make every unlock attempt allocate terabytes or run for days. The cap is 4× the
    /// memory and 16× the passes of ``sensitive``, libsodium's strongest preset, which leaves room
    /// for deliberately expensive settings on a big machine; the worst case it allows (64 passes
    /// over 4 GiB, about 64× `sensitive`) is slow but bounded, and 4 GiB is also the most a 32-bit
    /// `size_t` can address. Anything larger is rejected before memory is touched.
    public static let maximumAccepted = Argon2idParameters(opsLimit: 64, memLimitBytes: 4 << 30)

    /// Returns `self` if both limits lie within ``minimum`` ... ``maximumAccepted``.
    ///
    /// - Throws: `CryptoError` `.invalidParameter` otherwise; nothing is allocated.
    public func validated() throws -> Argon2idParameters {
        let minimum = Argon2idParameters.minimum
        let maximum = Argon2idParameters.maximumAccepted
        guard (minimum.opsLimit...maximum.opsLimit).contains(opsLimit) else {
            throw CryptoError(
                code: .invalidParameter,
                message: "Argon2id opsLimit must be \(minimum.opsLimit)...\(maximum.opsLimit), got \(opsLimit)")
        }
        guard (minimum.memLimitBytes...maximum.memLimitBytes).contains(memLimitBytes) else {
            throw CryptoError(
                code: .invalidParameter,
                message: """
                    Argon2id memLimitBytes must be \(minimum.memLimitBytes)...\(maximum.memLimitBytes), \
                    got \(memLimitBytes)
                    """)
        }
        return self
    }

    /// For example `Argon2id(opsLimit: 2, memLimitBytes: 67108864)`.
    public var description: String {
        "Argon2id(opsLimit: \(opsLimit), memLimitBytes: \(memLimitBytes))"
    }
}
