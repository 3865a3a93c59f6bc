// `git-credential-coffer`: git's credential-helper protocol (gitcredentials(7), git-credential(1)).
import ArgumentParser
import Coffer
import CofferCrypto
import CofferInterchange
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

struct GitCredentialCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: CredentialHelper.gitName,
        abstract: "git's credential helper: git's passwords and tokens kept in the coffer vault.",
        discussion: """
            Set up once: git config --global credential.helper coffer
            (with options: git config --global credential.helper 'coffer --vault /path/to/vault').

            git runs it with get, store or erase and the credential on standard input (any \
            other operation is ignored). Each credential is the item with service \
            git:PROTOCOL://HOST[/PATH] (the path only with credential.useHttpPath) and account \
            the user name (% for an empty one, %25 for a % in it), so `coffer list` shows it; \
            its secret is the password, followed by password_expiry_utc and oauth_refresh_token \
            lines when git gave them. get answers with the matching item (the one without a path \
            first, then the last stored); erase removes every item matching what git gave (and \
            only those holding the password, when git gave one).

            It unlocks as every coffer command does. When the vault is locked and nothing \
            unlocks it without a prompt (no key kept by `coffer unlock`, no --key-file, \
            --identity, $COFFER_IDENTITY or passphrase) and there is no terminal, get answers \
            nothing at once (git then asks the user); store and erase fail and change nothing.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "get, store or erase.") var operation: String

    func run() throws {
        guard ["get", "store", "erase"].contains(operation) else { return }
        // git's GIT_TERMINAL_PROMPT=0 (set by scripts and CI so nothing waits for a person)
        // holds for the helper too: never a passphrase prompt, even with a terminal.
        if environmentText("GIT_TERMINAL_PROMPT") == "0" { Input.promptsAllowed = false }
        var request = try CredentialHelper.readRequest(isComplete: GitCredential.isComplete)
        defer { SecureMemory.zero(&request) }
        var credential = try GitCredential(parsing: request)
        defer { credential.wipe() }
        guard credential.protocolName?.isEmpty == false else {
            throw CLIError.usage("the request names no protocol: nothing was done")
        }
        switch operation {
        case "get": try get(credential)
        case "store": try store(credential)
        default: try erase(credential)
        }
    }

    private func get(_ query: GitCredential) throws {
        guard let keychain = try CredentialHelper.openUnlessLocked(global) else { return }
        // The item stored for exactly this path (or none) first, then the last stored.
        let found = try keychain.items(service: nil).filter(query.matches).sorted {
            let exact = ($0.service == query.service, $1.service == query.service)
            return exact.0 != exact.1 ? exact.0 : $0.modified > $1.modified
        }
        for item in found {
            // An item this helper did not write (`coffer set`, an import) may hold anything: a
            // user name with a line break or a NUL would add lines of its own to the answer
            // (`quit=1`, another `host=`), so such an item is passed over, as git's own
            // helpers refuse to write such a value.
            let username = GitCredential.username(account: item.account)
            guard !username.utf8.contains(where: { $0 == 10 || $0 == 13 || $0 == 0 }) else { continue }
            guard let secret = try keychain.secret(service: item.service, account: item.account) else { continue }
            var output = Array("username=\(username)\npassword=".utf8)
            output.reserveCapacity(output.count + secret.count + 2)
            defer { SecureMemory.zero(&output) }
            let usable = secret.withUnsafeBytes { stored -> Bool in
                // The password's line, then only the attributes this helper keeps after it
                // (password_expiry_utc, oauth_refresh_token): any other line of the secret is
                // not part of the answer.
                let lines = stored.split(separator: 10, omittingEmptySubsequences: false)
                // One CR ending the line is dropped (a secret set from a CRLF file), as git
                // drops it when it reads the answer; a CR elsewhere, or a NUL, is not answered.
                guard var password = lines.first else { return false }
                if password.last == 13 { password = password.dropLast() }
                guard !password.contains(0), !password.contains(13) else { return false }
                output += password
                output.append(10)
                for line in lines.dropFirst() where !line.contains(0) && !line.contains(13) {
                    guard let equals = line.firstIndex(of: UInt8(ascii: "=")),
                        GitCredential.extraKeys.contains(where: { $0.utf8.elementsEqual(line[..<equals]) })
                    else { continue }
                    output += line
                    output.append(10)
                }
                return true
            }
            guard usable else { continue }
            guard writeAll(STDOUT_FILENO, output) else {
                throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))")
            }
            return
        }
    }

    private func store(_ credential: GitCredential) throws {
        guard let service = credential.service, let username = credential.username, let password = credential.password
        else {
            throw CLIError.usage("store needs protocol, username and password: nothing was stored")
        }
        guard !(credential.protocolName ?? "").contains(where: { $0 == ":" || $0 == "/" }),
            !(credential.host ?? "").contains("/")
        else {
            throw CLIError.usage("the protocol holds ':' or '/', or the host holds '/': nothing was stored")
        }
        var secret = password
        secret.reserveCapacity(password.count + credential.extras.reduce(0) { $0 + $1.key.utf8.count + $1.value.count + 2 })
        for (key, value) in credential.extras { secret += [10] + Array(key.utf8) + [UInt8(ascii: "=")] + value }
        // Runs after the change below is released, so the array is zeroed in place.
        defer { SecureMemory.zero(&secret) }
        let keychain = try CredentialHelper.openKeychain(global)
        try keychain.apply([
            .set(
                service: service, account: GitCredential.account(username), secret: secret, label: "git credential",
                comment: nil)
        ])
    }

    private func erase(_ query: GitCredential) throws {
        let keychain = try CredentialHelper.openKeychain(global)
        var removals: [VaultChange] = []
        for item in try keychain.items(service: nil) where query.matches(item) {
            if let password = query.password {
                guard let secret = try keychain.secret(service: item.service, account: item.account),
                    secret.withUnsafeBytes({ $0.prefix(while: { $0 != 10 }).elementsEqual(password) })
                else { continue }
            }
            removals.append(.remove(service: item.service, account: item.account))
        }
        if !removals.isEmpty { try keychain.apply(removals) }
    }
}

/// A credential as git sends it: `key=value` lines up to a blank line or the end.
struct GitCredential {
    var protocolName: String?
    var host: String?
    var path: String?
    var username: String?
    var password: [UInt8]?
    /// `password_expiry_utc` and `oauth_refresh_token` (git 2.41 and later), kept with the password.
    var extras: [(key: String, value: [UInt8])] = []
    static let extraKeys = ["password_expiry_utc", "oauth_refresh_token"]

    /// Whether `bytes` hold a whole request: a blank line ends it (git closes the pipe anyway).
    static func isComplete(_ bytes: [UInt8]) -> Bool {
        bytes.first == 10 || bytes.starts(with: [13, 10]) || bytes.firstRange(of: [10, 10]) != nil
            || bytes.firstRange(of: [10, 13, 10]) != nil
    }

    init(parsing request: [UInt8]) throws {
        for (index, whole) in request.split(separator: 10, omittingEmptySubsequences: false).enumerated() {
            let line = whole.last == 13 ? whole.dropLast() : whole
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: UInt8(ascii: "=")) else {
                throw CLIError.usage("line \(index + 1) of the request is not key=value: nothing was done")
            }
            let key = String(decoding: line[..<equals], as: UTF8.self)
            let value = line[(equals + 1)...]
            switch key {
            case "protocol": protocolName = try CredentialHelper.text(value, "protocol")
            case "host": host = try CredentialHelper.text(value, "host")
            case "path": path = try CredentialHelper.text(value, "path")
            case "username": username = try CredentialHelper.text(value, "username")
            case "password":
                SecureMemory.zero(&password)
                password = Array(value)
            case _ where Self.extraKeys.contains(key):
                extras.removeAll { $0.key == key }
                extras.append((key, Array(value)))
            case "url":
                // git's own helpers break a url= into the attributes above; git never sends one
                // to a helper. Ignored, it would widen a match to every host of a protocol.
                throw CLIError.usage("the request gives a url=, which this helper does not read: give protocol, host and path")
            default: continue  // unknown attributes are ignored, as git-credential(1) says
            }
        }
    }

    mutating func wipe() {
        SecureMemory.zero(&password)
        for index in extras.indices { SecureMemory.zero(&extras[index].value) }
    }

    /// The item's service: `git:PROTOCOL://HOST`, then `/PATH` when git sent a path.
    var service: String? {
        protocolName.map { "git:\($0)://\(host ?? "")" + (path.map { "/" + $0 } ?? "") }
    }

    /// The protocol, host and path a service of ``service``'s form names; `nil` for any other.
    static func parts(ofService service: String) -> (protocolName: String, host: String, path: String?)? {
        guard service.hasPrefix("git:"), let separator = service.range(of: "://") else { return nil }
        let rest = service[separator.upperBound...]
        let protocolName = String(service[service.index(service.startIndex, offsetBy: 4)..<separator.lowerBound])
        guard let slash = rest.firstIndex(of: "/") else { return (protocolName, String(rest), nil) }
        return (protocolName, String(rest[..<slash]), String(rest[rest.index(after: slash)...]))
    }

    /// The account for `username`: itself, `%` for an empty one (an account is never empty), a
    /// `%` in it written `%25` (so no user name is written `%`).
    static func account(_ username: String) -> String {
        username.isEmpty ? "%" : username.replacingOccurrences(of: "%", with: "%25")
    }

    static func username(account: String) -> String {
        account == "%" ? "" : account.replacingOccurrences(of: "%25", with: "%")
    }

    /// Whether `item` matches as git matches (credential_match): every attribute given is equal.
    func matches(_ item: VaultItem) -> Bool {
        guard let parts = Self.parts(ofService: item.service) else { return false }
        // By bytes, as git compares (strcmp) and the vault names items: `é` written as one
        // scalar and as `e` + U+0301 are two users, though Swift's == calls them equal.
        func equal(_ given: String?, _ stored: String?) -> Bool {
            guard let given else { return true }
            return stored.map { given.utf8.elementsEqual($0.utf8) } ?? false
        }
        return equal(protocolName, parts.protocolName) && equal(host, parts.host) && equal(path, parts.path)
            && equal(username, Self.username(account: item.account))
    }
}
