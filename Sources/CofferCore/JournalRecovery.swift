// What a store does with a damaged record: an option of the strategies that keep a journal.
/// What to do with a record that fails its checksum before the end of the file.
public enum JournalRecovery: Sendable {
    /// Refuse to open: throw ``CofferError/Code/corrupted`` with the record's byte offset.
    case strict
    /// Keep every intact record: copy the damaged file aside (`<file>.damaged-<time>`), then
    /// rewrite the file with the intact records only.
    case salvage
}
