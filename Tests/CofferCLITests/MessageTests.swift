import CofferCore
import Testing

@testable import coffer

/// What the command adds to the library's messages.
@Suite struct MessageTests {
    /// The vault's message names the library's `kdfLimit:` parameter; the command has no flag for
    /// it, so it says what a terminal user can do instead.
    @Test func aKDFCostAboveTheLimitNamesNoFlagTheCommandLacks() {
        let error = CofferError(
            .limitExceeded,
            "key slot 0 of this vault asks for Argon2id with 4 GiB and 64 passes, above the limit of "
                + "1 GiB and 4 passes; open it with a higher kdfLimit if you trust this file",
            path: "/tmp/v.coffer")
        let text = message(for: error)
        #expect(!text.contains("higher kdfLimit"), "\(text)")
        #expect(text.contains("4 GiB and 64 passes"), "\(text)")
        #expect(text.contains("coffer will not run it"), "\(text)")
        #expect(text.contains("Vault.open(at:unlock:kdfLimit:)"), "\(text)")
        #expect(text.contains("/tmp/v.coffer"), "\(text)")
    }
}
