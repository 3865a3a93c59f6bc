// What `coffer-bench` prints, and the `coffer` it measures.

import CofferBenchHarness
import CofferInterchange
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

func writeOut(_ text: String) { writeAll(STDOUT_FILENO, Array(text.utf8)) }
func writeError(_ text: String) { writeAll(STDERR_FILENO, Array(text.utf8)) }

/// The `coffer` built beside this program (`swift build` puts both in one folder), which
/// `cli.run.overhead` starts; `$COFFER_BENCH_COFFER` names another.
func cofferExecutable() throws -> String {
    if let chosen = ProcessInfo.processInfo.environment["COFFER_BENCH_COFFER"], !chosen.isEmpty { return chosen }
    var link = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &link, link.count - 1)
    guard length > 0 else { throw BenchError("bench: cannot find this program's own executable") }
    let own = URL(fileURLWithPath: String(decoding: link[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self))
    let coffer = own.deletingLastPathComponent().appendingPathComponent("coffer").path
    guard access(coffer, X_OK) == 0 else {
        throw BenchError("bench: no coffer beside \(own.path) (build it: swift build --product coffer)")
    }
    return coffer
}
