#!/usr/bin/env python3
"""Fails on a dangling reference in the repository's documents, or a tracker number in them.

A document must stand alone: everything it points at is in the repository, under the name it
uses. Checked in every Markdown file (README.md, docs/*.md, the DocC articles, ...):

- a relative link `[text](path#anchor)`, `[text]: path`, or DocC `<doc:Article>`: the file or
  directory exists, inside the repository (`../notes/DESIGN.md` is outside it), and the anchor
  is the GitHub anchor of one of its headings;
- a path in backticks or in the prose (`Sources/CofferVault/Vault.swift`, docs/FORMAT.md,
  `vault/` beside the document, a bare `Keychain.swift` or `*Command*.swift` in backticks): it
  exists (a path names the repository root or the document's own folder; a bare Swift, Python,
  shell or Markdown file name matches some file of the repository);
- a section named after a document, `docs/FORMAT.md §2, "Recipient slot"`, `RELIABILITY.md
  section 8`, `README "Integrations"`, or inside one document `§4`, `section 11`, `see "Rotation
  and revocation"`: the document has that heading. A name matches a heading's whole title
  (numbering, backticks and emphasis left out) or the title's part before a colon or a
  parenthesis ("Key slot" for "Key slot (128 bytes)"). A bold paragraph label is not a heading.

In the Swift sources, tests, Package.swift, the Makefile and the scripts, the same check applies
to each named Markdown document and its sections (`docs/SECURITY.md`, "the Rotation section").

Tracker numbers ("issue 6", "(issue 13)", "issue-15", "#34", "PR #5") and figures labelled as a
ticket's ("(issue: ≈ 19 ns)") are refused in documents and in the Swift sources and tests: a
reader of a clone has no tracker, so the text says what was meant.
Files listed in TRACKER_WARN_ONLY are reported as warnings instead (their owners remove them).

Before the repository, the script checks itself against a planted tree (PLANTED below: each
known kind of dangling reference must be reported, and nothing else), so it cannot pass by
having stopped looking.

Usage: scripts/check-doc-references.py [repository-directory]
Exit status 0 when nothing dangles, 1 otherwise (each problem on its own line: path:line: text),
2 when the self-test fails.
"""
import fnmatch
import os
import re
import subprocess
import sys

# Files whose tracker numbers are warnings, not failures (none left: keep the list empty).
TRACKER_WARN_ONLY = set()

SKIP_DIRS = {".git", ".build", ".swiftpm", "node_modules", ".benchmarkBaselines"}
CODE_SUFFIXES = (".swift", ".py", ".sh", ".c", ".h")
CODE_NAMES = ("Makefile",)
BARE_FILE_SUFFIXES = (".md", ".swift", ".py", ".sh")


def repository_files(root):
    """Every file of the working tree that git does not ignore (tracked or new)."""
    try:
        listing = subprocess.run(
            ["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            check=True, capture_output=True, text=True,
        ).stdout
        files = [f for f in listing.split("\0") if f and os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for directory, subdirectories, names in os.walk(root):
            subdirectories[:] = [d for d in subdirectories
                                 if d not in SKIP_DIRS and not d.startswith(".build")]
            for name in names:
                files.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(f.replace(os.sep, "/") for f in files
                  if not any(part in SKIP_DIRS or part.startswith(".build") for part in f.split("/")))


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


# ------------------------------------------------------------------------------ Markdown

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def blank_fences(text):
    """The text with fenced code blocks blanked (same length, same line numbers)."""
    out, fence = [], None
    for line in text.splitlines(keepends=True):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)[0] * len(match.group(2))
            out.append(re.sub(r"[^\n]", " ", line))
        elif fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            out.append(re.sub(r"[^\n]", " ", line))
        else:
            out.append(line)
    return "".join(out)


CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def split_code_spans(text):
    """(prose with code spans blanked, [(offset, content) of each code span])."""
    spans = []

    def blank(match):
        spans.append((match.start(2), match.group(2)))
        return re.sub(r"[^\n]", " ", match.group(0))

    return CODE_SPAN.sub(blank, text), spans


def normalize(title):
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = title.replace("`", "").replace("**", "").replace("\\", "")
    title = re.sub(r"(?<!\w)[*_]|[*_](?!\w)", "", title)
    title = title.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"\s+", " ", title).strip().strip(".,;").lower()


def github_anchor(title):
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


class Document:
    """A Markdown file's headings: their names, numbers and anchors."""

    def __init__(self, path, text):
        self.path = path
        self.headings = []  # (names, numbers, section number it lies in)
        self.anchors = set()
        current_section = None
        for line in blank_fences(text).splitlines():
            match = HEADING.match(line)
            if not match:
                continue
            raw = match.group(2)
            anchor = github_anchor(raw)
            base, n = anchor, 1
            while anchor in self.anchors:
                anchor, n = f"{base}-{n}", n + 1
            self.anchors.add(anchor)
            title = normalize(raw)
            numbers = set()
            numbered = re.match(r"^(\d+)(?:\s*[\u2013-]\s*(\d+))?\.\s+(.*)$", title)
            if numbered:
                first = int(numbered.group(1))
                last = int(numbered.group(2) or first)
                numbers = set(range(first, last + 1))
                current_section = numbers
                title = numbered.group(3)
            names = {title}
            for cut in (":", " ("):
                if cut in title:
                    names.add(title.split(cut)[0].strip())
            self.headings.append((names, numbers, current_section if not numbers else numbers))

    def has_number(self, number):
        return any(number in numbers for _, numbers, _ in self.headings)

    def has_name(self, name, number=None):
        wanted = re.sub(r"^\d+(?:\s*[\u2013-]\s*\d+)?\.\s+", "", normalize(name))
        for names, _, section in self.headings:
            if wanted in names and (number is None or (section and number in section)):
                return True
        return False


def swift_comments(text):
    """The text with everything but comments blanked (same length, same line numbers)."""
    out, i, n, state = [], 0, len(text), "code"
    while i < n:
        c = text[i]
        if state == "code":
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
                out.append(text[i:end]); i = end; continue
            if text.startswith("/*", i):
                end = text.find("*/", i)
                end = n if end < 0 else end + 2
                out.append(text[i:end]); i = end; continue
            if text.startswith('"""', i):
                end = text.find('"""', i + 3)
                end = n if end < 0 else end + 3
                out.append(re.sub(r"[^\n]", " ", text[i:end])); i = end; continue
            if c == '"':
                j = i + 1
                while j < n and text[j] not in '"\n':
                    j += 2 if text[j] == "\\" else 1
                out.append(re.sub(r"[^\n]", " ", text[i:j + 1])); i = j + 1; continue
        out.append(c if c == "\n" else " ")
        i += 1
    return "".join(out)[:n]


# ------------------------------------------------------------------------------ the checker

DOC_NAME = r"(?:\.{1,2}/)?(?:[\w.+-]+/)*[\w+-]+\.md\b|\bREADME\b(?!\.)"
QUOTED = r"[\"\u201c](?P<name>[^\"\u201d\n]{1,100}(?:\n[^\"\u201d\n]{1,100})?)[\"\u201d]"
SECTION_AFTER_DOC = re.compile(
    r"(?P<doc>" + DOC_NAME + r")(?:'s|\u2019s)?"
    r"(?:\s*,?\s*(?:\u00a7\s*(?P<num>\d+)(?!\.\d)|\bsection\s+(?P<num2>\d+)\b))?"
    r"(?:(?:\s*,\s*|\s+|\s*\(\s*|(?:\s+[a-z]+){1,3}\s*\(\s*)" + QUOTED + r")?"
)
SEE_QUOTED = re.compile(r"\b[Ss]ee\s+(?:also\s+)?" + QUOTED
                        + r"(?:\s+(?:in|of)\s+(?P<doc>" + DOC_NAME + r"))?")
BARE_SECTION = re.compile(r"(?:\u00a7\s*(?P<num>\d+)(?![.\d])|\b[Ss]ection\s+(?P<num2>\d+)\b(?!\.\d))"
                          r"(?:(?:\s*,\s*|\s+|\s*\(\s*)" + QUOTED + r")?")
NOT_OURS_BEFORE_SECTION = re.compile(r"(RFC\s*\d+|draft-[\w-]+|BIP\s*\d+|FIPS[\w\s-]*|NIST[\w\s.-]*)\s*,?\s*$")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s|$)", re.M)
DOCC_LINK = re.compile(r"<doc:(?P<target>[^>#]+)(?:#(?P<anchor>[^>]+))?>")
TRACKER = re.compile(
    r"\b(?:issues?|bugs?|tickets?|PRs?|pull requests?)[\s-]+#?\d+(?:\s*(?:,|and|&)\s*#?\d+)*\b"
    r"|\(\s*(?:issue|ticket|tracker)\s*:\s*[\u2248~<>\u2264\u2265]?\s*\d[^)\n]*\)"
    r"|(?:(?<=^)|(?<=[\s(\[]))(?<!fsync )(?<!write )(?<!read )(?<!call )(?<!step )(?<!run )#\d+\b",
    re.I | re.M,
)
PROSE_PATH = re.compile(r"(?<![\w/.$~@:-])(?:\.{1,2}/)?[\w.+*-]+(?:/[\w.+*-]+)*/?")
TRAILING = ".,;:)'\"\u201d"


class Checker:
    def __init__(self, root):
        self.root = root
        self.files = repository_files(root)
        self.file_set = set(self.files)
        self.directories = {"/".join(f.split("/")[:i]) for f in self.files
                            for i in range(1, f.count("/") + 1)}
        self.top_level = {f.split("/")[0] for f in self.files}
        self.basenames = {}
        for f in self.files:
            self.basenames.setdefault(f.rsplit("/", 1)[-1], []).append(f)
        self.documents = {}
        self.problems = []
        self.warnings = []

    # -- resolution

    def exists(self, relative):
        relative = relative.rstrip("/")
        if relative in ("", "."):
            return True
        if any(c in relative for c in "*?["):
            return any(fnmatch.fnmatchcase(f, relative) for f in self.files) or \
                any(fnmatch.fnmatchcase(d, relative) for d in self.directories)
        return relative in self.file_set or relative in self.directories

    def inside(self, base_dir, target):
        """The repository-relative path of target seen from base_dir, or None when outside."""
        joined = os.path.normpath(os.path.join(base_dir, target)).replace(os.sep, "/")
        if joined == ".." or joined.startswith("../"):
            return None
        return "" if joined == "." else joined

    def document(self, path):
        if path not in self.documents:
            with open(os.path.join(self.root, path), encoding="utf-8") as f:
                self.documents[path] = Document(path, f.read())
        return self.documents[path]

    def resolve_document(self, name, source):
        """The Markdown file a name in `source` means, or None."""
        base = os.path.dirname(source)
        if name == "README":
            return "README.md"
        candidates = []
        for start in (base, ""):
            resolved = self.inside(start, name)
            if resolved is not None and resolved in self.file_set:
                candidates.append(resolved)
        if candidates:
            return candidates[0]
        if "/" not in name:
            found = self.basenames.get(name, [])
            if len(found) == 1:
                return found[0]
        return None

    def report(self, path, text, offset, message):
        self.problems.append(f"{path}:{line_of(text, offset)}: {message}")

    # -- checks

    def check_path(self, token, source, text, offset, in_code):
        token = token.rstrip(TRAILING)
        if not token or any(c in token for c in "<>{}$~\u2026=@?:%'\"|\\") or token.startswith(("/", "-", "#")):
            return
        base = os.path.dirname(source)
        if token.startswith(("./", "../")):
            resolved = self.inside(base, token)
            if resolved is None or (token.startswith("../") and self.inside("", token) is None
                                    and not self.exists(resolved)):
                # A path in the prose is read from the repository's root as often as from the
                # document's folder: `../notes/DESIGN.md` leaves the repository either way.
                self.report(source, text, offset, f"{token}: outside the repository")
            elif not self.exists(resolved):
                self.report(source, text, offset, f"{token}: no such file or directory")
            return
        first = token.split("/")[0]
        if "/" in token and first in self.top_level:
            local = self.inside(base, token)
            if not self.exists(token) and not (local is not None and self.exists(local)):
                self.report(source, text, offset, f"{token}: no such file or directory")
            return
        if "/" in token and base and (first + "/") and self.exists(base + "/" + first):
            if not self.exists(base + "/" + token):
                self.report(source, text, offset, f"{token}: no such file or directory")
            return
        if token.endswith(".md"):
            if self.resolve_document(token, source) is None and not self.exists(token):
                self.report(source, text, offset, f"{token}: no such document")
            return
        if in_code and token.endswith(BARE_FILE_SUFFIXES) and re.fullmatch(r"[\w.+*/-]+", token):
            pattern = ("*" + token) if token.startswith("+") else token
            if "/" in pattern:
                if not any(d.rsplit("/", 1)[-1] == first for d in self.directories):
                    return  # `t/t0303-credential-external.sh`: another project's tree, not a path here
                found = any(fnmatch.fnmatchcase(f, pattern) or fnmatch.fnmatchcase(f, "*/" + pattern)
                            for f in self.files)
            else:
                found = any(fnmatch.fnmatchcase(name, pattern) for name in self.basenames)
            if not found:
                self.report(source, text, offset, f"{token}: no file of that name in the repository")

    def check_section(self, source, text, offset, doc_path, number, name):
        if doc_path is None:
            return
        document = self.document(doc_path)
        if number is not None and not document.has_number(number):
            self.report(source, text, offset, f"{doc_path} has no section {number}")
            return
        if name is not None and not document.has_name(name, number):
            where = f"{doc_path} section {number}" if number is not None else doc_path
            self.report(source, text, offset, f'{where} has no heading "{" ".join(name.split())}"')

    def check_named_sections(self, source, text, masked):
        """`DOC §N, "Name"` style references; returns the spans they covered."""
        covered = []
        for match in SECTION_AFTER_DOC.finditer(masked):
            name = match.group("doc")
            doc_path = self.resolve_document(name, source)
            if doc_path is None:
                continue  # reported as a path
            number = match.group("num") or match.group("num2")
            quoted = match.group("name")
            if number is None and quoted is None:
                continue
            covered.append((match.start(), match.end()))
            self.check_section(source, text, match.start(), doc_path,
                               int(number) if number else None, quoted)
        return covered

    def check_tracker(self, source, text, masked):
        for match in TRACKER.finditer(masked):
            message = f"tracker number {match.group(0)!r}: say what it means instead"
            entry = f"{source}:{line_of(masked, match.start())}: {message}"
            (self.warnings if source in TRACKER_WARN_ONLY else self.problems).append(entry)

    def check_markdown(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            text = f.read()
        unfenced = blank_fences(text)
        prose, spans = split_code_spans(unfenced)
        base = os.path.dirname(path)

        for match in list(LINK.finditer(prose)) + list(LINK_DEFINITION.finditer(prose)):
            target = match.group("target")
            if re.match(r"^[a-zA-Z][\w+.-]*:", target):
                continue  # https:, mailto:, doc: ...
            file_part, _, anchor = target.partition("#")
            resolved = path if not file_part else self.inside(base, file_part)
            if resolved is None:
                self.report(path, text, match.start(), f"link {target}: outside the repository")
                continue
            if not self.exists(resolved):
                self.report(path, text, match.start(), f"link {target}: no such file or directory")
                continue
            if anchor:
                if not resolved.endswith(".md"):
                    self.report(path, text, match.start(), f"link {target}: an anchor into a file that is not Markdown")
                elif anchor.lower() not in self.document(resolved).anchors:
                    self.report(path, text, match.start(), f"link {target}: no heading with that anchor")

        if ".docc/" in path:
            catalog = path[: path.index(".docc/") + 5]
            for match in DOCC_LINK.finditer(prose):
                article = f"{catalog}/{match.group('target')}.md"
                if article not in self.file_set:
                    self.report(path, text, match.start(), f"<doc:{match.group('target')}>: no such article")
                elif match.group("anchor") and not self.document(article).has_name(match.group("anchor").replace("-", " ")):
                    self.report(path, text, match.start(), f"<doc:{match.group('target')}#{match.group('anchor')}>: no such heading")

        prose = LINK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
        prose = LINK_DEFINITION.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
        for offset, content in spans:
            for token in re.finditer(r"\S+", content):
                self.check_path(token.group(0), path, text, offset + token.start(), in_code=True)
        for match in PROSE_PATH.finditer(prose):
            token = match.group(0)
            if "/" in token or token.rstrip(TRAILING).endswith(".md"):
                if "/" in token and token.split("/")[0] not in self.top_level and not token.startswith((".", )) \
                        and not token.rstrip(TRAILING).endswith(".md"):
                    continue  # and/or, 1/3, read/write: not paths
                self.check_path(token, path, text, match.start(), in_code=False)

        # Sections. Quoted names are looked for in the text with code spans blanked, so that a
        # quote inside backticks is not taken for a heading's name.
        covered = self.check_named_sections(path, text, prose)
        document = self.document(path)
        for match in SEE_QUOTED.finditer(prose):
            if any(start <= match.start() < end for start, end in covered):
                continue
            target = path
            if match.group("doc"):
                target = self.resolve_document(match.group("doc"), path)
            self.check_section(path, text, match.start(), target, None, match.group("name"))
        for match in BARE_SECTION.finditer(prose):
            if any(start <= match.start() < end for start, end in covered):
                continue
            if NOT_OURS_BEFORE_SECTION.search(prose[max(0, match.start() - 40): match.start()]):
                continue
            number = int(match.group("num") or match.group("num2"))
            if not document.has_number(number) and not any(h[1] for h in document.headings):
                self.report(path, text, match.start(), f"section {number}: this document numbers no sections")
                continue
            self.check_section(path, text, match.start(), path, number, match.group("name"))
        self.check_tracker(path, text, prose)

    def check_code(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        if path.endswith(".swift"):
            # References live in comments; a string literal's "a.md" is test data, unless it
            # names a document of the repository (an error message pointing at docs/FORMAT.md).
            scanned = swift_comments(text)
            for match in re.finditer(r"(?<![\w/.-])(?:[\w.+-]+/)*(?:[A-Z][A-Z_]+|README)\.md\b", text):
                if scanned[match.start()] == " " and (
                        "/" not in match.group(0) or match.group(0).split("/")[0] in self.top_level):
                    scanned = scanned[:match.start()] + text[match.start():match.end()] + scanned[match.end():]
        else:
            scanned = text
        # Comments continue across lines: `/// ... docs/FORMAT.md,\n/// "Vault header"`.
        joined = re.sub(r"\n[ \t]*(?://+|#+)[ \t]?", lambda m: " " * len(m.group(0)), scanned)
        for match in re.finditer(r"(?<![\w/.~-])(?:\.{1,2}/)?(?:[\w.+-]+/)*[\w+-]+\.md\b", joined):
            token = match.group(0)
            if self.resolve_document(token, path) is None:
                self.report(path, text, match.start(), f"{token}: no such document")
        self.check_named_sections(path, text, joined)
        if path.endswith(".swift"):
            self.check_tracker(path, text, swift_comments(text))

    def run(self):
        for path in self.files:
            name = path.rsplit("/", 1)[-1]
            if path.endswith(".md"):
                self.check_markdown(path)
            elif path.endswith(CODE_SUFFIXES) or name in CODE_NAMES or path.startswith(".ci/"):
                if path == "scripts/check-doc-references.py":
                    continue  # its own examples
                self.check_code(path)
        return list(dict.fromkeys(self.problems)), list(dict.fromkeys(self.warnings))


# ------------------------------------------------------------------------------ self-test

PLANTED = {
    "README.md": (
        "# Demo\n\n## Use it\n\nSee [the format](docs/FORMAT.md), [a slot](docs/FORMAT.md#key-slot-128-bytes),\n"
        "docs/FORMAT.md §2, \"Key slot\" and SECURITY.md, \"Rotation and revocation\"; see \"Use it\".\n"
        "An fsync #2 is no tracker number, nor is `Sources/Demo.swift`; `t/t0303-other.sh` is another tree's.\n\n"
        "```sh\nls ../elsewhere docs/NOPE.md  # issue 9\n```\n"
        # Each of the following must be reported.
        "[gone](docs/GONE.md) [anchor](#nowhere) `Sources/Nope.swift` see \"No such heading\";\n"
        "docs/FORMAT.md, \"Control page\"; docs/FORMAT.md §9; fixed in issue 6 (see #34).\n"
        "The issue-15 round; mutex (issue: \u2248 19 ns). The issue: (a) 2 reads; a non-issue (it is 3 ms).\n"
        "[design](../notes/DESIGN.md)\n"
    ),
    "SECURITY.md": "# Security\n\n## Rotation and revocation\n",
    "docs/FORMAT.md": (
        "# Formats\n\n## 1. The journal\n\n- **Control page.** A page.\n\n"
        "## 2. The vault\n\n### Key slot (128 bytes)\n"
    ),
    "docs/ARCHITECTURE.md": "# Architecture\n\nThe design: [design](../notes/DESIGN.md), `../notes/DESIGN.md`.\n",
    "Sources/Demo.swift": (
        "/// Rotation (docs/SECURITY.md, \"Rotation\"); fixes (issue 13).\n"
        "/// Slots: SECURITY.md, \"Rotation\".\n"
        "let name = \"notes/a.md\"  // test data, not a reference\n"
    ),
    "Package.swift": "// libFuzzer targets (see Fuzz/README.md).\n",
}
EXPECTED = [
    "README.md:12: link docs/GONE.md: no such file or directory",
    "README.md:12: link #nowhere: no heading with that anchor",
    "README.md:12: Sources/Nope.swift: no such file or directory",
    'README.md:12: README.md has no heading "No such heading"',
    'README.md:13: docs/FORMAT.md has no heading "Control page"',
    "README.md:13: docs/FORMAT.md has no section 9",
    "README.md:13: tracker number 'issue 6': say what it means instead",
    "README.md:13: tracker number '#34': say what it means instead",
    "docs/ARCHITECTURE.md:3: link ../notes/DESIGN.md: no such file or directory",
    "README.md:14: tracker number 'issue-15': say what it means instead",
    "README.md:14: tracker number '(issue: \u2248 19 ns)': say what it means instead",
    "README.md:15: link ../notes/DESIGN.md: outside the repository",
    "docs/ARCHITECTURE.md:3: ../notes/DESIGN.md: outside the repository",
    "Sources/Demo.swift:1: docs/SECURITY.md: no such document",
    "Sources/Demo.swift:1: tracker number 'issue 13': say what it means instead",
    'Sources/Demo.swift:2: SECURITY.md has no heading "Rotation"',
    "Package.swift:1: Fuzz/README.md: no such document",
]


def self_test():
    """The checker against a planted tree: each dangling reference found, nothing else."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for path, text in PLANTED.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        problems, _ = Checker(root).run()
    missed = [p for p in EXPECTED if p not in problems]
    extra = [p for p in problems if p not in EXPECTED]
    for p in missed:
        print(f"check-doc-references self-test: not reported: {p}", file=sys.stderr)
    for p in extra:
        print(f"check-doc-references self-test: reported wrongly: {p}", file=sys.stderr)
    return not missed and not extra


def main():
    if not self_test():
        return 2
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems, warnings = Checker(root).run()
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-doc-references: {len(problems)} dangling reference(s) or tracker number(s)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
