// InMemoryFileSystem's model: nodes, descriptors, the locked state, paths and directory changes.
import CofferCore
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Heap memory standing in for a shared mapping; freed when the last holder lets go.
final class MemoryMapping: SharedMapping, @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let length: Int

    init(copying bytes: ArraySlice<UInt8>) {
        length = bytes.count
        base = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 4096)
        bytes.withUnsafeBytes { base.copyMemory(from: $0.baseAddress!, byteCount: length) }
    }

    deinit { base.deallocate() }
}

/// An errno on its way to becoming a ``CofferError``.
struct PosixError: Error {
    var errno: Int32
    init(_ errno: Int32) { self.errno = errno }
}

/// A file or directory. Lives only inside the file system's `Mutex`.
final class Node {
    let id: UInt64
    let isDirectory: Bool
    let mode: UInt32
    /// Current bytes (files).
    var data: [UInt8] = []
    /// Writes and truncations since the last fsync, in order, each with what it replaced (files).
    /// An undo log rather than a copy of the synced bytes, so a sync costs nothing and an append
    /// after a sync does not copy the whole file.
    var pending: [(change: FileChange, undo: Undo)] = []
    /// Current entries, by name bytes (directories).
    var entries: [[UInt8]: UInt64] = [:]
    var exclusiveHolder: Int32?
    var sharedHolders: Set<Int32> = []
    /// The memory ``InMemoryFileSystem/mapShared(_:length:path:)`` handed out for this file.
    var mapping: MemoryMapping?

    init(id: UInt64, isDirectory: Bool, mode: UInt32) {
        self.id = id
        self.isDirectory = isDirectory
        self.mode = mode
    }

    var status: FileStatus {
        FileStatus(
            size: Int64(isDirectory ? 4096 : data.count), device: InMemoryFileSystem.deviceNumber, inode: id,
            mode: mode, isDirectory: isDirectory)
    }

    /// How to take back one change: set the size back to `size`, then put `bytes` back at `offset`.
    struct Undo {
        var size: Int
        var offset: Int
        var bytes: [UInt8]
    }

    /// Applies a write or truncation, remembering it (and what it replaced) until the next sync.
    func change(_ change: FileChange) {
        let undo: Undo
        switch change {
        case .write(let offset, let bytes):
            let overlap = offset < data.count ? Array(data[offset..<min(data.count, offset + bytes.count)]) : []
            undo = Undo(size: data.count, offset: offset, bytes: overlap)
        case .truncate(let size):
            undo = Undo(size: data.count, offset: size, bytes: size < data.count ? Array(data[size...]) : [])
        }
        data.apply(change)
        pending.append((change, undo))
    }

    /// The bytes as of the last fsync/fdatasync.
    var durableData: [UInt8] {
        var bytes = data
        for (_, undo) in pending.reversed() {
            bytes.apply(.truncate(size: undo.size))
            if !undo.bytes.isEmpty { bytes.apply(.write(offset: undo.offset, bytes: undo.bytes)) }
        }
        return bytes
    }

    func markSynced() {
        pending.removeAll()
    }

    /// `flock` semantics: a descriptor holding the lock may convert it; others conflict.
    func tryLock(_ fd: Int32, exclusive: Bool) -> Bool {
        if exclusive {
            if let holder = exclusiveHolder, holder != fd { return false }
            if !sharedHolders.subtracting([fd]).isEmpty { return false }
            sharedHolders.remove(fd)
            exclusiveHolder = fd
        } else {
            if let holder = exclusiveHolder, holder != fd { return false }
            if exclusiveHolder == fd { exclusiveHolder = nil }
            sharedHolders.insert(fd)
        }
        return true
    }
}

/// One unsynced change to a file's bytes.
enum FileChange {
    case write(offset: Int, bytes: [UInt8])
    case truncate(size: Int)
}

extension Array where Element == UInt8 {
    mutating func apply(_ change: FileChange) {
        switch change {
        case .write(let offset, let bytes):
            let end = offset + bytes.count
            if end > count { append(contentsOf: repeatElement(0, count: end - count)) }
            replaceSubrange(offset..<end, with: bytes)
        case .truncate(let size):
            if size < count { removeSubrange(size...) } else { append(contentsOf: repeatElement(0, count: size - count)) }
        }
    }
}

/// One change to directory entries, replayed by name when simulating a power loss.
enum DirectoryChange {
    case link(directory: UInt64, name: [UInt8], node: UInt64)
    case unlink(directory: UInt64, name: [UInt8])
    case rename(fromDirectory: UInt64, fromName: [UInt8], toDirectory: UInt64, toName: [UInt8])
}

/// A directory change not yet folded into the durable base; durable once every directory it
/// touches has been fsync'd after it.
struct LoggedChange {
    var change: DirectoryChange
    var pendingDirectories: Set<UInt64>
}

struct Descriptor {
    var node: UInt64
    var path: String
    var writable: Bool
}

struct ActiveFault {
    var fault: InMemoryFileSystem.Fault
    var seen = 0
}

struct State {
    static let rootID: UInt64 = 1
    var nodes: [UInt64: Node]
    var nextInode: UInt64 = 2
    var descriptors: [Int32: Descriptor] = [:]
    /// The addresses of the control pages' mutexes held now (``InMemoryFileSystem/lockMutex(_:timeout:path:)``).
    var heldMutexes: Set<UInt> = []
    var nextDescriptor: Int32 = 3
    var umask: UInt32
    var faults: [ActiveFault] = []
    var calls: [InMemoryFileSystem.Call] = []
    /// The largest buffer a `pread` was given since creation or the last `resetCalls()`.
    var largestRead = 0
    var diskBudget: Int?
    /// Directory entries as of the oldest change still in `metaLog`.
    var baseEntries: [UInt64: [[UInt8]: UInt64]] = [State.rootID: [:]]
    /// Directory changes since `baseEntries`, oldest first.
    var metaLog: [LoggedChange] = []
    /// Node count at which ``collectGarbage()`` next sweeps.
    var garbageThreshold = 64

    init(umask: UInt32) {
        self.umask = umask & 0o777
        nodes = [State.rootID: Node(id: State.rootID, isDirectory: true, mode: 0o755)]
    }

    var root: Node { nodes[State.rootID] ?? Node(id: State.rootID, isDirectory: true, mode: 0o755) }

    mutating func allocateInode() -> UInt64 {
        defer { nextInode += 1 }
        return nextInode
    }

    mutating func openDescriptor(node: Node, path: String, writable: Bool) -> Int32 {
        let fd = nextDescriptor
        nextDescriptor = nextDescriptor == Int32.max ? 3 : nextDescriptor + 1
        descriptors[fd] = Descriptor(node: node.id, path: path, writable: writable)
        return fd
    }

    func descriptor(_ fd: Int32) throws(PosixError) -> (node: Node, writable: Bool) {
        guard let descriptor = descriptors[fd], let node = nodes[descriptor.node] else { throw PosixError(EBADF) }
        return (node, descriptor.writable)
    }

    // MARK: Paths

    static func components(_ path: String) throws(PosixError) -> [[UInt8]] {
        let bytes = Array(path.utf8)
        if bytes.isEmpty { throw PosixError(ENOENT) }
        if bytes.contains(0) { throw PosixError(EINVAL) }
        if bytes.count >= 4096 { throw PosixError(ENAMETOOLONG) }
        var result: [[UInt8]] = []
        for part in bytes.split(separator: UInt8(ascii: "/")) {
            if part.elementsEqual([UInt8(ascii: ".")]) { continue }
            if part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                _ = result.popLast()
                continue
            }
            if part.count > 255 { throw PosixError(ENAMETOOLONG) }
            result.append(Array(part))
        }
        return result
    }

    func lookup(_ components: some Collection<[UInt8]>) throws(PosixError) -> Node {
        var current = root
        for name in components {
            guard current.isDirectory else { throw PosixError(ENOTDIR) }
            guard let id = current.entries[name], let next = nodes[id] else { throw PosixError(ENOENT) }
            current = next
        }
        return current
    }

    func resolve(_ path: String) throws(PosixError) -> Node {
        try lookup(State.components(path))
    }

    /// The directory that holds (or would hold) `path`, and the last name.
    func parent(of path: String) throws(PosixError) -> (Node, [UInt8]) {
        let components = try State.components(path)
        guard let name = components.last else { throw PosixError(EBUSY) }  // "/" itself
        let directory = try lookup(components.dropLast())
        guard directory.isDirectory else { throw PosixError(ENOTDIR) }
        return (directory, name)
    }

    func isAncestor(_ candidate: Node, of node: Node) -> Bool {
        if candidate.id == node.id { return true }
        for child in candidate.entries.values {
            if let next = nodes[child], next.isDirectory, isAncestor(next, of: node) { return true }
        }
        return false
    }

    func walk(_ directory: Node, prefix: String, _ visit: (String, Node) -> Void) {
        for (name, id) in directory.entries {
            guard let node = nodes[id] else { continue }
            let path = prefix + "/" + String(decoding: name, as: UTF8.self)
            visit(path, node)
            if node.isDirectory { walk(node, prefix: path, visit) }
        }
    }

    // MARK: Directory changes

    @discardableResult
    mutating func link(_ node: Node, name: [UInt8], in directory: Node) -> Node {
        nodes[node.id] = node
        directory.entries[name] = node.id
        log(.link(directory: directory.id, name: name, node: node.id), directories: [directory.id])
        return node
    }

    mutating func log(_ change: DirectoryChange, directories: Set<UInt64>) {
        metaLog.append(LoggedChange(change: change, pendingDirectories: directories))
    }

    mutating func syncDirectory(_ id: UInt64) {
        for index in metaLog.indices { metaLog[index].pendingDirectories.remove(id) }
        let durablePrefix = metaLog.prefix { $0.pendingDirectories.isEmpty }.count
        if durablePrefix > 0 {
            baseEntries = State.apply(metaLog[..<durablePrefix].map(\.change), to: baseEntries)
            metaLog.removeFirst(durablePrefix)
        }
        collectGarbage()
    }

    mutating func syncAll() {
        for node in nodes.values where !node.isDirectory { node.markSynced() }
        baseEntries = State.apply(metaLog.map(\.change), to: baseEntries)
        metaLog.removeAll()
        collectGarbage()
    }

    func replay(_ changes: [DirectoryChange]) -> [UInt64: [[UInt8]: UInt64]] {
        State.apply(changes, to: baseEntries)
    }

    static func apply(_ changes: [DirectoryChange], to base: [UInt64: [[UInt8]: UInt64]]) -> [UInt64: [[UInt8]: UInt64]] {
        var entries = base
        for change in changes {
            switch change {
            case .link(let directory, let name, let node):
                entries[directory, default: [:]][name] = node
            case .unlink(let directory, let name):
                entries[directory]?[name] = nil
            case .rename(let fromDirectory, let fromName, let toDirectory, let toName):
                // A rename whose source an earlier, dropped change never created does nothing.
                guard let node = entries[fromDirectory]?[fromName] else { continue }
                entries[fromDirectory]?[fromName] = nil
                entries[toDirectory, default: [:]][toName] = node
            }
        }
        return entries
    }

    /// Drops nodes that nothing can reach any more: not the current tree, an open descriptor,
    /// the durable base, or a logged change.
    mutating func collectGarbage() {
        // Amortised: unreachable nodes are harmless, so only sweep when the table has doubled.
        guard nodes.count >= garbageThreshold else { return }
        defer { garbageThreshold = max(64, nodes.count * 2) }
        var live: Set<UInt64> = [State.rootID]
        for descriptor in descriptors.values { live.insert(descriptor.node) }
        for (directory, entries) in baseEntries {
            live.insert(directory)
            live.formUnion(entries.values)
        }
        for logged in metaLog {
            switch logged.change {
            case .link(let directory, _, let node): live.formUnion([directory, node])
            case .unlink(let directory, _): live.insert(directory)
            case .rename(let from, _, let to, _): live.formUnion([from, to])
            }
        }
        var work = Array(live)
        while let id = work.popLast() {
            guard let node = nodes[id], node.isDirectory else { continue }
            for child in node.entries.values where live.insert(child).inserted { work.append(child) }
        }
        if live.count < nodes.count { nodes = nodes.filter { live.contains($0.key) } }
    }

}

/// A small, seedable generator (SplitMix64), so a power loss (or any test's random run) can be
/// replayed from its seed.
package struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
