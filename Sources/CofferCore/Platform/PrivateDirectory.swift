// The platform layer's one directory call in the vocabulary module: `CofferContext.temporary()`
// makes its directory without the runtime (CofferRuntime's LiveFileSystem and DurableIO do every
// other file operation).

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Creates the directory `path`, private to the user (`0700`; a umask can only remove bits), failing if
/// anything is already there: the caller chose a new random name, so an existing entry is
/// someone else's.
/// - Throws: ``CofferError`` with code ``CofferError/Code/io`` naming the path and the errno.
func makePrivateDirectory(_ path: String) throws {
    guard mkdir(path, 0o700) == 0 else { throw CofferError.io("mkdir", path: path, errno: errno) }
}
