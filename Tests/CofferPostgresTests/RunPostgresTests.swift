#if Postgres
import CofferTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer --store postgres://… run --watch`: a change made through PostgreSQL by another
/// process restarts the child with the new value (LISTEN/NOTIFY).
@Suite("coffer --store postgres:// run")
struct RunPostgresTests {
    @Test("run --watch restarts the child after coffer --store … set from another process", .timeLimit(.minutes(10)))
    func watchRestartsOnChange() throws {
        let cluster = try PostgresTestCluster.shared
        let directory = try TemporaryDirectory(prefix: "coffer-pg-run")
        let keyFile = directory.path("key")
        try Data(repeating: 0x44, count: 32).write(to: URL(fileURLWithPath: keyFile))
        let store = ["--store", cluster.url + "&vault=\(uniqueName("run"))", "--key-file", keyFile]
        func coffer(_ arguments: [String], input: String = "") throws -> HelperChild.Finished {
            try HelperChild.run(
                store + arguments, executable: builtProduct(named: "coffer"), input: Data(input.utf8),
                standardError: .capture)
        }
        var run = try coffer(["init"])
        #expect(run.status == 0, "\(run)")
        run = try coffer(["set", "db.internal", "app"], input: "before-\(UUID().uuidString)")
        #expect(run.status == 0, "\(run)")

        let log = directory.path("starts")
        // Each start appends its pid and which value it got (by the value's tag).
        let program = """
            import os, sys, time
            value = os.environb[b"S"]
            which = "first" if value.startswith(b"before-") else "second" if value.startswith(b"after-") else "other"
            with open(sys.argv[1], "a") as log: log.write("%d %s\\n" % (os.getpid(), which))
            deadline = time.time() + 300
            while time.time() < deadline: time.sleep(0.05)
            """
        let child = try HelperChild(
            store + ["run", "--watch", "--env", "S=coffer://db.internal/app", "--", "python3", "-c", program, log],
            executable: builtProduct(named: "coffer"), standardError: .capture)
        func starts() -> [Substring] {
            String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self).split(separator: "\n")
        }
        #expect(eventually(timeout: 120) { starts().count == 1 }, "the child never started: \(child.transcript)")
        let second = "after-\(UUID().uuidString)"
        let before = Date()
        run = try coffer(["set", "db.internal", "app"], input: second)
        #expect(run.status == 0, "\(run)")
        let restarted = eventually(timeout: 20) { starts().count >= 2 }
        let seconds = Date().timeIntervalSince(before)
        #expect(restarted, "no restart within 20 s of the change: \(child.transcript)")
        print("coffer run --watch (PostgreSQL): the restarted child ran \(String(format: "%.3f", seconds)) s after coffer set began")
        #expect(starts().last?.hasSuffix(" second") == true, "the restarted child did not get the new value")
        kill(child.process.processIdentifier, SIGTERM)
        #expect(child.wait() == 128 + SIGTERM)
        #expect(child.standardError.contains("coffer://db.internal/app changed"), "\(child.transcript)")
        #expect(!child.standardError.contains(second) && !child.output.contains(second))
    }
}
#endif
