import CofferCore
import CofferTesting
import Foundation
import Testing

/// A private temporary directory for one test, removed when the test ends.
final class Scratch {
    let url: URL
    var path: String { url.path }

    init(_ name: String = "test") throws {
        let path = FileManager.default.temporaryDirectory.path + "/coffer-storage-\(name)-\(UUID().uuidString)"
        try DurableIO.ensureDirectory(path, fileSystem: LiveFileSystem())
        url = URL(fileURLWithPath: path)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String) -> String { path + "/" + name }
}

/// Runs a product to completion, returning its exit status and standard output.
@discardableResult
func runProduct(_ name: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: productPath(name))
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Expects `body` to throw a ``CofferError`` with `code`.
func expectError(
    _ code: CofferError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) {
    let error = #expect(throws: CofferError.self, sourceLocation: sourceLocation) { try body() }
    #expect(error?.code == code, sourceLocation: sourceLocation)
}
