#!/usr/bin/env python3
"""An independent reader for Coffer vault files, written from docs/FORMAT.md alone.

It is an interop check: if this reader and the Swift implementation agree on the vectors in
Vectors/vault/, the document suffices to read the format. §1/§2 refer to docs/FORMAT.md.

  vault-reader.py --check-vectors DIR
  vault-reader.py VAULT (--passphrase-env VAR | --key-file F | --key-hex H) [--show-secrets]

Needs Python 3.11 and PyNaCl (libsodium); exits 77 if PyNaCl is missing.
"""
import argparse, hashlib, hmac, json, os, struct, sys, unicodedata

try:
    import nacl.bindings as sodium
    from nacl.exceptions import CryptoError
except ImportError:
    print("vault-reader: PyNaCl is not installed (pip install pynacl)", file=sys.stderr)
    sys.exit(77)


class VaultError(Exception):
    pass

class WrongKey(VaultError):
    """No key slot of the requested kind opened: the file is intact, the secret is wrong."""

class LimitExceeded(VaultError):
    """A passphrase slot asks for more Argon2id work than the reader's ceiling; not run."""

# §2 "Key slot": the reader's own ceiling on Argon2id cost (libsodium's "sensitive" preset).
DEFAULT_KDF_LIMIT = (4, 1 << 30)                     # (passes, bytes), each compared on its own


# ---------------------------------------------------------------- primitives (Conventions)

_CRC_TABLE = []
for _n in range(256):
    for _ in range(8):
        _n = (_n >> 1) ^ 0x82F63B78 if _n & 1 else _n >> 1
    _CRC_TABLE.append(_n)

def crc32c(data: bytes) -> int:
    """Castagnoli CRC: reflected polynomial 0x82F63B78, init and final XOR 0xFFFFFFFF."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283  # the check value given in FORMAT.md

def blake2b_256(message: bytes, key: bytes = b"") -> bytes:
    return sodium.crypto_generichash_blake2b_salt_personal(message, digest_size=32, key=key)

def kdf_derive(master: bytes, subkey_id: int, context: bytes) -> bytes:
    """crypto_kdf_derive_from_key as §2 spells it out (PyNaCl has no binding for it):
    BLAKE2b-256(key = master, empty message, salt = LE64(id) ‖ 0*8, personal = context ‖ 0*8)."""
    return hashlib.blake2b(b"", digest_size=32, key=master, salt=struct.pack("<Q", subkey_id)
                           + bytes(8), person=context + bytes(8)).digest()

def aead_open(ciphertext: bytes, ad: bytes, nonce: bytes, key: bytes):
    """XChaCha20-Poly1305-IETF decryption; None when authentication fails."""
    try:
        return sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(ciphertext, ad, nonce, key)
    except CryptoError:
        return None


# ---------------------------------------------------------------- §1 the journal

def read_journal(data: bytes, application: int, area_size: int):
    """Check the journal header; return (header area, [(frame offset, payload)]) for the
    frames of every complete commit. A strict reader: damage raises VaultError."""
    if len(data) < 32 or data[0:8] != b"COFFERJL":
        raise VaultError("corrupted: not a Coffer journal")
    if struct.unpack_from("<I", data, 28)[0] != crc32c(data[0:28]):
        raise VaultError("corrupted: journal header CRC mismatch")
    version, app, h = struct.unpack_from("<HHI", data, 8)
    if version != 1:                                 # checked after the CRC, as §1 says
        raise VaultError(f"unsupported journal version {version}")
    if app != application or h != area_size:
        raise VaultError("not this kind of store")
    if len(data) < 32 + h:                           # assumption: the area must be present
        raise VaultError("corrupted: file shorter than its header area")

    coalesced_writers = bool(data[16] & 1)           # file header flags, bit 0

    def frame_at(pos):
        """(header check ok, M flag, K flag, L, intact) for a frame starting at pos."""
        if pos + 12 > len(data):
            return False, 0, 0, 0, False
        word, payload_crc, header_crc = struct.unpack_from("<III", data, pos)
        more, cont, length = word >> 31, (word >> 30) & 1, word & 0x3FFFFFFF
        checked = header_crc == crc32c(data[pos:pos + 8]) and length >= 1
        intact = (checked and pos + 12 + length <= len(data)
                  and crc32c(data[pos + 12:pos + 12 + length]) == payload_crc)
        return checked, more, cont, length, intact

    def looks_torn(f):
        """§1 rule 1."""
        if f + 12 > len(data) or not any(data[f:f + 12]):
            return True
        checked, _, _, length, _ = frame_at(f)
        if checked and f + 12 + length > len(data):
            return True
        end = f + 12 + length if checked else f + 12
        b = (f // 512 + 1) * 512
        while b < end:
            if not any(data[b:min(b + 512, end)]):
                return True
            b += 512
        return False

    frames, pending = [], []
    pos = g = 32 + h
    while True:
        if not any(data[pos:]) and not pending:      # end of data: only zeros remain
            return data[32:32 + h], frames
        _, more, cont, length, intact = frame_at(pos)
        if intact and cont == (1 if pending else 0):
            pending.append((pos, data[pos + 12:pos + 12 + length]))
            pos += 12 + length
            if not more:                             # M = 0 closes the commit
                frames.extend(pending)
                pending, g = [], pos
            continue
        f = pos                                      # invalid, out of order, or unfinished at the end
        later = any(frame_at(p)[4] and not frame_at(p)[2] for p in range(f + 1, len(data) - 11))
        if looks_torn(f) and (not later or coalesced_writers):
            return data[32:32 + h], frames           # a torn tail: data ends at g
        raise VaultError(f"damaged at offset {g}")


# ---------------------------------------------------------------- §2 vault header, key slots

def parse_slot(s: bytes):
    """One 128-byte key slot as a dict, or None when it does not parse."""
    if s[0] == 4:                                    # a recipient slot (version 2 and 3)
        if any(s[1:8]) or any(s[120:128]):
            return None
        return dict(kind=4, ephemeral=s[8:40], recipient=s[40:72], wrapped=s[72:120], prefix=s[0:40])
    if s[0] not in (1, 2, 3) or any(s[1:8]) or any(s[112:128]):
        return None                                  # assumption: what "slots parse" means
    ops, mem = struct.unpack_from("<QQ", s, 8)
    return dict(kind=s[0], ops=ops, mem=mem, salt=s[24:40], nonce=s[40:64], wrapped=s[64:112], prefix=s[0:40])

def parse_header(copy: bytes):
    """A dict for a usable header copy; 'version' for a copy with a valid CRC but another
    version; None for a damaged copy. Versions 1 and 2: eight slot places, the MAC at 1,072.
    Version 3: n slots, then n labels of 64 bytes, then the MAC (docs/FORMAT.md §2)."""
    if struct.unpack_from("<I", copy, 2044)[0] != crc32c(copy[0:2044]) or copy[0:4] != b"CFVH":
        return None
    version, n, seq = struct.unpack_from("<HHQ", copy, 4)
    if version not in (1, 2, 3):
        return "version"
    if not 1 <= n <= (10 if version == 3 else 8):
        return None
    mac_at = 48 + 192 * n if version == 3 else 1072
    if any(copy[mac_at + 32:2044]):                  # the bytes after the MAC are zero
        return None
    slots = []
    for i in range(n):
        slot = parse_slot(copy[48 + 128 * i:48 + 128 * (i + 1)])
        if slot is None:
            return None
        slots.append(slot)
    if sum(1 for sl in slots if sl["kind"] == 1) > 8:
        return None                                  # at most 8 passphrase slots (any version)
    if version == 3:
        for i in range(n):
            field = copy[48 + 128 * n + 64 * i:48 + 128 * n + 64 * (i + 1)]
            label = field.split(b"\0", 1)[0]
            if any(field[len(label):]):
                return None                          # zero-padded: no byte after the first zero
            try:
                slots[i]["label"] = label.decode("utf-8")
            except UnicodeDecodeError:
                return None
            if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in slots[i]["label"]):
                return None                          # no control, format or separator character
        wanted = 3 if n > 8 or any(sl["label"] for sl in slots) else None
    elif any(copy[48 + 128 * n:1072]):               # slots n…7 are zero
        return None
    else:
        wanted = None
    if wanted is None:
        wanted = 2 if any(sl["kind"] == 4 for sl in slots) else 1
    if version != wanted:
        return None                                  # the version its slots call for
    return dict(seq=seq, vault_id=copy[16:32], epoch=copy[32:48], slots=slots,
                mac=copy[mac_at:mac_at + 32], mac_input=copy[0:mac_at])

def choose_header(area: bytes):
    copies = [parse_header(area[0:2048]), parse_header(area[2048:4096])]
    usable = [c for c in copies if isinstance(c, dict)]
    if usable:                                       # assumption: a tie picks copy 1
        return max(usable, key=lambda c: c["seq"])
    raise VaultError("unsupported vault version" if "version" in copies else "damaged header")

SLOT_KIND = {"passphrase": 1, "keyFile": 2, "key": 3, "identity": 4}

BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"

def bech32_decode(text: str):
    """(hrp, data bytes) of a Bech32 string as age writes them (BIP 173, no length limit)."""
    if text.lower() != text and text.upper() != text:
        raise VaultError("mixed case")
    pos = text.rfind("1")
    if pos < 1 or pos + 7 > len(text):
        raise VaultError("no Bech32 separator")
    hrp, lower = text[:pos], text.lower()
    values = [BECH32.index(c) if c in BECH32 else -1 for c in lower[pos + 1:]]
    if -1 in values:
        raise VaultError("not a Bech32 character")
    chk = 1
    for v in [ord(c) >> 5 for c in hrp.lower()] + [0] + [ord(c) & 31 for c in hrp.lower()] + values:
        top, chk = chk >> 25, (chk & 0x1ffffff) << 5 ^ v
        for i, g in enumerate([0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3]):
            chk ^= g if (top >> i) & 1 else 0
    if chk != 1:
        raise VaultError("bad Bech32 checksum")
    acc = bits = 0
    out = bytearray()
    for v in values[:-6]:
        acc, bits = (acc << 5) | v, bits + 5
        while bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xff)
    if bits >= 5 or (acc << (8 - bits)) & 0xff:
        raise VaultError("bad Bech32 padding")
    return hrp, bytes(out)

def identity_secrets(text: bytes) -> list:
    """The X25519 secret keys of the AGE-SECRET-KEY-1… lines of an identity file."""
    keys = []
    for line in text.decode("ascii").split("\n"):
        line = line.strip(" \t\r")
        if line and not line.startswith("#"):
            hrp, key = bech32_decode(line)
            if hrp != "AGE-SECRET-KEY-" or len(key) != 32:
                raise VaultError("not an X25519 identity")
            keys.append(key)
    if not keys:
        raise VaultError("no identity in the file")
    return keys

def recipient_unwrap(slot, vault_id: bytes, secret: bytes):
    """§2 "Recipient slot": the master key, or None when this identity does not open the slot."""
    if slot["recipient"] != sodium.crypto_scalarmult_base(secret):
        return None                                  # another recipient's slot
    try:
        shared = sodium.crypto_scalarmult(secret, slot["ephemeral"])
    except Exception:                                # PyNaCl raises on an all-zero result
        return None
    if not any(shared):
        return None                                  # E of small order: opens for nobody
    kn = hashlib.blake2b(b"coffer-x25519-v1" + slot["ephemeral"] + slot["recipient"],
                         digest_size=56, key=shared).digest()
    ad = b"coffer vault key slot v1" + vault_id + slot["prefix"]
    return aead_open(slot["wrapped"], ad, kn[32:], kn[:32])

def slot_kek(slot, secret: bytes) -> bytes:
    """The key-encryption key of a slot, from the secret of that slot's kind."""
    if slot["kind"] == 1:   # Argon2id; bounds are checked before running the KDF
        if not (1 <= slot["ops"] <= 64 and 8192 <= slot["mem"] <= 4 << 30):
            raise VaultError("refusing Argon2id parameters out of range")
        return sodium.crypto_pwhash_alg(32, secret, slot["salt"], slot["ops"], slot["mem"],
                                        sodium.crypto_pwhash_ALG_ARGON2ID13)
    if slot["kind"] == 2:   # the whole key file (assumption: all of its bytes, as read)
        if len(secret) < 32:
            raise VaultError("key file shorter than 32 bytes")
        return blake2b_256(b"coffer-key-file-v1" + slot["salt"] + secret)
    if len(secret) != 32:
        raise VaultError("a raw key is 32 bytes")
    return blake2b_256(b"coffer-raw-key-v1" + slot["salt"], key=secret)

def unwrap_master(header, kind: str, secret: bytes, kdf_limit=DEFAULT_KDF_LIMIT) -> bytes:
    """Try every slot of the source's kind within the KDF ceiling; the first that
    authenticates gives the master key. A slot above the ceiling is not run."""
    skipped = []
    for slot in header["slots"]:
        if slot["kind"] == SLOT_KIND[kind] == 4:             # secret: every identity of the file
            for key in secret:
                master = recipient_unwrap(slot, header["vault_id"], key)
                if master is not None:
                    return master
            continue
        if slot["kind"] == SLOT_KIND[kind]:
            if slot["kind"] == 1 and not (1 <= slot["ops"] <= 64 and 8192 <= slot["mem"] <= 4 << 30):
                raise VaultError("refusing Argon2id parameters out of range")
            if slot["kind"] == 1 and (slot["ops"] > kdf_limit[0] or slot["mem"] > kdf_limit[1]):
                skipped.append(slot)
                continue
            ad = b"coffer vault key slot v1" + header["vault_id"] + slot["prefix"]
            master = aead_open(slot["wrapped"], ad, slot["nonce"], slot_kek(slot, secret))
            if master is not None:
                return master
    if skipped:
        s = skipped[0]
        raise LimitExceeded(f"a key slot asks for Argon2id with {s['ops']} passes and {s['mem']} bytes, "
                            f"above the limit of {kdf_limit[0]} passes and {kdf_limit[1]} bytes")
    raise WrongKey("wrong passphrase or key: no slot opened")


# ---------------------------------------------------------------- §2 records and bodies

def parse_body(body: bytes, offset: int = 0):
    """('put', item dict) or ('delete', item dict with service and account only). Text fields
    must be valid UTF-8: never repaired (two names would become one)."""
    pos = 1
    def take(n):
        nonlocal pos
        if pos + n > len(body):
            raise VaultError("truncated record body")
        pos += n
        return body[pos - n:pos]
    def field():                                     # u32 length ‖ bytes
        return take(struct.unpack("<I", take(4))[0])
    def text(name):
        try:
            return field().decode("utf-8")           # strict: no U+FFFD repair
        except UnicodeDecodeError:
            raise VaultError(f"record at offset {offset}: its {name} is not valid UTF-8") from None
    if not body or body[0] not in (1, 2):
        raise VaultError("unknown record kind")
    item = dict(service=text("service"), account=text("account"))
    if not item["service"] or not item["account"]:
        raise VaultError("empty service or account")
    if body[0] == 1:
        item.update(label=text("label"), comment=text("comment"))
        item["created"], item["modified"] = struct.unpack("<qq", take(16))  # signed ms
        item["secret"] = field()
    if pos != len(body):
        raise VaultError("trailing bytes in record body")
    return ("put" if body[0] == 1 else "delete"), item

def open_vault(path: str, kind: str, secret: bytes, kdf_limit=DEFAULT_KDF_LIMIT):
    """Open a vault: (items sorted by service then account, record count, master key)."""
    with open(path, "rb") as f:
        data = f.read()
    area, frames = read_journal(data, application=2, area_size=4096)
    header = choose_header(area)                     # its MAC (below) is the one checked
    master = unwrap_master(header, kind, secret, kdf_limit)
    record_key, chain_key, header_key = (kdf_derive(master, 1, b"CFVrecrd"),
        kdf_derive(master, 2, b"CFVchain"), kdf_derive(master, 3, b"CFVheadr"))
    if not hmac.compare_digest(blake2b_256(header["mac_input"], key=header_key), header["mac"]):
        raise VaultError("header MAC mismatch: the header was altered")
    chain = blake2b_256(b"coffer-chain-genesis-v1" + header["vault_id"] + header["epoch"],
                        key=chain_key)
    items = {}
    for offset, payload in frames:                   # records are numbered in file order
        ad = b"CFVrec1\x00" + header["vault_id"] + chain
        body = aead_open(payload[24:], ad, payload[:24], record_key) if len(payload) >= 40 else None
        if body is None:
            raise VaultError(f"record at offset {offset} fails to authenticate")
        chain = blake2b_256(chain + payload[-16:], key=chain_key)
        op, item = parse_body(body, offset)
        key = (item["service"].encode(), item["account"].encode())   # exact bytes
        if op == "put":
            items[key] = item
        else:
            items.pop(key, None)
    return [items[k] for k in sorted(items)], len(frames), master


# ---------------------------------------------------------------- CLI

def check_vault(v, directory):
    """Problems found (never containing secret values) and a summary line."""
    path, u = os.path.join(directory, v["file"]), v["unlock"]
    if u["kind"] == "keyFile":
        with open(os.path.join(directory, u["key_file"]), "rb") as f:
            secret = f.read()
    else:
        secret = u["passphrase"].encode() if u["kind"] == "passphrase" else bytes.fromhex(u["key_hex"])
    items, records, master = open_vault(path, u["kind"], secret)
    problems = []
    want = sorted(v["items"], key=lambda i: (i["service"].encode(), i["account"].encode()))
    if len(items) != len(want):
        problems.append(f"{len(items)} items, manifest has {len(want)}")
    for got, exp in zip(items, want):
        exp = dict(exp, secret=bytes.fromhex(exp["secret_hex"]))
        for name in ("service", "account", "label", "comment", "secret"):
            if got[name] != exp[name]:
                problems.append(f"{name} differs (lengths {len(got[name])} vs {len(exp[name])})")
    if "records" in v and records != v["records"]:
        problems.append(f"{records} records, manifest says {v['records']}")
    if "wrong_passphrase" in v:
        try:
            open_vault(path, "passphrase", v["wrong_passphrase"].encode())
            problems.append("wrong_passphrase opened the vault")
        except WrongKey:
            pass
    if "also_opens_with_passphrase" in v:
        try:
            if open_vault(path, "passphrase", v["also_opens_with_passphrase"].encode())[2] != master:
                problems.append("also_opens_with_passphrase gives another master key")
        except WrongKey:
            problems.append("also_opens_with_passphrase does not open the vault")
    return problems, f"{len(items)} items, {records} records"

def check_vectors(directory) -> int:
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format_version") != 1:
        print(f"unsupported manifest format_version {manifest.get('format_version')}")
        return 1
    passed = failed = 0
    for v in manifest["vaults"]:
        try:
            problems, summary = check_vault(v, directory)
        except (VaultError, OSError, ValueError, KeyError) as e:
            problems, summary = [f"{type(e).__name__}: {e}"], ""
        if problems:
            failed += 1
            print(f"FAIL {v.get('file')}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"ok {v['file']}: {summary}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0

def main(argv) -> int:
    p = argparse.ArgumentParser(description="Independent Coffer vault reader (docs/FORMAT.md).")
    p.add_argument("vault", nargs="?")
    p.add_argument("--check-vectors", metavar="DIR")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--passphrase-env", metavar="VAR")
    g.add_argument("--key-file", metavar="F")
    g.add_argument("--key-hex", metavar="H")
    g.add_argument("--identity", metavar="F", help="an identity file (AGE-SECRET-KEY-1…)")
    p.add_argument("--show-secrets", action="store_true", help="also print secrets (hex)")
    p.add_argument("--kdf-limit", metavar="PASSES,BYTES",
                   help="most Argon2id work a passphrase slot may ask for (default 4,1073741824)")
    a = p.parse_args(argv)
    kdf_limit = DEFAULT_KDF_LIMIT
    if a.kdf_limit:
        try:
            kdf_limit = tuple(int(x) for x in a.kdf_limit.split(","))
            assert len(kdf_limit) == 2
        except (ValueError, AssertionError):
            p.error("--kdf-limit takes PASSES,BYTES")
    if a.check_vectors:
        return check_vectors(a.check_vectors)
    if not a.vault:
        p.error("give VAULT or --check-vectors DIR")
    try:
        if a.passphrase_env:
            if a.passphrase_env not in os.environ:
                p.error(f"environment variable {a.passphrase_env} is not set")
            kind, secret = "passphrase", os.environ[a.passphrase_env].encode()
        elif a.key_file:
            with open(a.key_file, "rb") as f:
                kind, secret = "keyFile", f.read()
        elif a.key_hex:
            kind, secret = "key", bytes.fromhex(a.key_hex)
        elif a.identity:
            with open(a.identity, "rb") as f:
                kind, secret = "identity", identity_secrets(f.read())
        else:
            p.error("give one of --passphrase-env, --key-file, --key-hex, --identity")
        items, records, _ = open_vault(a.vault, kind, secret, kdf_limit)
    except (VaultError, OSError, ValueError) as e:
        print(f"vault-reader: {e}", file=sys.stderr)
        return 1
    for it in items:
        print("\t".join([it["service"], it["account"], it["label"]]
                        + ([it["secret"].hex()] if a.show_secrets else [])))
    print(f"{len(items)} items, {records} records", file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
