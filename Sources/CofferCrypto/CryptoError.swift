/// An error thrown by CofferCrypto.
///
/// CofferCrypto sits below `CofferCore`, so it has its own error type; higher layers translate it.
/// The `message` is meant for a person and never contains key, passphrase or plaintext bytes.
///
/// ```swift
/// do {
///     let plaintext = try XChaCha20Poly1305.open(sealed, key: key, nonce: nonce, associatedData: ad)
/// } catch CryptoError.Code.authenticationFailed {
///     // wrong key, or the data was tampered with or corrupted
/// }
/// ```
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure. Codes may be added in later releases, so switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case authenticationFailed
            case invalidLength
            case invalidParameter
            case outOfMemory
            case memoryLockFailed
            case initializationFailed
            case failed
        }

        private let wrapped: Wrapped

        private init(_ wrapped: Wrapped) {
            self.wrapped = wrapped
        }

        /// Sealed data did not authenticate: wrong key, or ciphertext, tag, nonce or associated data changed.
        public static let authenticationFailed = Code(.authenticationFailed)
        /// A key, nonce, salt, context, buffer or output length is outside what the primitive accepts.
        public static let invalidLength = Code(.invalidLength)
        /// A parameter value (for example Argon2id limits) is outside the accepted range.
        public static let invalidParameter = Code(.invalidParameter)
        /// Guarded memory or the memory an Argon2id computation needs could not be allocated.
        public static let outOfMemory = Code(.outOfMemory)
        /// A secret's memory could not be locked into RAM (`mlock`) and ``SecureMemory/lockPolicy``
        /// is ``SecureMemory/LockPolicy/require``.
        public static let memoryLockFailed = Code(.memoryLockFailed)
        /// `sodium_init()` failed; no CofferCrypto operation can run.
        public static let initializationFailed = Code(.initializationFailed)
        /// libsodium reported a failure that has no more specific code.
        public static let failed = Code(.failed)

        /// The code's name, for example `authenticationFailed`.
        public var description: String {
            switch wrapped {
            case .authenticationFailed: "authenticationFailed"
            case .invalidLength: "invalidLength"
            case .invalidParameter: "invalidParameter"
            case .outOfMemory: "outOfMemory"
            case .memoryLockFailed: "memoryLockFailed"
            case .initializationFailed: "initializationFailed"
            case .failed: "failed"
            }
        }

        /// Matches a thrown error by code, so `catch CryptoError.Code.invalidLength { … }` works.
        public static func ~= (pattern: Code, value: any Error) -> Bool {
            (value as? CryptoError)?.code == pattern
        }
    }

    /// The kind of failure.
    public let code: Code
    /// What went wrong, for a person to read; never contains secret bytes.
    public let message: String

    /// Creates an error; `message` must not contain secret material.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// `"CryptoError.<code>: <message>"`.
    public var description: String {
        "CryptoError.\(code): \(message)"
    }
}

extension CryptoError {
    static func invalidLength(_ what: String, expected: String, actual: Int) -> CryptoError {
        CryptoError(code: .invalidLength, message: "\(what) must be \(expected) bytes, got \(actual)")
    }

    static func invalidLength(_ what: String, expected: Int, actual: Int) -> CryptoError {
        invalidLength(what, expected: String(expected), actual: actual)
    }

    static func invalidLength(_ what: String, in range: ClosedRange<Int>, actual: Int) -> CryptoError {
        invalidLength(what, expected: "\(range.lowerBound)...\(range.upperBound)", actual: actual)
    }

    static func failed(_ function: String) -> CryptoError {
        CryptoError(code: .failed, message: "\(function) failed")
    }
}
