public import Foundation
import CofferCore

/// An item's attributes: everything but the secret. Safe to list and print.
public struct VaultItem: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The service the credential is for, such as `api.github.com`.
    public var service: String
    /// The account within the service, such as `octocat`.
    public var account: String
    /// A human-readable name.
    public var label: String
    /// A free-form note.
    public var comment: String
    /// When the item was first stored.
    public var created: Date
    /// When the item's secret or attributes last changed.
    public var modified: Date

    public var description: String { "VaultItem(service: \(service), account: \(account), label: \(label))" }
}

/// A record's plaintext (docs/FORMAT.md §2, "Record body"). Pure: bytes in, bytes out.
package enum VaultRecordBody: Equatable {
    case put(VaultItem, secret: [UInt8])
    case delete(service: String, account: String)

    static let maximumFieldLength = 1 << 30

    /// What the index keeps of this body (the secret is left out).
    var indexed: IndexedBody {
        switch self {
        case .put(let item, _): .put(item)
        case .delete(let service, let account): .delete(service: service, account: account)
        }
    }

    /// The body's bytes, in one allocation of the exact size.
    func encoded() -> [UInt8] {
        switch self {
        case .put(let item, let secret):
            return secret.withUnsafeBytes { secret in
                let count = Self.putLength(item, secretCount: secret.count)
                return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                    Self.encodePut(item, secret: secret, into: UnsafeMutableRawBufferPointer(buffer))
                    initialized = count
                }
            }
        case .delete(let service, let account):
            let count = Self.deleteLength(service: service, account: account)
            return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                Self.encodeDelete(service: service, account: account, into: UnsafeMutableRawBufferPointer(buffer))
                initialized = count
            }
        }
    }

    /// The length of a `.put` body: kind (1), four length-prefixed texts, two dates (8 each),
    /// the length-prefixed secret.
    static func putLength(_ item: VaultItem, secretCount: Int) -> Int {
        putLength(
            service: item.service, account: item.account, label: item.label, comment: item.comment,
            secretCount: secretCount)
    }

    /// ``putLength(_:secretCount:)`` from the item's fields.
    static func putLength(service: String, account: String, label: String, comment: String, secretCount: Int) -> Int {
        1 + 5 * 4 + 2 * 8 + service.utf8.count + account.utf8.count + label.utf8.count + comment.utf8.count
            + secretCount
    }

    /// The length of a `.delete` body: kind (1), two length-prefixed texts.
    static func deleteLength(service: String, account: String) -> Int {
        1 + 2 * 4 + service.utf8.count + account.utf8.count
    }

    /// Writes a `.put` body into `output`, exactly ``putLength(_:secretCount:)`` bytes.
    static func encodePut(_ item: VaultItem, secret: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) {
        encodePut(
            service: item.service, account: item.account, label: item.label, comment: item.comment,
            created: item.created, modified: item.modified, secret: secret, into: output)
    }

    /// ``encodePut(_:secret:into:)`` from the item's fields.
    static func encodePut(
        service: String, account: String, label: String, comment: String, created: Date, modified: Date,
        secret: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) {
        var writer = BodyWriter(output)
        writer.byte(1)
        writer.text(service)
        writer.text(account)
        writer.text(label)
        writer.text(comment)
        writer.int64(Int64((created.timeIntervalSince1970 * 1000).rounded()))
        writer.int64(Int64((modified.timeIntervalSince1970 * 1000).rounded()))
        writer.field(secret)
        precondition(writer.offset == output.count, "a vault record body's length was miscounted")
    }

    /// Writes a `.delete` body into `output`, exactly ``deleteLength(service:account:)`` bytes.
    static func encodeDelete(service: String, account: String, into output: UnsafeMutableRawBufferPointer) {
        var writer = BodyWriter(output)
        writer.byte(2)
        writer.text(service)
        writer.text(account)
        precondition(writer.offset == output.count, "a vault record body's length was miscounted")
    }

    /// Writes a body's fields one after another into a buffer of the exact size.
    private struct BodyWriter {
        let output: UnsafeMutableRawBufferPointer
        var offset = 0

        init(_ output: UnsafeMutableRawBufferPointer) { self.output = output }

        mutating func byte(_ value: UInt8) {
            output[offset] = value
            offset += 1
        }

        mutating func int64(_ value: Int64) {
            output.storeBytes(of: value.littleEndian, toByteOffset: offset, as: Int64.self)
            offset += 8
        }

        mutating func field(_ bytes: UnsafeRawBufferPointer) {
            output.storeBytes(of: UInt32(bytes.count).littleEndian, toByteOffset: offset, as: UInt32.self)
            offset += 4
            if !bytes.isEmpty {
                UnsafeMutableRawBufferPointer(rebasing: output[offset..<(offset + bytes.count)]).copyMemory(from: bytes)
            }
            offset += bytes.count
        }

        mutating func text(_ string: String) {
            // No label or comment (the usual case) is a length of 0: no copy of the string.
            if string.isEmpty { return field(UnsafeRawBufferPointer(start: nil, count: 0)) }
            var string = string
            string.withUTF8 { field(UnsafeRawBufferPointer($0)) }
        }
    }

    /// Parses a record body, or `nil` when its layout is invalid.
    package static func decode(_ bytes: [UInt8]) -> VaultRecordBody? {
        bytes.withUnsafeBytes { bytes in
            guard let layout = Layout(bytes) else { return nil }
            switch layout.kind {
            case .put:
                guard let item = layout.item(bytes) else { return nil }
                return .put(item, secret: Array(UnsafeRawBufferPointer(rebasing: bytes[layout.secret])))
            case .delete:
                guard let service = text(bytes, layout.service), let account = text(bytes, layout.account) else {
                    return nil
                }
                return .delete(service: service, account: account)
            }
        }
    }

    /// Why ``indexed(_:)`` (and ``decode(_:)``) refuse `bytes`, naming the field at fault but
    /// never its content: "its layout is invalid", or "its service is not valid UTF-8", … A
    /// reader must never repair a name (String(decoding:) would turn every invalid byte into
    /// U+FFFD): two different stored names would become one item.
    static func invalidity(_ bytes: UnsafeRawBufferPointer) -> String {
        guard let layout = Layout(bytes) else {
            return "its layout is invalid (its kind, a field's length, or where it ends)"
        }
        var fields = [("service", layout.service), ("account", layout.account)]
        if layout.kind == .put { fields += [("label", layout.label), ("comment", layout.comment)] }
        for (name, range) in fields where text(bytes, range) == nil {
            return "its \(name) is not valid UTF-8"
        }
        return "its layout is invalid"
    }

    /// What the index keeps of a body, parsed straight from the plaintext: never the secret.
    /// `nil` when the layout is invalid or a text field is not valid UTF-8 (exactly when
    /// ``decode(_:)`` returns `nil`; ``invalidity(_:)`` says which).
    static func indexed(_ bytes: UnsafeRawBufferPointer) -> IndexedBody? {
        guard let layout = Layout(bytes),
            let service = text(bytes, layout.service), let account = text(bytes, layout.account)
        else { return nil }
        let key = ItemKey(service: service, account: account)
        switch layout.kind {
        case .put:
            return layout.attributes(bytes).map { .put($0, key: key) }
        case .delete:
            return .delete(key)
        }
    }

    /// The fields of a body as byte ranges of it, with the lengths and the end checked (parsed by
    /// the `init?(_:)` in the extension below, which keeps the memberwise initialiser).
    struct Layout {
        enum Kind { case put, delete }
        var kind: Kind
        var service: Range<Int>
        var account: Range<Int>
        var label = 0..<0
        var comment = 0..<0
        var created: Int64 = 0
        var modified: Int64 = 0
        var secret = 0..<0

        /// Reads length-prefixed fields and integers, checking every length against the end.
        private struct Cursor {
            let bytes: UnsafeRawBufferPointer
            var offset: Int

            mutating func field() -> Range<Int>? {
                guard bytes.count - offset >= 4 else { return nil }
                let length = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
                offset += 4
                guard length <= bytes.count - offset else { return nil }
                defer { offset += length }
                return offset..<(offset + length)
            }

            mutating func int64() -> Int64? {
                guard bytes.count - offset >= 8 else { return nil }
                defer { offset += 8 }
                return Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self))
            }
        }

        /// The item of a `.put` body, or `nil` when a text field is not UTF-8.
        func item(_ bytes: UnsafeRawBufferPointer) -> VaultItem? {
            guard let service = text(bytes, service), let account = text(bytes, account),
                let attributes = attributes(bytes)
            else { return nil }
            return attributes.item(service: service, account: account)
        }

        /// What a `.put` body says of its item besides the names, or `nil` when the label or
        /// the comment is not UTF-8.
        func attributes(_ bytes: UnsafeRawBufferPointer) -> ItemAttributes? {
            guard let label = text(bytes, label), let comment = text(bytes, comment) else { return nil }
            return ItemAttributes(
                label: label, comment: comment, created: Date(timeIntervalSince1970: Double(created) / 1000),
                modified: Date(timeIntervalSince1970: Double(modified) / 1000))
        }
    }

    /// The UTF-8 text in `range` of `bytes`, or `nil` when it is not valid UTF-8 (``UTF8Text``).
    static func text(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> String? {
        UTF8Text.decode(UnsafeRawBufferPointer(rebasing: bytes[range]))
    }
}

extension VaultRecordBody.Layout {
    /// The layout of `bytes`; `nil` for an unknown kind, a length past the end, or bytes after
    /// the last field.
    init?(_ bytes: UnsafeRawBufferPointer) {
        // A cursor value rather than nested functions capturing a local `var`: those get a
        // dynamic exclusivity check on every call, which showed in the open profile.
        var cursor = Cursor(bytes: bytes, offset: 1)
        guard let first = bytes.first else { return nil }
        switch first {
        case 1:
            guard let service = cursor.field(), let account = cursor.field(), let label = cursor.field(),
                let comment = cursor.field(), let created = cursor.int64(), let modified = cursor.int64(),
                let secret = cursor.field(), cursor.offset == bytes.count
            else { return nil }
            self.init(
                kind: .put, service: service, account: account, label: label, comment: comment, created: created,
                modified: modified, secret: secret)
        case 2:
            guard let service = cursor.field(), let account = cursor.field(), cursor.offset == bytes.count else {
                return nil
            }
            self.init(kind: .delete, service: service, account: account)
        default:
            return nil
        }
    }
}

/// What the vault's index keeps of a record body: the item's attributes, or the identity removed.
enum IndexedBody {
    /// The item's attributes, and its key (made where the record was decrypted: see ``ItemKey``).
    case put(ItemAttributes, key: ItemKey)
    case delete(ItemKey)

    static func put(_ item: VaultItem) -> IndexedBody {
        .put(ItemAttributes(item), key: ItemKey(service: item.service, account: item.account))
    }

    static func delete(service: String, account: String) -> IndexedBody {
        .delete(ItemKey(service: service, account: account))
    }
}

/// What the index keeps of an item besides its names, which its ``ItemKey`` holds: the item is
/// put together from both when it is read (``Entry/item(_:)``). Keeping the names once makes an
/// entry a fifth smaller (120 bytes instead of 152), which an open of many items writes at
/// random places of the index's table.
struct ItemAttributes: Sendable {
    var label: String
    var comment: String
    var created: Date
    var modified: Date

    init(label: String, comment: String, created: Date, modified: Date) {
        self.label = label
        self.comment = comment
        self.created = created
        self.modified = modified
    }

    init(_ item: VaultItem) {
        self.init(label: item.label, comment: item.comment, created: item.created, modified: item.modified)
    }

    func item(service: String, account: String) -> VaultItem {
        VaultItem(
            service: service, account: account, label: label, comment: comment, created: created, modified: modified)
    }
}
