// The umbrella module: `import Coffer` gives the whole public API, and only it.
//
// CofferRuntime (the kernel's file system, durable writes, the directory watcher) is the
// machinery under it. Everything in it is `package` except ProcessHardening, the one runtime type
// an app calls, so re-exporting it shows users that type and nothing else. (A typealias was not
// enough: a client built with the MemberImportVisibility feature could not call its members
// without importing CofferRuntime itself.)
//
// CofferCrypto likewise: its public API is only what the vault's signatures name (SecureBytes,
// SecureMemory, Argon2idParameters, the age keys X25519Recipient and X25519Identity, CryptoError);
// the primitives (the AEAD, X25519, BLAKE2b, Argon2id, the KDF, randomness, zeroing) are `package`.
// Tests/CofferSnippetTests compiles every Swift block of the README and the DocC articles
// that imports no integration module against this import alone (the others are compiled by
// CofferIntegrationSnippetTests, with their module, under its trait).
@_exported public import CofferCore
@_exported public import CofferCrypto
@_exported public import CofferState
@_exported public import CofferStorage
@_exported public import CofferVault
@_exported public import CofferRuntime
