#!/usr/bin/python3
"""Writes fuzz seed inputs, one directory per target, from the repository's golden files, sample
traces and documented examples.

  tests/fuzz/make_seeds.py OUT_DIR          the full seed set (whole sample traces, cut into
                                            chunks) for a fuzzing run
  tests/fuzz/make_seeds.py --checked-in     the small seeds kept in tests/fuzz/corpus/ (replayed by
                                            fuzz_corpus_tests next to the crash reproducers)
  tests/fuzz/make_seeds.py --check          exits 1 naming every checked-in seed that is missing or
                                            differs from what --checked-in would write (ctest
                                            fuzz_seeds_current)

Seed files are named seed-*; reproducers of fixed crashes sit beside them under other names.
"""
import argparse
import binascii
import pathlib
import struct
import sys

import msgpack

ROOT = pathlib.Path(__file__).resolve().parents[2]


def protocol_goldens():
    for path in sorted((ROOT / "tests/data/protocol").glob("*.hex")):
        yield path.stem, binascii.unhexlify("".join(path.read_text().split()))


def index_query_seeds():
    pack = msgpack.packb
    yield "overlap_tokens", pack({"type": "overlap", "id": "q1", "tokens": list(range(1, 9)),
                                  "block_size": 4})
    yield "overlap_hashes", pack({"type": "overlap",
                                  "block_hashes": [0xCB38E4D7FB2DCA5C, 0x44A2B2379D6D3C3D]})
    yield "overlap_seeds", pack({"type": "overlap", "tokens": [1, 2, 3, 4], "hash_seed": 7,
                                 "chain_seed": 9})
    yield "overlap_lora", pack({"type": "overlap", "tokens": [1, 2, 3, 4], "lora": "sql-lora"})
    yield "overlap_tiers", pack({"type": "overlap", "tokens": [1, 2, 3, 4], "tiers": True,
                                 "with_cached": True})
    yield "overlap_reply_tiers", pack({"type": "overlap_reply", "num_blocks": 3,
                                       "workers": [{"worker_id": 7, "blocks": 1, "ranks": [
                                           {"dp_rank": 0, "blocks": 1,
                                            "tiers": {"GPU": 1, "CPU": 1, "DISK": 1}}]}]})
    yield "stats", pack({"type": "stats"})
    yield "verify", pack({"type": "verify", "id": "v"})
    yield "overlap_reply", pack({"type": "overlap_reply", "id": "q1", "num_blocks": 2,
                                 "workers": [{"worker_id": 7, "blocks": 2,
                                              "ranks": [{"dp_rank": 0, "blocks": 2}]}]})
    yield "stats_reply", pack({"type": "stats_reply", "stats": {"batches": 3, "gaps": 0}})
    yield "verify_reply", pack({"type": "verify_reply", "id": "v", "ok": False,
                                "sources": [{"worker_id": 1, "dp_rank": 0, "index_blocks": 2,
                                             "worker_blocks": 3, "missing": [5], "extra": []}],
                                "errors": ["worker 2: no snapshot endpoint"]})
    yield "error", pack({"type": "error", "id": "q", "message": "unknown type"})


def frames(*parts):
    return b"".join(bytes([len(p)]) + p for p in parts)


def kv_replay_seeds():
    seq = lambda n: struct.pack(">Q", n)  # noqa: E731
    # setup byte (ring capacity | r2 << 3), batches published, then length-prefixed frames
    yield "r1_from_0", bytes([5, 7]) + frames(b"id", b"", seq(0))
    yield "r2_from_3", bytes([4 | 8, 9]) + frames(b"client", b"", seq(3))
    yield "past_end", bytes([7, 3]) + frames(b"x", b"", seq(2**64 - 2))
    yield "no_ring", bytes([0, 4]) + frames(b"x", b"", seq(1))
    yield "bad_shape", bytes([3, 3]) + frames(b"x", b"y", seq(0), b"")


def sequencer_seeds():
    # setup: has_replay | probe << 1 | can_resync << 2 | replay_from_zero << 3 | retries << 4
    yield "in_order", bytes([0x01, 0, 0, 0, 1, 0, 2, 6, 6, 6])
    yield "gap_replay_heal", bytes([0x05, 0, 0, 0, 1, 0, 3, 1, 2, 1, 3, 2])
    yield "replay_from_zero", bytes([0x0B, 1, 0, 1, 1, 2, 6, 3, 200, 3, 200, 5, 2])
    yield "resync", bytes([0x05, 0, 5, 0, 9, 2, 2, 3, 250, 3, 250, 4 | 8, 0, 12])
    yield "no_replay_skip", bytes([0x00, 0, 4, 0, 7, 0, 5, 0, 6])


TIMING_PROFILE = b"""{
  "prefill_isl": [8, 512, 8192],
  "prefill_ttft_ms": [16.6, 24.4, 169.1],
  "decode_active_kv_tokens": [0, 1000],
  "decode_context_length": [16, 4096],
  "decode_itl": [[5.7, 6.0], [20.0, 34.0]]
}
"""

CONFIG_SMALL = b"""[engine]
engine_type = "sglang"
num_gpu_blocks = 4096
max_num_seqs = "none"

[engine.sglang]
schedule_policy = "lpm"

[kv_events]
layout = "map26"
"""


def lines_of(path, count):
    with open(path, "rb") as f:
        return [next(f) for _ in range(count)]


def seeds(full):
    out = {}
    goldens = list(protocol_goldens())
    out["client_fuzz"] = [(n, b) for n, b in goldens if n.startswith("client_")]
    out["fpm_fuzz"] = [(n, b) for n, b in goldens if n.startswith("fpm_")]
    out["kv_events_fuzz"] = [(n, b) for n, b in goldens if n.startswith("kv_")]
    if not full:  # a few of each family are enough next to the reproducers
        for k in ("client_fuzz", "kv_events_fuzz"):
            out[k] = [s for s in out[k] if s[0].endswith(("submit_full", "output", "stats_reply",
                                                          "submit_handoff", "kv_fetch",
                                                          "lora_reply_error", "p6_batch1", "p8_batch1", "map26_batch1",
                                                          "p12_batch2", "cleared_map"))]
    out["index_query_fuzz"] = list(index_query_seeds())
    out["kv_replay_fuzz"] = list(kv_replay_seeds())
    # byte 0 picks the parser (0 worker spec, 1 config key, 2 endpoint, 3 azure timestamp)
    out["cli_text_fuzz"] = [
        ("worker", b"\x00\x00" + b"7=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,dp=2"),
        ("worker_rank", b"\x00\x00" + b"3/1=tcp://h:1,snapshot=tcp://h:2,topic=kv@a@b"),
        ("config_key", b"\x01\x03" + b"4096"),
        ("endpoint", b"\x02\x03" + b"tcp://127.0.0.1:5557"),
        ("azure_ts", b"\x03\x00" + b"2023-11-16 18:17:03.9799600"),
    ]
    # byte 0: bit 0 chat, the rest the context length; then the request body
    out["openai_request_fuzz"] = [
        ("completion_string", b"\x20" + b'{"prompt": "Hello world", "max_tokens": 4, "stream": '
         b'true, "stream_options": {"include_usage": true}, "stop": ["x"]}'),
        ("completion_ids", b"\x20" + b'{"prompt": [[1, 2, 3], [4]], "n": 2, "min_tokens": 1, '
         b'"ignore_eos": true}'),
        # A flat token-id prompt (the JSON fast path's ids), given twice: the last one counts.
        ("completion_flat_ids", b"\x20" + b'{"prompt": "x", "max_tokens": 2, '
         b'"prompt": [7, 1000000, 4294967295]}'),
        ("completion_flat_ids_replaced", b"\x20" + b'{"prompt": [7, 1000000], "max_tokens": 2, '
         b'"prompt": "x"}'),
        ("chat", b"\x21" + b'{"model": "m", "messages": [{"role": "system", "content": '
         b'"Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], '
         b'"max_completion_tokens": 3}'),
        ("chat_wrong_type", b"\x21" + b'{"messages": [{"role": "user", "content": 5}], '
         b'"temperature": "x"}'),
    ]
    out["sequencer_fuzz"] = list(sequencer_seeds())
    out["timing_profile_fuzz"] = [("example", TIMING_PROFILE)]
    out["config_toml_fuzz"] = [("small", CONFIG_SMALL),
                               ("example", (ROOT / "docs/mocker.example.toml").read_bytes())]
    tiny = (ROOT / "tests/data/tiny_trace.jsonl").read_bytes()
    mooncake = ROOT / "data/traces/mooncake_synthetic_trace.jsonl"
    azure = ROOT / "data/traces/azure_llm_inference_2023_code.csv"
    out["mooncake_fuzz"] = [("tiny_trace", tiny)]
    out["flat_json_fuzz"] = [(f"tiny_line{i + 1}", line.rstrip(b"\n"))
                             for i, line in enumerate(tiny.splitlines(keepends=True))]
    out["azure_fuzz"] = []
    for target, name in (("agentic_fuzz", "agentic_sample.jsonl"),
                         ("mooncake_delta_fuzz", "mooncake_delta_sample.jsonl")):
        sample = ROOT / "data/traces" / name
        out[target] = [("sample", sample.read_bytes())] if sample.exists() else []
    # data/traces/ is optional: without a sample trace its seeds are skipped, never an error.
    if mooncake.exists():
        out["mooncake_fuzz"].append(("synthetic_head", b"".join(lines_of(mooncake, 3))))
        if full:
            data = mooncake.read_bytes().splitlines(keepends=True)
            out["mooncake_fuzz"] += [(f"synthetic_{i}", b"".join(data[i:i + 20]))
                                     for i in range(0, len(data), 400)]
            out["flat_json_fuzz"] += [(f"synthetic_line{i}", data[i].rstrip(b"\n"))
                                      for i in range(0, len(data), 200)]
    else:
        print(f"skipping the seeds from {mooncake.relative_to(ROOT)}: not present", file=sys.stderr)
    if azure.exists():
        out["azure_fuzz"].append(("code_head", b"".join(lines_of(azure, 8))))
        if full:
            rows = azure.read_bytes().splitlines(keepends=True)
            out["azure_fuzz"] += [(f"code_{i}", rows[0] + b"".join(rows[i:i + 50]))
                                  for i in range(1, len(rows), 1000)]
    else:
        print(f"skipping the seeds from {azure.relative_to(ROOT)}: not present", file=sys.stderr)
    return out


def check_checked_in():
    corpus = ROOT / "tests/fuzz/corpus"
    stale = []
    for target, items in seeds(full=False).items():
        for name, data in items:
            path = corpus / target / f"seed-{name}"
            if not path.exists():
                stale.append(f"{path.relative_to(ROOT)}: missing")
            elif path.read_bytes() != data:
                stale.append(f"{path.relative_to(ROOT)}: differs from its source")
    for line in stale:
        print(line, file=sys.stderr)
    if stale:
        print(f"{len(stale)} stale seed(s): run tests/fuzz/make_seeds.py --checked-in",
              file=sys.stderr)
        return 1
    print("every checked-in seed matches its source")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("out_dir", nargs="?", type=pathlib.Path)
    ap.add_argument("--checked-in", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if (args.checked_in + args.check + (args.out_dir is not None)) != 1:
        ap.error("give exactly one of OUT_DIR, --checked-in, --check")
    if args.check:
        return check_checked_in()
    out_dir = ROOT / "tests/fuzz/corpus" if args.checked_in else args.out_dir
    for target, items in seeds(full=not args.checked_in).items():
        d = out_dir / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in items:
            (d / f"seed-{name}").write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
