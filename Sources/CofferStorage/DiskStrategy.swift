public import CofferCore
import CofferRuntime
import CofferJournal
public import Foundation

/// One file per key in a directory, each replaced atomically and durably on every save.
///
/// Suited to a few larger values (a session, a document, a cache of a `Codable` model): a save
/// writes the whole value, fsyncs it and renames it into place, so when `save` returns the value
/// survives power loss, and a reader in any process sees the old value or the new one, never a
/// mix.
///
/// Any key works — slashes, `..`, Unicode, a thousand characters: the file name is derived from
/// the key (readable for short plain keys, hashed for long ones) and the key itself is stored
/// inside the file, so ``keys()`` returns exactly what was saved. Each file carries a CRC-32C of
/// its value; a damaged file reads as ``CofferError/Code/corrupted``, never as wrong data.
///
/// ```swift
/// let disk = try DiskStrategy(directory: dir)
/// try disk.set(session, for: "session")
/// ```
public final class DiskStrategy: ChangeObservingPersistenceStrategy {
    /// The directory holding one file per key.
    public let directory: String
    private let fs: any FileSystem

    /// Who is told about files other processes replace, and the directory watch that tells.
    private let observers = WatchedObservers<StoreChange>()
    static let magic: [UInt8] = Array("CFD1".utf8)
    static let fileExtension = ".cofferd"

    /// Uses (creating it `0700` if needed) `directory`.
    /// - Throws: ``CofferError/Code/io`` when the directory cannot be created.
    public convenience init(directory: URL) throws {
        try self.init(directory: directory, fileSystem: LiveFileSystem())
    }

    /// Uses `directory` through `fileSystem` (a test's, to inject faults).
    package init(directory: URL, fileSystem: any FileSystem) throws {
        self.directory = directory.path
        self.fs = fileSystem
        try DurableIO.ensureDirectory(self.directory, fileSystem: fileSystem)
    }

    public func load(_ key: String) throws -> Data? {
        for candidate in candidates(for: key) {
            guard let bytes = try DurableIO.readFile(candidate, fileSystem: fs) else { return nil }
            let (storedKey, value) = try Self.parse(bytes, path: candidate)
            if storedKey == key { return value }
        }
        return nil
    }

    public func save(_ data: Data, for key: String) throws {
        let path = try slot(for: key)
        try DurableIO.atomicReplace(path, with: Self.image(key: key, value: data), fileSystem: fs)
    }

    public func remove(_ key: String) throws {
        for candidate in candidates(for: key) {
            guard let bytes = try DurableIO.readFile(candidate, fileSystem: fs) else { return }
            if let (storedKey, _) = try? Self.parse(bytes, path: candidate), storedKey != key { continue }
            try DurableIO.remove(candidate, fileSystem: fs)
            return
        }
    }

    public func keys() throws -> [String] {
        var keys: [String] = []
        for name in try fs.contentsOfDirectory(directory) where name.hasSuffix(Self.fileExtension) && !name.hasPrefix(".") {
            let path = directory + "/" + name
            guard let bytes = try DurableIO.readFile(path, fileSystem: fs) else { continue }
            keys.append(try Self.parse(bytes, path: path).key)
        }
        return keys
    }

    // MARK: - Changes from elsewhere

    /// Starts telling `handler` which keys' files change in the directory (another process,
    /// another instance). The directory is watched while at least one observation is alive.
    /// This instance's own saves are seen too; a property rereads the value and notifies only
    /// when it differs.
    public func observeChanges(_ handler: @escaping @Sendable (StoreChange) -> Void) throws -> StoreObservation {
        observers.add(handler) {
            FileWatcher.shared.watch(directory: (try? fs.resolve(directory)) ?? directory) { [weak self] names in
                self?.deliver(names)
            }
        } stopped: {}
    }

    /// The keys held by the changed files; `nil` (anything) when a file is gone or unreadable
    /// (its key is inside it), or when the watcher cannot name the files.
    private func deliver(_ names: Set<String>?) {
        var keys: Set<String>? = []
        if let names {
            for name in names where name.hasSuffix(Self.fileExtension) && !name.hasPrefix(".") {
                let path = directory + "/" + name
                guard let bytes = try? DurableIO.readFile(path, fileSystem: fs),
                    let (key, _) = try? Self.parse(bytes, path: path)
                else {
                    keys = nil
                    break
                }
                keys?.insert(key)
            }
        } else {
            keys = nil
        }
        if let found = keys, found.isEmpty { return }
        observers.notify(StoreChange(keys: keys))
    }

    // MARK: - Names and bytes

    /// The file a key goes to: its readable name when free or already holding this key, else
    /// the next probe.
    private func slot(for key: String) throws -> String {
        for candidate in candidates(for: key) {
            guard let bytes = try DurableIO.readFile(candidate, fileSystem: fs) else { return candidate }
            if let (storedKey, _) = try? Self.parse(bytes, path: candidate), storedKey != key { continue }
            return candidate
        }
        throw CofferError(.io, "too many keys collide on one file name", path: directory)
    }

    /// Probe sequence of file names for a key (the first is almost always the one).
    private func candidates(for key: String) -> [String] {
        let base = Self.fileName(for: key)
        return (0..<8).map { i in directory + "/" + base + (i == 0 ? "" : "~\(i)") + Self.fileExtension }
    }

    /// `[a-z0-9_-]` stay as they are; every other UTF-8 byte becomes `%XX` (upper case letters
    /// too, so case-insensitive file systems cannot merge two keys). Names over 120 bytes keep a
    /// readable prefix and a 64-bit hash; the key inside the file settles any collision.
    static func fileName(for key: String) -> String {
        var name = "k"
        for byte in key.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"),
                UInt8(ascii: "-"):
                name.append(Character(Unicode.Scalar(byte)))
            default:
                name += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        if name.utf8.count <= 120 { return name }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a
        for byte in key.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        return String(name.prefix(80)) + "#" + String(hash, radix: 16)
    }

    /// File layout: "CFD1", key length (u32 LE), key (UTF-8), CRC-32C of the value (u32 LE), value.
    static func image(key: String, value: Data) -> [UInt8] {
        var bytes = magic
        let keyBytes = Array(key.utf8)
        bytes.reserveCapacity(12 + keyBytes.count + value.count)
        withUnsafeBytes(of: UInt32(keyBytes.count).littleEndian) { bytes += $0 }
        bytes += keyBytes
        withUnsafeBytes(of: value.withUnsafeBytes { CRC32C.checksum($0) }.littleEndian) { bytes += $0 }
        bytes += value
        return bytes
    }

    static func parse(_ data: Data, path: String) throws -> (key: String, value: Data) {
        let bytes = [UInt8](data)
        func damaged(_ what: String) -> CofferError {
            CofferError(.corrupted, "the value file is damaged: \(what)", path: path)
        }
        guard bytes.count >= 12, Array(bytes[0..<4]) == magic else { throw damaged("wrong magic bytes or too short") }
        let keyLength = Int(UInt32(bytes[4]) | UInt32(bytes[5]) << 8 | UInt32(bytes[6]) << 16 | UInt32(bytes[7]) << 24)
        guard keyLength <= bytes.count - 12 else { throw damaged("key length past the end") }
        guard let key = String(validating: bytes[8..<(8 + keyLength)], as: UTF8.self) else {
            throw damaged("key is not UTF-8")
        }
        let c = 8 + keyLength
        let crc = UInt32(bytes[c]) | UInt32(bytes[c + 1]) << 8 | UInt32(bytes[c + 2]) << 16 | UInt32(bytes[c + 3]) << 24
        let value = Data(bytes[(c + 4)...])
        guard value.withUnsafeBytes({ CRC32C.checksum($0) }) == crc else { throw damaged("value fails its checksum") }
        return (key, value)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

extension Backing {
    /// A file of its own, `<context directory>/files/<key>`, in the current ``CofferContext``.
    ///
    /// ```swift
    /// @Stored(backed: .disk(key: "session")) var session: Session? = nil
    /// ```
    public static func disk(key: String) -> Backing {
        Backing(description: "disk(key: \(key))", store: .inContext(["disk"]), key: key) { context in
            let store = try context.sharedStore(id: .inContext(["disk"])) {
                try DiskStrategy(directory: context.directory.appendingPathComponent("files"), fileSystem: context.fileSystem)
            }
            return (store, key)
        }
    }

    /// A key in an explicit disk store.
    public static func disk(_ store: DiskStrategy, key: String) -> Backing {
        Backing(description: "disk(\(store.directory), key: \(key))", store: store.id, key: key) { _ in
            (store, key)
        }
    }
}

extension DiskStrategy: WatchStoppable {
    package func stopWatching() { observers.stopAll() }
}

extension DiskStrategy: FileLocatedPersistenceStrategy {
    package var fileStoreID: StoreID { StoreID(file: directory) }
}
