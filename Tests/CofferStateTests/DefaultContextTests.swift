import CofferCore
import CofferTesting
import Foundation
import Testing

/// The default app name (the folder under `$XDG_DATA_HOME`) is settable, and a test that makes
/// a model outside any context is told, once, where it writes. Each case runs the helper in a
/// child process with `XDG_DATA_HOME` in a temporary directory, so no real data folder is touched.
@Suite("The default context: its app name, and a notice when a test uses it")
struct DefaultContextTests {
    struct Run {
        var status: Int32
        var output: [String]
        var errors: [String]
        func value(_ prefix: String) -> String? {
            output.first { $0.hasPrefix(prefix + " ") }.map { String($0.dropFirst(prefix.count + 1)) }
        }
    }

    /// Runs `CofferTestHelper default-context` as `executableName` (a copy named `*.xctest` is
    /// a test runner to Coffer, as `swift test`'s runner is).
    func run(as executableName: String?, appName: String?, in directory: URL) throws -> Run {
        var helper = builtProduct(named: "CofferTestHelper")
        if let executableName {
            let copy = directory.appendingPathComponent(executableName)
            // Written through a descriptor that no child inherits past its exec (O_CLOEXEC):
            // a copy another test's spawn inherited open for writing made exec fail with
            // ETXTBSY ("Text file busy") in CI. The spawn below also waits that out.
            let bytes = try Data(contentsOf: helper)
            let fd = open(copy.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o755)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
            guard written == bytes.count else { throw POSIXError(.EIO) }
            helper = copy
        }
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_DATA_HOME"] = directory.appendingPathComponent("data").path
        environment["HOME"] = directory.path
        for key in ["XCTestConfigurationFilePath", "XCTestBundlePath", "XCTestSessionIdentifier"] {
            environment[key] = nil
        }
        var attempt = 0
        let run: HelperChild.Finished
        while true {
            do {
                run = try HelperChild.run(
                    ["default-context"] + (appName.map { [$0] } ?? []), executable: helper, environment: environment,
                    inheritsEnvironment: false, standardError: .capture)
                break
            } catch let error as NSError where attempt < 100 && Self.isTextFileBusy(error) {
                // Another test's child, forked while the copy was open, still holds it: wait.
                attempt += 1
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        let lines = { (text: String) in text.split(separator: "\n").map(String.init) }
        return Run(status: run.status, output: lines(run.output), errors: lines(run.errors))
    }

    /// Whether spawning failed because the executable is open for writing somewhere (ETXTBSY).
    static func isTextFileBusy(_ error: NSError) -> Bool {
        guard let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError else { return false }
        return underlying.domain == NSPOSIXErrorDomain && underlying.code == Int(ETXTBSY)
    }

    func withDirectory<R>(_ body: (URL) throws -> R) throws -> R {
        let directory = try CofferContext.temporary(prefix: "coffer-default-context").directory
        defer { try? FileManager.default.removeItem(at: directory) }
        return try body(directory)
    }

    @Test("setDefaultAppName names the folder; renaming once it is in use is refused with a reason")
    func settableAppName() throws {
        try withDirectory { directory in
            let run = try run(as: nil, appName: "com.example.notes", in: directory)
            #expect(run.status == 0, "\(run.errors)")
            let folder = directory.appendingPathComponent("data/com.example.notes")
            #expect(run.value("dir") == folder.path)
            #expect(run.value("app") == "com.example.notes")
            #expect(run.value("theme") == "dark launches 1")
            #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("standard.cofferkv").path))
            let late = try #require(run.value("late-rename"))
            #expect(late.hasPrefix("invalid argument"))
            #expect(late.contains("already in use as \"com.example.notes\""))
            // Not a test runner: nothing is said.
            #expect(run.value("running-tests") == "false")
            #expect(!run.errors.contains { $0.contains("coffer: warning:") }, "\(run.errors)")
        }
    }

    @Test("Without a name, the folder is the process's name")
    func processNameByDefault() throws {
        try withDirectory { directory in
            let run = try run(as: "NotesTool", appName: nil, in: directory)
            #expect(run.status == 0, "\(run.errors)")
            #expect(run.value("dir") == directory.appendingPathComponent("data/NotesTool").path)
        }
    }

    @Test("A test runner that writes through the default context is told once where, and how to scope it")
    func noticeInTests() throws {
        try withDirectory { directory in
            let run = try run(as: "NotesPackageTests.xctest", appName: nil, in: directory)
            #expect(run.status == 0, "\(run.errors)")
            #expect(run.value("running-tests") == "true")
            let folder = directory.appendingPathComponent("data/NotesPackageTests.xctest").path
            #expect(run.value("dir") == folder)
            // Two stores (a suite and a disk folder) were opened, by two models: one notice.
            let notices = run.errors.filter { $0.hasPrefix("coffer: warning:") }
            #expect(notices.count == 1, "\(run.errors)")
            let notice = try #require(notices.first)
            #expect(notice.contains("default context"))
            #expect(notice.contains("[path: \(folder)]"))
            #expect(notice.contains("CofferContext.$current.withValue(try .temporary())"))
            #expect(!notice.contains("dark"))  // where, never what
        }
    }

    @Test("setDefaultAppName refuses names that are not one folder")
    func invalidNames() {
        for name in ["", ".", "..", "a/b", "nul\0"] {
            #expect { try CofferContext.setDefaultAppName(name) } throws: {
                ($0 as? CofferError)?.code == .invalidArgument
            }
        }
    }
}
