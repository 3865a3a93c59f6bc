// The secrets CofferTestHelper's integration children handle, shared with the tests that look
// for them in every output (Sources/CofferTestHelper/Integrations.swift). Package-only.

/// The secrets the integration children handle; the tests look for each in every output.
package enum IntegrationSecrets {
    package static let passphrase = "correct horse PASSPHRASE-7d1f"
    package static let vaultSecret = "SECRET-VALUE-93c2"
    package static let storedSecret = "SECRET-KV-55aa"
    /// Each of them, and the passphrase's distinctive part alone.
    package static let all = [passphrase, "PASSPHRASE-7d1f", vaultSecret, storedSecret]
}
