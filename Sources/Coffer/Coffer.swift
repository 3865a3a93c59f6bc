// The umbrella module: `import Coffer` gives the whole public API.
@_exported public import CofferCore
@_exported public import CofferState
@_exported public import CofferStorage
@_exported public import CofferVault
