// CofferSync's Locked is re-exported, so every module above CofferCore finds the one lock type
// without importing CofferSync (it has no public API: users see nothing new).
@_exported public import CofferSync
