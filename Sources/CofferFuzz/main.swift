// Coffer's fuzz targets (see Fuzz/README.md).
//
//   CofferFuzz TARGET [libFuzzer options…] [CORPUS_DIR…]
//       built for fuzzing (make fuzz: -DCOFFER_LIBFUZZER -sanitize=fuzzer,address -use-ld=lld):
//       hands TARGET (frames, header, vault) to libFuzzer's LLVMFuzzerRunDriver.
//   CofferFuzz replay TARGET FILE_OR_DIR…
//       any build: runs TARGET once on each file (the regression check for the corpus and for
//       every crash ever found); prints how many inputs ran.
//   CofferFuzz make-corpus DIR
//       writes the seed corpus (valid files and tamper cases) into DIR/<target>/.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

func die(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

/// Runs `target` once on every file under `paths`; returns the count.
func replay(_ target: FuzzTarget, _ paths: [String]) -> Int {
    var count = 0
    for path in paths {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { die("no such file: \(path)") }
        let files =
            isDirectory.boolValue
            ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
            : [path]
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            data.withUnsafeBytes { target.run($0) }
            count += 1
        }
    }
    return count
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { die("usage: CofferFuzz TARGET [options] | replay TARGET PATH… | make-corpus DIR") }

switch arguments[1] {
case "replay":
    guard arguments.count >= 4, let target = FuzzTarget(rawValue: arguments[2]) else {
        die("usage: CofferFuzz replay TARGET PATH…")
    }
    print("\(target.rawValue): \(replay(target, Array(arguments[3...]))) inputs ran without a crash")
case "make-corpus":
    guard arguments.count >= 3 else { die("usage: CofferFuzz make-corpus DIR") }
    do { try makeCorpus(in: arguments[2]) } catch { die("error: \(error)") }
default:
    guard let target = FuzzTarget(rawValue: arguments[1]) else { die("unknown target or command \(arguments[1])") }
    #if COFFER_LIBFUZZER
    runLibFuzzer(target, arguments: [arguments[0]] + arguments[2...])
    #else
    die("this build has no libFuzzer (make fuzz builds one); use: CofferFuzz replay \(target.rawValue) PATH…")
    #endif
}

#if COFFER_LIBFUZZER
/// The target libFuzzer's callback runs (set once, before the driver starts).
nonisolated(unsafe) var selectedTarget = FuzzTarget.frames

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

/// Hands the process to libFuzzer with `arguments` (the program name first, then its options).
func runLibFuzzer(_ target: FuzzTarget, arguments: [String]) -> Never {
    selectedTarget = target
    var argc = Int32(arguments.count)
    var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    let status = cArguments.withUnsafeMutableBufferPointer { buffer in
        var argv = buffer.baseAddress
        return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            selectedTarget.run(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
    }
    exit(status)
}

/// `-sanitize=fuzzer` also links libFuzzer's `main` object, which needs this symbol; our own
/// `main` (above) is the one that runs, so this is never called.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    selectedTarget.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
#endif
