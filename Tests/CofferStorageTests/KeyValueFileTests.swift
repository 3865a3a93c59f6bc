import CofferCore
import CofferRuntime
import CofferStorage
import CofferTesting
import Foundation
import Testing

@Suite("Key-value file strategy")
struct KeyValueFileTests {
    @Test func valuesSurviveReopenInBothDurabilityModes() throws {
        for durability in [Durability.immediate, .coalesced] {
            let dir = try Scratch("kv-reopen")
            do {
                let store = try KeyValueFileStrategy(directory: dir.url, suite: "prefs", durability: durability)
                try store.set("dark", for: "theme")
                try store.set(30.5, for: "timeout")
                try store.set(1, for: "gone")
                try store.remove("gone")
                try store.saveBatch([("a", Data([1])), ("b", nil), ("c", Data())])
            }
            let store = try KeyValueFileStrategy(directory: dir.url, suite: "prefs", durability: durability)
            #expect(try store.get(String.self, for: "theme") == "dark")
            #expect(try store.get(Double.self, for: "timeout") == 30.5)
            #expect(try store.load("gone") == nil)
            #expect(try store.load("a") == Data([1]))
            #expect(try store.load("c") == Data())
            #expect(Set(try store.keys()) == ["theme", "timeout", "a", "c"])
        }
    }

    /// A store's own methods called from its `update` transform (which runs under the store's
    /// lock) throw `.invalidArgument` saying so: they trapped in the mutex before ("Recursive
    /// call to lock Mutex"). Nothing is written by the refused call or the update it ends.
    @Test func callsFromInsideItsOwnUpdateAreRefusedNotATrap() throws {
        let dir = try Scratch("kv-reentry")
        for exclusive in [false, true] {
            let store = try KeyValueFileStrategy(directory: dir.url, suite: "s\(exclusive)", exclusive: exclusive)
            try store.set(1, for: "n")
            var refused: [CofferError] = []
            let calls: [(KeyValueFileStrategy) throws -> Void] = [
                { try $0.set(2, for: "n") }, { try $0.set(2, for: "other") }, { _ = try $0.load("n") },
                { _ = try $0.keys() }, { try $0.remove("n") }, { try $0.saveBatch([("b", Data([1]))]) },
                { try $0.update("n") { (n: Int?) in n } }, { _ = try $0.compareAndSwap("n", expected: nil, new: nil) },
                { try $0.compact() }, { try $0.flush() }, { _ = try $0.observeChanges { _ in } },
            ]
            for call in calls {
                #expect(throws: CofferError.self) {
                    try store.update("n") { (n: Int?) -> Int? in
                        do { try call(store) } catch let error as CofferError {
                            refused.append(error)
                            throw error
                        }
                        return 99
                    }
                }
            }
            #expect(refused.count == calls.count)
            for error in refused {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains("inside a closure it runs under its own lock"), "\(error.message)")
            }
            // The store works on, and holds only what was there.
            #expect(try store.get(Int.self, for: "n") == 1)
            #expect(try store.keys() == ["n"])
            try store.update("n") { (n: Int?) in (n ?? 0) + 1 }
            #expect(try store.get(Int.self, for: "n") == 2)
        }
        let reopened = try KeyValueFileStrategy(directory: dir.url, suite: "sfalse")
        #expect(try reopened.get(Int.self, for: "n") == 2)
        #expect(try reopened.keys() == ["n"])
    }

    @Test func compactionKeepsEveryLiveValueAndShrinksTheFile() throws {
        let dir = try Scratch("kv-compact")
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "s")
        let big = Data(repeating: 7, count: 4096)
        for round in 0..<200 {
            for key in 0..<5 { try store.save(big + Data([UInt8(round & 0xFF)]), for: "k\(key)") }
        }
        let stats = store.statistics
        #expect(stats.keys == 5)
        // 1,000 writes of 4 KiB: without compaction the file would hold 4 MB.
        #expect(stats.fileBytes < 1_000_000)
        let reopened = try KeyValueFileStrategy(directory: dir.url, suite: "s")
        for key in 0..<5 { #expect(try reopened.load("k\(key)") == big + Data([199])) }
    }

    @Test func filesAre0600AndDirectories0700() throws {
        let dir = try Scratch("kv-perm")
        let nested = dir.url.appendingPathComponent("a/b")
        let store = try KeyValueFileStrategy(directory: nested, suite: "s")
        try store.set("v", for: "k")
        try store.compact()
        let disk = try DiskStrategy(directory: nested.appendingPathComponent("files"))
        try disk.set("v", for: "k")
        let fs = LiveFileSystem()
        for directory in [dir.path + "/a", dir.path + "/a/b", dir.path + "/a/b/files"] {
            #expect(try fs.stat(directory)?.mode == 0o700, "\(directory)")
        }
        for file in try FileManager.default.subpathsOfDirectory(atPath: dir.path + "/a") {
            let status = try #require(try fs.stat(dir.path + "/a/" + file))
            if !status.isDirectory { #expect(status.mode == 0o600, "\(file)") }
        }
    }

    @Test func aSecondInstanceSeesWritesWithoutReopening() throws {
        let dir = try Scratch("kv-two")
        let a = try KeyValueFileStrategy(directory: dir.url, suite: "s")
        let b = try KeyValueFileStrategy(directory: dir.url, suite: "s")
        try a.set(1, for: "x")
        #expect(try b.get(Int.self, for: "x") == 1)
        try b.set(2, for: "x")
        #expect(try a.get(Int.self, for: "x") == 2)
        try a.compact()
        try b.set(3, for: "y")
        #expect(try a.get(Int.self, for: "y") == 3)
        #expect(try a.get(Int.self, for: "x") == 2)
    }

    /// A child process appends while this process keeps its store open and reads.
    @Test func childProcessWritesAreSeenWithoutReopening() throws {
        let dir = try Scratch("kv-child")
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "shared")
        try store.set(-1, for: "parent")
        let result = try HelperChild.run(["kv-write", dir.path, "shared", "50", "child-", "coalesced"])
        #expect(result.status == 0)
        #expect(result.output.split(separator: "\n").count == 50)
        for i in 0..<50 { #expect(try store.get(Int.self, for: "child-\(i)") == i) }
        #expect(try store.get(Int.self, for: "parent") == -1)
    }

    /// Two processes each increment one counter 500 times through `update`: none is lost.
    @Test func twoProcessesIncrementingOneCounterLoseNothing() throws {
        let dir = try Scratch("kv-counter")
        let children = try (0..<2).map { _ in try HelperChild(["kv-increment", dir.path, "counter", "n", "500"]) }
        for child in children { #expect(child.wait() == 0) }
        let store = try KeyValueFileStrategy(directory: dir.url, suite: "counter")
        #expect(try store.get(Int.self, for: "n") == 1000)
    }

    @Test func damagedSuiteIsReportedAndSalvageable() throws {
        let dir = try Scratch("kv-damage")
        do {
            let store = try KeyValueFileStrategy(directory: dir.url, suite: "s", durability: .immediate)
            for i in 0..<10 { try store.set("value-\(i)", for: "k\(i)") }
        }
        let path = dir.path + "/s.cofferkv"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        let marker = Array("value-4".utf8)
        let at = try #require((0..<(bytes.count - marker.count)).first { Array(bytes[$0..<($0 + marker.count)]) == marker })
        bytes[at] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: CofferError.self) { _ = try KeyValueFileStrategy(directory: dir.url, suite: "s") }
        #expect(error?.code == .corrupted)
        #expect(error?.offset != nil)
        #expect(error.map { !$0.description.contains("value-") } ?? false)
        let salvaged = try KeyValueFileStrategy(directory: dir.url, suite: "s", recovery: .salvage)
        #expect(Set(try salvaged.keys()) == Set((0..<10).filter { $0 != 4 }.map { "k\($0)" }))
    }

    @Test func badSuiteNamesAreRejected() {
        for name in ["", "a/b", "..", "."] {
            expectError(.invalidArgument) {
                _ = try KeyValueFileStrategy(directory: URL(fileURLWithPath: "/tmp"), suite: name)
            }
        }
    }

    @Test func aFileInTheWayOfTheDirectoryIsAClearError() throws {
        let dir = try Scratch("kv-inway")
        try Data("x".utf8).write(to: dir.url.appendingPathComponent("blocker"))
        let error = #expect(throws: CofferError.self) {
            _ = try KeyValueFileStrategy(directory: dir.url.appendingPathComponent("blocker/sub"), suite: "s")
        }
        #expect(error?.code == .io)
    }
}

@Suite("Disk strategy")
struct DiskStrategyTests {
    @Test func oddKeysMapToSafeNamesAndRoundTrip() throws {
        let dir = try Scratch("disk-keys")
        let store = try DiskStrategy(directory: dir.url)
        let keys = [
            "plain", "UPPER", "upper", "a/b/c", "../../etc/passwd", "..", ".", ".hidden", "spaces and\ttabs",
            "émoji 🔑", "e\u{301}", "\u{e9}", String(repeating: "long-key-", count: 112), String(repeating: "ü", count: 1000),
        ]
        for (i, key) in keys.enumerated() { try store.set(i, for: key) }
        for (i, key) in keys.enumerated() { #expect(try store.get(Int.self, for: key) == i, "\(key.prefix(20))") }
        #expect(Set(try store.keys()) == Set(keys))
        // Nothing escaped the directory.
        for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) {
            #expect(!name.contains("/"))
            #expect(name.utf8.count <= 255)
        }
        for key in keys { try store.remove(key) }
        #expect(try store.keys().isEmpty)
    }

    @Test func damagedFileReadsAsCorruptedNotAsWrongData() throws {
        let dir = try Scratch("disk-damage")
        let store = try DiskStrategy(directory: dir.url)
        try store.set("secret-ish value", for: "k")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.path).first)
        let path = dir.path + "/" + name
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes[bytes.count - 2] ^= 1
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: CofferError.self) { _ = try store.load("k") }
        #expect(error?.code == .corrupted)
        #expect(error.map { !$0.description.contains("secret-ish") } ?? false)
    }
}

@Suite("Key-value file strategy, exclusive")
struct ExclusiveKeyValueTests {
    @Test func anExclusiveSuiteKeepsOthersOutUntilItCloses() throws {
        let dir = try Scratch("kv-exclusive")
        do {
            let store = try KeyValueFileStrategy(directory: dir.url, suite: "s", exclusive: true)
            for i in 0..<100 { try store.set(i, for: "k\(i % 7)") }
            try store.saveBatch([("a", Data([1])), ("b", nil)])
            #expect(try store.get(Int.self, for: "k6") == 97)
            // Another instance (another descriptor, as another process would be) is refused.
            let error = #expect(throws: CofferError.self) {
                _ = try KeyValueFileStrategy(directory: dir.url, suite: "s", lockTimeout: .seconds(0.2))
            }
            #expect(error?.code == .busy)
            // A child process too.
            let child = try HelperChild.run(["kv-write", dir.path, "s", "1", "child-", "coalesced"])
            #expect(child.status != 0)
        }
        // Closed: the next opener, exclusive or not, gets in and sees everything.
        let reopened = try KeyValueFileStrategy(directory: dir.url, suite: "s", exclusive: true)
        #expect(try reopened.get(Int.self, for: "k0") == 98)
        #expect(try reopened.load("a") == Data([1]))
        #expect(Set(try reopened.keys()).count == 8)
    }
}
