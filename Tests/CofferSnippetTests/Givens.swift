// What the documents' prose takes as given (a key file's URL, a vault opened earlier on the
// page, an app's own types), as static members of each document's namespace (see
// Sources/CofferSnippetExtractor/main.swift). The snippets are compiled, never run: a given is
// never read.
import Coffer
import Foundation

/// A value the snippets name but never get: they are compiled, not run.
func given<T>() -> T { fatalError("a document snippet's given value is compiled, never run") }

extension README_md {
    static var keyURL: URL { given() }
    static var url: URL { given() }
    /// The model the "State layer" section made (its `AccountModel`).
    static var model: AccountModel { given() }
    static var token: SecureBytes { given() }
    static var fileVault: Vault { given() }
    /// A PostgresVault in the README (CofferPostgres, not imported here): any other keychain.
    static var fleetVault: any Keychain { given() }
    /// An app's own Codable type.
    struct Session: Codable {}
    /// An app's own type, not Codable.
    struct Document {}
}

extension GettingStarted_md {
    static var keyURL: URL { given() }
}

extension KeysChosenAtRunTime_md {
    /// The map the first block made.
    static var counts: StoredMap<Int> { given() }
}

extension RotatingFleetKeys_md {
    static var url: URL { given() }
    static var operatorPassphrase: String { given() }
}

extension StateLayer_md {
    static var model: AccountModel { given() }
}

extension TheVault_md {
    static var url: URL { given() }
}
