// InMemoryFileSystem's faults: the calls it records and the failures tests inject into them.
import CofferCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension InMemoryFileSystem {
    /// The kinds of call this file system records and can fail.
    package enum Operation: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// ``FileSystem/open(_:create:exclusive:mode:)``.
        case open
        /// ``FileSystem/openReadOnly(_:)``.
        case openReadOnly
        /// ``FileSystem/close(_:)`` (recorded, never fails).
        case close
        /// ``FileSystem/pread(_:into:at:)``.
        case pread
        /// ``FileSystem/pwrite(_:_:at:)``.
        case pwrite
        /// ``FileSystem/fsync(_:)``.
        case fsync
        /// ``FileSystem/fdatasync(_:)``.
        case fdatasync
        /// ``FileSystem/ftruncate(_:size:)``.
        case ftruncate
        /// ``FileSystem/fstat(_:)``.
        case fstat
        /// ``FileSystem/stat(_:)``.
        case stat
        /// ``FileSystem/rename(_:_:)`` (the path is the source).
        case rename
        /// ``FileSystem/unlink(_:)``.
        case unlink
        /// ``FileSystem/mkdir(_:mode:)``.
        case mkdir
        /// ``FileSystem/contentsOfDirectory(_:)``.
        case contentsOfDirectory
        /// ``FileSystem/fsyncDirectory(_:)``.
        case fsyncDirectory
        /// ``FileSystem/lock(_:exclusive:timeout:path:)``.
        case lock
        /// ``FileSystem/unlock(_:)`` (recorded, never fails).
        case unlock
        /// ``FileSystem/mapShared(_:length:path:)``.
        case mmap

        /// The operation's name.
        package var description: String { rawValue }
    }

    /// One recorded call: its operation and the path it concerned (for descriptor calls, the
    /// path the descriptor was opened with; `nil` for an unknown descriptor).
    package struct Call: Sendable, Hashable, CustomStringConvertible {
        /// What was called.
        package var operation: Operation
        /// The path involved.
        package var path: String?

        /// A recorded call.
        package init(operation: Operation, path: String?) {
            self.operation = operation
            self.path = path
        }

        /// `pwrite(/dir/file)`.
        package var description: String { "\(operation)(\(path ?? "?"))" }
    }

    /// A failure to inject into a future call; install it with ``InMemoryFileSystem/inject(_:)``.
    package struct Fault: Sendable, CustomStringConvertible {
        /// What happens when the fault fires.
        package enum Effect: Sendable, Hashable {
            /// The call fails with this errno and changes nothing.
            case fail(errno: Int32)
            /// (`pwrite` only.) The call writes at most `bytes` bytes and returns that count
            /// (`bytes == 0` fails at once); the next matching `pwrite` fails with `thenErrno`.
            case shortWrite(bytes: Int, thenErrno: Int32)
        }

        /// The operation to fail.
        package var operation: Operation
        /// Which matching call fires the fault: 1 is the next one, counted from installation.
        package var occurrence: Int
        /// What the failing call does.
        package var effect: Effect
        /// When true, every matching call from `occurrence` on fails, not only that one.
        package var persistent: Bool
        /// Only calls whose path this accepts count and fail; `nil` matches every call.
        package var matches: (@Sendable (String) -> Bool)?

        /// A fault with every property spelled out.
        package init(
            operation: Operation, occurrence: Int = 1, effect: Effect, persistent: Bool = false,
            matches: (@Sendable (String) -> Bool)? = nil
        ) {
            self.operation = operation
            self.occurrence = occurrence
            self.effect = effect
            self.persistent = persistent
            self.matches = matches
        }

        /// Fails the `occurrence`-th matching call of `operation` with `errno` (28 ENOSPC, 5 EIO, …).
        package static func fail(
            _ operation: Operation, occurrence: Int = 1, errno: Int32, persistent: Bool = false,
            where matches: (@Sendable (String) -> Bool)? = nil
        ) -> Fault {
            Fault(
                operation: operation, occurrence: occurrence, effect: .fail(errno: errno), persistent: persistent,
                matches: matches)
        }

        /// Makes the `occurrence`-th matching `pwrite` write only `bytes` bytes; the next one fails with `thenErrno`.
        package static func shortWrite(
            occurrence: Int = 1, bytes: Int, thenErrno: Int32 = 28, where matches: (@Sendable (String) -> Bool)? = nil
        ) -> Fault {
            Fault(operation: .pwrite, occurrence: occurrence, effect: .shortWrite(bytes: bytes, thenErrno: thenErrno),
                  matches: matches)
        }

        /// `fail(fsync #2, errno 28)`, without the predicate.
        package var description: String {
            switch effect {
            case .fail(let errno): return "fail(\(operation) #\(occurrence), errno \(errno)\(persistent ? ", persistent" : ""))"
            case .shortWrite(let bytes, let errno): return "shortWrite(pwrite #\(occurrence), \(bytes) bytes, then errno \(errno))"
            }
        }
    }
}

extension State {
    /// Counts the call against every matching fault; the first one due fires. Non-persistent
    /// faults that come due are removed.
    mutating func fireFault(_ operation: InMemoryFileSystem.Operation, path: String?) -> InMemoryFileSystem.Fault.Effect? {
        var fired: InMemoryFileSystem.Fault?
        var remaining: [ActiveFault] = []
        for var active in faults {
            let fault = active.fault
            let matches = fault.operation == operation && (fault.matches.map { test in path.map(test) ?? false } ?? true)
            if matches {
                active.seen += 1
                let due = active.seen == fault.occurrence || (fault.persistent && active.seen > fault.occurrence)
                if due {
                    if fired == nil { fired = fault }
                    if !fault.persistent { continue }
                }
            }
            remaining.append(active)
        }
        if let fired, case .shortWrite(_, let errno) = fired.effect {
            remaining.append(ActiveFault(fault: .fail(.pwrite, errno: errno, where: fired.matches)))
        }
        faults = remaining
        return fired?.effect
    }
}
