import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Suspending coffer at a prompt without echo: after Ctrl-Z and `fg`, the
/// rest of the passphrase must still not be shown.
@Suite("coffer prompts and job control")
struct JobControlTests {
    /// Waits until `pid`'s state in /proc is `state` ("T" stopped, "S" sleeping …).
    private func waitForState(_ pid: pid_t, _ states: Set<Character>, timeout: Double = 5) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let paren = stat.lastIndex(of: ")"),
                let state = stat[stat.index(paren, offsetBy: 2)...].first,
                states.contains(state)
            {
                return true
            }
            usleep(10_000)
        }
        return false
    }

    /// Waits until the terminal's echo is `on`.
    private func waitForEcho(_ terminal: PseudoTerminal, on: Bool, timeout: Double = 5) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if terminal.echoes == on { return true }
            usleep(10_000)
        }
        return false
    }

    @Test(
        "stopped and continued at the prompt, echo is off again even if the shell turned it on",
        .timeLimit(.minutes(10)))
    func echoOffAfterContinue() throws {
        let box = try Sandbox()
        try box.initVault()
        let terminal = try PseudoTerminal()
        let child = try box.start(["set", "svc", "acct"], terminal: terminal)
        #expect(terminal.waitFor("Secret for svc / acct"))
        #expect(waitForEcho(terminal, on: false))
        terminal.send(Array("first-".utf8))
        // Stopped (SIGSTOP: no handler runs), and meanwhile the shell puts its own modes back.
        kill(child.pid, SIGSTOP)
        #expect(waitForState(child.pid, ["T"]))
        terminal.turnEchoOn()
        kill(child.pid, SIGCONT)
        #expect(waitForEcho(terminal, on: false), "echo is still on after SIGCONT")
        let rest = "second-" + UUID().uuidString
        terminal.type(rest)
        let run = box.expectClean(child.wait())
        #expect(run.status == Exit.ok, "\(run)")
        terminal.drain()
        #expect(terminal.transcript.firstRange(of: Array(rest.utf8)) == nil, "typed after fg was echoed")
        #expect(try box.run(["get", "svc", "acct"]).printed(Array(("first-" + rest).utf8)))
    }

    @Test("Ctrl-Z at the prompt gives the terminal back, then asks again without echo", .timeLimit(.minutes(10)))
    func ctrlZRestartsThePrompt() throws {
        let box = try Sandbox()
        try box.initVault()
        let terminal = try PseudoTerminal()
        let child = try box.start(["get", "svc", "acct"], passphraseFile: false, terminal: terminal)
        let prompt = "Passphrase for \(box.vault): "
        #expect(terminal.waitFor(prompt))
        terminal.send(Array("typed-before-".utf8))
        // Ctrl-Z: the terminal sends SIGTSTP to the foreground group. (The test's child is alone
        // in its session, an orphaned group, so the kernel does not actually stop it; what is
        // checked is what coffer does around the stop.)
        terminal.send([0x1A])
        // The prompt again, on a new line (the terminal shows "\n" as "\r\n").
        #expect(terminal.waitFor("\n" + prompt), "the prompt was not shown again")
        #expect(waitForEcho(terminal, on: false))
        terminal.type(box.passphrase)  // only what follows the new prompt counts
        let run = box.expectClean(child.wait())
        #expect(run.status == Exit.notFound, "\(run)")  // unlocked: the passphrase was right
        terminal.drain()
        #expect(terminal.transcript.firstRange(of: Array(box.passphrase.utf8)) == nil, "the passphrase was echoed")
    }
}
