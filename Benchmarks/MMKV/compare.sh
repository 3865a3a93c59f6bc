#!/usr/bin/env bash
# Runs coffer-bench (the rows MMKV has a counterpart for) and mmkv-bench alternately, PAIRS times
# (default 3), and prints a markdown table: each Coffer row, its MMKV row, the median of each
# over the pairs and the ratio Coffer/MMKV (below 1: Coffer takes less time per operation).
#
#   Benchmarks/MMKV/compare.sh <coffer-bench> <mmkv-bench>
#
# QUICK=1 passes --quick to coffer-bench (a smoke run, not figures to publish). Both programs
# work in new directories under $TMPDIR (or /tmp), so both write to the same file system.

set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 <coffer-bench> <mmkv-bench>" >&2
    exit 2
fi
coffer=$1
mmkv=$2
pairs=${PAIRS:-3}
for program in "$coffer" "$mmkv"; do
    [[ -x $program ]] || { echo "compare.sh: not an executable: $program" >&2; exit 1; }
done
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: PAIRS must be a positive number" >&2; exit 1; }
coffer_args=(--json)
[[ ${QUICK:-0} == 1 ]] && coffer_args+=(--quick)

work=$(mktemp -d "${TMPDIR:-/tmp}/coffer-mmkv-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

for ((i = 1; i <= pairs; i++)); do
    echo "compare.sh: pair $i of $pairs: coffer-bench" >&2
    COFFER_BENCH_FILTER=keyvalue.write,vault.write,keyvalue.open.10k,vault.open.10k,peer.crypto.open.10k \
        "$coffer" "${coffer_args[@]}" >"$work/coffer-$i.json"
    echo "compare.sh: pair $i of $pairs: mmkv-bench" >&2
    root=$(mktemp -d "$work/mmkv-root.XXXXXX")
    "$mmkv" "$root" >"$work/mmkv-$i.tsv"
    rm -rf "$root"
done

python3 - "$work" "$pairs" "${QUICK:-0}" <<'EOF'
import json
import statistics
import sys

work, pairs, quick = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rows = [
    ("keyvalue.write", "mmkv.set.multiprocess"),
    ("keyvalue.write.exclusive", "mmkv.set.singleprocess"),
    ("vault.write", "mmkv.set.encrypted.multiprocess"),
    ("keyvalue.write.durable", "mmkv.set.durable"),
    ("vault.write.durable", "mmkv.set.durable.encrypted"),
    ("keyvalue.open.10k", "mmkv.open.10k.multiprocess"),
    ("vault.open.10k", "mmkv.open.10k.encrypted"),
]

coffer, mmkv = {}, {}
for i in range(1, pairs + 1):
    with open(f"{work}/coffer-{i}.json") as f:
        for result in json.load(f)["results"]:
            if result["ns_per_op"] is not None:
                coffer.setdefault(result["name"], []).append(float(result["ns_per_op"]))
    with open(f"{work}/mmkv-{i}.tsv") as f:
        for line in f:
            if "\t" in line:
                name, ns = line.rstrip("\n").split("\t")
                mmkv.setdefault(name, []).append(float(ns))


def duration(ns):
    if ns < 1e3:
        return f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


print(f"Median per operation over {pairs} alternating run{'s' if pairs > 1 else ''} of each program"
      + (" (coffer-bench --quick)" if quick else "") + "; ratio = Coffer / MMKV.")
print()
print("| Coffer row | MMKV row | Coffer | MMKV | Coffer / MMKV |")
print("|---|---|---:|---:|---:|")
for ours, theirs in rows:
    a = statistics.median(coffer[ours]) if ours in coffer else None
    b = statistics.median(mmkv[theirs]) if theirs in mmkv else None
    ratio = f"{a / b:.2f}" if a is not None and b else "—"
    print(f"| `{ours}` | `{theirs}` | {duration(a) if a is not None else '—'} | "
          f"{duration(b) if b is not None else '—'} | {ratio} |")

# The vault's open against the cryptography it cannot skip, measured in the same runs: an
# XChaCha20-Poly1305 open and a keyed BLAKE2b chain step per record, on one thread, raw buffers
# (BENCHMARKS.md, "The vault's open and its cryptography").
if "vault.open.10k" in coffer and "peer.crypto.open.10k" in coffer:
    a = statistics.median(coffer["vault.open.10k"])
    b = statistics.median(coffer["peer.crypto.open.10k"])
    print()
    print(f"`vault.open.10k` / `peer.crypto.open.10k` (its cryptography alone, one thread): "
          f"{duration(a)} / {duration(b)} = {a / b:.2f}")

# Each pair's figures on stderr, to see how much the machine moved between pairs.
for ours, theirs in rows:
    for name, values in ((ours, coffer.get(ours, [])), (theirs, mmkv.get(theirs, []))):
        print(f"{name}: " + (", ".join(duration(v) for v in values) or "not measured"), file=sys.stderr)
print("peer.crypto.open.10k: " + (", ".join(duration(v) for v in coffer.get("peer.crypto.open.10k", []))
                                  or "not measured"), file=sys.stderr)
EOF
