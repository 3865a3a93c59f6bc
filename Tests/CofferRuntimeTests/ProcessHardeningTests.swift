import CofferCore
import CofferRuntime
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// ProcessHardening's environment call; its whole effect on a real process (core limit,
/// dumpable flag, /proc/<pid>/environ, crash output) is tested on the CLI in
/// Tests/CofferCLITests/HardeningTests.swift, so this test process stays as it is.
@Suite("ProcessHardening")
struct ProcessHardeningTests {
    @Test func consumingAVariableGivesItsBytesOnceAndRemovesIt() throws {
        let name = "COFFER_TEST_CONSUME_\(getpid())"
        #expect(setenv(name, "s3cret-value", 1) == 0)
        let seen = ProcessHardening.consumeEnvironmentVariable(name) { bytes in bytes.map { Array($0) } }
        #expect(seen == Array("s3cret-value".utf8))
        #expect(getenv(name) == nil)
        let again = ProcessHardening.consumeEnvironmentVariable(name) { bytes in bytes == nil }
        #expect(again)
        #expect(setenv(name, "", 1) == 0)
        #expect(ProcessHardening.consumeEnvironmentVariable(name) { $0?.count } == 0)
    }
}
