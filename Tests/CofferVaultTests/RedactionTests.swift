import CofferCore
import CofferCrypto
import CofferVault
import Foundation
import Testing

/// Every public type that can hold a secret shows none in `description`, `String(reflecting:)`,
/// `dump` or a `Mirror` walk (what debuggers, crash reporters and logging of `\(value)` use).
@Suite("Secrets never show in dump, Mirror or descriptions")
struct RedactionTests {
    static let secret = "hunter2-never-shown"

    /// Everything a person or a tool could print of `value`.
    static func everyRendering(_ value: Any) -> [String] {
        var dumped = ""
        dump(value, to: &dumped, maxDepth: 20)
        var walked = ""
        func walk(_ value: Any, depth: Int) {
            guard depth < 20 else { return }
            for child in Mirror(reflecting: value).children {
                walked += "\(child.label ?? "_")=\(String(describing: child.value))\n"
                walk(child.value, depth: depth + 1)
            }
        }
        walk(value, depth: 0)
        return [String(describing: value), String(reflecting: value), dumped, walked]
    }

    @Test("VaultUnlock, VaultConfiguration and a context carrying one")
    func vaultSettings() throws {
        let bytes = try SecureBytes(copying: Array(Self.secret.utf8))
        let unlocks: [VaultUnlock] = [.passphrase(Self.secret), .passphrase(bytes), .keyFileContents(bytes)]
        for unlock in unlocks {
            let configuration = VaultConfiguration(unlock: unlock, kdf: .minimum)
            let context = try CofferContext.temporary().with(configuration)
            defer { try? FileManager.default.removeItem(at: context.directory) }
            for value in [unlock as Any, configuration, context] {
                for text in Self.everyRendering(value) {
                    #expect(!text.contains(Self.secret), "\(type(of: value)): \(text)")
                }
            }
        }
    }

    @Test("VaultChange names its item and never shows the secret it sets")
    func vaultChange() {
        let changes: [VaultChange] = [
            .set(service: "svc", account: "acct", secret: Array(Self.secret.utf8), label: "L", comment: nil),
            .remove(service: "svc", account: "acct"),
        ]
        for change in changes {
            for text in Self.everyRendering(change) {
                #expect(!text.contains(Self.secret), "\(text)")
            }
            #expect(String(describing: change).contains("\"acct\""))
        }
        #expect(String(describing: changes[0]).contains("secret: <redacted>"))
    }
}
