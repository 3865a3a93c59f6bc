import CofferCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A throwaway PostgreSQL server for tests: `initdb` into a new temporary directory, `pg_ctl
/// start` on a free loopback port (and a Unix socket in the same directory), trust
/// authentication for the superuser `coffer`, stopped and deleted by ``stop()``, at process
/// exit, or by a watchdog when the test process dies.
///
/// PostgreSQL refuses to run as root; as root, the server runs as `nobody` (through `runuser`),
/// which owns the directory. The binaries are looked up in `$COFFER_PG_BIN`, then
/// `/usr/lib/postgresql/<newest>/bin`, then the `PATH`.
///
/// ```swift
/// let cluster = try PostgresTestCluster.shared      // one per test process
/// let url = cluster.url                             // postgres://coffer@127.0.0.1:<port>/postgres
/// ```
public final class PostgresTestCluster: @unchecked Sendable {
    /// The data directory (and socket directory).
    public let directory: String
    /// The loopback port.
    public let port: Int
    /// The superuser.
    public let user = "coffer"
    /// The binaries' directory.
    public let binaries: String
    private let runAs: String?
    /// Whether this process started the server and has not stopped it.
    private let running = Locked(false)

    /// `postgres://coffer@127.0.0.1:<port>/postgres`.
    public var url: String { "postgres://\(user)@127.0.0.1:\(port)/postgres?sslmode=disable" }

    /// The cluster every test of the process shares, started on first use.
    public static var shared: PostgresTestCluster {
        get throws { try sharedCluster.get() }
    }

    private static let sharedCluster: Result<PostgresTestCluster, any Error> = Result {
        try PostgresTestCluster()
    }

    /// The clusters this process started and has not stopped, stopped at exit.
    private static let live = Locked<[PostgresTestCluster]>([])

    /// Starts a new cluster of its own (for a test that stops or restarts its server).
    /// - Throws: ``PostgresTestCluster/Failure`` when PostgreSQL is not installed or does not start.
    public init() throws {
        binaries = try Self.findBinaries()
        let isRoot = geteuid() == 0
        runAs = isRoot ? "nobody" : nil
        var template = Array("/tmp/coffer-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure("mkdtemp failed: errno \(errno)") }
        directory = String(cString: made)
        port = try Self.freePort()
        if isRoot {
            var pw = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var buffer = [CChar](repeating: 0, count: 4096)
            guard getpwnam_r("nobody", &pw, &buffer, buffer.count, &result) == 0, result != nil else {
                throw Failure("running as root, and there is no user 'nobody' to run PostgreSQL as")
            }
            guard chown(directory, pw.pw_uid, pw.pw_gid) == 0 else { throw Failure("chown failed: errno \(errno)") }
        }
        let data = directory + "/data"
        try run(
            "initdb", ["-D", data, "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"],
            what: "initdb")
        try start()
        let first = Self.live.withLock { live in
            live.append(self)
            return live.count == 1
        }
        if first { atexit { PostgresTestCluster.stopAll() } }
        startWatchdog()
    }

    /// Starts the server (again, after ``stopServer(mode:)``): same data, same port.
    public func start() throws {
        try run(
            "pg_ctl",
            [
                "-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "60", "-o",
                "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c max_connections=200 "
                    + "-c fsync=on -c synchronous_commit=on", "start",
            ], what: "pg_ctl start")
        running.withLock { $0 = true }
    }

    /// Stops the server, keeping its data: `fast` (a clean shutdown) or `immediate` (as if it
    /// crashed: no checkpoint; committed transactions must come back from the WAL).
    public func stopServer(mode: String = "fast") throws {
        try run("pg_ctl", ["-D", directory + "/data", "-m", mode, "-w", "stop"], what: "pg_ctl stop")
        running.withLock { $0 = false }
    }

    /// Copies the data directory to `name` beside it, as a cold backup (stop the server first).
    public func backUp(as name: String) throws {
        try runTool(["/bin/cp", "-a", directory + "/data", directory + "/" + name], what: "backup")
    }

    /// Replaces the data directory with the backup `name` (stop the server first): the server
    /// restarts as it was when the backup was taken, its transaction counter included.
    public func restore(_ name: String) throws {
        try runTool(["/bin/rm", "-rf", directory + "/data"], what: "restore")
        try runTool(["/bin/cp", "-a", directory + "/" + name, directory + "/data"], what: "restore")
    }

    /// Runs a program as the server's user.
    private func runTool(_ command: [String], what: String) throws {
        let full = runAs != nil ? ["/usr/sbin/runuser", "-u", runAs!, "--"] + command : command
        let status = try Self.spawn(full, output: "/dev/null", errors: "/dev/null", wait: true, newSession: false)
        guard status == 0 else { throw Failure("\(what) failed (\(status)): \(command.joined(separator: " "))") }
    }

    /// Stops the server and deletes its directory.
    public func stop() {
        let wasRunning = running.withLock { running in
            defer { running = false }
            return running
        }
        if wasRunning { _ = try? run("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"], what: "stop") }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a client program of the cluster's (`psql`, `pg_dump`) against it and returns its
    /// standard output.
    @discardableResult
    public func client(_ program: String, _ arguments: [String]) throws -> String {
        try run(program, ["-h", "127.0.0.1", "-p", String(port), "-U", user] + arguments, what: program, asServer: false)
    }

    /// Runs SQL through `psql` (stops at the first error) and returns its unaligned output.
    @discardableResult
    public func sql(_ statements: String, database: String = "postgres") throws -> String {
        try client("psql", ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", statements])
    }

    /// The server's log so far (for a failure message).
    public var log: String {
        (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
    }

    private static func stopAll() {
        let all = live.withLock { live in
            defer { live = [] }
            return live
        }
        for cluster in all { cluster.stop() }
    }

    /// A shell loop that stops the server and removes its directory once this process is gone
    /// (a crashed or killed test run leaves no server behind). In a session of its own, so a
    /// signal to the test's process group does not end it first.
    private func startWatchdog() {
        let script =
            "while [ -d /proc/\(getpid()) ]; do sleep 1; done; "
            + "'\(binaries)/pg_ctl' -D '\(directory)/data' -m immediate stop >/dev/null 2>&1; rm -rf '\(directory)'"
        let arguments = runAs == nil ? ["/bin/sh", "-c", script] : ["/usr/sbin/runuser", "-u", runAs!, "--", "/bin/sh", "-c", script]
        _ = try? Self.spawn(arguments, output: "/dev/null", errors: "/dev/null", wait: false, newSession: true)
    }

    @discardableResult
    private func run(_ program: String, _ arguments: [String], what: String, asServer: Bool = true) throws -> String {
        let path = binaries + "/" + program
        let command = asServer && runAs != nil ? ["/usr/sbin/runuser", "-u", runAs!, "--", path] + arguments : [path] + arguments
        // Files, not pipes: the server that pg_ctl starts inherits descriptors and would keep a
        // pipe open for good. posix_spawn and waitpid, not Foundation's Process, whose exit
        // monitoring missed `runuser`'s exit here.
        let base = "\(directory)/.run-\(UUID().uuidString)"
        defer {
            unlink(base + ".out")
            unlink(base + ".err")
        }
        let status = try Self.spawn(command, output: base + ".out", errors: base + ".err", wait: true, newSession: false)
        let out = (try? Data(contentsOf: URL(fileURLWithPath: base + ".out"))) ?? Data()
        let err = (try? Data(contentsOf: URL(fileURLWithPath: base + ".err"))) ?? Data()
        guard status == 0 else {
            throw Failure(
                "\(what) failed (\(status)): \(String(decoding: err, as: UTF8.self))"
                    + (what.hasPrefix("pg_ctl") ? "\nserver log:\n\(log)" : ""))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Starts `command` with standard input from /dev/null and its output appended to files;
    /// returns its exit status when `wait`, else 0 at once.
    private static func spawn(_ command: [String], output: String, errors: String, wait: Bool, newSession: Bool)
        throws -> Int32
    {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o666)
        posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY | O_CREAT | O_APPEND, 0o666)
        // Nothing of this process but 0-2 reaches the child. A watcher lives as long as the test
        // process, and any descriptor it inherits by chance stays open as long: Foundation's
        // Process learns that its child exited when a socket the child holds closes, so a watcher
        // started by one test while another thread was starting a child kept that child's socket
        // open, and the test waited for the child's exit for good (a clean-clone run hung so, the
        // child a zombie). glibc's closefrom action (2.34 and later; Swift's Glibc module does
        // not declare it) closes every descriptor from 3 up in the child.
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if newSession { posix_spawnattr_setflags(&attributes, 0x80) }  // POSIX_SPAWN_SETSID (glibc)
        var argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, command[0], &actions, &attributes, &argv, environ)
        guard result == 0 else { throw Failure("cannot start \(command[0]): errno \(result)") }
        guard wait else { return 0 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw Failure("waitpid failed: errno \(errno)") }
        }
        // WIFEXITED / WEXITSTATUS, spelled out (the macros are not imported).
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    private static func findBinaries() throws -> String {
        let fm = FileManager.default
        if let given = ProcessInfo.processInfo.environment["COFFER_PG_BIN"], fm.fileExists(atPath: given + "/pg_ctl") {
            return given
        }
        let root = "/usr/lib/postgresql"
        let versions = ((try? fm.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        for version in versions.reversed() where fm.fileExists(atPath: "\(root)/\(version)/bin/pg_ctl") {
            return "\(root)/\(version)/bin"
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            if fm.fileExists(atPath: "\(directory)/pg_ctl") && fm.fileExists(atPath: "\(directory)/initdb") {
                return String(directory)
            }
        }
        throw Failure(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed: run `make test` (which installs "
                + "them with scripts/install-postgres.sh) or `apt-get install postgresql`, or set COFFER_PG_BIN")
    }

    /// A loopback port nothing listens on now.
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw Failure("bind failed: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Why the cluster could not be set up.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
