public import Foundation

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

/// A record's plaintext (docs/FORMAT.md, "Vault records"). Pure: bytes in, bytes out.
package enum VaultRecordBody: Equatable {
    case put(VaultItem, secret: [UInt8])
    case delete(service: String, account: String)

    static let maximumFieldLength = 1 << 30

    func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        func field(_ value: [UInt8]) {
            appendLE(UInt32(value.count), to: &bytes)
            bytes += value
        }
        switch self {
        case .put(let item, let secret):
            bytes.append(1)
            field(Array(item.service.utf8))
            field(Array(item.account.utf8))
            field(Array(item.label.utf8))
            field(Array(item.comment.utf8))
            appendLE(Int64((item.created.timeIntervalSince1970 * 1000).rounded()), to: &bytes)
            appendLE(Int64((item.modified.timeIntervalSince1970 * 1000).rounded()), to: &bytes)
            field(secret)
        case .delete(let service, let account):
            bytes.append(2)
            field(Array(service.utf8))
            field(Array(account.utf8))
        }
        return bytes
    }

    /// Parses a record body, or `nil` when its layout is invalid.
    package static func decode(_ bytes: [UInt8]) -> VaultRecordBody? {
        var offset = 1
        func field() -> [UInt8]? {
            guard bytes.count - offset >= 4 else { return nil }
            let length = Int(readLE32(bytes, offset))
            offset += 4
            guard length <= bytes.count - offset else { return nil }
            defer { offset += length }
            return Array(bytes[offset..<(offset + length)])
        }
        func text() -> String? { field().flatMap { String(validating: $0, as: UTF8.self) } }
        func int64() -> Int64? {
            guard bytes.count - offset >= 8 else { return nil }
            defer { offset += 8 }
            return Int64(bitPattern: readLE64(bytes, offset))
        }
        guard let kind = bytes.first else { return nil }
        switch kind {
        case 1:
            guard let service = text(), let account = text(), let label = text(), let comment = text(),
                let created = int64(), let modified = int64(), let secret = field(), offset == bytes.count
            else { return nil }
            let item = VaultItem(
                service: service, account: account, label: label, comment: comment,
                created: Date(timeIntervalSince1970: Double(created) / 1000),
                modified: Date(timeIntervalSince1970: Double(modified) / 1000))
            return .put(item, secret: secret)
        case 2:
            guard let service = text(), let account = text(), offset == bytes.count else { return nil }
            return .delete(service: service, account: account)
        default:
            return nil
        }
    }
}
