#!/usr/bin/env python3
"""Fails when a target imports a module of this package that it does not declare.

The rule (docs/ARCHITECTURE.md, "Who may import what, and how CI checks it"): a target's sources import only the
targets it lists in its own `dependencies:` in Package.swift, never one it merely reaches
through another (`coffer` importing CofferCrypto because Coffer depends on it).

SwiftPM's `--explicit-target-dependency-import-check error` (also in `make build` and `make
test`) compares a target's imports with everything it depends on transitively, so it catches an
import of an unrelated target but not that one; this script checks the direct list. It reads
the manifest with `swift package dump-package` and each target's `import` lines, every
`#if` branch included (a trait's imports must be declared too, conditionally or not).

Usage: scripts/check-imports.py [package-directory]
"""
import json
import os
import re
import subprocess
import sys

IMPORT = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|fileprivate|private)\s+)?"
    r"import\s+(?:(?:struct|class|enum|protocol|typealias|func|let|var)\s+)?([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)


def declared(target):
    names = set()
    for dependency in target.get("dependencies", []):
        for kind in ("byName", "target", "product"):
            if kind in dependency:
                names.add(dependency[kind][0])
    return names


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    manifest = json.loads(
        subprocess.run(
            ["swift", "package", "--package-path", root, "dump-package"],
            check=True, capture_output=True, text=True,
        ).stdout
    )
    targets = {t["name"]: t for t in manifest["targets"]}
    failures = []
    for name, target in sorted(targets.items()):
        if target["type"] in ("system", "binary", "plugin"):
            continue
        folder = target.get("path") or os.path.join("Tests" if target["type"] == "test" else "Sources", name)
        allowed = declared(target) | {name}
        for directory, _, files in os.walk(os.path.join(root, folder)):
            for file in sorted(files):
                if not file.endswith(".swift"):
                    continue
                path = os.path.join(directory, file)
                with open(path, encoding="utf-8") as source:
                    text = source.read()
                for match in IMPORT.finditer(text):
                    module = match.group(1)
                    if module in targets and module not in allowed:
                        line = text.count("\n", 0, match.start()) + 1
                        failures.append(
                            f"{os.path.relpath(path, root)}:{line}: target {name} imports {module} "
                            f"without declaring it in Package.swift"
                        )
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(f"check-imports: {len(failures)} undeclared import(s)", file=sys.stderr)
        return 1
    print(f"check-imports: every import of a package target is declared ({len(targets)} targets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
