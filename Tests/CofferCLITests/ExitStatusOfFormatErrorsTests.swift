import CofferCore
import Testing

@testable import coffer

/// The exit status of each error docs/FORMAT.md names ("Errors, and the exit status of
/// `coffer`"): scripts branch on them, so the table and the command must agree.
@Suite struct ExitStatusOfFormatErrorsTests {
    @Test func eachNamedErrorHasTheDocumentedStatus() {
        let documented: [(CofferError.Code, coffer.ExitStatus)] = [
            (.corrupted, .integrity),  // damage, a header that fails its CRC or MAC, KDF fields out of bounds
            (.rolledBack, .integrity),  // a PostgreSQL row older than one already read
            (.wrongKey, .wrongKey),  // no slot opens (the file is intact)
            (.limitExceeded, .usage),  // a slot above the caller's KDF ceiling: never run
            (.invalidArgument, .usage),  // another kind of store (application)
            (.unsupportedVersion, .failure),  // a newer format, vouched for by its CRC
            (.notFound, .notFound),
            (.busy, .busy),
            (.io, .failure),
        ]
        for (code, status) in documented {
            #expect(ExitStatus(CofferError(code, "x")) == status, "\(code)")
        }
    }
}
