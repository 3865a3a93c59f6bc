// `coffer bench` and `coffer-bench` output: the table, the JSON object (its names are fixed:
// scripts and BENCHMARKS.md read them; BenchCommandTests lists them), and the SVG chart.

import Foundation

package enum BenchReport {
    // MARK: Table

    /// `title`: the command, `coffer bench` or `coffer-bench`.
    package static func table(_ results: [BenchResult], title: String, quick: Bool, seconds: Double) -> String {
        let runs = results.map(\.runs).max() ?? 0
        var lines: [String] = []
        lines.append("\(title) — median of \(runs) runs per benchmark\(quick ? " (quick)" : ""), min and max beside it")
        lines.append("")
        // The name column fits the longest name, so the figures always line up.
        let nameWidth = max(26, results.map(\.name.count).max() ?? 0)
        let header = [pad("name", nameWidth), lpad("median", 10), lpad("ops/s", 12), lpad("min", 10), lpad("max", 10), lpad("runs", 5)]
        lines.append(header.joined(separator: "  "))
        lines.append(String(repeating: "-", count: nameWidth + 10 + 12 + 10 + 10 + 5 + 10))
        for result in results {
            var row = [
                pad(result.name, nameWidth), lpad(duration(result.nsPerOp), 10), lpad(rate(result.opsPerSec), 12),
                lpad(duration(result.minNs), 10), lpad(duration(result.maxNs), 10), lpad("\(result.runs)", 5),
            ]
            if result.name.hasSuffix(".1MiB") {
                row.append(String(format: "  %.0f MB/s", Double(1 << 20) / result.nsPerOp * 1e9 / 1e6))
            }
            if let p99 = result.p99Ns { row.append("  p99 \(duration(p99))") }
            lines.append(row.joined(separator: "  "))
        }
        lines.append("")
        // The notes of the rows shown (`coffer bench` shows a few of `coffer-bench`'s).
        let names = Set(results.map(\.name))
        lines.append("peer.* are baselines measured in the same run. Durable = fdatasync before returning;")
        lines.append("coalesced = in the kernel on return.")
        if names.contains("vault.seal.1MiB") {
            lines.append("vault.seal.1MiB is Vault.set of a new 1 MiB item (coalesced: copies, seal, CRC-32C, write);")
            lines.append("peer.libsodium.seal.1MiB is the raw AEAD call.")
        }
        if names.contains(where: { $0.hasPrefix("kdf.") }) {
            lines.append("kdf.*: one passphrase unlock's Argon2id at that preset (coffer init --kdf).")
        }
        if names.contains(where: { $0.contains(".change.latency") }) {
            lines.append("*.change.latency: another process's write to this process's observer, over samples (runs);")
        }
        if names.contains("watch.idle.1000keys") {
            lines.append("watch.idle.1000keys: CPU time per second while 1,000 watched properties see no change.")
        }
        lines.append(String(format: "%.1f s in all.", seconds))
        return lines.joined(separator: "\n") + "\n"
    }

    /// 12.3 ns, 4.56 µs, 7.89 ms, 1.23 s.
    package static func duration(_ ns: Double) -> String {
        switch ns {
        case ..<1_000: return String(format: "%.1f ns", ns)
        case ..<1_000_000: return String(format: "%.2f µs", ns / 1e3)
        case ..<1_000_000_000: return String(format: "%.2f ms", ns / 1e6)
        default: return String(format: "%.2f s", ns / 1e9)
        }
    }

    package static func rate(_ perSecond: Double) -> String {
        switch perSecond {
        case 1e6...: return String(format: "%.1f M/s", perSecond / 1e6)
        case 1e3...: return String(format: "%.1f k/s", perSecond / 1e3)
        default: return String(format: "%.2f /s", perSecond)
        }
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        let count = text.count
        return count >= width ? text : text + String(repeating: " ", count: width - count)
    }

    private static func lpad(_ text: String, _ width: Int) -> String {
        let count = text.count
        return count >= width ? text : String(repeating: " ", count: width - count) + text
    }

    // MARK: JSON

    /// `{"results": [{"name", "ns_per_op", "ops_per_sec", "min_ns", "max_ns", "runs"}…]}`.
    package static func json(_ results: [BenchResult]) -> String {
        let rows = results.map { result in
            "    {\"name\": \(quoted(result.name)), \"ns_per_op\": \(number(result.nsPerOp)), "
                + "\"ops_per_sec\": \(number(result.opsPerSec)), \"min_ns\": \(number(result.minNs)), "
                + "\"max_ns\": \(number(result.maxNs)), \"runs\": \(result.runs)"
                + (result.p99Ns.map { ", \"p99_ns\": \(number($0))" } ?? "") + "}"
        }
        return "{\n  \"results\": [\n" + rows.joined(separator: ",\n") + "\n  ]\n}\n"
    }

    private static func number(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        return String(format: "%.3f", value)
    }

    private static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    // MARK: SVG

    /// A horizontal bar chart, log scale (ns per op), min–max whiskers, peers in grey.
    package static func svg(_ results: [BenchResult], title: String) -> String {
        // The label column fits the longest name (about 7 px a character at 12 px Helvetica).
        let longest = Double(results.map(\.name.count).max() ?? 0)
        let left = max(200.0, (longest * 7 + 16).rounded()), right = 110.0, top = 56.0, rowHeight = 22.0, barHeight = 14.0
        let plotWidth = 620.0
        let width = left + plotWidth + right
        let height = top + rowHeight * Double(results.count) + 44
        let positive = results.flatMap { [$0.minNs, $0.nsPerOp, $0.maxNs] }.filter { $0 > 0 }
        let low = floor(log10(positive.min() ?? 1))
        let high = max(low + 1, ceil(log10(positive.max() ?? 10)))
        func x(_ ns: Double) -> Double { left + (log10(max(ns, pow(10, low))) - low) / (high - low) * plotWidth }
        var s = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
            viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="#ffffff"/>
            <text x="\(Int(left))" y="20" font-size="15" font-weight="bold">\(escape(title)): time per operation (log scale, lower is faster)</text>
            <rect x="\(Int(left))" y="30" width="12" height="10" fill="#2b6cb0"/>
            <text x="\(Int(left) + 16)" y="39">Coffer</text>
            <rect x="\(Int(left) + 70)" y="30" width="12" height="10" fill="#a0aec0"/>
            <text x="\(Int(left) + 86)" y="39">peer (same run)</text>
            <text x="\(Int(left) + 200)" y="39" fill="#4a5568">bar = median, whisker = min–max</text>

            """
        // Decade grid lines.
        let bottom = top + rowHeight * Double(results.count)
        for decade in Int(low)...Int(high) {
            let gx = x(pow(10, Double(decade)))
            s += "<line x1=\"\(f(gx))\" y1=\"\(f(top - 4))\" x2=\"\(f(gx))\" y2=\"\(f(bottom))\" stroke=\"#e2e8f0\"/>\n"
            s += "<text x=\"\(f(gx))\" y=\"\(f(bottom + 16))\" text-anchor=\"middle\" fill=\"#4a5568\">"
                + "\(escape(duration(pow(10, Double(decade))).replacingOccurrences(of: ".0 ", with: " ").replacingOccurrences(of: ".00 ", with: " ")))</text>\n"
        }
        for (i, result) in results.enumerated() {
            let y = top + rowHeight * Double(i)
            let mid = y + rowHeight / 2
            let color = result.isPeer ? "#a0aec0" : "#2b6cb0"
            s += "<text x=\"\(f(left - 8))\" y=\"\(f(mid + 4))\" text-anchor=\"end\""
                + (result.isPeer ? " fill=\"#4a5568\" font-style=\"italic\"" : "") + ">\(escape(result.name))</text>\n"
            s += "<rect x=\"\(f(left))\" y=\"\(f(mid - barHeight / 2))\" width=\"\(f(max(1, x(result.nsPerOp) - left)))\" "
                + "height=\"\(f(barHeight))\" fill=\"\(color)\"><title>\(escape(result.name)): \(escape(duration(result.nsPerOp)))</title></rect>\n"
            s += "<line x1=\"\(f(x(result.minNs)))\" y1=\"\(f(mid))\" x2=\"\(f(x(result.maxNs)))\" y2=\"\(f(mid))\" stroke=\"#1a202c\"/>\n"
            s += "<line x1=\"\(f(x(result.minNs)))\" y1=\"\(f(mid - 4))\" x2=\"\(f(x(result.minNs)))\" y2=\"\(f(mid + 4))\" stroke=\"#1a202c\"/>\n"
            s += "<line x1=\"\(f(x(result.maxNs)))\" y1=\"\(f(mid - 4))\" x2=\"\(f(x(result.maxNs)))\" y2=\"\(f(mid + 4))\" stroke=\"#1a202c\"/>\n"
            s += "<text x=\"\(f(max(x(result.maxNs), x(result.nsPerOp)) + 6))\" y=\"\(f(mid + 4))\">\(escape(duration(result.nsPerOp)))</text>\n"
        }
        s += "<text x=\"\(f(left + plotWidth / 2))\" y=\"\(f(bottom + 34))\" text-anchor=\"middle\" fill=\"#4a5568\">"
            + "median time per operation (ns, log scale)</text>\n</svg>\n"
        return s
    }

    private static func f(_ value: Double) -> String { String(format: "%.1f", value) }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
