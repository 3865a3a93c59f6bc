// A vault file's identity, read without unlocking it: the random id its header was given when
// the vault was created.
package import CofferCore
import CofferJournal
import CofferRuntime
package import Foundation

extension Vault {
    /// The random id (16 bytes) the vault file at `url` was given when it was created, read
    /// from its header without unlocking it. Every name of the file (a symlinked directory, a
    /// renamed one) reads the same id, and it stays through writes, compaction, rotation and
    /// passphrase changes; a copy of the file carries it too.
    ///
    /// Unauthenticated (the header's MAC needs the master key): use it to name the file, never
    /// to trust it.
    /// - Throws: ``CofferError`` — ``CofferError/Code/notFound`` when there is no file,
    ///   ``CofferError/Code/corrupted`` when it is not a vault file or both header copies are
    ///   damaged, ``CofferError/Code/io`` when it cannot be read.
    package static func storedID(at url: URL, fileSystem: any FileSystem = LiveFileSystem()) throws -> [UInt8] {
        let path = url.path
        guard try fileSystem.stat(path) != nil else {
            throw CofferError(.notFound, "there is no vault file", path: path)
        }
        let fd = try fileSystem.openReadOnly(try fileSystem.resolve(path))
        defer { fileSystem.close(fd) }
        let size = Journal.fileHeaderSize + VaultHeader.areaSize
        var bytes = [UInt8](repeating: 0, count: size)
        let read = try bytes.withUnsafeMutableBytes { try fileSystem.readFully(fd, into: $0, at: 0) }
        guard read == size, bytes[0..<8].elementsEqual("COFFERJL".utf8),
            bytes[10] == UInt8(truncatingIfNeeded: application), bytes[11] == UInt8(truncatingIfNeeded: application >> 8)
        else {
            throw CofferError(.corrupted, "not a vault file (no vault header at its start)", path: path, offset: 0)
        }
        let (header, _) = try selectHeader(Array(bytes[Journal.fileHeaderSize...]), path: path)
        return header.vaultID
    }
}
