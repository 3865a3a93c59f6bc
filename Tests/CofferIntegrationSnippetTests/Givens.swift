// What the documents' integration blocks take as given (a logger, a router, a vault opened
// earlier on the page), as static members of each document's namespace, under the traits that
// build the modules they name (see Sources/CofferSnippetExtractor/main.swift). The snippets are
// compiled, never run: a given is never read.
import Coffer
import Foundation

#if Postgres
    import CofferPostgres
#endif
#if ServiceLifecycle || Logging || Postgres
    import Logging
#endif
#if ExampleService
    import Hummingbird
#endif

/// A value the snippets name but never get: they are compiled, not run.
func given<T>() -> T { fatalError("a document snippet's given value is compiled, never run") }

extension README_md {
    static var keyURL: URL { given() }
    static var fileVault: Vault { given() }
    static var dir: URL { given() }
    #if Postgres
        /// The "Many machines" block's own values, which its `Model` names as top-level code would.
        static var flags: PostgresKeyValueStrategy { given() }
        static var vault: PostgresVault { given() }
    #endif
    #if ServiceLifecycle || Logging || Postgres
        static var logger: Logger { given() }
    #endif
    #if ExampleService
        static var router: Router<BasicRequestContext> { given() }
    #endif
}

#if Postgres
    extension RotatingFleetKeys_md {
        static var settings: PostgresConfiguration { given() }
        static var vault: PostgresVault { given() }
        static var leaver: X25519Recipient { given() }
    }
#endif
