// What `coffer-demo` prints, and how it fails.

import CofferInterchange

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
