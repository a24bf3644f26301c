#!/usr/bin/python3
"""Independent encoder for the protocol golden files in tests/data/protocol/*.hex.

Uses python3-msgpack (use_bin_type=True: ints in the smallest form, floats as float64, str for
text, bin for bytes) and dicts in insertion order, so the bytes follow the key orders of
protocol/README.md and docs/wire.md without sharing any code with the C++ encoders. It also
checks the worked examples (docs/wire.md, Worked examples and FPM example) byte for byte.

  gen_protocol_goldens.py           rewrite the .hex files
  gen_protocol_goldens.py --check   exit 1 if any checked-in file differs (run by ctest)
"""
import os
import struct
import sys

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "protocol")


class U64(int):
    """An integer that must be written as cf + 8 bytes (force_uint64_hashes)."""


_packer = msgpack.Packer(use_bin_type=True)


def pack(o):
    if isinstance(o, U64):
        return b"\xcf" + struct.pack(">Q", int(o))
    if isinstance(o, list):
        return _packer.pack_array_header(len(o)) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        return _packer.pack_map_header(len(o)) + b"".join(pack(k) + pack(v) for k, v in o.items())
    return msgpack.packb(o, use_bin_type=True)


# ---------------------------------------------------------------------------------------------
# KV events (docs/wire.md, KV events)
S0, S1, S2 = 0xCB38E4D7FB2DCA5C, 0x44A2B2379D6D3C3D, 0xAEA1E67A6C80CF84
TS0, TS1, TS2 = 1700000000.5, 1700000000.75, 1700000001.0


def stored_pos(n, hashes, parent, tokens, block_size=4):
    e = ["BlockStored", hashes, parent, tokens, block_size, None]
    if n >= 7:
        e.append("GPU")
    if n >= 8:
        e.append(None)  # lora_name
    if n >= 9:
        e.append(None)  # extra_keys
    if n >= 12:
        e += [0, "full_attention", None]
    return e


def removed_pos(n, hashes):
    e = ["BlockRemoved", hashes]
    if n >= 7:
        e.append("GPU")
    if n >= 12:
        e.append(0)
    return e


def stored_map(v26, hashes, parent, tokens, block_size=4):
    e = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
         "token_ids": tokens, "block_size": block_size, "lora_id": None, "medium": "GPU",
         "lora_name": None}
    if v26:
        e["extra_keys"] = [None] * len(hashes)
        e["group_idx"] = 0
        e["kv_cache_spec_kind"] = "full_attention"
    return e


def removed_map(v26, hashes):
    e = {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}
    if v26:
        e["group_idx"] = 0
    return e


T8 = list(range(1, 9))
T4 = [9, 10, 11, 12]

GOLDENS = {}
for n in (6, 7, 8, 9, 12):
    GOLDENS[f"kv_p{n}_batch0"] = [TS0, [stored_pos(n, [S0, S1], None, T8)], 0]
    GOLDENS[f"kv_p{n}_batch1"] = [TS1, [stored_pos(n, [S2], S1, T4)], 0]
    GOLDENS[f"kv_p{n}_batch2"] = [TS2, [removed_pos(n, [S2]), removed_pos(n, [S1])], 0]
for name, v26 in (("map", False), ("map26", True)):
    GOLDENS[f"kv_{name}_batch0"] = [TS0, [stored_map(v26, [S0, S1], None, T8)], 0]
    GOLDENS[f"kv_{name}_batch1"] = [TS1, [stored_map(v26, [S2], S1, T4)], 0]
    GOLDENS[f"kv_{name}_batch2"] = [TS2, [removed_map(v26, [S2]), removed_map(v26, [S1])], 0]
GOLDENS["kv_cleared_positional"] = [TS0, [["AllBlocksCleared"]], 0]
GOLDENS["kv_cleared_map"] = [TS0, [{"type": "AllBlocksCleared"}], 0]
# parent_root = zero, a mixed batch on rank 3, and force_uint64_hashes with small hashes.
GOLDENS["kv_p8_parent_zero"] = [TS0, [stored_pos(8, [S0, S1], 0, T8)], 0]
GOLDENS["kv_p8_mixed_rank3"] = [
    2.25, [removed_pos(8, [S2]), stored_pos(8, [S0], None, [1, 2, 3, 4]), ["AllBlocksCleared"]], 3]
GOLDENS["kv_p8_force_u64"] = [
    0.0, [stored_pos(8, [U64(5), U64(1 << 40)], U64(7), [300, 70000, 1, 2, 3, 4, 5, 6], 4),
          removed_pos(8, [U64(9)])], 1]
GOLDENS["kv_p8_force_u64_parent_zero"] = [0.0, [stored_pos(8, [U64(5)], U64(0), T4)], 0]

# ---------------------------------------------------------------------------------------------
# Forward-pass metrics (docs/wire.md, Forward-pass metrics)


def fpm(counter_id, wall_time, sched, queued, ext=None):
    keys_s = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
              "sum_prefill_kv_tokens", "num_decode_requests", "sum_decode_kv_tokens",
              "var_decode_kv_tokens"]
    keys_q = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
              "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens"]
    m = {"version": 1, "worker_id": "7587889736218396437", "dp_rank": 0,
         "counter_id": counter_id, "wall_time": wall_time,
         "scheduled_requests": dict(zip(keys_s, sched)),
         "queued_requests": dict(zip(keys_q, queued))}
    m.update(ext or {})
    return m


GOLDENS["fpm_example"] = fpm(42, 0.025, [1, 512, 0.0, 0, 3, 1500, 2.0],
                             [0, 0, 0.0, 0, 0, 0.0])
GOLDENS["fpm_heartbeat"] = fpm(43, 0.0, [0, 0, 0.0, 0, 0, 0, 0.0], [0, 0, 0.0, 0, 0, 0.0])
GOLDENS["fpm_extensions"] = fpm(
    70000, 1.5, [2, 100000, 12.25, 64, 300, 4000000000, 0.5], [5, 6000, 1.0, 2, 300, 7.5],
    {"x_pass_start_ms": 1000.0, "x_pass_end_ms": 2500.0, "x_preemptions_total": 12})

# ---------------------------------------------------------------------------------------------
# Client protocol v1 (protocol/README.md)


def msg(type_, **fields):
    m = {"v": 1, "type": type_}
    m.update(fields)
    return m


GOLDENS["client_submit_min"] = msg("submit", id="r1", prompt=[1, 2, 3], max_tokens=2)
GOLDENS["client_submit_full"] = msg(
    "submit", id="req-42", prompt=[1, 200, 70000], max_tokens=3, output_tokens=[7, 8, 9],
    dp_rank=1, arrival_ms=12.5, priority=-2)
GOLDENS["client_submit_ack"] = msg("submit_ack", id="r1", dp_rank=0)
GOLDENS["client_submit_reject"] = msg("submit_reject", id="r1",
                                      reason="duplicate active request id")
GOLDENS["client_output"] = msg("output", outputs=[
    {"id": "r1", "index": 0, "tokens": [24979], "cached_tokens": 16},
    {"id": "r2", "index": 5, "tokens": [7036, 1001]},
    {"id": "r3", "index": 2, "tokens": [], "finish": "cancelled", "reason": "cancelled by client"},
    {"id": "r4", "index": 9, "tokens": [1234], "finish": "length"},
])
GOLDENS["client_cancel"] = msg("cancel", id="r1")
GOLDENS["client_cancel_client"] = msg("cancel", id="r1", client=b"\x00k\x8bEg")
GOLDENS["client_cancel_reply_applied"] = msg("cancel_reply", id="r1", result="applied")
GOLDENS["client_cancel_reply_not_found"] = msg("cancel_reply", id="r9", result="not_found")
GOLDENS["client_error"] = msg("error", code="unsupported",
                              message="v: protocol version 2 is not supported "
                                      "(this peer speaks version 1)")
GOLDENS["client_error_id"] = msg("error", code="invalid_argument",
                                 message="dp_rank: 4 >= dp_size 2", id="r1")
GOLDENS["client_stats"] = msg("stats")
GOLDENS["client_stats_reply"] = msg("stats_reply", ranks=[
    {"dp_rank": 0, "active_blocks": 10, "total_blocks": 16384, "kv_usage": 0.25, "running": 2,
     "waiting": 1, "preemptions": 0, "prefix_queries_tokens": 4096, "prefix_hit_tokens": 1024},
    {"dp_rank": 1, "active_blocks": 0, "total_blocks": 16384, "kv_usage": 0.0, "running": 0,
     "waiting": 0, "preemptions": 3, "prefix_queries_tokens": 0, "prefix_hit_tokens": 0},
], routes=3, clients=[{"client": b"\x00k\x8bEg", "routes": 2}, {"client": b"bob", "routes": 1}],
    client_entries=2)
GOLDENS["client_kv_snapshot"] = msg("kv_snapshot")
GOLDENS["client_kv_snapshot_rank"] = msg("kv_snapshot", dp_rank=1)
GOLDENS["client_kv_snapshot_reply"] = msg("kv_snapshot_reply", ranks=[
    {"dp_rank": 0, "block_hashes": [S1, S2, S0]},  # sorted: 0x44.. < 0xae.. < 0xcb..
    {"dp_rank": 1, "block_hashes": []},
])
GOLDENS["client_kv_snapshot_reply_seq"] = msg("kv_snapshot_reply", ranks=[
    {"dp_rank": 0, "block_hashes": [S1, S2], "last_seq": 41},
    {"dp_rank": 1, "block_hashes": []},
])
# Disaggregated prefill/decode (protocol/README.md §1.2)
KEY = bytes(range(0xa0, 0xb0))
TICKET = {"source": "tcp://10.0.0.7:5560", "key": KEY, "source_rank": 0, "block_size": 16,
          "prompt_len": 40, "cached_tokens": 16, "transfer_ms": 1.25}
GOLDENS["client_handoff"] = msg("handoff", id="r1", ticket=TICKET)
GOLDENS["client_submit_handoff"] = msg("submit", id="d1", prompt=list(range(1, 41)),
                                       max_tokens=4, handoff=TICKET)
GOLDENS["client_kv_fetch"] = msg("kv_fetch", key=KEY, tokens=24)
GOLDENS["client_kv_fetch_reply"] = msg("kv_fetch_reply", key=KEY, result="ready")
GOLDENS["client_kv_release"] = msg("kv_release", key=KEY)
GOLDENS["client_lora_load"] = msg("lora_load", name="sql-lora")
GOLDENS["client_lora_unload"] = msg("lora_unload", name="sql-lora")
GOLDENS["client_lora_reply"] = msg("lora_reply", op="load", name="sql-lora", result="ok",
                                   changed=True)
GOLDENS["client_lora_reply_error"] = msg("lora_reply", op="unload", name="sql-lora",
                                         result="unsupported", changed=False,
                                         message="lora_unload: LoRA is off on this engine "
                                                 "(max_loras 0)")
GOLDENS["client_stats_reply_handoff"] = msg("stats_reply", ranks=[
    {"dp_rank": 0, "active_blocks": 3, "total_blocks": 64, "kv_usage": 0.046875, "running": 0,
     "waiting": 0, "preemptions": 0, "prefix_queries_tokens": 40, "prefix_hit_tokens": 16,
     "held": 1, "pending_handoffs": 0, "handoff_expired": 2},
], routes=1, clients=[], client_entries=1)

# Worked examples (docs/wire.md), byte for byte (checked before anything is written).
SPEC = {
    "kv_p8_batch0": "93cb41d954fc402000009198ab426c6f636b53746f72656492cfcb38e4d7fb2dca5ccf44a2b2379d6d3c3dc098010203040506070804c0a3475055c000",
    "kv_map_batch0": "93cb41d954fc402000009188a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392cfcb38e4d7fb2dca5ccf44a2b2379d6d3c3db1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473980102030405060708aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c000",
    "kv_p8_batch1": "93cb41d954fc40300000 91 98 ab426c6f636b53746f726564 91 cfaea1e67a6c80cf84 cf44a2b2379d6d3c3d 94 090a0b0c 04 c0 a3475055 c0 00",
    "kv_map_batch1": "93cb41d954fc403000009188a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cfaea1e67a6c80cf84b1706172656e745f626c6f636b5f68617368cf44a2b2379d6d3c3da9746f6b656e5f69647394090a0b0caa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c000",
    "kv_p8_batch2": "93 cb41d954fc40400000 92 93 ac426c6f636b52656d6f766564 91 cfaea1e67a6c80cf84 a3475055 93 ac426c6f636b52656d6f766564 91 cf44a2b2379d6d3c3d a3475055 00",
    "kv_map_batch2": "93cb41d954fc404000009283a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cfaea1e67a6c80cf84a66d656469756da347505583a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf44a2b2379d6d3c3da66d656469756da347505500",
    "kv_cleared_positional": "93 cb41d954fc40200000 91 91 b0416c6c426c6f636b73436c6561726564 00",
    "kv_cleared_map": "93 cb41d954fc40200000 91 81 a474797065 b0416c6c426c6f636b73436c6561726564 00",
}
SPEC_SIZES = {"kv_p8_batch0": 61, "kv_map_batch0": 143, "kv_p8_batch1": 56, "kv_map_batch1": 138,
              "kv_p8_batch2": 68, "kv_map_batch2": 118, "kv_p12_batch0": 79,
              "fpm_example": 430, "fpm_heartbeat": 426}


def check_spec(encoded):
    for name, text in SPEC.items():
        want = bytes.fromhex(text.replace(" ", ""))
        if encoded[name] != want:
            sys.exit(f"{name}: python encoding differs from the worked example")
    for name, size in SPEC_SIZES.items():
        if len(encoded[name]) != size:
            sys.exit(f"{name}: {len(encoded[name])} bytes, the worked example has {size}")
    p12 = encoded["kv_p12_batch0"].hex()
    if not p12.startswith("93cb41d954fc40200000919c") or not p12.endswith(
            "04c0a3475055c0c000ae66756c6c5f617474656e74696f6ec000"):
        sys.exit("kv_p12_batch0: differs from the worked example")
    if "94ac426c6f636b52656d6f76656491cfaea1e67a6c80cf84a347505500" not in encoded["kv_p12_batch2"].hex():
        sys.exit("kv_p12_batch2: BlockRemoved differs from the worked example")


def main():
    check = "--check" in sys.argv[1:]
    encoded = {name: pack(obj) for name, obj in GOLDENS.items()}
    check_spec(encoded)
    bad = []
    for name, data in sorted(encoded.items()):
        path = os.path.join(OUT_DIR, name + ".hex")
        text = data.hex() + "\n"
        if check:
            try:
                with open(path) as f:
                    if f.read() != text:
                        bad.append(name)
            except FileNotFoundError:
                bad.append(name + " (missing)")
        else:
            os.makedirs(OUT_DIR, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    if check:
        known = {n + ".hex" for n in encoded}
        extra = sorted(set(os.listdir(OUT_DIR)) - known)
        bad += [f"{e} (not produced by this script)" for e in extra]
        if bad:
            sys.exit("golden files differ from the python encoder: " + ", ".join(bad))
        print(f"{len(encoded)} golden files match")
    else:
        print(f"wrote {len(encoded)} golden files to {OUT_DIR}")


if __name__ == "__main__":
    main()
