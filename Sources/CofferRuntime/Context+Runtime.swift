package import CofferCore
import Foundation

extension CofferContext {
    /// The file system the default stores use: the one a test put in place, else the kernel's.
    package var fileSystem: any FileSystem { fileSystemOverride ?? LiveFileSystem() }

    /// A context in a new private (`0700`) temporary directory made through `fileSystem`, for
    /// tests that put their own file system (fault injection, power loss) in place of the kernel's.
    package static func temporary(
        prefix: String = "coffer", durability: Durability = .coalesced, fileSystem: any FileSystem
    ) throws -> CofferContext {
        let path = temporaryPath(prefix: prefix)
        try DurableIO.ensureDirectory(path, fileSystem: fileSystem)
        return CofferContext(directory: URL(fileURLWithPath: path), durability: durability, fileSystem: fileSystem)
    }
}
