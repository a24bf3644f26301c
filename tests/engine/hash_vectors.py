#!/usr/bin/python3
"""Independent cross-check of reference hash vectors with python3-xxhash (Debian package).

Recomputes the content and chained sequence hashes from the spec's formula and compares them
with the values pinned in block_hash_test.cpp, so those vectors are not our own output echoed
back. Exits non-zero on any mismatch.
"""
import struct
import sys

import xxhash


def content(tokens, seed=1337):
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens), seed=seed)


def chain(parent, c, seed):
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, c), seed=seed)


def seq_hashes(tokens, block, chain_seed):
    out = []
    for i in range(len(tokens) // block):
        c = content(tokens[i * block:(i + 1) * block])
        out.append(c if i == 0 else chain(out[-1], c, chain_seed))
    return out


CASES = [
    ("c[1..4]", content([1, 2, 3, 4]), 14643705804678351452),
    ("c[5..8]", content([5, 6, 7, 8]), 16777012769546811212),
    ("c[9..12]", content([9, 10, 11, 12]), 483935686894639516),
    ("s[1..12] seed 1337", seq_hashes(list(range(1, 13)), 4, 1337)[1:],
     [4945711292740353085, 12583592247330656132]),
    ("s[1..12] seed 0", seq_hashes(list(range(1, 13)), 4, 0)[1:],
     [13257339816715102022, 18362646011897812054]),
    ("dynamo s", seq_hashes([11, 22, 33, 44, 55, 66, 77, 88], 4, 1337),
     [4117275816416024698, 5947898228081096063]),
    ("dynamo c1", content([55, 66, 77, 88]), 6081346995852963768),
]

failed = 0
for name, got, want in CASES:
    ok = got == want
    failed += not ok
    print(("ok  " if ok else "FAIL"), name, got, "" if ok else "want %s" % want)
print("%d passed, %d failed" % (len(CASES) - failed, failed))
sys.exit(1 if failed else 0)
