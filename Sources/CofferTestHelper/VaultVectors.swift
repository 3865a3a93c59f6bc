import CofferCore
import CofferCrypto
import CofferVault
import Foundation

/// Writes `Vectors/vault/`: vault files made through the public API with fixed passphrases and
/// keys, and `manifest.json` saying how to open each and what it must contain.
///
/// The files are committed; the tests open them. Regenerating them changes every nonce, so do it
/// only with a format change (and bump the format version).
func writeVaultVectors(to directory: URL) throws {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let kdf = Argon2idParameters.minimum
    var manifest: [[String: Any]] = []

    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
    func item(_ service: String, _ account: String, _ label: String, _ comment: String, _ secret: [UInt8]) -> [String: Any] {
        ["service": service, "account": account, "label": label, "comment": comment, "secret_hex": hex(secret)]
    }
    func fresh(_ name: String) throws -> URL {
        let url = directory.appendingPathComponent(name)
        try? FileManager.default.removeItem(at: url)
        try? FileManager.default.removeItem(at: URL(fileURLWithPath: url.path + ".lock"))
        return url
    }
    let binary: [UInt8] = [0x00, 0x0A, 0x0D, 0xFF, 0x80, 0x00]

    // 1. Passphrase, three items (one binary), one with label and comment.
    do {
        let url = try fresh("passphrase.coffer")
        let vault = try Vault.create(at: url, unlock: .passphrase("correct horse battery staple"), kdf: kdf)
        try vault.set("ghp_exampleToken0001", service: "api.github.com", account: "octocat", label: "GitHub token",
                      comment: "scopes: repo")
        try vault.set(Data(binary), service: "db.internal", account: "root")
        try vault.set("é 🔑 unicode", service: "ünïcödé", account: "e\u{301}")
        manifest.append([
            "file": "passphrase.coffer", "unlock": ["kind": "passphrase", "passphrase": "correct horse battery staple"],
            "wrong_passphrase": "Correct horse battery staple",
            "items": [
                item("api.github.com", "octocat", "GitHub token", "scopes: repo", Array("ghp_exampleToken0001".utf8)),
                item("db.internal", "root", "", "", binary),
                item("ünïcödé", "e\u{301}", "", "", Array("é 🔑 unicode".utf8)),
            ],
        ])
    }
    // 2. Key file.
    do {
        let url = try fresh("keyfile.coffer")
        let keyBytes = (0..<64).map { UInt8(($0 * 37 + 11) & 0xFF) }
        let keyURL = directory.appendingPathComponent("keyfile.key")
        try Data(keyBytes).write(to: keyURL)
        let vault = try Vault.create(at: url, unlock: .keyFile(keyURL), kdf: kdf)
        try vault.set("s3cret", service: "smtp", account: "mailer", label: "Mail relay")
        manifest.append([
            "file": "keyfile.coffer", "unlock": ["kind": "keyFile", "key_file": "keyfile.key"],
            "items": [item("smtp", "mailer", "Mail relay", "", Array("s3cret".utf8))],
        ])
    }
    // 3. Raw key, with a second (passphrase) slot added.
    do {
        let url = try fresh("rawkey.coffer")
        let raw = (0..<32).map { UInt8($0) }
        let vault = try Vault.create(at: url, unlock: .key(try SecureBytes(copying: raw)), kdf: kdf)
        try vault.set("value", service: "svc", account: "acct")
        try vault.addKeySlot(.passphrase("second slot"), kdf: kdf)
        manifest.append([
            "file": "rawkey.coffer", "unlock": ["kind": "key", "key_hex": hex(raw)],
            "also_opens_with_passphrase": "second slot",
            "items": [item("svc", "acct", "", "", Array("value".utf8))],
        ])
    }
    // 4. Changed passphrase: the old one must fail.
    do {
        let url = try fresh("changed-passphrase.coffer")
        let vault = try Vault.create(at: url, unlock: .passphrase("old passphrase"), kdf: kdf)
        try vault.set("kept", service: "svc", account: "a")
        try vault.changePassphrase(to: .passphrase("new passphrase"))
        try vault.set("after", service: "svc", account: "b")
        manifest.append([
            "file": "changed-passphrase.coffer", "unlock": ["kind": "passphrase", "passphrase": "new passphrase"],
            "wrong_passphrase": "old passphrase",
            "items": [item("svc", "a", "", "", Array("kept".utf8)), item("svc", "b", "", "", Array("after".utf8))],
        ])
    }
    // 5. Deleted and updated items (superseded records stay in the file until compaction).
    do {
        let url = try fresh("deleted-items.coffer")
        let vault = try Vault.create(at: url, unlock: .passphrase("pw"), kdf: kdf)
        for i in 0..<5 { try vault.set("v\(i)", service: "svc", account: "a\(i)") }
        try vault.remove(service: "svc", account: "a1")
        try vault.remove(service: "svc", account: "a3")
        try vault.set("v4-updated", service: "svc", account: "a4", label: "updated")
        try vault.apply([
            .set(service: "batch", account: "x", secret: Array("bx".utf8), label: nil, comment: nil),
            .remove(service: "svc", account: "a0"),
        ])
        manifest.append([
            "file": "deleted-items.coffer", "unlock": ["kind": "passphrase", "passphrase": "pw"],
            "items": [
                item("batch", "x", "", "", Array("bx".utf8)), item("svc", "a2", "", "", Array("v2".utf8)),
                item("svc", "a4", "updated", "", Array("v4-updated".utf8)),
            ],
            "records": 10,
        ])
    }
    for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasSuffix(".lock") {
        try FileManager.default.removeItem(at: directory.appendingPathComponent(name))
    }
    let json = try JSONSerialization.data(withJSONObject: ["format_version": 1, "vaults": manifest],
                                          options: [.prettyPrinted, .sortedKeys])
    try json.write(to: directory.appendingPathComponent("manifest.json"))
}
