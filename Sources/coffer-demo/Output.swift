// What `coffer-demo` prints, and how it fails.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The demo could not go on, or a claim it made did not hold (exit 1).
struct DemoError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func writeOut(_ text: String) { _ = Array(text.utf8).withUnsafeBytes { writeAll(STDOUT_FILENO, $0) } }
func writeError(_ text: String) { _ = Array(text.utf8).withUnsafeBytes { writeAll(STDERR_FILENO, $0) } }

/// Writes every byte to `fd`, retrying partial writes and EINTR. Returns false on failure.
func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard var next = bytes.baseAddress else { return true }
    var left = bytes.count
    while left > 0 {
        let n = write(fd, next, left)
        if n < 0 {
            if errno == EINTR { continue }
            return false
        }
        next += n
        left -= n
    }
    return true
}

/// Left-aligned columns separated by two spaces.
func formatTable(_ rows: [[String]]) -> String {
    guard let columns = rows.first?.count else { return "" }
    let widths = (0..<columns).map { column in rows.map { $0[column].count }.max() ?? 0 }
    return rows.map { row in
        row.enumerated().map { column, cell in
            column == columns - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[column] - cell.count))
        }.joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
}

/// `Argon2id, 2 passes, 64 MiB` for a key slot's Argon2id parameters.
func describeKDF(opsLimit: UInt64?, memLimitBytes: UInt64?) -> String {
    guard let opsLimit, let memLimitBytes else { return "" }
    let memory =
        memLimitBytes >= 1 << 20 && memLimitBytes % (1 << 20) == 0
        ? "\(memLimitBytes >> 20) MiB"
        : memLimitBytes % 1024 == 0 ? "\(memLimitBytes >> 10) KiB" : "\(memLimitBytes) bytes"
    return "Argon2id, \(opsLimit) pass\(opsLimit == 1 ? "" : "es"), \(memory)"
}
