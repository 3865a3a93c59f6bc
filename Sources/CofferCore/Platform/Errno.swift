// The platform layer's errno values and their text, for the files and modules that import no C library.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The C library's text for an errno value (`strerror`): "No space left on device".
func errnoDescription(_ value: Int32) -> String {
    String(cString: strerror(value))
}

package let ENOENT_: Int32 = ENOENT
package let EINVAL_: Int32 = EINVAL
package let ENOTDIR_: Int32 = ENOTDIR
package let EIO_: Int32 = EIO
package let EACCES_: Int32 = EACCES
package let EROFS_: Int32 = EROFS
package let ENOSPC_: Int32 = ENOSPC
package let EDQUOT_: Int32 = EDQUOT
package let EPERM_: Int32 = EPERM
package let EMLINK_: Int32 = EMLINK
