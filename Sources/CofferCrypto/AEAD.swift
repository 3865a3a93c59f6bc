internal import CSodium

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// libsodium's `crypto_aead_*_encrypt(c, clen_p, m, mlen, ad, adlen, nsec, npub, k)`.
typealias SodiumAEADEncrypt = @convention(c) (
    UnsafeMutablePointer<UInt8>, UnsafeMutablePointer<UInt64>?, UnsafePointer<UInt8>?, UInt64,
    UnsafePointer<UInt8>?, UInt64, UnsafePointer<UInt8>?, UnsafePointer<UInt8>, UnsafePointer<UInt8>
) -> Int32

/// libsodium's `crypto_aead_*_decrypt(m, mlen_p, nsec, c, clen, ad, adlen, npub, k)`.
typealias SodiumAEADDecrypt = @convention(c) (
    UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt64>?, UnsafeMutablePointer<UInt8>?,
    UnsafePointer<UInt8>, UInt64, UnsafePointer<UInt8>?, UInt64, UnsafePointer<UInt8>, UnsafePointer<UInt8>
) -> Int32

/// The libsodium functions and sizes of one combined-mode AEAD construction.
///
/// Both IETF constructions share libsodium's calling convention, so one generic implementation
/// (``AEAD``) checks lengths and translates results for both, and a binding is only its sizes
/// and its two C functions. The public API is ``XChaCha20Poly1305`` (the vault's cipher);
/// ChaCha20-Poly1305-IETF has no public wrapper — no format of Coffer's uses it — and stays as a
/// binding so the tests run RFC 8439's and Wycheproof's vectors for it through the same generic
/// code, with a second nonce length.
protocol SodiumAEADBinding {
    /// Name used in error messages.
    static var name: String { get }
    /// The key, nonce and tag lengths are literals, not the library's size functions: a
    /// `static let` initialised by a call is a `swift_once` on every read, and a vault write reads
    /// them several times. ``librarySizes`` (checked by the tests) is what libsodium reports.
    static var keyLength: Int { get }
    static var nonceLength: Int { get }
    static var tagLength: Int { get }
    /// libsodium's `*_keybytes()`, `*_npubbytes()` and `*_abytes()`.
    static var librarySizes: (key: Int, nonce: Int, tag: Int) { get }
    /// Largest plaintext libsodium accepts (`*_messagebytes_max()`).
    static var maximumMessageLength: Int { get }
    static var encryptFunction: SodiumAEADEncrypt { get }
    static var decryptFunction: SodiumAEADDecrypt { get }
}

extension SodiumAEADBinding {
    /// Combined mode: no separate tag, no secret nonce.
    static func encrypt(
        _ output: UnsafeMutablePointer<UInt8>,
        _ message: UnsafePointer<UInt8>?, _ messageLength: UInt64,
        _ associatedData: UnsafePointer<UInt8>?, _ associatedDataLength: UInt64,
        _ nonce: UnsafePointer<UInt8>, _ key: UnsafePointer<UInt8>
    ) -> Int32 {
        encryptFunction(output, nil, message, messageLength, associatedData, associatedDataLength, nil, nonce, key)
    }

    static func decrypt(
        _ output: UnsafeMutablePointer<UInt8>?,
        _ sealed: UnsafePointer<UInt8>, _ sealedLength: UInt64,
        _ associatedData: UnsafePointer<UInt8>?, _ associatedDataLength: UInt64,
        _ nonce: UnsafePointer<UInt8>, _ key: UnsafePointer<UInt8>
    ) -> Int32 {
        decryptFunction(output, nil, nil, sealed, sealedLength, associatedData, associatedDataLength, nonce, key)
    }
}

enum XChaCha20Poly1305Binding: SodiumAEADBinding {
    static let name = "XChaCha20-Poly1305"
    static let keyLength = 32
    static let nonceLength = 24
    static let tagLength = 16
    static var librarySizes: (key: Int, nonce: Int, tag: Int) {
        (
            Int(crypto_aead_xchacha20poly1305_ietf_keybytes()), Int(crypto_aead_xchacha20poly1305_ietf_npubbytes()),
            Int(crypto_aead_xchacha20poly1305_ietf_abytes())
        )
    }
    static let maximumMessageLength = sizeLimit(crypto_aead_xchacha20poly1305_ietf_messagebytes_max())
    static let encryptFunction: SodiumAEADEncrypt = crypto_aead_xchacha20poly1305_ietf_encrypt
    static let decryptFunction: SodiumAEADDecrypt = crypto_aead_xchacha20poly1305_ietf_decrypt
}

enum ChaCha20Poly1305IETFBinding: SodiumAEADBinding {
    static let name = "ChaCha20-Poly1305-IETF"
    static let keyLength = 32
    static let nonceLength = 12
    static let tagLength = 16
    static var librarySizes: (key: Int, nonce: Int, tag: Int) {
        (
            Int(crypto_aead_chacha20poly1305_ietf_keybytes()), Int(crypto_aead_chacha20poly1305_ietf_npubbytes()),
            Int(crypto_aead_chacha20poly1305_ietf_abytes())
        )
    }
    static let maximumMessageLength = sizeLimit(crypto_aead_chacha20poly1305_ietf_messagebytes_max())
    static let encryptFunction: SodiumAEADEncrypt = crypto_aead_chacha20poly1305_ietf_encrypt
    static let decryptFunction: SodiumAEADDecrypt = crypto_aead_chacha20poly1305_ietf_decrypt
}

/// Length checks and result translation for every AEAD construction (``XChaCha20Poly1305`` is its
/// public face).
///
/// libsodium's AEAD functions take no key or nonce length and would read past a short buffer, so
/// every length is checked here, before any C call.
enum AEAD<Binding: SodiumAEADBinding> {
    static var keyLength: Int { Binding.keyLength }
    static var nonceLength: Int { Binding.nonceLength }
    static var tagLength: Int { Binding.tagLength }

    private static func checkKeyAndNonce(key: SecureBytes, nonce: UnsafeRawBufferPointer) throws {
        guard key.count == Binding.keyLength else {
            throw CryptoError.invalidLength("\(Binding.name) key", expected: Binding.keyLength, actual: key.count)
        }
        guard nonce.count == Binding.nonceLength else {
            throw CryptoError.invalidLength(
                "\(Binding.name) nonce", expected: Binding.nonceLength, actual: nonce.count)
        }
    }

    static func seal(
        _ plaintext: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try Sodium.initialize()
        try checkKeyAndNonce(key: key, nonce: nonce)
        guard plaintext.count <= Binding.maximumMessageLength else {
            throw CryptoError.invalidLength(
                "\(Binding.name) plaintext", in: 0...Binding.maximumMessageLength, actual: plaintext.count)
        }
        let sealedLength = plaintext.count + Binding.tagLength
        guard output.count == sealedLength, let outputStart = output.mutableBytePointer else {
            throw CryptoError.invalidLength(
                "\(Binding.name) output buffer", expected: sealedLength, actual: output.count)
        }
        // Key and nonce lengths were checked above, so their buffers are non-empty.
        let status = key.withUnsafeBytes { keyBytes in
            withNonNullBytes(keyBytes) { keyStart in
                withNonNullBytes(nonce) { nonceStart in
                    Binding.encrypt(
                        outputStart,
                        plaintext.bytePointer, UInt64(plaintext.count),
                        associatedData.bytePointer, UInt64(associatedData.count),
                        nonceStart, keyStart)
                }
            }
        }
        guard status == 0 else {
            throw CryptoError.failed("\(Binding.name) encryption")
        }
    }

    static func open(
        _ sealed: UnsafeRawBufferPointer,
        key: SecureBytes,
        nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws {
        try Sodium.initialize()
        try checkKeyAndNonce(key: key, nonce: nonce)
        guard sealed.count >= Binding.tagLength, let sealedStart = sealed.bytePointer else {
            throw CryptoError.invalidLength(
                "\(Binding.name) sealed data", expected: "at least \(Binding.tagLength)", actual: sealed.count)
        }
        let plaintextLength = sealed.count - Binding.tagLength
        guard output.count == plaintextLength else {
            throw CryptoError.invalidLength(
                "\(Binding.name) output buffer", expected: plaintextLength, actual: output.count)
        }
        let status = key.withUnsafeBytes { keyBytes in
            withNonNullBytes(keyBytes) { keyStart in
                withNonNullBytes(nonce) { nonceStart in
                    Binding.decrypt(
                        output.mutableBytePointer,
                        sealedStart, UInt64(sealed.count),
                        associatedData.bytePointer, UInt64(associatedData.count),
                        nonceStart, keyStart)
                }
            }
        }
        guard status == 0 else {
            throw CryptoError(
                code: .authenticationFailed,
                message: "\(Binding.name) authentication failed: wrong key, or the data was modified")
        }
    }

    // MARK: - Forms that allocate their output

    static func seal(
        _ plaintext: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try array(.seal, plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    static func open(
        _ sealed: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        try array(.open, sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    static func seal<P: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ plaintext: P, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> Data {
        try data(.seal, plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    static func open<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> Data {
        try data(.open, sealed, key: key, nonce: nonce, associatedData: associatedData)
    }

    static func openSecure<S: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ sealed: S, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> SecureBytes {
        try withBytes(sealed, nonce, associatedData) { sealed, nonce, associatedData in
            // Check lengths before allocating guarded memory for the plaintext.
            try checkKeyAndNonce(key: key, nonce: nonce)
            guard sealed.count >= Binding.tagLength else {
                throw CryptoError.invalidLength(
                    "\(Binding.name) sealed data", expected: "at least \(Binding.tagLength)",
                    actual: sealed.count)
            }
            return try SecureBytes(count: sealed.count - Binding.tagLength) { output in
                try open(sealed, key: key, nonce: nonce, associatedData: associatedData, into: output)
            }
        }
    }

    /// Sealing or opening, for the forms that allocate their output: its length, and the `into:`
    /// form that writes it.
    private enum Operation {
        case seal, open

        /// The output's length for `count` bytes in. Opening fewer bytes than a tag gives 0, and
        /// the `into:` form then refuses them.
        func outputLength(_ count: Int) throws -> Int {
            switch self {
            case .seal:
                let (length, overflow) = count.addingReportingOverflow(Binding.tagLength)
                guard !overflow else {
                    throw CryptoError.invalidLength(
                        "\(Binding.name) plaintext", in: 0...Binding.maximumMessageLength, actual: count)
                }
                return length
            case .open:
                return max(count - Binding.tagLength, 0)
            }
        }

        func callAsFunction(
            _ input: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
            associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) throws {
            switch self {
            case .seal: try AEAD.seal(input, key: key, nonce: nonce, associatedData: associatedData, into: output)
            case .open: try AEAD.open(input, key: key, nonce: nonce, associatedData: associatedData, into: output)
            }
        }
    }

    /// `operation`'s output for `input`, in a new array.
    private static func array(
        _ operation: Operation, _ input: UnsafeRawBufferPointer, key: SecureBytes, nonce: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer
    ) throws -> [UInt8] {
        let count = try operation.outputLength(input.count)
        guard count > 0 else {
            // Opening a tag alone still checks the tag. Not through
            // `[UInt8](unsafeUninitializedCapacity: 0)`: that writes the count of the shared
            // empty-array storage, which ThreadSanitizer reports as a race between threads.
            try withUnsafeTemporaryAllocation(byteCount: 1, alignment: 1) { scratch in
                try operation(
                    input, key: key, nonce: nonce, associatedData: associatedData,
                    into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<0]))
            }
            return []
        }
        return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            try operation(
                input, key: key, nonce: nonce, associatedData: associatedData,
                into: UnsafeMutableRawBufferPointer(buffer))
            initialized = buffer.count
        }
    }

    /// `operation`'s output for `input`, in a new `Data`.
    private static func data<M: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes>(
        _ operation: Operation, _ input: M, key: SecureBytes, nonce: N, associatedData: A
    ) throws -> Data {
        try withBytes(input, nonce, associatedData) { input, nonce, associatedData in
            var output = Data(count: try operation.outputLength(input.count))
            try output.withUnsafeMutableBytes { output in
                try operation(input, key: key, nonce: nonce, associatedData: associatedData, into: output)
            }
            return output
        }
    }

    /// Calls `body` with the bytes of a message (plaintext or sealed), a nonce and associated
    /// data, each borrowed for the call: the one place the `ContiguousBytes` forms unwrap them.
    private static func withBytes<M: ContiguousBytes, N: ContiguousBytes, A: ContiguousBytes, R>(
        _ message: M, _ nonce: N, _ associatedData: A,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R {
        try message.withUnsafeBytes { message in
            try nonce.withUnsafeBytes { nonce in
                try associatedData.withUnsafeBytes { associatedData in try body(message, nonce, associatedData) }
            }
        }
    }
}
