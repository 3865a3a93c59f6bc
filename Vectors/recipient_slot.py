#!/usr/bin/env python3
"""Writes Vectors/recipient_slot.json: known answers for a vault key slot of kind 4 (a
recipient), computed from docs/FORMAT.md §2 ("Recipient slot") with PyNaCl (libsodium) and
hashlib only — not from Coffer's code. Fixed inputs, so the output never changes:

    python3 Vectors/recipient_slot.py > Vectors/recipient_slot.json
"""
import hashlib
import json

from nacl import bindings


def case(name, recipient_secret, ephemeral_secret, vault_id, master):
    recipient = bindings.crypto_scalarmult_base(recipient_secret)
    ephemeral = bindings.crypto_scalarmult_base(ephemeral_secret)
    shared = bindings.crypto_scalarmult(ephemeral_secret, recipient)
    derived = hashlib.blake2b(b"coffer-x25519-v1" + ephemeral + recipient, key=shared, digest_size=56).digest()
    key, nonce = derived[:32], derived[32:]
    head = bytes([4]) + bytes(7) + ephemeral  # slot bytes [0, 40)
    associated = b"coffer vault key slot v1" + vault_id + head
    wrapped = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(master, associated, nonce, key)
    slot = head + recipient + wrapped + bytes(8)
    assert len(slot) == 128
    return {
        "name": name,
        "recipient_secret": recipient_secret.hex(),
        "recipient": recipient.hex(),
        "ephemeral_secret": ephemeral_secret.hex(),
        "vault_id": vault_id.hex(),
        "master_key": master.hex(),
        "shared_secret": shared.hex(),
        "wrapping_key": key.hex(),
        "wrapping_nonce": nonce.hex(),
        "slot": slot.hex(),
    }


cases = [
    case("counting bytes", bytes(range(1, 33)), bytes(range(33, 65)), bytes(range(100, 116)), bytes(range(200, 232))),
    case("repeated bytes", bytes([0x17]) * 32, bytes([0x42]) * 32, bytes([0xA5]) * 16, bytes([0x5A]) * 32),
]
print(json.dumps({"source": "Vectors/recipient_slot.py (PyNaCl, from docs/FORMAT.md §2)", "cases": cases}, indent=2))
