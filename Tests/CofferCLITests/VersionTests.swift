import Foundation
import Testing

/// `coffer --version`: a script or a package manager asks which coffer it has. It used to be
/// "Unknown option '--version'" (exit 2).
@Suite("coffer --version")
struct VersionTests {
    /// The version as stated in its one place, Sources/coffer/Version.swift, read from the source
    /// so that the test follows a new version without being edited.
    static let stated: String? = {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/coffer/Version.swift")
        guard let text = try? String(contentsOf: source, encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("let cofferVersion = \"") })
        else { return nil }
        return line.split(separator: "\"").dropFirst().first.map(String.init)
    }()

    @Test("--version prints the stated version and exits 0, with no vault and nothing on standard error")
    func printsVersion() throws {
        let version = try #require(Self.stated, "no `let cofferVersion = \"…\"` in Sources/coffer/Version.swift")
        #expect(!version.isEmpty && version.first!.isNumber, "\(version)")
        let box = try Sandbox()
        let run = try box.run(["--version"], vault: false, passphraseFile: false)
        #expect(run.status == Exit.ok, "\(run)")
        #expect(run.out == version + "\n", "\(run)")
        #expect(run.stderr.isEmpty, "\(run)")
        // No vault was made or needed.
        #expect(!FileManager.default.fileExists(atPath: box.vault))
    }
}
