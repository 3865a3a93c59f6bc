import CofferCore
import CofferRuntime
import CofferCrypto
import CofferState
import CofferStorage
import CofferVault
import Foundation

/// A model as an application writes it: one counter, incremented with `$counter.update`.
final class CounterModel {
    @Stored(backed: .keyValue(key: "counter")) var counter = 0
}

final class VaultCounterModel {
    @Stored(backed: .vault(service: "counter", account: "stored")) var counter = 0
}

/// `stored-increment`: `times` increments through `$counter.update` in a context rooted at
/// `directory`, started together with the other children ("ready", then one line of input).
func storedIncrement(directory: String, times: Int, vault: Bool) throws {
    let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
    let context = CofferContext(directory: URL(fileURLWithPath: directory))
        .with(VaultConfiguration(unlock: .key(key), createIfMissing: true))
    try CofferContext.$current.withValue(context) {
        let increment: () throws -> Void
        if vault {
            let model = VaultCounterModel()
            _ = try model.$counter.load()
            increment = { try model.$counter.update { $0 += 1 } }
        } else {
            let model = CounterModel()
            _ = try model.$counter.load()
            increment = { try model.$counter.update { $0 += 1 } }
        }
        say("ready")
        _ = readLine()
        for _ in 0..<times { try increment() }
    }
}

/// `watch-release DIR`: a property observed, then dropped, twice. Prints what the process held
/// during the second round and after it, so a parent can check that the watcher thread and its
/// descriptors go away with the last property:
/// `running-during=1 running-after=0 fds-during=N fds-after=M fds-baseline=B threads-during=… threads-after=… threads-baseline=…`
func watchRelease(directory: String) throws {
    func count(_ path: String) -> Int { (try? FileManager.default.contentsOfDirectory(atPath: path).count) ?? -1 }
    let context = CofferContext(directory: URL(fileURLWithPath: directory))
    try CofferContext.$current.withValue(context) {
        func round() throws -> (running: Bool, fds: Int, threads: Int) {
            let model = CounterModel()
            _ = try model.$counter.load()
            return (FileWatcher.shared.isRunning, count("/proc/self/fd"), count("/proc/self/task"))
        }
        // A released property's cell lingers a moment (to be taken up again) before it is let
        // go in the background; `settle()` lets go of it now, as the wait would.
        _ = try round()
        CellRegistry.settle()
        Thread.sleep(forTimeInterval: 0.05)
        let baseline = (fds: count("/proc/self/fd"), threads: count("/proc/self/task"))
        let during = try round()
        CellRegistry.settle()
        // The last cancel returns once the watcher thread has closed its descriptors and is
        // returning; the kernel drops the thread from /proc a moment later.
        var waited = 0
        while count("/proc/self/task") > baseline.threads, waited < 200 {
            Thread.sleep(forTimeInterval: 0.01)
            waited += 1
        }
        let after = (running: FileWatcher.shared.isRunning, fds: count("/proc/self/fd"), threads: count("/proc/self/task"))
        say(
            "running-during=\(during.running ? 1 : 0) running-after=\(after.running ? 1 : 0) "
                + "fds-during=\(during.fds) fds-after=\(after.fds) fds-baseline=\(baseline.fds) "
                + "threads-during=\(during.threads) threads-after=\(after.threads) threads-baseline=\(baseline.threads)")
    }
}

final class ConvergeModel {
    @Stored(backed: .keyValue(key: "shared")) var shared = -1
}

/// `stored-converge DIR INDEX WRITES`: after "ready" and one line of input, writes WRITES values
/// to the shared key (INDEX × 1,000,000 + n) and to its own key `own-INDEX` (n), says "done",
/// then reads a line "expect V": waits (5 s at most) until its *in-memory* shared value, kept
/// current only by watching, equals V, and prints "shared=<value> own=<own value>".
func storedConverge(directory: String, index: Int, writes: Int) throws {
    let context = CofferContext(directory: URL(fileURLWithPath: directory))
    try CofferContext.$current.withValue(context) {
        let model = ConvergeModel()
        let own = Stored(wrappedValue: -1, backed: .keyValue(key: "own-\(index)"))
        _ = try model.$shared.load()
        _ = try own.load()
        say("ready")
        _ = readLine()
        for n in 0..<writes {
            model.shared = index * 1_000_000 + n
            own.wrappedValue = n
        }
        say("done")
        guard let line = readLine(), line.hasPrefix("expect "), let expected = Int(line.dropFirst(7)) else {
            fail("expected 'expect V'")
        }
        let deadline = Date().addingTimeInterval(5)
        while model.shared != expected, Date() < deadline { Thread.sleep(forTimeInterval: 0.002) }
        say("shared=\(model.shared) own=\(own.wrappedValue)")
    }
}

/// `stored-follow DIR`: observes `theme` (default "light"), says "ready", and prints
/// "theme=<value> warnings=<kinds>" once it changed (or after 5 s).
func storedFollow(directory: String) throws {
    let warnings = Locked<[String]>([])
    CofferWarning.setHandler { warning in warnings.withLock { $0.append(warning.kind.name) } }
    let context = CofferContext(directory: URL(fileURLWithPath: directory))
    try CofferContext.$current.withValue(context) {
        let theme = Stored(wrappedValue: "light", backed: .keyValue(key: "theme"))
        _ = try theme.load()
        say("ready")
        let deadline = Date().addingTimeInterval(5)
        while theme.wrappedValue == "light", Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        say("theme=\(theme.wrappedValue) warnings=\(warnings.withLock { $0.joined(separator: ",") })")
    }
}
