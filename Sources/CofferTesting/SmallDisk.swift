import CofferCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

#if os(Linux)
/// A tmpfs of a few kilobytes mounted for one test (root only, as `mount -t tmpfs` is): a disk
/// that fills up. ``fill()`` takes every free block with a filler file, ``free()`` removes it.
package final class SmallDisk {
    package let scratch: TemporaryDirectory
    /// The mount point: a directory on the small disk.
    package let path: String

    package init(_ name: String, kilobytes: Int) throws {
        scratch = try TemporaryDirectory(name)
        path = scratch.path("disk")
        guard mkdir(path, 0o700) == 0 else { throw CofferError.io("mkdir", path: path, errno: errno) }
        let options = "size=\(kilobytes)k,mode=0700"
        guard options.withCString({ mount("tmpfs", path, "tmpfs", 0, $0) }) == 0 else {
            throw CofferError.io("mount tmpfs (the full-disk tests need root)", path: path, errno: errno)
        }
    }

    deinit {
        umount2(path, 2)  // MNT_DETACH
    }

    /// Writes a filler file until the disk refuses a byte; throws unless it refused with ENOSPC.
    package func fill() throws {
        let fd = open(path + "/filler", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw CofferError.io("open filler", path: path, errno: errno) }
        defer { close(fd) }
        let block = [UInt8](repeating: 0x55, count: 512)
        while block.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
        var byte: UInt8 = 1
        while write(fd, &byte, 1) > 0 {}
        guard errno == ENOSPC else { throw CofferError.io("filling the small disk", path: path, errno: errno) }
    }

    /// Removes the filler.
    package func free() throws {
        guard unlink(path + "/filler") == 0 else { throw CofferError.io("unlink filler", path: path, errno: errno) }
    }
}
#endif
