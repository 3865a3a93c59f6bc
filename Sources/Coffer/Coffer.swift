// The umbrella module: `import Coffer` gives the whole public API, and only it.
//
// CofferRuntime (the kernel's file system, durable writes, the directory watcher) is the
// machinery under it and is not re-exported: an app names none of it. The one runtime type an
// app calls, ProcessHardening, is exported by name below.
@_exported public import CofferCore
@_exported public import CofferState
@_exported public import CofferStorage
@_exported public import CofferVault
public import CofferRuntime

/// Process hardening for programs that hold secrets: no core dumps, environment variables read
/// and zeroed, one fixed line instead of a crash report (README, "Strategies and what each promises").
public typealias ProcessHardening = CofferRuntime.ProcessHardening
