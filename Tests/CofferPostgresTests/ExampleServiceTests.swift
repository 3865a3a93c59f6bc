#if ExampleService
import CofferTesting
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The example service (Examples/TenantService) as its users run it: the built binary, real
/// HTTP, the test's PostgreSQL cluster. Guards against the example rotting (a route that no
/// longer answers as its README says), values lost across a restart or a graceful shutdown, a
/// shutdown that hangs or fails, and a token reaching its output.
@Suite("Examples/TenantService, run as a process")
struct ExampleServiceTests {
    /// One run of the service, listening on a port it chose.
    struct Service {
        let child: HelperChild
        let base: String

        /// Starts the binary with `environment` and waits (60 s at most) for it to say where it
        /// listens; a failure shows its output through `shown`, which hides the tokens.
        init(environment: [String: String], shown: (String) -> String) async throws {
            child = try HelperChild(
                [], executable: builtProduct(named: "TenantService"), environment: environment, standardError: .capture)
            let prefix = "tenant-service: listening on "
            guard let line = try await child.waitForLine(startingWith: prefix, seconds: 60) else {
                if child.process.isRunning { kill(child.process.processIdentifier, SIGKILL) }
                throw Failure(description: "the service never said it was listening: \(shown(child.transcript))")
            }
            base = "http://" + line.dropFirst(prefix.count)
        }

        /// One request; `status` and the body as text. Each request has a 20 s deadline.
        func call(_ method: String, _ path: String, body: String? = nil) async throws -> (status: Int, body: String) {
            var request = URLRequest(url: URL(string: base + path)!, timeoutInterval: 20)
            request.httpMethod = method
            if let body { request.httpBody = Data(body.utf8) }
            let (data, response) = try await URLSession.shared.data(for: request)
            let status = (response as? HTTPURLResponse)?.statusCode ?? -1
            return (status, String(decoding: data, as: UTF8.self))
        }

        /// SIGTERM, then waits (30 s at most; SIGKILL after) for the process to end.
        /// - Returns: whether it exited by itself, and its status.
        func terminate() async throws -> (exited: Bool, status: Int32) {
            kill(child.process.processIdentifier, SIGTERM)
            let deadline = ContinuousClock.now + .seconds(30)
            while child.process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            let hung = child.process.isRunning
            if hung { kill(child.process.processIdentifier, SIGKILL) }
            let status = try await child.waitForExit(seconds: 30)
            return (!hung && child.process.terminationReason == .exit, status)
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    @Test("every route answers; values survive a restart; SIGTERM flushes and exits 0; no token in the output",
        .timeLimit(.minutes(10)))
    func serviceRoundTrip() async throws {
        let cluster = try PostgresTestCluster.shared
        let directory = try TemporaryDirectory(prefix: "coffer-example-service")
        let keyFile = directory.url("vault.key")
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: keyFile)
        let data = directory.url("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: false)
        let environment = [
            "TENANT_SERVICE_DATA": data.path, "TENANT_SERVICE_KEY_FILE": keyFile.path, "TENANT_SERVICE_PORT": "0",
            "TENANT_SERVICE_HOST": "127.0.0.1", "DATABASE_URL": cluster.url,
        ]
        let token = "tok-\(UUID().uuidString)"
        let otherToken = "tok-\(UUID().uuidString)"
        let setting = uniqueName("timeout")  // the cluster is shared with other tests
        var transcripts: [String] = []
        /// `text` as a failure message may show it: the tokens replaced (they must never be printed).
        func shown(_ value: Any) -> String {
            [token, otherToken].reduce(String(describing: value)) { $0.replacingOccurrences(of: $1, with: "<token>") }
        }

        // First run: every route.
        var service = try await Service(environment: environment, shown: shown)
        var reply = try await service.call("GET", "/flags/beta-ui")
        #expect(reply.status == 200 && reply.body == "false", "\(shown(reply))")
        reply = try await service.call("PUT", "/flags/beta-ui", body: "true")
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("GET", "/flags/beta-ui")
        #expect(reply.status == 200 && reply.body == "true", "\(shown(reply))")
        reply = try await service.call("PUT", "/flags/beta-ui", body: "yes")
        #expect(reply.status == 400, "\(shown(reply))")

        reply = try await service.call("GET", "/tenants/acme/token")
        #expect(reply.status == 200 && reply.body == "not set", "\(shown(reply))")
        reply = try await service.call("PUT", "/tenants/acme/token", body: token)
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("GET", "/tenants/acme/token")
        #expect(reply.status == 200 && reply.body == "set", "\(shown(reply))")
        reply = try await service.call("POST", "/tenants/acme/token/check", body: token)
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("POST", "/tenants/acme/token/check", body: otherToken)
        #expect(reply.status == 403, "\(shown(reply))")
        reply = try await service.call("POST", "/tenants/nobody/token/check", body: token)
        #expect(reply.status == 403, "\(shown(reply))")
        reply = try await service.call("PUT", "/tenants/globex/token", body: otherToken)
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("DELETE", "/tenants/globex/token")
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("GET", "/tenants/globex/token")
        #expect(reply.status == 200 && reply.body == "not set", "\(shown(reply))")
        // A tenant name the vault refuses (over 1,024 bytes): the client's error, logged without the token.
        reply = try await service.call("PUT", "/tenants/\(String(repeating: "a", count: 1100))/token", body: token)
        #expect(reply.status == 400, "\(shown(reply))")
        let echoed = reply.body.contains(token)  // a Bool: #expect would print the operands
        #expect(!echoed, "the error answer repeats the token")

        reply = try await service.call("GET", "/settings/\(setting)")
        #expect(reply.status == 404, "\(shown(reply))")
        reply = try await service.call("PUT", "/settings/\(setting)", body: "30")
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("GET", "/settings/\(setting)")
        #expect(reply.status == 200 && reply.body == "30", "\(shown(reply))")
        // Through PostgreSQL itself: the write is committed, not only in the service's memory.
        let rows = try cluster.sql(
            "SELECT count(*) FROM coffer_kv WHERE suite = 'settings' AND key = '\(setting)' AND value IS NOT NULL")
        #expect(rows.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(rows)")

        // Writes just before SIGTERM: a coalesced flag (made durable by CofferService) and a setting.
        reply = try await service.call("PUT", "/flags/late", body: "true")
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("PUT", "/settings/\(setting)", body: "45")
        #expect(reply.status == 204, "\(shown(reply))")
        var ended = try await service.terminate()
        transcripts.append(service.child.transcript)
        #expect(ended.exited && ended.status == 0, "\(shown(service.child.transcript))")
        // Bools, not the log in the expectation: #expect prints its operands, and the log is
        // only shown with the tokens replaced.
        let shutDown = service.child.standardError.contains("coffer: shut down")
        let locked = service.child.standardError.contains("coffer.locked=1")
        #expect(shutDown && locked, "CofferService did not shut down: \(shown(service.child.transcript))")

        // Second run on the same directory and database: everything is still there.
        service = try await Service(environment: environment, shown: shown)
        reply = try await service.call("GET", "/flags/beta-ui")
        #expect(reply.status == 200 && reply.body == "true", "\(shown(reply))")
        reply = try await service.call("GET", "/flags/late")
        #expect(reply.status == 200 && reply.body == "true", "\(shown(reply))")
        reply = try await service.call("GET", "/tenants/acme/token")
        #expect(reply.status == 200 && reply.body == "set", "\(shown(reply))")
        reply = try await service.call("POST", "/tenants/acme/token/check", body: token)
        #expect(reply.status == 204, "\(shown(reply))")
        reply = try await service.call("GET", "/tenants/globex/token")
        #expect(reply.status == 200 && reply.body == "not set", "\(shown(reply))")
        reply = try await service.call("GET", "/settings/\(setting)")
        #expect(reply.status == 200 && reply.body == "45", "\(shown(reply))")
        ended = try await service.terminate()
        transcripts.append(service.child.transcript)
        #expect(ended.exited && ended.status == 0, "\(shown(service.child.transcript))")

        // The vault file holds no token in the clear either.
        let vault = try Data(contentsOf: data.appendingPathComponent("default.coffer"))
        let inClear = vault.range(of: Data(token.utf8)) != nil
        #expect(!inClear, "the vault file holds a token in the clear")
        let leaked = transcripts.contains { $0.contains(token) || $0.contains(otherToken) }
        #expect(!leaked, "a token reached the service's output")
    }

    @Test("without a key for the vault it exits 2 and says which variables to set")
    func refusesWithoutKey() throws {
        var environment = ProcessInfo.processInfo.environment
        for name in ["TENANT_SERVICE_KEY_FILE", "TENANT_SERVICE_PASSPHRASE"] { environment[name] = nil }
        environment["TENANT_SERVICE_PORT"] = "0"
        let run = try HelperChild.run(
            [], executable: builtProduct(named: "TenantService"), environment: environment, inheritsEnvironment: false,
            standardError: .capture)
        #expect(run.reason == .exit && run.status == 2, "\(run)")
        #expect(run.errors.contains("TENANT_SERVICE_KEY_FILE") && run.errors.contains("TENANT_SERVICE_PASSPHRASE"), "\(run)")
    }
}
#endif
