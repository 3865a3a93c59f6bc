// InMemoryFileSystem's power loss: what unsynced data and metadata become when the machine stops.
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension InMemoryFileSystem {
    /// What happens to file data written since the file's last `fsync`/`fdatasync` when power is lost.
    package enum UnsyncedData: Sendable, Hashable {
        /// Every unsynced write survives.
        case keep
        /// Every unsynced write is lost: files hold what they held at their last fsync.
        case drop
        /// Each unsynced 4 KiB sector of each write (and each truncation) survives or not, at random.
        case random
        /// Like ``random``, but a sector may also survive as garbage (random bytes).
        case randomWithGarbage
    }

    /// What happens to directory changes made since the directory's last fsync when power is lost.
    package enum UnsyncedMetadata: Sendable, Hashable {
        /// Every change survives.
        case keep
        /// Only changes made durable by ``InMemoryFileSystem/fsyncDirectory(_:)`` survive (the strict POSIX minimum).
        case drop
        /// Changes survive as an in-order prefix that includes every durable one (a metadata journal, like ext4's).
        case orderedPrefix
        /// Each unsynced change survives or not, independently, at random (each one atomically).
        case random
    }

    /// What a simulated power loss did, counted in changes, never in content.
    package struct PowerLossReport: Sendable, Hashable, CustomStringConvertible {
        /// Unsynced data sectors and truncations that survived intact.
        package var keptWrites = 0
        /// Unsynced data sectors and truncations that were lost.
        package var droppedWrites = 0
        /// Unsynced data sectors that survived as garbage.
        package var garbledWrites = 0
        /// Unsynced directory changes that survived.
        package var keptDirectoryChanges = 0
        /// Unsynced directory changes that were undone.
        package var droppedDirectoryChanges = 0

        /// True when the crash lost or damaged something.
        package var lostAnything: Bool { droppedWrites + garbledWrites + droppedDirectoryChanges > 0 }

        /// Counts only.
        package var description: String {
            "writes kept \(keptWrites), dropped \(droppedWrites), garbled \(garbledWrites); "
                + "directory changes kept \(keptDirectoryChanges), dropped \(droppedDirectoryChanges)"
        }
    }
}

extension State {
    mutating func powerLoss(
        seed: UInt64, data dataMode: InMemoryFileSystem.UnsyncedData, metadata: InMemoryFileSystem.UnsyncedMetadata
    ) -> InMemoryFileSystem.PowerLossReport {
        var random = SplitMix64(seed: seed)
        var report = InMemoryFileSystem.PowerLossReport()

        // 1. Directory changes: which unsynced ones survive.
        var kept: [DirectoryChange] = []
        let lastDurable = metaLog.lastIndex { $0.pendingDirectories.isEmpty } ?? -1
        let cut = metaLog.count > lastDurable + 1 ? Int.random(in: (lastDurable + 1)...metaLog.count, using: &random) : metaLog.count
        for (index, logged) in metaLog.enumerated() {
            let keep: Bool
            if logged.pendingDirectories.isEmpty {
                keep = true
            } else {
                switch metadata {
                case .keep: keep = true
                case .drop: keep = false
                case .orderedPrefix: keep = index < cut
                case .random: keep = Bool.random(using: &random)
                }
                if keep { report.keptDirectoryChanges += 1 } else { report.droppedDirectoryChanges += 1 }
            }
            if keep { kept.append(logged.change) }
        }
        let entries = replay(kept)

        // 2. Which nodes are still reachable from "/".
        var reachable: Set<UInt64> = [State.rootID]
        var work: [UInt64] = [State.rootID]
        while let id = work.popLast() {
            for child in (entries[id] ?? [:]).values where nodes[child] != nil && reachable.insert(child).inserted {
                work.append(child)
            }
        }

        // 3. File data: the durable bytes plus whichever unsynced changes survive.
        for id in reachable.sorted() {
            guard let node = nodes[id] else { continue }
            if node.isDirectory {
                node.entries = (entries[id] ?? [:]).filter { reachable.contains($0.value) }
            } else {
                var bytes = node.durableData
                for (change, _) in node.pending {
                    switch change {
                    case .truncate:
                        let keep = dataMode == .keep || (dataMode != .drop && Bool.random(using: &random))
                        if keep {
                            bytes.apply(change)
                            report.keptWrites += 1
                        } else {
                            report.droppedWrites += 1
                        }
                    case .write(let offset, let written):
                        var start = 0
                        while start < written.count {
                            let sectorEnd = min(written.count, ((offset + start) / 4096 + 1) * 4096 - offset)
                            let piece = Array(written[start..<sectorEnd])
                            let fate: Int  // 0 kept, 1 dropped, 2 garbage
                            switch dataMode {
                            case .keep: fate = 0
                            case .drop: fate = 1
                            case .random: fate = Int.random(in: 0...1, using: &random)
                            case .randomWithGarbage: fate = Int.random(in: 0...2, using: &random)
                            }
                            switch fate {
                            case 0:
                                bytes.apply(.write(offset: offset + start, bytes: piece))
                                report.keptWrites += 1
                            case 1:
                                report.droppedWrites += 1
                            default:
                                let garbage = (0..<piece.count).map { _ in UInt8.random(in: 0...255, using: &random) }
                                bytes.apply(.write(offset: offset + start, bytes: garbage))
                                report.garbledWrites += 1
                            }
                            start = sectorEnd
                        }
                    }
                }
                node.data = bytes
                node.markSynced()  // what survived is durable now
            }
            node.exclusiveHolder = nil
            node.sharedHolders.removeAll()
        }

        // So are the mutexes in them (modelled apart: see `lockMutex`).
        heldMutexes.removeAll()
        // Shared mappings are memory: they end with the machine. The processes that held them
        // are gone; clear the memory (they may still hold it) and let the next map start anew
        // from the file's surviving bytes.
        for node in nodes.values {
            if let mapping = node.mapping {
                mapping.base.initializeMemory(as: UInt8.self, repeating: 0, count: mapping.length)
                node.mapping = nil
            }
        }

        // 4. What survived is now the durable state.
        nodes = nodes.filter { reachable.contains($0.key) }
        baseEntries = [:]
        for id in reachable { if let node = nodes[id], node.isDirectory { baseEntries[id] = node.entries } }
        metaLog.removeAll()
        descriptors.removeAll()
        return report
    }
}
