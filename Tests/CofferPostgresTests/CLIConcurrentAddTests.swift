#if Postgres
import CofferTesting
import Foundation
import Testing

/// `coffer generate` and `coffer import` on one new item of a PostgreSQL vault, two at once:
/// exactly one adds it. The existence check and the write were two steps (two transactions),
/// so both found no item, both wrote, and one printed secret was silently replaced.
@Suite("coffer --store postgres://: two additions of one item at once")
struct PostgresCLIConcurrentAddTests {
    /// Starts `coffer` with each of `runs` (arguments, standard input) at once, and waits for all.
    static func atOnce(_ runs: [[String]]) throws -> [(status: Int32, output: String, errors: String)] {
        let children = try runs.map {
            try HelperChild($0, executable: builtProduct(named: "coffer"), standardError: .capture)
        }
        return children.map { child in
            let status = child.wait()
            return (status, child.output, child.standardError)
        }
    }

    @Test("Two generate --print, and two imports with different secrets, of one new item at once: one succeeds, the other fails and replaces nothing", .timeLimit(.minutes(10)))
    func oneOfTwoAdds() throws {
        let cluster = try PostgresTestCluster.shared
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-pg-race-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyFile = directory.appendingPathComponent("key")
        try Data(repeating: 0x44, count: 32).write(to: keyFile)
        let name = uniqueName("race")
        let store = ["--store", cluster.url + "&vault=\(name)", "--key-file", keyFile.path]
        var (status, _, err) = try PostgresCLITests.coffer(store + ["init"])
        #expect(status == 0, "\(err)")

        for pair in 0..<10 {
            let runs = try Self.atOnce(Array(repeating: store + ["generate", "race", "pair-\(pair)", "--print"], count: 2))
            let winners = runs.filter { $0.status == 0 }
            // Statuses and errors only: standard output holds a generated secret.
            #expect(winners.count == 1, "pair \(pair): \(runs.map(\.status)) \(runs.map(\.errors))")
            for run in runs where run.status != 0 {
                #expect(run.status == 1 && run.errors.contains("already has a secret") && run.output.isEmpty, "\(run.errors)")
            }
            let stored: String
            (status, stored, err) = try PostgresCLITests.coffer(store + ["get", "race", "pair-\(pair)"])
            #expect(status == 0, "\(err)")
            #expect(winners.count == 1 && stored == winners[0].output, "pair \(pair): the stored secret is not the one printed")
        }

        for round in 0..<6 {
            let files = try (0..<2).map { side in
                let file = directory.appendingPathComponent("import-\(round)-\(side).json")
                try Data(
                    #"{"format": "coffer-export", "version": 1, "items": [{"service": "imported", "account": "r\#(round)", "secret": "secret-\#(side)-\#(round)"}]}"#
                        .utf8
                ).write(to: file)
                return file.path
            }
            let runs = try Self.atOnce(files.map { store + ["import", "json", $0] })
            let winners = runs.indices.filter { runs[$0].status == 0 }
            #expect(winners.count == 1, "round \(round): \(runs.map(\.status)) \(runs.map(\.errors))")
            for run in runs where run.status != 0 {
                #expect(run.status == 1 && run.errors.contains("already exist") && run.errors.contains("nothing was imported"), "\(run.errors)")
            }
            let stored: String
            (status, stored, err) = try PostgresCLITests.coffer(store + ["get", "imported", "r\(round)"])
            #expect(status == 0, "\(err)")
            #expect(winners.count == 1 && stored == "secret-\(winners[0])-\(round)", "round \(round): the stored secret is not the successful import's")
        }
    }
}
#endif
