import CofferCore
import CofferCrypto
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

/// The default vault's file name is the `coffer` command's, `default.coffer`; a vault an earlier
/// version of the library made under `default.coffervault` is still the one a context opens when
/// it is the only one; with both, neither is chosen.
@Suite("The default vault's file name")
struct DefaultVaultNameTests {
    @Test("a new default vault is default.coffer, the command's name")
    func aNewDefaultVaultTakesTheCommandsName() throws {
        let scratch = try Scratch("default-name")
        let key = try SecureBytes.random(count: 32)
        let context = CofferContext(directory: scratch.url).with(VaultConfiguration(unlock: .key(key)))
        let vault = try context.defaultVault()
        #expect(vault.url.lastPathComponent == "default.coffer")
        #expect(FileManager.default.fileExists(atPath: scratch.url("default.coffer").path))
        #expect(!FileManager.default.fileExists(atPath: scratch.url("default.coffervault").path))
    }

    @Test("a vault at the former default path opens through the new default, and no second vault is made")
    func aVaultUnderTheFormerNameIsStillFound() throws {
        let scratch = try Scratch("former-name")
        let key = try SecureBytes.random(count: 32)
        let former = scratch.url("default.coffervault")
        do {
            let made = try Vault.create(at: former, unlock: .key(key))
            try made.set("kept", service: "api", account: "me")
        }
        let context = CofferContext(directory: scratch.url).with(VaultConfiguration(unlock: .key(key)))
        let vault = try context.defaultVault()
        #expect(vault.url.path == former.path)
        #expect(try vault.string(service: "api", account: "me") == "kept")
        #expect(!FileManager.default.fileExists(atPath: scratch.url(VaultConfiguration.defaultFileName).path))
    }

    @Test("when both names exist, opening the default vault is refused, naming both files")
    func bothNamesAreRefused() throws {
        // Guards against silently preferring one: the items the application expects may be in
        // either, and the `coffer` command follows the same rule (VaultConfiguration.defaultVault).
        let scratch = try Scratch("both-names")
        let key = try SecureBytes.random(count: 32)
        _ = try Vault.create(at: scratch.url("default.coffervault"), unlock: .key(key))
        _ = try Vault.create(at: scratch.url("default.coffer"), unlock: .key(key))
        let context = CofferContext(directory: scratch.url).with(VaultConfiguration(unlock: .key(key)))
        let error = #expect(throws: CofferError.self) { try context.defaultVault() }
        #expect(error?.code == .invalidArgument, "\(String(describing: error))")
        #expect(error?.description.contains(scratch.url("default.coffer").path) == true, "\(String(describing: error))")
        #expect(
            error?.description.contains(scratch.url("default.coffervault").path) == true, "\(String(describing: error))")
        // Nothing was made or changed: both files are still there.
        #expect(try VaultConfiguration.defaultVault(in: scratch.url) == .both(
            current: scratch.url("default.coffer"), former: scratch.url("default.coffervault")))
    }

    @Test("the rule the command shares: the current name, the former one alone, both refused")
    func theSharedRule() throws {
        let scratch = try Scratch("shared-rule")
        let key = try SecureBytes.random(count: 32)
        let current = scratch.url("default.coffer"), former = scratch.url("default.coffervault")
        #expect(try VaultConfiguration.defaultVault(in: scratch.url) == .current(current))
        _ = try Vault.create(at: former, unlock: .key(key))
        #expect(try VaultConfiguration.defaultVault(in: scratch.url) == .former(former))
        _ = try Vault.create(at: current, unlock: .key(key))
        #expect(try VaultConfiguration.defaultVault(in: scratch.url) == .both(current: current, former: former))
    }
}
