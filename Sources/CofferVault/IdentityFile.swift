package import CofferCrypto
import CofferCore
import CofferRuntime
package import Foundation

/// Identity files: the X25519 identities (`AGE-SECRET-KEY-1…`, age-keygen's format) a machine
/// or a person keeps to open the vaults that name their recipient.
///
/// ```swift
/// let identities = try IdentityFile.read(URL(fileURLWithPath: "/etc/coffer/identity"))
/// print(identities.map(\.recipient))   // age1…
/// ```
///
/// A file is read as a key file is (``VaultUnlock/keyFile(_:)``): a regular file of at most
/// 64 KiB (a symbolic link to one is followed), never a FIFO or a device, into guarded memory.
package enum IdentityFile: Sendable {
    /// The identities in the file at `url`.
    /// - Throws: ``CofferError/Code/notFound`` when there is no such file;
    ///   ``CofferError/Code/invalidArgument`` for a file that is not a regular file, or holds a
    ///   line that is not an identity (named by its number, never quoted), or no identity;
    ///   ``CofferError/Code/limitExceeded`` above 64 KiB.
    package static func read(_ url: URL) throws -> [X25519Identity] {
        let contents = try KeyFileReader.read(url.path, fileSystem: LiveFileSystem(), what: "identity file")
        return try parse(contents, path: url.path)
    }

    /// The identities in an identity file's contents, already read (from a pipe, a secret store).
    /// - Throws: ``CofferError/Code/invalidArgument`` as ``read(_:)``.
    package static func parse(_ contents: SecureBytes) throws -> [X25519Identity] {
        try parse(contents, path: nil)
    }

    static func parse(_ contents: SecureBytes, path: String?) throws -> [X25519Identity] {
        do {
            return try X25519Identity.parseFile(contents)
        } catch let error as CryptoError {
            throw CofferError(.invalidArgument, "not an identity file: \(error.message)", path: path)
        }
    }
}
