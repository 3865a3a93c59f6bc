import CofferCore
import CofferState
import CofferStorage
import Foundation
import Testing

@Suite("Stored")
struct StoredTests {
    @Test("A missing key reads as the initial value, and reading writes nothing")
    func absentKeyGivesInitialValue() throws {
        let store = RecordingStrategy()
        let count = Stored(wrappedValue: 7, backed: .strategy(store, key: "count"))
        #expect(count.wrappedValue == 7)
        #expect(count.error == nil)
        #expect(try store.keys().isEmpty)
        #expect(store.recorded.saves == 0)
    }

    @Test("The first read loads once; later reads are served from memory")
    func loadsOnceThenCaches() throws {
        let store = RecordingStrategy()
        try store.put(42, for: "answer")
        let answer = Stored(wrappedValue: 0, backed: .strategy(store, key: "answer"))
        #expect(store.recorded.loads == 0)  // creating a property does no I/O
        for _ in 0..<100 { #expect(answer.wrappedValue == 42) }
        #expect(store.recorded.loads == 1)
    }

    @Test("A write persists before the setter returns, and a new property reads it back")
    func writePersists() throws {
        try withTemporaryContext { _ in
            let name = Stored(wrappedValue: "", backed: .keyValue(key: "name"))
            name.wrappedValue = "Ada"
            let reopened = Stored(wrappedValue: "", backed: .keyValue(key: "name"))
            #expect(reopened.wrappedValue == "Ada")
        }
    }

    @Test("A write equal to the current value does nothing")
    func equalWriteIsIgnored() throws {
        let store = RecordingStrategy()
        let size = Stored(wrappedValue: 12, backed: .strategy(store, key: "size"))
        size.wrappedValue = 12
        #expect(store.recorded.saves == 0)
        size.wrappedValue = 13
        size.wrappedValue = 13
        #expect(store.recorded.saves == 1)
        // Equal to the stored (loaded) value, not just the initial one.
        let again = Stored(wrappedValue: 0, backed: .strategy(store, key: "size"))
        again.wrappedValue = 13
        #expect(store.recorded.saves == 1)
    }

    @Test("A value that is not Equatable is written every time")
    func nonEquatableAlwaysWrites() throws {
        struct Blob: Codable, Sendable { var bytes: [UInt8] }
        let store = RecordingStrategy()
        let blob = Stored(wrappedValue: Blob(bytes: []), backed: .strategy(store, key: "blob"))
        blob.wrappedValue = Blob(bytes: [1])
        blob.wrappedValue = Blob(bytes: [1])
        #expect(store.recorded.saves == 2)
    }

    @Test("Setting an Optional to nil removes the key")
    func nilRemoves() throws {
        let store = RecordingStrategy()
        let token = Stored<String?>(wrappedValue: nil, backed: .strategy(store, key: "token"))
        token.wrappedValue = "abc"
        #expect(store.raw("token") != nil)
        token.wrappedValue = nil
        #expect(store.raw("token") == nil)
        #expect(store.recorded.removes == 1)
        #expect(Stored<String?>(wrappedValue: nil, backed: .strategy(store, key: "token")).wrappedValue == nil)
    }

    enum Appearance: String, Codable, Sendable { case light, dark, system }

    @Test("Collections, enums and nested Codable values round-trip through a real store")
    func codableValues() throws {
        struct Window: Codable, Sendable, Equatable {
            var origin: [Double]
            var titles: [String: String]
        }
        try withTemporaryContext { _ in
            let tags = Stored(wrappedValue: Set<String>(), backed: .keyValue(key: "tags"))
            let recent = Stored(wrappedValue: [String](), backed: .disk(key: "recent"))
            let sizes = Stored(wrappedValue: [String: Int](), backed: .keyValue(suite: "layout", key: "sizes"))
            let appearance = Stored(wrappedValue: Appearance.system, backed: .keyValue(key: "appearance"))
            let window = Stored(wrappedValue: Window(origin: [], titles: [:]), backed: .disk(key: "window"))
            let data = Stored(wrappedValue: Data(), backed: .keyValue(key: "data"))
            let ratio = Stored(wrappedValue: Float(1), backed: .keyValue(key: "ratio"))
            let big = Stored(wrappedValue: UInt64(0), backed: .keyValue(key: "big"))

            tags.wrappedValue = ["a", "b"]
            recent.wrappedValue = ["/tmp/x", "/tmp/y"]
            sizes.wrappedValue = ["sidebar": 240, "inspector": 300]
            appearance.wrappedValue = .dark
            window.wrappedValue = Window(origin: [10, 20], titles: ["main": "Untitled"])
            data.wrappedValue = Data([0, 1, 2, 255])
            ratio.wrappedValue = 0.75
            big.wrappedValue = .max

            #expect(Stored(wrappedValue: Set<String>(), backed: .keyValue(key: "tags")).wrappedValue == ["a", "b"])
            #expect(Stored(wrappedValue: [String](), backed: .disk(key: "recent")).wrappedValue == ["/tmp/x", "/tmp/y"])
            #expect(
                Stored(wrappedValue: [String: Int](), backed: .keyValue(suite: "layout", key: "sizes")).wrappedValue
                    == ["sidebar": 240, "inspector": 300])
            #expect(Stored(wrappedValue: Appearance.system, backed: .keyValue(key: "appearance")).wrappedValue == .dark)
            #expect(
                Stored(wrappedValue: Window(origin: [], titles: [:]), backed: .disk(key: "window")).wrappedValue
                    == Window(origin: [10, 20], titles: ["main": "Untitled"]))
            #expect(Stored(wrappedValue: Data(), backed: .keyValue(key: "data")).wrappedValue == Data([0, 1, 2, 255]))
            #expect(Stored(wrappedValue: Float(1), backed: .keyValue(key: "ratio")).wrappedValue == 0.75)
            #expect(Stored(wrappedValue: UInt64(0), backed: .keyValue(key: "big")).wrappedValue == .max)
        }
    }

    @Test("Bytes that are not a Value keep the initial value and surface a decoding error")
    func decodingErrorSurfaces() throws {
        let store = RecordingStrategy()
        try store.put("not a number", for: "count")
        let count = Stored(wrappedValue: 5, backed: .strategy(store, key: "count"))
        #expect(count.wrappedValue == 5)
        #expect(count.error?.code == .decoding)
        #expect(throws: CofferError.self) { try count.load() }
        // A successful write replaces the bad bytes and clears the error.
        count.wrappedValue = 6
        #expect(count.error == nil)
        #expect(try store.get(Int.self, for: "count") == 6)
    }

    @Test("load() reads a value another writer stored, and save(_:) writes through")
    func explicitLoadAndSave() throws {
        let store = RecordingStrategy()
        let level = Stored(wrappedValue: 1, backed: .strategy(store, key: "level"))
        #expect(level.wrappedValue == 1)
        try store.put(9, for: "level")
        #expect(level.wrappedValue == 1)  // memory until asked
        #expect(try level.load() == 9)
        #expect(level.wrappedValue == 9)
        try store.remove("level")
        #expect(try level.load() == 1)  // absent again: the initial value

        let savesBefore = store.recorded.saves
        try level.save(1)  // equal to the current value, written anyway
        #expect(store.recorded.saves == savesBefore + 1)
        #expect(try store.get(Int.self, for: "level") == 1)
    }

    @Test("A property resolves in the context current when it was created")
    func contextCapturedAtCreation() throws {
        let first = try CofferContext.temporary(prefix: "coffer-state-test")
        let second = try CofferContext.temporary(prefix: "coffer-state-test")
        defer {
            try? FileManager.default.removeItem(at: first.directory)
            try? FileManager.default.removeItem(at: second.directory)
        }
        let property = CofferContext.$current.withValue(first) { Stored(wrappedValue: "", backed: .keyValue(key: "owner")) }
        CofferContext.$current.withValue(second) {
            property.wrappedValue = "first"  // used under `second`, but created under `first`
            #expect(property.context === first)
            #expect(Stored(wrappedValue: "", backed: .keyValue(key: "owner")).wrappedValue == "")
        }
        CofferContext.$current.withValue(first) {
            #expect(Stored(wrappedValue: "", backed: .keyValue(key: "owner")).wrappedValue == "first")
        }
    }

    @Test("Memory is the default and never touches the file system")
    func memoryIsDefault() throws {
        try withTemporaryContext { context in
            final class Scratch {
                @Stored var text = ""
                @Stored var count = 0
            }
            let scratch = Scratch()
            scratch.text = "hello"
            scratch.count = 3
            #expect(scratch.text == "hello")
            #expect(scratch.$text.backing.description == "memory")
            #expect(Scratch().text == "")
            let files = try FileManager.default.contentsOfDirectory(atPath: context.directory.path)
            #expect(files.isEmpty)
        }
    }
}
