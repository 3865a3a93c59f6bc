public import CofferCrypto
import CofferCore
import CofferRuntime
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
public struct VaultUnlock: Sendable, CustomStringConvertible, CustomReflectable {
    enum Source: Sendable {
        case passphrase(SecureBytes)
        case passphraseText(String)
        case keyFile(URL)
        case keyFileContents(SecureBytes)
        case key(SecureBytes)
        case identityFile(URL)
        case identities([X25519Identity])
        /// A slot's key-encryption key kept by `coffer unlock` (Vault+SessionKey.swift).
        case sessionKey(VaultSessionKey)
    }

    /// The largest key file accepted, in bytes: 64 KiB. A key file is a few dozen random bytes;
    /// anything much larger is a mistake (the wrong file) and is refused before it is read.
    public static let maximumKeyFileSize = 64 * 1024

    let source: Source

    /// A passphrase held in guarded memory (preferred: it is wiped when released).
    public static func passphrase(_ bytes: SecureBytes) -> VaultUnlock { VaultUnlock(source: .passphrase(bytes)) }

    /// A passphrase from a `String`. Convenient, but a Swift `String` cannot be wiped from
    /// memory; read passphrases into ``SecureBytes`` where that matters.
    public static func passphrase(_ text: String) -> VaultUnlock { VaultUnlock(source: .passphraseText(text)) }

    /// A key file: its whole content (at least 32 bytes, ideally random) is the secret.
    ///
    /// The file must be a regular file of at most ``maximumKeyFileSize`` bytes (a symbolic link
    /// to one is followed); a FIFO, socket, device or directory is refused at once (never
    /// waited on), and no more than the size the file reports is read. To take a key from a
    /// pipe, read it yourself and use ``keyFileContents(_:)``.
    ///
    /// - Throws (when the vault is opened): ``CofferError/Code/notFound`` when there is no such
    ///   file, ``CofferError/Code/invalidArgument`` for a file that is not a regular file or
    ///   holds fewer than 32 bytes, ``CofferError/Code/limitExceeded`` above
    ///   ``maximumKeyFileSize``.
    public static func keyFile(_ url: URL) -> VaultUnlock { VaultUnlock(source: .keyFile(url)) }

    /// The content of a key file, already read (from standard input, a pipe, a secret store):
    /// opens the same key slot as ``keyFile(_:)`` given a file with these bytes.
    ///
    /// ```swift
    /// let key = try SecureBytes(copying: bytesReadFromAPipe)
    /// let vault = try Vault.open(at: url, unlock: .keyFileContents(key))
    /// ```
    ///
    /// - Throws (when the vault is opened): ``CofferError/Code/invalidArgument`` for fewer than
    ///   32 bytes, ``CofferError/Code/limitExceeded`` above ``maximumKeyFileSize``.
    public static func keyFileContents(_ bytes: SecureBytes) -> VaultUnlock {
        VaultUnlock(source: .keyFileContents(bytes))
    }

    /// A raw 32-byte key (from another keychain, an HSM, an environment secret).
    public static func key(_ key: SecureBytes) -> VaultUnlock { VaultUnlock(source: .key(key)) }

    /// An identity file (`AGE-SECRET-KEY-1…` lines, as `coffer identity new` and `age-keygen`
    /// write them): opens the recipient key slot of any identity in it. Read as a key file is
    /// (see ``IdentityFile``). Given to `create` or `addKeySlot`, it adds a slot for each
    /// identity's recipient.
    public static func identity(_ url: URL) -> VaultUnlock { VaultUnlock(source: .identityFile(url)) }

    /// Identities already read (``IdentityFile/parse(_:)``, ``X25519Identity/generate()``).
    public static func identities(_ identities: [X25519Identity]) -> VaultUnlock {
        VaultUnlock(source: .identities(identities))
    }

    public var description: String {
        switch source {
        case .passphrase, .passphraseText: "VaultUnlock.passphrase(<redacted>)"
        case .keyFile(let url): "VaultUnlock.keyFile(\(url.path))"
        case .keyFileContents: "VaultUnlock.keyFileContents(<redacted>)"
        case .key: "VaultUnlock.key(<redacted>)"
        case .identityFile(let url): "VaultUnlock.identity(\(url.path))"
        case .identities(let identities): "VaultUnlock.identities(\(identities.map(\.recipient.description)))"
        case .sessionKey: "VaultUnlock.sessionKey(<redacted>)"
        }
    }

    /// What `dump`, `Mirror` and debuggers show: the description, never the secret.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }

    /// The bytes this source stands for.
    func material(fileSystem: any FileSystem) throws -> UnlockMaterial {
        MemoryWarnings.route()  // every create, open and unlock passes here
        switch source {
        case .passphrase(let bytes):
            guard bytes.count > 0 else { throw CofferError(.invalidArgument, "the passphrase is empty") }
            return .passphrase(bytes)
        case .passphraseText(let text):
            guard !text.isEmpty else { throw CofferError(.invalidArgument, "the passphrase is empty") }
            return .passphrase(try crypto { try SecureBytes(copying: Array(text.utf8)) })
        case .keyFile(let url):
            let bytes = try KeyFileReader.read(url.path, fileSystem: fileSystem)
            try KeyFileReader.check(count: bytes.count, path: url.path)
            return .keyFile(bytes)
        case .keyFileContents(let bytes):
            try KeyFileReader.check(count: bytes.count, path: nil)
            return .keyFile(bytes)
        case .key(let key):
            guard key.count == 32 else {
                throw CofferError(.invalidArgument, "a raw vault key must be 32 bytes (it is \(key.count))")
            }
            return .rawKey(key)
        case .identityFile(let url):
            let contents = try KeyFileReader.read(url.path, fileSystem: fileSystem, what: "identity file")
            return .identities(try IdentityFile.parse(contents, path: url.path))
        case .identities(let identities):
            guard !identities.isEmpty else { throw CofferError(.invalidArgument, "no identity was given") }
            return .identities(identities)
        case .sessionKey(let key):
            return .sessionKey(key)
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
    /// The recipient string (`age1…`) whose identity opens the slot (recipient slots).
    public var recipient: String?
    /// The slot's label (who or what it is for), when it has one.
    public var label: String?

    public init(
        kind: String, opsLimit: UInt64? = nil, memLimitBytes: UInt64? = nil, recipient: String? = nil, label: String? = nil
    ) {
        self.kind = kind
        self.opsLimit = opsLimit
        self.memLimitBytes = memLimitBytes
        self.recipient = recipient
        self.label = label
    }
}

/// Counts from ``Vault/verify()``.
public struct VaultVerification: Sendable, Codable, Equatable {
    /// Records that authenticated.
    public var records: Int
    /// Items they leave live.
    public var items: Int
}

/// Reads a key file without ever waiting on it or reading more than
/// ``VaultUnlock/maximumKeyFileSize`` bytes: a FIFO would hang the open forever, and a 3 GB file
/// would be read whole.
enum KeyFileReader {
    /// The size rules every key (file or contents) must meet.
    static func check(count: Int, path: String?, what: String = "key file") throws {
        guard count <= VaultUnlock.maximumKeyFileSize else {
            throw CofferError(
                .limitExceeded,
                "a \(what) may hold at most \(VaultUnlock.maximumKeyFileSize) bytes (it holds \(count))", path: path)
        }
        guard count >= 32 else {
            throw CofferError(
                .invalidArgument, "a \(what) must hold at least 32 bytes (it holds \(count))", path: path)
        }
    }

    /// The whole content of the key file at `path` in guarded memory, or a thrown error.
    static func read(_ path: String, fileSystem: any FileSystem, what: String = "key file") throws -> SecureBytes {
        let live = fileSystem is LiveFileSystem
        let fd: Int32
        if live {
            fd = try openLive(path, what: what)
        } else {
            do {
                fd = try fileSystem.openReadOnly(path)
            } catch let error as CofferError where error.errno == ENOENT_ {
                throw CofferError(.notFound, "the \(what) does not exist", path: path)
            }
        }
        defer { fileSystem.close(fd) }
        let status = try fileSystem.fstat(fd)
        if !live, status.isDirectory { throw notRegular(path, what: what) }
        // The size is checked before anything is read or allocated; the read below is bounded
        // again in case the file grows in between.
        if status.size > Int64(VaultUnlock.maximumKeyFileSize) {
            try check(count: Int(clamping: status.size), path: path, what: what)
        }
        let capacity = VaultUnlock.maximumKeyFileSize + 1
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer {
            SecureMemory.zero(buffer)
            buffer.deallocate()
        }
        // At most the size the file says it has: a file whose size reads as 0 but whose read
        // blocks or streams (/proc/kmsg) is never waited on; it holds 0 bytes and is refused.
        let count = try fileSystem.readFully(
            fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<Int(min(status.size, Int64(capacity)))]), at: 0)
        try check(count: count, path: path, what: what)
        return try crypto { try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: buffer[..<count])) }
    }

    /// Opens a key file on the real file system. A symbolic link is followed: the user named
    /// this path, a key kept on another device is often reached through one (a Kubernetes
    /// secret mount is a chain of links), and reading through a link writes nothing. `O_NONBLOCK`
    /// (opening a FIFO never waits for a writer), then only a regular file is kept, and made
    /// blocking again for the read.
    private static func openLive(_ path: String, what: String) throws -> Int32 {
        switch LiveFileSystem.openRegularFileForReading(path) {
        case .success(let fd):
            return fd
        case .failure(.open(let code)) where code == ENOENT_:
            throw CofferError(.notFound, "the \(what) does not exist", path: path, errno: code)
        case .failure(.open(let code)):
            throw CofferError.io("open of the \(what)", path: path, errno: code)
        case .failure(.fstat(let code)):
            throw CofferError.io("fstat of the \(what)", path: path, errno: code)
        case .failure(.notRegular):
            throw notRegular(path, what: what)
        case .failure(.nulInPath):
            throw CofferError(.invalidArgument, "a \(what) path must not contain a NUL byte", errno: EINVAL_)
        }
    }

    private static func notRegular(_ path: String, what: String) -> CofferError {
        CofferError(
            .invalidArgument,
            "the \(what) is not a regular file (a FIFO, pipe, socket, device or directory), so it is not read: "
                + "to take a key from a pipe, read it and pass its contents",
            path: path)
    }
}
