// What the journal tests share: a scratch directory and an expectation on CofferError codes.
import CofferCore
import CofferTesting
import Testing

/// A fresh directory for one test (CofferTesting's ``TemporaryDirectory``), removed after it.
typealias Scratch = TemporaryDirectory

/// Expects `body` to throw a ``CofferError`` with `code`.
func expectError(
    _ code: CofferError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) {
    let error = #expect(throws: CofferError.self, sourceLocation: sourceLocation) { try body() }
    #expect(error?.code == code, sourceLocation: sourceLocation)
}
