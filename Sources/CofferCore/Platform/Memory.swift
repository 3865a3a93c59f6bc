// The platform layer's byte comparison and standard-error output, for the files that import no C library.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether `count` bytes at `a` equal those at `b` (`memcmp`: one call, not constant-time; for
/// names and keys, never for secrets, which CofferCrypto compares).
@usableFromInline func bytesEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count: Int) -> Bool {
    memcmp(a, b, count) == 0
}

/// Writes `bytes` to the standard error descriptor in one `write(2)`, unbuffered: a line
/// written so is never interleaved with another's. A failure is ignored (there is nowhere
/// else to say it).
func writeToStandardError(_ bytes: UnsafeRawBufferPointer) {
    _ = write(2, bytes.baseAddress, bytes.count)
}
