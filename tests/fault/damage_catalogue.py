"""The wire damage catalogue of the hostile-flood scenario (tests/fault/README.md, scenario 3).

Each `Damage` is what a hostile DEALER sends as one ZeroMQ message — a list of frames (the
ROUTER prepends the routing id) — and what the service must answer: one `error` reply with
`code`, whose message contains `mentions`. `catalogue(socket)` builds every case for the
"submit" or the "cancel" socket; `flood_cases(socket)` is the subset small enough to repeat
100,000 times. The protocol goldens (tests/data/protocol/*.hex) supply real frames: every
truncation of the client-to-service ones, and the service-to-client, KV-event and FPM ones as
messages of the wrong direction or the wrong protocol.

Classes: truncated msgpack, not msgpack / wrong structure, wrong types, out of range, invalid
UTF-8, wrong protocol version, unknown or wrong-direction types, oversize (over the protocol's
16 MiB limit, under ZMQ_MAXMSGSIZE), extra frames, empty frames, delimiter misuse.
"""

import collections
import os

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.join(os.path.dirname(HERE), "data", "protocol")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # protocol/limits.h kMaxMessageBytes

CORRUPTION = "corruption"
INVALID = "invalid_argument"
UNSUPPORTED = "unsupported"

Damage = collections.namedtuple("Damage", "name cls frames code mentions")

# The goldens a client sends; the others are service-to-client messages, KV events and FPM.
CLIENT_TO_SERVICE = ("client_submit_min", "client_submit_full", "client_cancel",
                     "client_cancel_client", "client_stats", "client_kv_snapshot",
                     "client_kv_snapshot_rank", "client_submit_handoff", "client_lora_load",
                     "client_lora_unload")


def golden(name):
    with open(os.path.join(GOLDEN_DIR, name + ".hex"), encoding="ascii") as f:
        return bytes.fromhex("".join(f.read().split()))


def golden_names():
    return sorted(n[:-4] for n in os.listdir(GOLDEN_DIR) if n.endswith(".hex"))


def pack(m):
    return msgpack.packb(m, use_bin_type=True)


def with_raw(m, placeholder, raw):
    """pack(m) with the str `placeholder` (once in m) replaced by bytes `raw` of equal length, so
    the str header stays right: how a str that is not UTF-8 gets onto the wire."""
    packed = pack(m)
    ph = placeholder.encode()
    assert len(ph) == len(raw) and packed.count(ph) == 1, placeholder
    return packed.replace(ph, raw)


def submit(**fields):
    m = {"v": 1, "type": "submit", "id": "h1", "prompt": [1, 2, 3], "max_tokens": 4}
    m.update(fields)
    return m


def cancel(**fields):
    m = {"v": 1, "type": "cancel", "id": "h1"}
    m.update(fields)
    return m


def without(m, key):
    m = dict(m)
    del m[key]
    return m


def _request(socket, **fields):
    return submit(**fields) if socket == "submit" else cancel(**fields)


def catalogue(socket):
    """Every damage case for `socket` ("submit" or "cancel")."""
    assert socket in ("submit", "cancel")
    req = _request(socket)
    ok = pack(req)
    cases = []

    def add(name, cls, payload_or_frames, code, mentions=""):
        frames = payload_or_frames if isinstance(payload_or_frames, list) else [payload_or_frames]
        cases.append(Damage(name, cls, frames, code, mentions))

    # Truncated msgpack: every proper prefix of the client-to-service goldens this socket reads.
    sources = (["client_submit_full", "client_stats", "client_kv_snapshot_rank"]
               if socket == "submit" else ["client_cancel_client"])
    for src in sources:
        data = golden(src)
        for n in range(1, len(data)):
            add("%s cut at %d of %d bytes" % (src, n, len(data)), "truncated", data[:n],
                CORRUPTION, "truncated")

    # Not msgpack, or not one msgpack map.
    add("reserved byte 0xc1", "structure", b"\xc1", CORRUPTION)
    add("root is an array", "structure", pack([1, "submit"]), CORRUPTION, "expected map")
    add("root is an int", "structure", pack(7), CORRUPTION, "expected map")
    add("root is nil", "structure", pack(None), CORRUPTION, "expected map")
    add("root is a str", "structure", pack("submit"), CORRUPTION, "expected map")
    add("root is bin", "structure", pack(b"\x01\x02"), CORRUPTION, "expected map")
    add("msgpack ext", "structure", pack(msgpack.ExtType(5, b"abcd")), CORRUPTION)
    add("trailing byte", "structure", ok + b"\x00", CORRUPTION, "trailing")
    add("two maps in one frame", "structure", ok + ok, CORRUPTION, "trailing")
    add("array claims 2^32-1 elements", "structure", b"\xdd\xff\xff\xff\xff", CORRUPTION)
    add("str claims 2^32-1 bytes", "structure", b"\xdb\xff\xff\xff\xff" + b"ab", CORRUPTION)
    add("map claims 2^32-1 entries", "structure", b"\xdf\xff\xff\xff\xff", CORRUPTION)
    add("nesting 40 deep", "structure", b"\x91" * 40 + b"\x01", INVALID, "nesting")
    add("map of 70 keys", "structure", pack({**req, **{"k%d" % i: i for i in range(70)}}),
        INVALID, "exceeds the limit of 64")
    add("duplicate key", "structure", b"\x83\xa1v\x01\xa4type\xa5stats\xa1v\x01", CORRUPTION,
        "duplicate key")
    add("int map key", "structure", pack({1: 2, "v": 1, "type": "stats"}), CORRUPTION)

    # Wrong protocol version.
    for name, v, code in (("v 2", 2, UNSUPPORTED), ("v 0", 0, UNSUPPORTED),
                          ("v 2^64-1", 2 ** 64 - 1, UNSUPPORTED), ("v -1", -1, UNSUPPORTED),
                          ("v str", "1", CORRUPTION), ("v float", 1.0, CORRUPTION),
                          ("v nil", None, CORRUPTION), ("v true", True, CORRUPTION)):
        add(name, "version", pack(_request(socket, v=v)), code, "v")
    add("v missing", "version", pack(without(req, "v")), CORRUPTION, "v: missing")

    # Unknown types, and messages of the wrong direction or of another protocol entirely.
    add("type missing", "type", pack(without(req, "type")), CORRUPTION, "type: missing")
    add("type int", "type", pack(_request(socket, type=3)), CORRUPTION, "type: expected str")
    add("type unknown", "type", pack(_request(socket, type="subscribe")), CORRUPTION,
        "subscribe")
    add("type empty", "type", pack(_request(socket, type="")), CORRUPTION, "type")
    for name in golden_names():
        if name in CLIENT_TO_SERVICE:
            continue
        code = INVALID if name.startswith("client_") else CORRUPTION
        add("golden %s" % name, "wrong direction", golden(name), code)
    if socket == "cancel":
        # Well-formed requests the cancel socket does not take.
        for name in ("client_submit_min", "client_stats", "client_kv_snapshot",
                     "client_lora_load", "client_lora_unload"):
            add("golden %s on the cancel socket" % name, "wrong socket", golden(name), INVALID,
                "accepts only")

    # Wrong types and values out of range.
    common = [("id", 7, CORRUPTION), ("id", None, CORRUPTION), ("id", b"h1", CORRUPTION),
              ("id", "", INVALID), ("id", "x" * 257, INVALID)]
    if socket == "submit":
        typed = common + [
            ("prompt", "abc", CORRUPTION), ("prompt", {"a": 1}, CORRUPTION),
            ("prompt", [1, "2"], CORRUPTION), ("prompt", [-1], INVALID),
            ("prompt", [2 ** 32], INVALID), ("prompt", [1.5], CORRUPTION),
            ("prompt", [[1]], CORRUPTION), ("max_tokens", "4", CORRUPTION),
            ("max_tokens", -4, INVALID), ("max_tokens", 2 ** 40, INVALID),
            ("output_tokens", [1.5], CORRUPTION), ("output_tokens", 5, CORRUPTION),
            ("dp_rank", "0", CORRUPTION), ("dp_rank", -1, INVALID),
            ("arrival_ms", "now", CORRUPTION), ("priority", 0.5, CORRUPTION)]
        for key in ("id", "prompt", "max_tokens"):
            add("%s missing" % key, "missing field", pack(without(req, key)), CORRUPTION,
                key + ": missing")
    else:
        typed = common + [("client", 5, CORRUPTION), ("client", b"", INVALID),
                          ("client", b"c" * 256, INVALID), ("client", [1], CORRUPTION)]
        add("id missing", "missing field", pack(without(req, "id")), CORRUPTION, "id: missing")
    for key, value, code in typed:
        shown = repr(value)
        if len(shown) > 24:
            shown = "%s... (%d long)" % (shown[:12], len(value))
        add("%s = %s" % (key, shown), "wrong type", pack(_request(socket, **{key: value})), code,
            key)
    if socket == "submit":
        add("prompt of 2^20+1 tokens", "out of range",
            pack(submit(prompt=[1] * ((1 << 20) + 1))), INVALID, "prompt")

    # Strs that are not UTF-8 (overlong, surrogate, above U+10FFFF, truncated, stray bytes).
    for label, raw in (("ff fe", b"\xff\xfeA"), ("overlong /", b"\xc0\xafA"),
                       ("surrogate", b"\xed\xa0\x80"), ("above U+10FFFF", b"\xf4\x90\x80"),
                       ("cut 3-byte", b"A\xe2\x82")):
        add("id %s" % label, "utf-8", with_raw(_request(socket, id="@@@"), "@@@", raw),
            CORRUPTION, "UTF-8")
        add("type %s" % label, "utf-8", with_raw(_request(socket, type="@@@"), "@@@", raw),
            CORRUPTION, "UTF-8")
        add("map key %s" % label, "utf-8", with_raw({**req, "@@@": 1}, "@@@", raw), CORRUPTION,
            "UTF-8")
    if socket == "cancel":
        add("client str ff fe", "utf-8", with_raw(cancel(client="@@@"), "@@@", b"\xff\xfeA"),
            CORRUPTION, "UTF-8")

    # Framing: the service takes [payload] or [empty delimiter, payload].
    add("empty frame", "empty frames", b"", CORRUPTION, "empty")
    add("delimiter then empty payload", "empty frames", [b"", b""], CORRUPTION, "empty")
    add("two empty frames then payload", "delimiter misuse", [b"", b"", ok], CORRUPTION,
        "one payload frame")
    add("payload then empty frame", "delimiter misuse", [ok, b""], CORRUPTION,
        "one payload frame")
    add("delimiter, payload, empty", "delimiter misuse", [b"", ok, b""], CORRUPTION,
        "one payload frame")
    add("delimiter then garbage", "delimiter misuse", [b"", b"\xc1"], CORRUPTION)
    add("two payload frames", "extra frames", [ok, ok], CORRUPTION, "one payload frame")
    add("payload then junk frame", "extra frames", [ok, b"junk"], CORRUPTION,
        "one payload frame")
    add("five frames", "extra frames", [ok, b"a", b"b", b"c", b"d"], CORRUPTION,
        "one payload frame")

    # Oversize: over the protocol limit, under ZMQ_MAXMSGSIZE (those drop the connection).
    add("payload of 16 MiB + 1", "oversize", b"\xc0" * (MAX_MESSAGE_BYTES + 1), INVALID,
        "exceeds the limit")
    add("valid prefix padded to 17 MiB", "oversize",
        ok + b"\x00" * (MAX_MESSAGE_BYTES + (1 << 20)), INVALID, "exceeds the limit")
    return cases


def flood_cases(socket):
    """The catalogue without its large cases (over 64 KiB), for the 100,000-message flood."""
    return [c for c in catalogue(socket) if sum(len(f) for f in c.frames) <= 64 * 1024]
