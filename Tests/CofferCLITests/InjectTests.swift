import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `coffer inject`: templates filled with secrets, written 0600 and atomically, or not at all.
@Suite("coffer inject")
struct InjectTests {
    @Test("Placeholders are filled with exactly the stored bytes; other braces stay; the file is 0600; nothing leaks", .timeLimit(.minutes(10)))
    func fillsTemplate() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("hunter2".utf8))
        try box.set("api", "team/ops", Array("tok\nen".utf8))
        let template = """
            db: {{ coffer://db.internal/app }}
            api: {{coffer://api/team%2Fops}} and again {{   coffer://db.internal/app   }}
            kept: {{ .Values.other }} {{ not a reference }}

            """
        let path = box.path + "/config.tpl"
        let out = box.path + "/config.yml"
        try box.write(template, to: path)
        try box.write("old contents", to: out)
        #expect(chmod(out, 0o644) == 0)
        let run = try box.run(["inject", "-i", path, "-o", out])
        #expect(run.status == Exit.ok && run.err.contains("3 placeholders filled"), "\(run)")
        let written = try String(contentsOfFile: out, encoding: .utf8)
        #expect(
            written == """
                db: hunter2
                api: tok
                en and again hunter2
                kept: {{ .Values.other }} {{ not a reference }}

                """)
        var status = stat()
        #expect(stat(out, &status) == 0 && status.st_mode & 0o777 == 0o600)
        #expect(!run.out.contains("hunter2") && !run.err.contains("hunter2"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: box.path).allSatisfy { !$0.hasSuffix(".tmp") })
        // Standard input to standard output.
        let piped = try box.run(["inject"], stdin: Array("x={{ coffer://db.internal/app }};".utf8))
        #expect(piped.status == Exit.ok && piped.out == "x=hunter2;", "\(piped)")
    }

    @Test("A missing item or a malformed placeholder fails before anything is written, naming it", .timeLimit(.minutes(10)))
    func refusesBeforeWriting() throws {
        let box = try Sandbox()
        try box.initVault()
        try box.set("db.internal", "app", Array("hunter2".utf8))
        let out = box.path + "/out"
        try box.write("untouched", to: out)
        let cases: [(String, Int32, String)] = [
            ("a={{ coffer://db.internal/app }} b={{ coffer://db.internal/nobody }}", Exit.notFound, "coffer://db.internal/nobody"),
            ("line one\n{{ coffer://no-slash }}", Exit.usage, "line 2"),
            ("{{ coffer://a/b/c }}", Exit.usage, "exactly one /"),
            ("{{ coffer://db.internal/app ", Exit.usage, "no }}"),
            ("{{ coffer://db.internal/%zz }}", Exit.usage, "%-escape"),
        ]
        for (template, code, said) in cases {
            try box.write(template, to: box.path + "/t")
            let run = try box.run(["inject", "-i", box.path + "/t", "-o", out])
            #expect(run.status == code && run.err.contains(said), "\(template): \(run)")
            #expect(try String(contentsOfFile: out, encoding: .utf8) == "untouched", "\(template)")
            #expect(!run.err.contains("hunter2"))
        }
    }
}
