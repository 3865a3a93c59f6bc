import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The environment `coffer run` gives its child: every variable in order, each a plain value or
/// a reference to an item (whose secret is filled in at each start).
struct ChildEnvironment {
    /// A variable's value.
    enum Value {
        /// `NAME=VALUE` exactly as it will be passed (bytes from the environment or a file).
        case plain([UInt8])
        /// An item whose secret becomes the value.
        case reference(SecretReference)
    }

    /// One variable: its value, and where it was set (for messages).
    struct Entry {
        var value: Value
        var origin: String
    }

    /// The variables' names in the order they first appeared (later sources override the
    /// value, not the place).
    private(set) var order: [[UInt8]] = []
    private(set) var entries: [[UInt8]: Entry] = [:]

    /// Sets `name` (bytes; the environment may hold names that are not identifiers).
    mutating func set(_ name: [UInt8], _ entry: Entry) {
        if entries.updateValue(entry, forKey: name) == nil { order.append(name) }
    }

    /// The entries in order, with their names.
    var ordered: [(name: [UInt8], entry: Entry)] { order.map { ($0, entries[$0]!) } }

    /// Every distinct item referred to, in order of first use, with the first place naming it.
    var references: [(reference: SecretReference, origin: String)] {
        var seen: Set<SecretReference> = []
        var found: [(SecretReference, String)] = []
        for (_, entry) in ordered {
            if case .reference(let reference) = entry.value, seen.insert(reference).inserted {
                found.append((reference, entry.origin))
            }
        }
        return found
    }

    /// A plain variable's value (for PATH), `nil` when unset or a reference.
    func plainValue(_ name: String) -> [UInt8]? {
        guard case .plain(let bytes)? = entries[Array(name.utf8)]?.value else { return nil }
        let prefix = name.utf8.count + 1
        return Array(bytes[prefix...])
    }

    /// `value` as a reference when it starts with `coffer://`; `nil` when it does not; a usage
    /// error naming `origin` when it starts so but is malformed.
    static func reference<S: Collection<UInt8>>(in value: S, origin: String) throws -> SecretReference? {
        let scheme = Array(SecretReference.scheme.utf8)
        guard value.starts(with: scheme) else { return nil }
        guard let text = String(validating: Array(value), as: UTF8.self) else {
            throw CLIError.usage("\(origin) is not a valid reference: it is not UTF-8")
        }
        switch SecretReference.parse(text[...]) {
        case .success(let reference): return reference
        case .failure(let error): throw CLIError.usage("\(origin) is not a valid reference: \(error.reason)")
        }
    }

    /// The variables of this process's environment, then each env file's in order, then each
    /// `--env NAME=REF`; a later one overrides an earlier one of the same name.
    static func assemble(envFiles: [String], assignments: [String]) throws -> ChildEnvironment {
        var environment = ChildEnvironment()
        let block: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ
        if var cursor = block {
            while let entry = cursor.pointee {
                let bytes = Array(UnsafeRawBufferPointer(start: entry, count: strlen(entry)))
                let split = bytes.firstIndex(of: UInt8(ascii: "=")) ?? bytes.count
                let name = Array(bytes[..<split])
                let origin = "the environment variable \(escapedName(String(decoding: name, as: UTF8.self)))"
                let value = split < bytes.count ? bytes[(split + 1)...] : []
                if let reference = try reference(in: value, origin: origin) {
                    environment.set(name, Entry(value: .reference(reference), origin: origin))
                } else {
                    environment.set(name, Entry(value: .plain(bytes), origin: origin))
                }
                cursor += 1
            }
        }
        for file in envFiles {
            for assignment in try DotEnv.read(file) {
                let origin = "\(assignment.name) on line \(assignment.line) of the env file \(quotedName(file))"
                let name = Array(assignment.name.utf8)
                if let reference = try reference(in: assignment.value, origin: origin) {
                    environment.set(name, Entry(value: .reference(reference), origin: origin))
                } else {
                    environment.set(name, Entry(value: .plain(name + [UInt8(ascii: "=")] + assignment.value), origin: origin))
                }
            }
        }
        for (index, assignment) in assignments.enumerated() {
            let parts = assignment.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            // Never any part of the argument in a message unless it is NAME=coffer://…: a token
            // pasted in its place (`--env "$TOKEN"`, `--env TOKEN=ghp_…`) would be printed, and
            // a token's characters before its first = can look like a name. The argument's
            // position says which one it is.
            let malformed = "argument \(index + 1) of --env is not NAME=coffer://SERVICE/ACCOUNT"
            guard parts.count == 2 else { throw CLIError.usage("\(malformed): it has no =") }
            guard parts[1].hasPrefix(SecretReference.scheme) else {
                throw CLIError.usage("\(malformed): its value must be a reference, coffer://SERVICE/ACCOUNT")
            }
            guard DotEnv.isValidName(parts[0].utf8) else {
                throw CLIError.usage("\(malformed): NAME must be letters, digits and _, not starting with a digit")
            }
            let origin = "--env \(parts[0])"
            guard let reference = try reference(in: parts[1].utf8, origin: origin) else {
                throw CLIError.usage("\(malformed): its value must be a reference, coffer://SERVICE/ACCOUNT")
            }
            environment.set(Array(parts[0].utf8), Entry(value: .reference(reference), origin: origin))
        }
        return environment
    }
}
