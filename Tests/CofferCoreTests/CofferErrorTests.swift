import CofferCore
import Testing

@Suite("CofferError")
struct CofferErrorTests {
    @Test func ioErrorNamesPathAndErrno() {
        let error = CofferError.io("open", path: "/var/lib/app/store.kv", errno: 2)
        #expect(error.code == .io)
        #expect(error.errno == 2)
        #expect(error.path == "/var/lib/app/store.kv")
        #expect(error.description.contains("/var/lib/app/store.kv"))
        #expect(error.description.contains("errno 2"))
        #expect(error.description.contains("No such file or directory"))
        #expect(error.description.contains("open failed"))
        #expect(error.debugDescription.contains("I/O error"))
    }

    @Test func descriptionIncludesOffsetAndCause() {
        let cause = CofferError(.io, "disk on fire", errno: 5)
        let error = CofferError(.corrupted, "record fails its checksum", path: "/s", offset: 4096, cause: cause)
        #expect(error.description.contains("4096"))
        #expect(error.description.contains("disk on fire"))
        #expect(error.description.contains("record fails its checksum"))
    }

    @Test func codesCompareAndHash() {
        #expect(CofferError.Code.notFound == .notFound)
        #expect(CofferError.Code.notFound != .alreadyExists)
        #expect(CofferError.Code.wrongKey != .corrupted)
        let all: Set<CofferError.Code> = [
            .notFound, .alreadyExists, .wrongKey, .corrupted, .unsupportedVersion, .locked, .busy, .io,
            .invalidArgument, .encoding, .decoding, .cycle, .closed, .crypto,
        ]
        #expect(all.count == 14)
        #expect(Set(all.map(\.description)).count == 14)
        #expect(CofferError.Code.busy.description == "busy")
    }

    @Test func catchClauseMatchesCode() {
        func fail(_ code: CofferError.Code) throws { throw CofferError(code, "x") }
        var matched = ""
        do {
            try fail(.notFound)
        } catch CofferError.Code.busy {
            matched = "busy"
        } catch CofferError.Code.notFound {
            matched = "notFound"
        } catch {
            matched = "other"
        }
        #expect(matched == "notFound")

        struct Unrelated: Error {}
        #expect(!(CofferError.Code.notFound ~= Unrelated()))
        #expect(CofferError.Code.io ~= CofferError.io("read", path: nil, errno: 5))
    }

    @Test func errnoText() {
        #expect(CofferError.errnoText(28).contains("28"))
        #expect(CofferError.errnoText(28).contains("No space left on device"))
    }
}
