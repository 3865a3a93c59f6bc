import CofferCrypto
import Foundation
import Testing

@Suite("SecureBytes")
struct SecureBytesTests {
    @Test func neverPrintsItsBytes() throws {
        let secret = try SecureBytes(utf8: "hunter2-hunter2")
        #expect(secret.description == "<redacted>")
        #expect("\(secret)" == "<redacted>")
        #expect(secret.debugDescription == "SecureBytes(15 bytes, <redacted>)")
        #expect(String(reflecting: secret) == "SecureBytes(15 bytes, <redacted>)")
        var dumped = ""
        dump(secret, to: &dumped)
        #expect(!dumped.contains("hunter2"))
        #expect(!dumped.contains("0x"), "no storage address either")
        #expect(dumped.contains("count: 15"))
        let error = CryptoError(code: .failed, message: "x")
        #expect(error.description == "CryptoError.failed: x")
    }

    @Test func copiesAndExposesBytes() throws {
        let bytes: [UInt8] = [0, 1, 2, 0xFF]
        #expect(try SecureBytes(copying: bytes).testCopy == bytes)
        #expect(try SecureBytes(copying: Data(bytes)).testCopy == bytes)
        #expect(try bytes.withUnsafeBytes { try SecureBytes(copying: $0) }.testCopy == bytes)
        #expect(try SecureBytes(utf8: "pässword").testCopy == Array("pässword".utf8))
        #expect(try SecureBytes(count: 5).testCopy == [0, 0, 0, 0, 0])
        #expect(try SecureBytes(count: 4096 + 3).testCopy == [UInt8](repeating: 0, count: 4099))
    }

    @Test func zeroLengthWorks() throws {
        let empty = try SecureBytes(count: 0)
        #expect(empty.count == 0)
        #expect(empty.testCopy.isEmpty)
        #expect(empty == (try SecureBytes(copying: [UInt8]())))
        #expect(empty == (try SecureBytes(utf8: "")))
        #expect(try SecureBytes.random(count: 0).count == 0)
        #expect(empty != (try SecureBytes(count: 1)))
    }

    @Test func negativeCountThrows() {
        expectCryptoError(.invalidLength) { try SecureBytes(count: -1) }
        expectCryptoError(.invalidLength) { try SecureBytes.random(count: -1) }
    }

    @Test func equalityComparesContentsAndLength() throws {
        let a = try SecureBytes(copying: [1, 2, 3] as [UInt8])
        #expect(a == a)
        #expect(a == (try SecureBytes(copying: [1, 2, 3] as [UInt8])))
        #expect(a != (try SecureBytes(copying: [1, 2, 4] as [UInt8])))
        #expect(a != (try SecureBytes(copying: [0, 2, 3] as [UInt8])))
        #expect(a != (try SecureBytes(copying: [1, 2] as [UInt8])))
        #expect(a != (try SecureBytes(copying: [1, 2, 3, 0] as [UInt8])))
    }

    @Test func randomIsNotZeroAndNotRepeated() throws {
        let a = try SecureBytes.random(count: 32)
        let b = try SecureBytes.random(count: 32)
        #expect(a.count == 32)
        let aIsAllZero = a.withUnsafeBytes { $0.allSatisfy { $0 == 0 } }
        #expect(!aIsAllZero)
        #expect(a != b)
        #expect(a != (try SecureBytes(count: 32)))
    }

    @Test func isUsableFromManyTasksAtOnce() async throws {
        let key = try SecureBytes.random(count: 32)
        let expected = key.testCopy
        let matches = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask { key.testCopy == expected && key == key }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(matches == 16)
    }

    @Test func sodiumInitialisesAndReportsItsVersion() throws {
        try Sodium.initialize()
        try Sodium.initialize()
        #expect(Sodium.versionString.split(separator: ".").count == 3)
    }

    @Test func errorCodesMatchInCatchClauses() throws {
        do {
            _ = try XChaCha20Poly1305.open(
                [UInt8](repeating: 0, count: 16), key: SecureBytes(count: 32), nonce: [UInt8](repeating: 0, count: 24),
                associatedData: [UInt8]())
            Issue.record("opened garbage")
        } catch CryptoError.Code.invalidLength {
            Issue.record("wrong code")
        } catch CryptoError.Code.authenticationFailed {
            // expected
        }
        #expect(CryptoError.Code.authenticationFailed.description == "authenticationFailed")
        #expect(CryptoError.Code.invalidLength != .invalidParameter)
        let codes: Set<CryptoError.Code> = [
            .authenticationFailed, .invalidLength, .invalidParameter, .outOfMemory, .initializationFailed, .failed,
        ]
        #expect(codes.count == 6)
    }
}
