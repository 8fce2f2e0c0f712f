#!/usr/bin/env python3
"""Independent reference for kvtier's block-key encoding (common/block_key.h).

Prints the test vectors that common/block_key_test.cc checks. Written against the
header's description only, with Python's hashlib, so that the C++ implementation is
checked by a second implementation of the same specification.
"""
import hashlib
import struct

OPAQUE = 1 << 63


def key_from_digest(d):
    hi = int.from_bytes(d[0:8], "big") & ~OPAQUE
    lo = int.from_bytes(d[8:16], "big")
    return hi, lo


def encode_key(k):
    return struct.pack("<QQ", k[0], k[1])


def lp(b):
    return struct.pack("<I", len(b)) + b


def root(salt):
    return key_from_digest(hashlib.sha256(b"kvtier.root.v1" + lp(salt.encode())).digest())


def block(parent, tokens, lora_id=0, model_tag="", extra=()):
    m = b"kvtier.block.v1" + encode_key(parent) + struct.pack("<Q", lora_id) + lp(model_tag.encode())
    m += struct.pack("<I", len(extra)) + b"".join(lp(e.encode()) for e in extra)
    m += struct.pack("<I", len(tokens)) + b"".join(struct.pack("<I", t) for t in tokens)
    return key_from_digest(hashlib.sha256(m).digest())


def chain(salt, tokens, per_block, **extra):
    keys, parent = [], root(salt)
    for i in range(len(tokens) // per_block):
        parent = block(parent, tokens[i * per_block:(i + 1) * per_block], **extra)
        keys.append(parent)
    return keys


def salted(salt, k):
    """The server's map of a client's key into a tenant's key space (KeySalt)."""
    if not salt:
        return k
    secret = hashlib.sha256(b"kvtier.salt.v1" + lp(salt.encode())).digest()
    d = hashlib.sha256(b"kvtier.salted.v1" + secret + encode_key(k)).digest()
    hi, lo = key_from_digest(d)
    return hi | (k[0] & OPAQUE), lo


def hexkey(k):
    return "%016x%016x" % k


if __name__ == "__main__":
    print("root('')", hexkey(root("")))
    print("root('tenant-a')", hexkey(root("tenant-a")))
    for salt in ("", "tenant-a"):
        for k in chain(salt, list(range(1, 9)), 4):
            print("chain(%r, 1..8, 4)" % salt, hexkey(k))
    for k in chain("tenant-a", list(range(1, 9)), 4, lora_id=7, model_tag="llama3-8b/bf16", extra=("img:abc",)):
        print("chain('tenant-a', 1..8, 4, lora 7, llama3-8b/bf16, img:abc)", hexkey(k))
    tag = int.from_bytes(hashlib.sha256(b"kvtier.opaque.v1" + lp(b"mooncake") + lp(b"")).digest()[0:8], "big") | OPAQUE
    print("opaque('mooncake', '', 42)", hexkey((tag, 42)))
    for k in chain("", list(range(1, 9)), 4):
        print("salted('tenant-a', chain('', 1..8, 4))", hexkey(salted("tenant-a", k)))
    print("salted('tenant-a', root(''))", hexkey(salted("tenant-a", root(""))))
    print("salted('tenant-a', opaque('mooncake', '', 42))", hexkey(salted("tenant-a", (tag, 42))))
