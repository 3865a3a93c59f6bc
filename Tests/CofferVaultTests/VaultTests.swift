import CofferCore
import CofferRuntime
import CofferJournal
import CofferCrypto
import CofferTesting
@testable import CofferVault
import Foundation
import Testing

@Suite("Vault")
struct VaultTests {
    @Test func storeReadListRemoveAndReopenWithEachUnlockSource() throws {
        let dir = try Scratch("sources")
        let keyFile = dir.url("key")
        try Data(SecureRandom.bytes(count: 64)).write(to: keyFile)
        let rawKey = try SecureBytes.random(count: 32)
        for unlock in [VaultUnlock.passphrase("correct horse battery staple"), .keyFile(keyFile), .key(rawKey)] {
            let url = dir.url(UUID().uuidString + ".coffer")
            do {
                let vault = try Vault.create(at: url, unlock: unlock, kdf: fastKDF)
                try vault.set("ghp_secret", service: "api.github.com", account: "octocat", label: "GitHub token")
                try vault.set(Data([0, 10, 13, 255]), service: "db", account: "root", comment: "binary")
                try vault.set("gone", service: "db", account: "temp")
                #expect(try vault.remove(service: "db", account: "temp"))
                #expect(try !vault.remove(service: "db", account: "temp"))
            }
            let vault = try Vault.open(at: url, unlock: unlock)
            #expect(try vault.string(service: "api.github.com", account: "octocat") == "ghp_secret")
            #expect(try vault.data(service: "db", account: "root") == Data([0, 10, 13, 255]))
            #expect(try vault.data(service: "db", account: "temp") == nil)
            let items = try vault.items()
            #expect(items.map(\.service) == ["api.github.com", "db"])
            #expect(items[0].label == "GitHub token")
            #expect(items[1].comment == "binary")
            #expect(try vault.items(service: "db").map(\.account) == ["root"])
            #expect(try vault.secret(service: "db", account: "root")?.count == 4)
        }
    }

    @Test func updatingKeepsCreatedAndLabelAndAdvancesModified() throws {
        let dir = try Scratch("update")
        let vault = try Vault.create(at: dir.url("v"), unlock: .passphrase("p"), kdf: fastKDF)
        try vault.set("one", service: "s", account: "a", label: "L", comment: "C")
        let first = try #require(try vault.item(service: "s", account: "a"))
        Thread.sleep(forTimeInterval: 0.01)
        try vault.set("two", service: "s", account: "a")
        let second = try #require(try vault.item(service: "s", account: "a"))
        #expect(second.label == "L" && second.comment == "C")
        #expect(second.created == first.created)
        #expect(second.modified > first.modified)
        #expect(try vault.string(service: "s", account: "a") == "two")
    }

    @Test func wrongPassphraseIsWrongKeyNeverCorruptionNeverEmpty() throws {
        let dir = try Scratch("wrong")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("right"), kdf: fastKDF)
        try vault.set("x", service: "s", account: "a")
        for attempt in 0..<50 {
            let guess = String(UInt64.random(in: 0...UInt64.max), radix: 36) + "\(attempt)"
            let error = expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase(guess)) }
            #expect(error.map { !$0.description.contains(guess) } ?? false)
        }
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .key(try SecureBytes.random(count: 32))) }
        expectError(.invalidArgument) { _ = try Vault.open(at: url, unlock: .passphrase("")) }
        #expect(try Vault.open(at: url, unlock: .passphrase("right")).string(service: "s", account: "a") == "x")
    }

    @Test func missingFilesAndExistingFilesAreClearErrors() throws {
        let dir = try Scratch("missing")
        expectError(.notFound) { _ = try Vault.open(at: dir.url("nope"), unlock: .passphrase("p")) }
        _ = try Vault.create(at: dir.url("v"), unlock: .passphrase("p"), kdf: fastKDF)
        expectError(.alreadyExists) { _ = try Vault.create(at: dir.url("v"), unlock: .passphrase("q"), kdf: fastKDF) }
        expectError(.notFound) { _ = try Vault.open(at: dir.url("v"), unlock: .keyFile(dir.url("no-key"))) }
        try Data(repeating: 1, count: 8).write(to: dir.url("short-key"))
        expectError(.invalidArgument) { _ = try Vault.open(at: dir.url("v"), unlock: .keyFile(dir.url("short-key"))) }
        expectError(.invalidArgument) { _ = try Vault.open(at: dir.url("v"), unlock: .key(try SecureBytes.random(count: 16))) }
    }

    @Test func lockDropsAccessUntilUnlocked() throws {
        let dir = try Scratch("lock")
        let vault = try Vault.create(at: dir.url("v"), unlock: .passphrase("p"), kdf: fastKDF)
        try vault.set("x", service: "s", account: "a")
        vault.lock()
        #expect(vault.isLocked)
        expectError(.locked) { _ = try vault.string(service: "s", account: "a") }
        expectError(.locked) { try vault.set("y", service: "s", account: "a") }
        expectError(.locked) { _ = try vault.items() }
        expectError(.wrongKey) { try vault.unlock(.passphrase("q")) }
        #expect(vault.isLocked)
        try vault.unlock(.passphrase("p"))
        #expect(try vault.string(service: "s", account: "a") == "x")
    }

    @Test func changePassphraseAndKeySlots() throws {
        let dir = try Scratch("passwd")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("old"), kdf: fastKDF)
        try vault.set("x", service: "s", account: "a")
        try vault.changePassphrase(to: "new")
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase("old")) }
        #expect(try Vault.open(at: url, unlock: .passphrase("new")).string(service: "s", account: "a") == "x")
        // The old passphrase's slot is gone from both header copies.
        let key = try SecureBytes.random(count: 32)
        try vault.addKeySlot(.key(key), kdf: fastKDF)
        #expect(try vault.info().keySlots.map(\.kind) == ["passphrase", "key"])
        #expect(try Vault.open(at: url, unlock: .key(key)).string(service: "s", account: "a") == "x")
        try vault.removeKeySlot(at: 0)
        expectError(.wrongKey) { _ = try Vault.open(at: url, unlock: .passphrase("new")) }
        expectError(.invalidArgument) { try vault.removeKeySlot(at: 0) }
        // A vault unlocked by key can gain a passphrase slot again.
        try vault.addKeySlot(.passphrase("again"), kdf: fastKDF)
        #expect(try Vault.open(at: url, unlock: .passphrase("again")).string(service: "s", account: "a") == "x")
    }

    /// A crash at any point of a passphrase change leaves the old or the new passphrase working.
    @Test func passphraseChangeInterruptedAtEveryWriteKeepsOneWorking() throws {
        // Count the header writes of one change, then fail each in turn (and cut each short).
        let probe = InMemoryFileSystem()
        try probe.createDirectory(atPath: "/v")
        let url = URL(fileURLWithPath: "/v/vault")
        let vault = try Vault.create(at: url, unlock: .passphrase("old"), kdf: fastKDF, fileSystem: probe)
        try vault.set("x", service: "s", account: "a")
        let image = try #require(probe.contents(atPath: url.path))
        probe.resetCalls()
        try vault.changePassphrase(to: "new")
        let writes = probe.callCount(.pwrite, where: { $0 == url.path })
        let syncs = probe.callCount(.fdatasync, where: { $0 == url.path })
        #expect(writes == 2 && syncs == 2)
        var faults: [InMemoryFileSystem.Fault] = []
        for n in 1...writes {
            faults.append(.fail(.pwrite, occurrence: n, errno: 5, where: { $0 == url.path }))
            for bytes in [1, 100, 1000, 2047] {
                faults.append(.shortWrite(occurrence: n, bytes: bytes, where: { $0 == url.path }))
            }
        }
        for n in 1...syncs { faults.append(.fail(.fdatasync, occurrence: n, errno: 5, where: { $0 == url.path })) }
        for fault in faults {
            let fs = InMemoryFileSystem()
            try fs.createDirectory(atPath: "/v")
            try fs.createFile(atPath: url.path, contents: image)
            let vault = try Vault.open(at: url, unlock: .passphrase("old"), fileSystem: fs)
            fs.inject(fault)
            #expect(throws: CofferError.self, "\(fault)") { try vault.changePassphrase(to: "new") }
            let old = try? Vault.open(at: url, unlock: .passphrase("old"), fileSystem: fs)
            let new = try? Vault.open(at: url, unlock: .passphrase("new"), fileSystem: fs)
            #expect(old != nil || new != nil, "\(fault): neither passphrase works")
            for opened in [old, new].compactMap({ $0 }) {
                #expect(try opened.string(service: "s", account: "a") == "x")
            }
        }
    }

    @Test func nothingReadableInTheFile() throws {
        let dir = try Scratch("plaintext")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("hunter2-passphrase"), kdf: fastKDF)
        let needles = ["ghp_VerySecretToken123", "api.github.example", "octocat-account", "My GitHub Label", "a comment"]
        try vault.set(needles[0], service: needles[1], account: needles[2], label: needles[3], comment: needles[4])
        try vault.compact()
        try vault.set(needles[0] + "2", service: needles[1], account: needles[2])
        let bytes = try readBytes(url)
        for needle in needles + ["hunter2-passphrase"] {
            #expect(!contains(bytes, Array(needle.utf8)), "\(needle.prefix(3))… found in the file")
        }
        let fs = LiveFileSystem()
        #expect(try fs.stat(url.path)?.mode == 0o600)
        #expect(try fs.stat(url.path + ".lock")?.mode == 0o600)
    }

    @Test func secretsNeverAppearInDescriptionsOrErrors() throws {
        let unlock = VaultUnlock.passphrase("s3cret-pass")
        #expect(!"\(unlock)".contains("s3cret"))
        let key = try SecureBytes(copying: Array("0123456789abcdef0123456789abcdef".utf8))
        #expect("\(key)" == "<redacted>")
        #expect(!"\(VaultUnlock.key(key))".contains("0123"))
        let dir = try Scratch("errors")
        let vault = try Vault.create(at: dir.url("v"), unlock: unlock, kdf: fastKDF)
        try vault.set(Data([0xFF, 0xFE]), service: "svc", account: "acct")
        let error = expectError(.decoding) { _ = try vault.string(service: "svc", account: "acct") }
        #expect(error.map { !$0.description.contains("\u{FFFD}") } ?? false)
        let item = try #require(try vault.item(service: "svc", account: "acct"))
        #expect(!"\(item)".contains("\u{FF}"))
    }

    @Test func compactionKeepsItemsAndShrinksTheFile() throws {
        let dir = try Scratch("compact")
        let url = dir.url("v")
        let vault = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF, durability: .coalesced)
        for round in 0..<300 {
            for account in 0..<3 { try vault.set(String(repeating: "\(round)", count: 200), service: "s", account: "a\(account)") }
        }
        try vault.flush()
        #expect(try vault.info().fileSize < 200_000)
        let reopened = try Vault.open(at: url, unlock: .passphrase("p"))
        #expect(try reopened.string(service: "s", account: "a2") == String(repeating: "299", count: 200))
        let verification = try reopened.verify()
        #expect(verification.items == 3)
        #expect(verification.records >= 3)
    }

    @Test func twoInstancesSeeEachOthersWritesAndCompactions() throws {
        let dir = try Scratch("two")
        let url = dir.url("v")
        let a = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
        let b = try Vault.open(at: url, unlock: .passphrase("p"))
        try a.set("1", service: "s", account: "x")
        #expect(try b.string(service: "s", account: "x") == "1")
        try b.set("2", service: "s", account: "y")
        try b.compact()
        try a.set("3", service: "s", account: "z")
        #expect(try b.items().map(\.account) == ["x", "y", "z"])
        #expect(try a.string(service: "s", account: "y") == "2")
        try a.changePassphrase(to: "q")
        try b.set("4", service: "s", account: "w")  // b's keys are unchanged: the master key is the same
        #expect(try Vault.open(at: url, unlock: .passphrase("q")).items().count == 4)
    }

    @Test func absurdKDFParametersInTheHeaderAreRefusedBeforeRunning() throws {
        let dir = try Scratch("absurd")
        let url = dir.url("v")
        _ = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
        var bytes = try readBytes(url)
        // Both header copies: opsLimit 2^32, memLimit 2^40, with valid checksums (a hostile file).
        for copy in 0..<2 {
            let base = 32 + copy * VaultHeader.copySize
            let slot = base + VaultHeader.slotsOffset
            withUnsafeBytes(of: UInt64(1 << 32).littleEndian) { for i in 0..<8 { bytes[slot + 8 + i] = $0[i] } }
            withUnsafeBytes(of: UInt64(1 << 40).littleEndian) { for i in 0..<8 { bytes[slot + 16 + i] = $0[i] } }
            let crc = CRC32C.checksum(Array(bytes[base..<(base + VaultHeader.crcOffset)]))
            withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { bytes[base + VaultHeader.crcOffset + i] = $0[i] } }
        }
        try writeBytes(bytes, to: url)
        let started = Date()
        let error = expectError(.corrupted) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
        #expect(error?.message.contains("Argon2id") == true)
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test func unsupportedVersionIsReportedAsSuch() throws {
        let dir = try Scratch("version")
        let url = dir.url("v")
        _ = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF)
        var bytes = try readBytes(url)
        for copy in 0..<2 {
            let base = 32 + copy * VaultHeader.copySize
            bytes[base + 4] = 9
            let crc = CRC32C.checksum(Array(bytes[base..<(base + VaultHeader.crcOffset)]))
            withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { bytes[base + VaultHeader.crcOffset + i] = $0[i] } }
        }
        try writeBytes(bytes, to: url)
        expectError(.unsupportedVersion) { _ = try Vault.open(at: url, unlock: .passphrase("p")) }
    }
}

@Suite("Vault strategy conformance")
struct VaultConformanceTests {
    @Test(arguments: StrategyConformance.cases)
    func vaultStrategy(_ check: StrategyConformance.Case) throws {
        try check.run(
            StrategyConformance.Subject(
                make: {
                    let url = FileManager.default.temporaryDirectory.appendingPathComponent(
                        "coffer-vault-conformance-\(UUID().uuidString)/v.coffer")
                    let vault = try Vault.create(at: url, unlock: .passphrase("p"), kdf: fastKDF, durability: .coalesced)
                    return VaultStrategy(vault: vault, service: "conformance")
                },
                reopen: { store in
                    let strategy = store as! VaultStrategy
                    try strategy.flush()
                    let vault = try Vault.open(at: strategy.vault.url, unlock: .passphrase("p"))
                    return VaultStrategy(vault: vault, service: "conformance")
                }))
    }
}

@Suite("Vault strategy values")
struct VaultStrategyValueTests {
    /// Secrets are stored as themselves, so `coffer get` and `@Stored` agree on the bytes.
    @Test func typedValuesAreStoredPlainAndReadBackTyped() throws {
        let dir = try Scratch("plain")
        let vault = try Vault.create(at: dir.url("v"), unlock: .passphrase("p"), kdf: fastKDF)
        let strategy = VaultStrategy(vault: vault, service: "svc")
        try strategy.set("ghp_token", for: "string")
        #expect(try vault.string(service: "svc", account: "string") == "ghp_token")
        try strategy.set(42, for: "int")
        #expect(try vault.string(service: "svc", account: "int") == "42")
        try strategy.set(Data([0, 0x05, 0xFF]), for: "data")
        #expect(try vault.data(service: "svc", account: "data") == Data([0, 0x05, 0xFF]))
        struct Login: Codable, Equatable { var user: String; var port: Int }
        try strategy.set(Login(user: "me", port: 22), for: "login")
        #expect(try strategy.get(Login.self, for: "login") == Login(user: "me", port: 22))
        // What another tool stored reads back typed.
        try vault.set("stored-by-cli", service: "svc", account: "cli")
        #expect(try strategy.get(String.self, for: "cli") == "stored-by-cli")
        try vault.set("3.5", service: "svc", account: "number")
        #expect(try strategy.get(Double.self, for: "number") == 3.5)
        try vault.set(Data([0xFF, 0xFE]), service: "svc", account: "binary")
        #expect(try strategy.get(Data.self, for: "binary") == Data([0xFF, 0xFE]))
        let error = #expect(throws: CofferError.self) { _ = try strategy.get(String.self, for: "binary") }
        #expect(error?.code == .decoding)
    }
}
