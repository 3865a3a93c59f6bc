// `docker-credential-coffer`: the credential-helper protocol of docker/docker-credential-helpers.
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

struct DockerCredentialCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: CredentialHelper.dockerName,
        abstract: "docker's credential helper: registry logins kept in the coffer vault.",
        discussion: """
            Set up once: in ~/.docker/config.json, "credsStore": "coffer" (then `docker login`).

            store reads {"ServerURL", "Username", "Secret"} as JSON on standard input; get and \
            erase read a server URL and get answers that JSON; list answers a JSON object of \
            server URL to user name. Each login is the item with service docker:SERVER-URL and \
            account the user name (one per server: a new login replaces the old); its secret is \
            the Secret. As docker expects, an error is one line on standard output with exit 1, \
            and a missing login is exactly "\(notFound)".

            It unlocks as every coffer command does. When the vault is locked and nothing \
            unlocks it without a prompt and there is no terminal, get answers "\(notFound)" \
            (docker then goes on without a login); the others fail and change nothing.
            """)

    static let notFound = "credentials not found in native keychain"

    @OptionGroup var global: GlobalOptions
    @Argument(help: "store, get, erase, list or version.") var action: String

    func run() throws {
        do {
            try perform()
        } catch let error as ExitCode {
            throw error
        } catch {
            // docker reads a helper's error from its standard output: one line, exit 1.
            let message = (error as? CofferError).map { coffer.message(for: $0) } ?? "\(error)"
            writeOut(escapingControls(message.split(whereSeparator: \.isNewline).joined(separator: " ")) + "\n")
            throw ExitCode(ExitStatus.failure.rawValue)
        }
    }

    private func perform() throws {
        switch action {
        case "store": try store()
        case "get":
            let url = try serverURL()
            guard let keychain = try CredentialHelper.openUnlessLocked(global),
                // Two logins for one server (two `docker login`s raced): the latest, as `list` says.
                let item = try keychain.items(service: "docker:" + url).max(by: { $0.modified < $1.modified }),
                let secret = try keychain.secret(service: item.service, account: item.account)
            else { throw CLIError(.notFound, Self.notFound) }
            let text = try secret.withUnsafeBytes { bytes in
                guard let text = String(validating: bytes, as: UTF8.self) else {
                    throw CLIError(.failure, "the secret of \(quotedName(item.service)) is not UTF-8 text")
                }
                return text
            }
            var json = try JSONSerialization.data(
                withJSONObject: ["ServerURL": url, "Username": item.account, "Secret": text],
                options: [.sortedKeys, .withoutEscapingSlashes])
            json.append(10)
            defer { SecureMemory.zero(&json) }
            guard json.withUnsafeBytes({ writeAll(STDOUT_FILENO, $0) }) else {
                throw CLIError(.failure, "cannot write to standard output: \(String(cString: strerror(errno)))")
            }
        case "erase":
            let service = "docker:" + (try serverURL())
            let keychain = try CredentialHelper.openKeychain(global)
            let items = try keychain.items(service: service)
            guard !items.isEmpty else { throw CLIError(.notFound, Self.notFound) }
            try keychain.apply(items.map { .remove(service: $0.service, account: $0.account) })
        case "list":
            let keychain = try CredentialHelper.openKeychain(global)
            var logins: [String: String] = [:]
            var latest: [String: Date] = [:]
            for item in try keychain.items(service: nil) where item.service.hasPrefix("docker:") {
                let server = String(item.service.dropFirst("docker:".count))
                // One user per server: the latest login, as `get` answers.
                if let seen = latest[server], seen >= item.modified { continue }
                latest[server] = item.modified
                logins[server] = item.account
            }
            let json = try JSONSerialization.data(withJSONObject: logins, options: [.sortedKeys, .withoutEscapingSlashes])
            writeOut(String(decoding: json, as: UTF8.self) + "\n")
        case "version": writeOut("\(CredentialHelper.dockerName) (coffer)\n")
        default:
            throw CLIError.usage("unknown action \(quotedName(action)): use store, get, erase, list or version")
        }
    }

    private func store() throws {
        var request = try CredentialHelper.readRequest()
        defer { SecureMemory.zero(&request) }
        let object = try? JSONSerialization.jsonObject(with: Data(request)) as? [String: Any]
        guard let object else { throw CLIError.usage("the request is not a JSON object: nothing was stored") }
        // Trimmed as `get` and `erase` trim it, so what is stored can be read and erased.
        guard let url = (object["ServerURL"] as? String)?.trimmingCharacters(in: .whitespacesAndNewlines), !url.isEmpty
        else {
            throw CLIError.usage("no credentials server URL")
        }
        guard let username = object["Username"] as? String, !username.isEmpty else {
            throw CLIError.usage("no credentials username")
        }
        guard !username.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw CLIError.usage("the user name holds a control character (a line break?): nothing was stored")
        }
        guard let secretText = object["Secret"] as? String else {
            throw CLIError.usage("the request has no Secret (a string): nothing was stored")
        }
        try Self.checkURL(url)
        var secret = Array(secretText.utf8)
        // Runs after the changes below are released, so the array is zeroed in place.
        defer { SecureMemory.zero(&secret) }
        let keychain = try CredentialHelper.openKeychain(global)
        let service = "docker:" + url
        // One login per server: `get` names only the server.
        let others = try keychain.items(service: service).filter { !$0.account.utf8.elementsEqual(username.utf8) }
        try keychain.apply(
            others.map { .remove(service: $0.service, account: $0.account) } + [
                .set(service: service, account: username, secret: secret, label: "docker credential", comment: nil)
            ])
    }

    /// The server URL `get` and `erase` read: standard input, without surrounding white space.
    private func serverURL() throws -> String {
        var request = try CredentialHelper.readRequest()
        defer { SecureMemory.zero(&request) }
        let url = try CredentialHelper.text(request[...], "server URL").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !url.isEmpty else { throw CLIError.usage("no credentials server URL") }
        try Self.checkURL(url)
        return url
    }

    private static func checkURL(_ url: String) throws {
        guard !url.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw CLIError.usage("the server URL holds a control character (a line break?): nothing was done")
        }
    }
}
