#!/bin/sh
# Regenerates age_keys.json: identities made by age-keygen (age 1.1.1, Debian's package), their
# recipients as `age-keygen -y` prints them, and strings that age itself refuses, each checked
# against age (an identity with `age-keygen -y`, a recipient with `age -r`). Needs age, python3.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import json, subprocess, sys, os
d = sys.argv[1]
def keygen(i):
    path = os.path.join(d, f"k{i}")
    subprocess.run(["age-keygen", "-o", path], check=True, capture_output=True)
    lines = open(path).read().splitlines()
    identity = [l for l in lines if l.startswith("AGE-SECRET-KEY-1")][0]
    recipient = subprocess.run(["age-keygen", "-y", path], check=True, capture_output=True, text=True).stdout.strip()
    comment = [l for l in lines if l.startswith("# public key: ")][0][len("# public key: "):]
    assert comment == recipient
    return {"identity": identity, "recipient": recipient, "file": open(path).read()}
def identity_ok(text):
    path = os.path.join(d, "probe")
    open(path, "w").write(text + "\n")
    return subprocess.run(["age-keygen", "-y", path], capture_output=True).returncode == 0
def recipient_ok(text):
    return subprocess.run(["age", "-r", text, "-o", os.devnull], input=b"x", capture_output=True).returncode == 0
pairs = [keygen(i) for i in range(4)]
good_id, good_r = pairs[0]["identity"], pairs[0]["recipient"]
flip = lambda s, i: s[:i] + ("q" if s[i].lower() != "q" else "p") + s[i + 1:]
bad_identities = {
    "lower case": good_id.lower(),
    "mixed case": good_id[:-1] + good_id[-1].lower() if good_id[-1].isalpha() else good_id[:20].lower() + good_id[20:],
    "a character changed": flip(good_id, 30).upper(),
    "a character missing": good_id[:30] + good_id[31:],
    "another prefix": "AGE-PLUGIN-X-1" + good_id[len("AGE-SECRET-KEY-1"):],
    "a recipient": good_r,
}
bad_recipients = {
    "upper case": good_r.upper(),
    "a character changed": flip(good_r, 20),
    "a character missing": good_r[:20] + good_r[21:],
    "an identity": good_id,
    "no separator": good_r.replace("1", "", 1),
}
for k, v in bad_identities.items():
    assert not identity_ok(v), k
for k, v in bad_recipients.items():
    assert not recipient_ok(v), k
for p in pairs:
    assert identity_ok(p["identity"]) and recipient_ok(p["recipient"])
out = {
    "source": "age-keygen and age 1.1.1 (Debian bookworm's package), run by Vectors/age_keys.sh",
    "pairs": pairs,
    "refused_identities": bad_identities,
    "refused_recipients": bad_recipients,
}
json.dump(out, open("age_keys.json", "w"), indent=2)
print("wrote age_keys.json")
PY
