import Foundation
import Synchronization

/// A private temporary directory for one test, removed when released.
final class Scratch: Sendable {
    let url: URL
    var path: String { url.path }

    init(_ name: String) throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("coffer-integration-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }
}

/// The CofferTestHelper executable built beside the test bundle.
func helperPath() -> String {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("CofferTestHelper").path),
        directory.path != "/"
    {
        directory.deleteLastPathComponent()
    }
    return directory.appendingPathComponent("CofferTestHelper").path
}

/// A running helper child: its output, line by line, as it arrives.
final class HelperChild: Sendable {
    let process: Process
    private let output = Mutex<[String]>([])
    private let errors = Mutex(Data())
    private let partial = Mutex(Data())

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: helperPath())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        self.process = process
        out.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            guard let self else { return }
            self.partial.withLock { buffer in
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    self.output.withLock { $0.append(line) }
                }
            }
        }
        err.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            self?.errors.withLock { $0.append(chunk) }
        }
        try process.run()
    }

    var lines: [String] { output.withLock { $0 } }
    var standardError: String { errors.withLock { String(decoding: $0, as: UTF8.self) } }

    /// Waits for a line starting with `prefix`, up to a generous bound (never asserted as a
    /// speed). The bound is wall-clock time, and a busy test process may not run this task for
    /// a long while: the output is checked once more after it, so a slow resumption is not
    /// mistaken for a missing line.
    func waitForLine(startingWith prefix: String, seconds: Double = 600) async throws -> String? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if let line = lines.first(where: { $0.hasPrefix(prefix) }) { return line }
            if !process.isRunning {
                try await Task.sleep(for: .milliseconds(200))  // let the last output arrive
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return lines.first { $0.hasPrefix(prefix) }
    }

    /// Waits for the child to exit; kills it if it outlives a generous bound.
    func waitForExit(seconds: Double = 600) async throws -> Int32 {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try await Task.sleep(for: .milliseconds(100))  // the pipes' last bytes
        return process.terminationStatus
    }

    /// What the child said so far, for a failure message.
    var transcript: String { "running: \(process.isRunning); output: \(lines); errors: \(standardError)" }
}

/// The secrets the helper's integration children handle (Sources/CofferTestHelper/Integrations.swift).
enum IntegrationSecrets {
    static let passphrase = "correct horse PASSPHRASE-7d1f"
    static let vaultSecret = "SECRET-VALUE-93c2"
    static let storedSecret = "SECRET-KV-55aa"
    static let all = [passphrase, "PASSPHRASE-7d1f", vaultSecret, storedSecret]
}
