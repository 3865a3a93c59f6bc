import ArgumentParser
import CofferCore
import CofferVault
import Foundation
import Testing

@testable import coffer

/// The command and the library agree on their defaults: one lock timeout, one vault file name.
@Suite("The command's defaults are the library's")
struct DefaultsTests {
    @Test("COFFER_LOCK_TIMEOUT unset waits as long as the library does")
    func theLockTimeoutIsTheLibrarys() throws {
        #expect(try GlobalOptions.lockTimeout(nil) == CofferContext.defaultLockTimeout.inSeconds)
        #expect(CofferContext.defaultLockTimeout == .seconds(10))
    }

    @Test("the default vault file is the library's default vault file name")
    func theVaultFileNameIsTheLibrarys() throws {
        let options = try GlobalOptions.parse([])
        #expect(try options.vaultURL.lastPathComponent == VaultConfiguration.defaultFileName)
    }
}
