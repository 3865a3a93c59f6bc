// The umbrella module: `import Coffer` gives the whole public API, and only it.
//
// CofferRuntime (the kernel's file system, durable writes, the directory watcher) is the
// machinery under it. Everything in it is `package` except ProcessHardening, the one runtime type
// an app calls, so re-exporting it shows users that type and nothing else. (A typealias was not
// enough: a client built with the MemberImportVisibility feature could not call its members
// without importing CofferRuntime itself.)
@_exported public import CofferCore
@_exported public import CofferState
@_exported public import CofferStorage
@_exported public import CofferVault
@_exported public import CofferRuntime
