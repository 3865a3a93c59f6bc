// A child process the tests talk to by lines (CofferTestHelper by default, or any built product
// or executable), a run of one to its end, and where the built products are.
package import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The executable product `name` (`coffer`, `CofferTestHelper` …) built beside the running test
/// binary.
///
/// On Linux the test binary is `<build>/debug/<Package>PackageTests.xctest` with the products
/// beside it; on macOS it is a bundle whose executable sits three levels deeper. So the search
/// walks up from the binary's directory to the first that holds `name`.
/// - Returns: the product's URL; `/<name>` when no directory on the way holds it (running it
///   then fails, naming that path).
package func builtProduct(named name: String) -> URL {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    while !FileManager.default.fileExists(atPath: directory.appendingPathComponent(name).path),
        directory.path != "/"
    {
        directory.deleteLastPathComponent()
    }
    return directory.appendingPathComponent(name)
}

/// A running child process, talked to by lines.
///
/// Its standard output is read as it arrives, by a thread of its own (as is its standard error
/// when captured), so a child is never stalled by a full pipe and the test may read it line by
/// line (``readLine()``), wait for a line (``waitForLine(startingWith:seconds:)``), or look at
/// everything so far (``lines``, ``output``).
///
/// ```swift
/// let child = try HelperChild(["stored-increment", directory.path, "500"])
/// #expect(child.readLine() == "ready")
/// child.say("go")
/// #expect(child.wait() == 0)
/// ```
///
/// ``run(_:executable:input:environment:inheritsEnvironment:standardError:)`` runs one to its end.
// @unchecked Sendable: `process` and `input` are Sendable handles; everything else is guarded by
// `condition` (an NSCondition, which ThreadSanitizer sees).
package final class HelperChild: @unchecked Sendable {
    /// Where the child's standard error goes.
    package enum StandardError: Sendable {
        /// To the test process's own, so a failing child's message shows in the test log.
        case inherit
        /// Into ``standardError``, for a test that checks it.
        case capture
        /// Nowhere.
        case discard
    }

    /// How a child run to its end finished.
    package struct Finished: Sendable, CustomStringConvertible {
        /// Whether it exited or died of a signal.
        package var reason: Process.TerminationReason
        /// Its exit status, or the signal that ended it.
        package var status: Int32
        /// Everything it wrote to standard output.
        package var output: String
        /// Everything it wrote to standard error, when captured (empty otherwise).
        package var errors: String

        /// For a failure message.
        package var description: String {
            "\(reason == .exit ? "exit" : "signal") \(status); output: \(output); errors: \(errors)"
        }
    }

    /// The running process: its identifier (to signal it), its termination reason.
    package let process: Process
    private let input: FileHandle
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var outputBytes = Data()
    private var completeLines: [String] = []
    private var partialLine = Data()
    private var linesRead = 0
    private var outputEnded = false
    private var errorBytes = Data()
    private var errorsEnded: Bool

    /// Starts `executable` with `arguments`, its standard input and output on pipes.
    ///
    /// - Parameters:
    ///   - executable: the program; the built `CofferTestHelper` unless told otherwise.
    ///   - environment: added to the test process's own environment; with `inheritsEnvironment`
    ///     `false`, the child's whole environment.
    ///   - standardError: where the child's standard error goes.
    /// - Throws: the error of `Process.run()` when the child cannot be started.
    package init(
        _ arguments: [String], executable: URL = builtProduct(named: "CofferTestHelper"),
        environment: [String: String] = [:], inheritsEnvironment: Bool = true, standardError: StandardError = .inherit
    ) throws {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment =
            inheritsEnvironment ? ProcessInfo.processInfo.environment.merging(environment) { $1 } : environment
        let inputPipe = Pipe()
        let outputPipe = Pipe()
        process.standardInput = inputPipe
        process.standardOutput = outputPipe
        let errorPipe = standardError == .capture ? Pipe() : nil
        switch standardError {
        case .inherit: break
        case .capture: process.standardError = errorPipe
        case .discard: process.standardError = FileHandle.nullDevice
        }
        self.process = process
        input = inputPipe.fileHandleForWriting
        errorsEnded = errorPipe == nil
        try process.run()
        drain(outputPipe.fileHandleForReading) { child, chunk in child.received(chunk) }
        if let errorPipe {
            drain(errorPipe.fileHandleForReading) { child, chunk in
                if let chunk { child.errorBytes += chunk } else { child.errorsEnded = true }
            }
        }
    }

    /// Reads `handle` to its end on a thread of its own, handing each chunk, then `nil` at the
    /// end, to `take` with the condition held. Plain `read(2)`: it returns what the pipe holds
    /// (`FileHandle.read(upToCount:)` waits for the whole count or the end).
    private func drain(_ handle: FileHandle, _ take: @escaping @Sendable (HelperChild, Data?) -> Void) {
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(handle.fileDescriptor, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }  // the end, or an error: nothing more will come
                condition.withLock { take(self, Data(buffer[..<count])) }
            }
            condition.withLock {
                take(self, nil)
                condition.broadcast()
            }
        }
    }

    /// Takes a chunk of standard output (`nil`: its end); called with the condition held.
    private func received(_ chunk: Data?) {
        guard let chunk else {
            // A last line without its newline (the child was killed mid-line, say) still counts.
            if !partialLine.isEmpty { completeLines.append(String(decoding: partialLine, as: UTF8.self)) }
            partialLine = Data()
            outputEnded = true
            return
        }
        outputBytes += chunk
        partialLine += chunk
        while let newline = partialLine.firstIndex(of: UInt8(ascii: "\n")) {
            completeLines.append(String(decoding: partialLine[partialLine.startIndex..<newline], as: UTF8.self))
            partialLine.removeSubrange(partialLine.startIndex...newline)
        }
        condition.broadcast()
    }

    /// The next line of the child's output that this method has not returned yet (without its
    /// newline), waiting for it; `nil` once the output has ended, or when `seconds` (a generous
    /// bound, never asserted as a speed) pass without one, so a test fails instead of hanging.
    package func readLine(seconds: Double = 600) -> String? {
        let deadline = Date(timeIntervalSinceNow: seconds)
        return condition.withLock {
            while linesRead == completeLines.count, !outputEnded {
                if !condition.wait(until: deadline) { break }
            }
            guard linesRead < completeLines.count else { return nil }
            linesRead += 1
            return completeLines[linesRead - 1]
        }
    }

    /// Writes `line` and a newline to the child's standard input.
    package func say(_ line: String) {
        try? input.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Closes the child's standard input, waits for it to exit and for the end of its output,
    /// and returns its exit status (the signal's number when one ended it).
    ///
    /// Bounded (a generous bound, never asserted as a speed): a child that outlives it is
    /// terminated, and `-1` is returned when its exit or the end of its output is still not
    /// seen, so a test fails instead of hanging. (Foundation learns of an exit from a socket
    /// the child holds: a process that inherited that socket by chance kept it open, and
    /// `waitUntilExit()` never returned, the child a zombie.)
    @discardableResult
    package func wait(seconds: Double = 600) -> Int32 {
        try? input.close()
        let deadline = Date(timeIntervalSinceNow: seconds)
        while process.isRunning, Date() < deadline { usleep(10_000) }
        if process.isRunning {
            process.terminate()
            let grace = Date(timeIntervalSinceNow: 10)
            while process.isRunning, Date() < grace { usleep(10_000) }
            if process.isRunning { return -1 }
        }
        let ended = condition.withLock { () -> Bool in
            while !outputEnded || !errorsEnded {
                if !condition.wait(until: deadline) { return outputEnded && errorsEnded }
            }
            return true
        }
        return ended ? process.terminationStatus : -1
    }

    /// Every line the child has written so far, the ones ``readLine()`` returned included.
    package var lines: [String] { condition.withLock { completeLines } }

    /// Everything the child has written to standard output so far.
    package var output: String { condition.withLock { String(decoding: outputBytes, as: UTF8.self) } }

    /// Everything the child has written to standard error so far, when captured.
    package var standardError: String { condition.withLock { String(decoding: errorBytes, as: UTF8.self) } }

    /// What the child said so far, for a failure message.
    package var transcript: String { "running: \(process.isRunning); output: \(lines); errors: \(standardError)" }

    /// Waits for a line starting with `prefix`, up to a generous bound (never asserted as a
    /// speed), without blocking the task's thread; `nil` when the output ends, or the bound
    /// passes, without one. The bound is wall-clock time, and a busy test process may not run
    /// this task for a long while: the output is checked once more after it, so a slow
    /// resumption is not mistaken for a missing line.
    package func waitForLine(startingWith prefix: String, seconds: Double = 600) async throws -> String? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            let (found, ended) = condition.withLock { (completeLines.first { $0.hasPrefix(prefix) }, outputEnded) }
            if let found { return found }
            if ended { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        return lines.first { $0.hasPrefix(prefix) }
    }

    /// ``wait()`` without blocking the task's thread: waits for the child to exit (terminating
    /// it if it outlives a generous bound) and for the end of its output.
    package func waitForExit(seconds: Double = 600) async throws -> Int32 {
        try? input.close()
        let deadline = ContinuousClock.now + .seconds(seconds)
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        if process.isRunning {
            process.terminate()
            let grace = ContinuousClock.now + .seconds(10)
            while process.isRunning, ContinuousClock.now < grace { try await Task.sleep(for: .milliseconds(10)) }
            if process.isRunning { return -1 }  // its exit not seen (see ``wait(seconds:)``)
        }
        let outputDeadline = ContinuousClock.now + .seconds(seconds)
        while condition.withLock({ !outputEnded || !errorsEnded }) {
            if ContinuousClock.now >= outputDeadline { return -1 }
            try await Task.sleep(for: .milliseconds(10))
        }
        return process.terminationStatus
    }

    /// Runs `executable` with `arguments` to its end: writes `input` to its standard input,
    /// closes it, and collects what the child writes.
    ///
    /// - Parameters: as ``init(_:executable:environment:inheritsEnvironment:standardError:)``.
    /// - Throws: the error of `Process.run()`, or of writing `input`.
    package static func run(
        _ arguments: [String], executable: URL = builtProduct(named: "CofferTestHelper"), input: Data = Data(),
        environment: [String: String] = [:], inheritsEnvironment: Bool = true, standardError: StandardError = .inherit
    ) throws -> Finished {
        let child = try HelperChild(
            arguments, executable: executable, environment: environment, inheritsEnvironment: inheritsEnvironment,
            standardError: standardError)
        if !input.isEmpty { try child.input.write(contentsOf: input) }
        let status = child.wait()
        // A child whose exit was never seen (`-1`) has no termination reason to read.
        let reason: Process.TerminationReason = child.process.isRunning ? .uncaughtSignal : child.process.terminationReason
        return Finished(reason: reason, status: status, output: child.output, errors: child.standardError)
    }
}
