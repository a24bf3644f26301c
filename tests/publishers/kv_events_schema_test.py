#!/usr/bin/python3
"""Subscribes to a live KvEventPublisher (kv_publish_demo) with python3-zmq and decodes every
batch strictly against the vLLM schema (docs/wire.md, KV events) for the given layout.

  kv_events_schema_test.py <path-to-kv_publish_demo> <layout>...

Slow joiner: the replay (DEALER, from seq 0) delivers the batches published before the SUB
joined; the live SUB is then checked by asking the demo to publish until one arrives.
"""
import struct
import subprocess
import sys
import time

import msgpack
import zmq

TOPIC = b"kv@127.0.0.1:8000@Qwen/Qwen3-0.6B"
END = b"\xff" * 8
DEADLINE_S = 30


def fail(msg):
    raise AssertionError(msg)


def check_hash(h, what):
    if type(h) is not int or not 0 <= h < 2**64:
        fail(f"{what}: hash must be an unsigned 64-bit int, got {h!r}")


def check_hashes(hs, what):
    if type(hs) is not list or not hs:
        fail(f"{what}: block_hashes must be a non-empty list")
    for h in hs:
        check_hash(h, what)


STORED_POS = {"p6": 6, "p7": 7, "p8": 8, "p9": 9, "p12": 12}
REMOVED_POS = {"p6": 2, "p7": 3, "p8": 3, "p9": 3, "p12": 4}
STORED_KEYS = ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
               "medium", "lora_name"]


def check_stored(fields, what):
    hashes, parent, tokens, block_size = fields
    check_hashes(hashes, what)
    if parent is not None:
        check_hash(parent, what + " parent")
        if parent in hashes:
            fail(f"{what}: parent equals a child")
    if len(set(hashes)) != len(hashes):
        fail(f"{what}: duplicate hashes")
    if type(block_size) is not int or block_size < 1:
        fail(f"{what}: block_size {block_size!r}")
    if type(tokens) is not list or any(type(t) is not int or t < 0 for t in tokens):
        fail(f"{what}: token_ids {tokens!r}")
    if len(tokens) != len(hashes) * block_size:
        fail(f"{what}: {len(tokens)} tokens for {len(hashes)} blocks of {block_size}")


def check_event(ev, layout, what):
    if layout.startswith("p"):
        if type(ev) is not list or not ev or type(ev[0]) is not str:
            fail(f"{what}: positional event must be a list starting with a str tag: {ev!r}")
        tag = ev[0]
        if tag == "BlockStored":
            if len(ev) != STORED_POS[layout]:
                fail(f"{what}: BlockStored has {len(ev)} elements, {layout} needs {STORED_POS[layout]}")
            check_stored(ev[1:5], what)
            if ev[5] is not None:
                fail(f"{what}: lora_id must be nil")
            if len(ev) >= 7 and ev[6] != "GPU":
                fail(f"{what}: medium {ev[6]!r}")
            if len(ev) >= 8 and ev[7] is not None:
                fail(f"{what}: lora_name must be nil")
            if len(ev) >= 9 and ev[8] is not None:
                fail(f"{what}: extra_keys must be nil")
            if len(ev) == 12 and ev[9:] != [0, "full_attention", None]:
                fail(f"{what}: p12 tail {ev[9:]!r}")
        elif tag == "BlockRemoved":
            if len(ev) != REMOVED_POS[layout]:
                fail(f"{what}: BlockRemoved has {len(ev)} elements")
            check_hashes(ev[1], what)
            if len(ev) >= 3 and ev[2] != "GPU":
                fail(f"{what}: medium {ev[2]!r}")
            if len(ev) == 4 and ev[3] != 0:
                fail(f"{what}: group_idx {ev[3]!r}")
        elif tag == "AllBlocksCleared":
            if ev != ["AllBlocksCleared"]:
                fail(f"{what}: {ev!r}")
        else:
            fail(f"{what}: unknown tag {tag!r}")
        return tag
    if type(ev) is not dict:
        fail(f"{what}: map event expected, got {ev!r}")
    keys = list(ev)
    tag = ev.get("type")
    v26 = layout == "map26"
    if tag == "BlockStored":
        want = STORED_KEYS + (["extra_keys", "group_idx", "kv_cache_spec_kind"] if v26 else [])
        if keys != want:
            fail(f"{what}: keys {keys}, want {want}")
        check_stored([ev["block_hashes"], ev["parent_block_hash"], ev["token_ids"],
                      ev["block_size"]], what)
        if ev["lora_id"] is not None or ev["lora_name"] is not None or ev["medium"] != "GPU":
            fail(f"{what}: lora/medium {ev!r}")
        if v26 and (ev["extra_keys"] != [None] * len(ev["block_hashes"]) or ev["group_idx"] != 0
                    or ev["kv_cache_spec_kind"] != "full_attention"):
            fail(f"{what}: map26 fields {ev!r}")
    elif tag == "BlockRemoved":
        want = ["type", "block_hashes", "medium"] + (["group_idx"] if v26 else [])
        if keys != want:
            fail(f"{what}: keys {keys}, want {want}")
        check_hashes(ev["block_hashes"], what)
        if ev["medium"] != "GPU":
            fail(f"{what}: medium")
    elif tag == "AllBlocksCleared":
        if keys != ["type"]:
            fail(f"{what}: keys {keys}")
    else:
        fail(f"{what}: unknown type {tag!r}")
    return tag


def check_batch(payload, layout, what):
    if payload[0] != 0x93 or payload[1] != 0xCB:
        fail(f"{what}: batch must start with array(3) and a float64 ts: {payload[:2].hex()}")
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    if type(batch) is not list or len(batch) != 3:
        fail(f"{what}: batch must be [ts, events, dp_rank]")
    ts, events, rank = batch
    if type(ts) is not float:
        fail(f"{what}: ts {ts!r}")
    if type(rank) is not int or rank != 0:
        fail(f"{what}: dp_rank must be a non-nil int (0): {rank!r}")
    if type(events) is not list or not events:
        fail(f"{what}: events {events!r}")
    return [check_event(ev, layout, f"{what} event {i}") for i, ev in enumerate(events)]


def recv_all(sock, timeout_ms):
    if sock.poll(timeout_ms):
        return sock.recv_multipart()
    return None


def run(demo, layout):
    proc = subprocess.Popen([demo, layout], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    ctx = zmq.Context()
    try:
        pub_ep = proc.stdout.readline().split()[1]
        replay_ep = proc.stdout.readline().split()[1]
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.connect(pub_ep)
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(replay_ep)

        # 1. Replay from seq 0 (layout r1): the four batches published before we joined.
        dealer.send_multipart([b"", struct.pack(">Q", 0)])
        tags, seqs = [], []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            if time.monotonic() > deadline:
                fail("replay: no end marker")
            frames = recv_all(dealer, 100)
            if frames is None:
                continue
            if len(frames) != 3 or frames[0] != b"" or len(frames[1]) != 8:
                fail(f"replay frame shape {[len(f) for f in frames]}")
            if frames[1] == END:
                if frames[2] != b"":
                    fail("end marker payload must be empty")
                break
            seqs.append(struct.unpack(">Q", frames[1])[0])
            tags.append(check_batch(frames[2], layout, f"replay seq {seqs[-1]}"))
        if seqs[:4] != [0, 1, 2, 3]:
            fail(f"replay seqs {seqs}")
        if tags[:4] != [["BlockStored"], ["BlockStored"], ["BlockRemoved", "BlockRemoved"],
                        ["AllBlocksCleared"]]:
            fail(f"replay tags {tags}")

        # 2. Live: ask for batches until the SUB has joined, then check one strictly.
        live = None
        while live is None:
            if time.monotonic() > deadline:
                fail("live: SUB never received a batch")
            proc.stdin.write("publish\n")
            proc.stdin.flush()
            live = recv_all(sub, 50)
        if len(live) != 3 or live[0] != TOPIC or len(live[1]) != 8:
            fail(f"live frames {[f[:40] for f in live]}")
        seq = struct.unpack(">Q", live[1])[0]
        if seq < 4:
            fail(f"live seq {seq} repeats a replayed batch")
        check_batch(live[2], layout, f"live seq {seq}")
        # Every later batch arrives with the next sequence number.
        proc.stdin.write("publish\n")
        proc.stdin.flush()
        while True:
            nxt = recv_all(sub, DEADLINE_S * 1000)
            if nxt is None:
                fail("live: next batch missing")
            nseq = struct.unpack(">Q", nxt[1])[0]
            if nseq != seq + 1:
                fail(f"live: seq {nseq} after {seq}")
            check_batch(nxt[2], layout, f"live seq {nseq}")
            seq = nseq
            if not sub.poll(0):
                break
        print(f"{layout}: replayed {len(seqs)} batches, live up to seq {seq}: schema ok")
    finally:
        proc.stdin.close()
        rc = proc.wait(timeout=DEADLINE_S)
        ctx.destroy(linger=0)
    if rc != 0:
        fail(f"demo exited with {rc}")


def main():
    demo = sys.argv[1]
    for layout in sys.argv[2:] or ["p8"]:
        run(demo, layout)


if __name__ == "__main__":
    main()
