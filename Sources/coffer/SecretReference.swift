import Foundation

/// `coffer://SERVICE/ACCOUNT`: an item named in a template (`coffer inject`) or, later, an
/// environment (`coffer run`).
///
/// SERVICE and ACCOUNT are percent-encoded UTF-8 (RFC 3986): `/` in a name is `%2F`, `%` is
/// `%25`, and any byte may be written `%XX`. Everything else stands for itself, spaces
/// included, except `}` (which would end a template's placeholder: write `%7D`). Exactly one
/// unencoded `/` separates the two; neither may be empty.
struct SecretReference: Hashable, CustomStringConvertible {
    static let scheme = "coffer://"

    let service: String
    let account: String

    /// Parses a reference; `nil` with the reason when `text` is not one.
    static func parse(_ text: Substring) -> Result<SecretReference, ReferenceError> {
        guard text.hasPrefix(scheme) else { return .failure(.init("it does not start with \(scheme)")) }
        let rest = text.dropFirst(scheme.count)
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else {
            return .failure(.init("it needs exactly one / between the service and the account (write a / in a name as %2F)"))
        }
        guard let service = decode(parts[0]), let account = decode(parts[1]) else {
            return .failure(.init("a %-escape is malformed, or the decoded name is not UTF-8"))
        }
        guard !service.isEmpty, !account.isEmpty else { return .failure(.init("the service and the account must not be empty")) }
        return .success(SecretReference(service: service, account: account))
    }

    struct ReferenceError: Error {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// Percent-decoding; `nil` for a bad escape or bytes that are not UTF-8.
    private static func decode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The reference written back, `/`, `%`, `}` and non-printable bytes escaped (for messages:
    /// names are not secret, but a name may hold a control character).
    var description: String {
        func encode(_ name: String) -> String {
            var out = ""
            for byte in name.utf8 {
                if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "%") || byte == UInt8(ascii: "}") || byte < 0x21 || byte >= 0x7F {
                    out += String(format: "%%%02X", byte)
                } else {
                    out += String(UnicodeScalar(byte))
                }
            }
            return out
        }
        return Self.scheme + encode(service) + "/" + encode(account)
    }
}
