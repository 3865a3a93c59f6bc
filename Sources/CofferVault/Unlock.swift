public import CofferCrypto
import CofferCore
public import Foundation

/// What opens a vault: a passphrase, a key file, or a raw 32-byte key.
///
/// ```swift
/// let vault = try Vault.open(at: url, unlock: .passphrase("correct horse battery staple"))
/// ```
///
/// What each protects is in SECURITY.md. In short: a passphrase is stretched with Argon2id, so
/// a stolen file resists guessing; a key file is only as safe as where it is kept — one stored
/// beside the vault protects nothing against someone who copies the directory.
public struct VaultUnlock: Sendable, CustomStringConvertible {
    enum Source: Sendable {
        case passphrase(SecureBytes)
        case passphraseText(String)
        case keyFile(URL)
        case key(SecureBytes)
    }

    let source: Source

    /// A passphrase held in guarded memory (preferred: it is wiped when released).
    public static func passphrase(_ bytes: SecureBytes) -> VaultUnlock { VaultUnlock(source: .passphrase(bytes)) }

    /// A passphrase from a `String`. Convenient, but a Swift `String` cannot be wiped from
    /// memory; read passphrases into ``SecureBytes`` where that matters.
    public static func passphrase(_ text: String) -> VaultUnlock { VaultUnlock(source: .passphraseText(text)) }

    /// A key file: its whole content (at least 32 bytes, ideally random) is the secret.
    public static func keyFile(_ url: URL) -> VaultUnlock { VaultUnlock(source: .keyFile(url)) }

    /// A raw 32-byte key (from another keychain, an HSM, an environment secret).
    public static func key(_ key: SecureBytes) -> VaultUnlock { VaultUnlock(source: .key(key)) }

    public var description: String {
        switch source {
        case .passphrase, .passphraseText: "VaultUnlock.passphrase(<redacted>)"
        case .keyFile(let url): "VaultUnlock.keyFile(\(url.path))"
        case .key: "VaultUnlock.key(<redacted>)"
        }
    }

    /// The bytes this source stands for.
    func material(fileSystem: any FileSystem) throws -> UnlockMaterial {
        switch source {
        case .passphrase(let bytes):
            guard bytes.count > 0 else { throw CofferError(.invalidArgument, "the passphrase is empty") }
            return .passphrase(bytes)
        case .passphraseText(let text):
            guard !text.isEmpty else { throw CofferError(.invalidArgument, "the passphrase is empty") }
            return .passphrase(try crypto { try SecureBytes(copying: Array(text.utf8)) })
        case .keyFile(let url):
            guard var data = try DurableIO.readFile(url.path, fileSystem: fileSystem) else {
                throw CofferError(.notFound, "the key file does not exist", path: url.path)
            }
            defer { data.resetBytes(in: 0..<data.count) }  // best effort: Data may have copied
            guard data.count >= 32 else {
                throw CofferError(
                    .invalidArgument, "a key file must hold at least 32 bytes (it holds \(data.count))", path: url.path)
            }
            return .keyFile(try crypto { try SecureBytes(copying: data) })
        case .key(let key):
            guard key.count == 32 else {
                throw CofferError(.invalidArgument, "a raw vault key must be 32 bytes (it is \(key.count))")
            }
            return .rawKey(key)
        }
    }
}

/// Facts about a vault for `coffer info`: nothing secret.
public struct VaultInfo: Sendable, Codable {
    /// The vault format version.
    public var formatVersion: Int
    /// The key slots: their kind and, for passphrases, the Argon2id parameters.
    public var keySlots: [KeySlotInfo]
    /// Items currently stored.
    public var itemCount: Int
    /// Bytes of the file holding records (live and superseded).
    public var fileSize: Int64
    /// Records in the file, live and superseded.
    public var recordCount: Int
}

/// One key slot as `coffer info` shows it.
public struct KeySlotInfo: Sendable, Codable, Equatable {
    /// `passphrase`, `keyFile` or `key`.
    public var kind: String
    /// Argon2id's operations limit (passphrase slots).
    public var opsLimit: UInt64?
    /// Argon2id's memory limit in bytes (passphrase slots).
    public var memLimitBytes: UInt64?
}

/// Counts from ``Vault/verify()``.
public struct VaultVerification: Sendable, Codable, Equatable {
    /// Records that authenticated.
    public var records: Int
    /// Items they leave live.
    public var items: Int
}
