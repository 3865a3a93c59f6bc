import CofferInterchange
import Foundation
import Testing

/// The ``InterchangeError`` that `body` throws; `nil`, with an issue recorded, when it throws
/// another error or nothing. Only the other error's type is recorded: its message might quote
/// the input under test.
func interchangeError(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> InterchangeError? {
    do {
        try body()
    } catch let error as InterchangeError {
        return error
    } catch {
        Issue.record("expected an InterchangeError, got \(type(of: error))", sourceLocation: sourceLocation)
        return nil
    }
    Issue.record("expected an InterchangeError, but nothing was thrown", sourceLocation: sourceLocation)
    return nil
}

/// Calls `body` with the path of a new private directory under the system's temporary
/// directory, which is removed with its contents afterwards.
func withTemporaryDirectory<R>(_ body: (String) throws -> R) throws -> R {
    let path = FileManager.default.temporaryDirectory.path + "/coffer-interchange-" + UUID().uuidString
    try FileManager.default.createDirectory(
        atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// Whether `text` holds any of the scalars a terminal acts on that the tests put in names
/// (ESC, BEL, the 8-bit CSI U+009B, RIGHT-TO-LEFT OVERRIDE U+202E, LINE SEPARATOR U+2028).
func holdsRawTerminalControls(_ text: String) -> Bool {
    let raw: Set<Unicode.Scalar> = ["\u{1B}", "\u{07}", "\u{9B}", "\u{202E}", "\u{2028}"]
    return text.unicodeScalars.contains { raw.contains($0) }
}
