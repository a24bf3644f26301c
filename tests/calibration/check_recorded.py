#!/usr/bin/env python3
"""Integrity check of data/calibration/recorded/ (stdlib only; ctest calibration_data_check).

Usage: check_recorded.py [DIR]   (default: data/calibration/recorded beside this repository's tests)

Checks, for every run directory:
  * trace.jsonl, ground_truth.csv, run.json and config.json exist; nothing else is there;
  * trace lines == ground-truth rows, in the same order, with identical request ids, arrivals and
    lengths; hash_ids non-empty positive integers, ceil(input_length / 16) of them; timestamps
    start at 0 and never decrease;
  * each ground-truth row is consistent (0 <= queue <= ttft <= e2e, first/last token times =
    arrival + ttft/e2e, itl * (output_length - 1) = e2e - ttft);
  * the aggregates recomputed from ground_truth.csv (mean/p50/p90/p99 of ttft, e2e, itl, and the
    column sums) equal run.json's recorded.aggregates and recorded.sums;
  * run.json's mocker_engine agrees with its engine block, and block_size is 16;
and for the folder: every file's sha256 matches SHA256SUMS, and no file is missing from it.
Exit status 0 when everything passes, 1 otherwise (one line per problem).
"""
import csv
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path

BLOCK = 16
RUN_FILES = {"trace.jsonl", "ground_truth.csv", "run.json", "config.json"}
TRACE_KEYS = {"timestamp", "input_length", "output_length", "hash_ids", "request_id"}
GT_COLS = ["request_id", "arrival_ms", "input_length", "output_length", "ttft_ms", "e2e_ms",
           "itl_ms", "queue_ms", "first_token_ms", "last_token_ms", "dataset_arrival_ms"]
errors = []


def fail(msg):
    errors.append(msg)


def pct(xs, p):
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def close(a, b, tol):
    return abs(a - b) <= tol


def check_rows(run, trace, gt):
    prev = 0.0
    ids = set()
    for i, (t, g) in enumerate(zip(trace, gt)):
        where = f"{run}/ground_truth.csv line {i + 2} (trace.jsonl line {i + 1})"
        if t["request_id"] != g["request_id"] or t["request_id"] in ids:
            fail(f"{where}: request_id {t['request_id']} vs {g['request_id']} (or duplicate)")
        ids.add(t["request_id"])
        if not close(float(t["timestamp"]), float(g["arrival_ms"]), 1e-9):
            fail(f"{where}: timestamp {t['timestamp']} vs arrival_ms {g['arrival_ms']}")
        if t["timestamp"] < prev or (i == 0 and t["timestamp"] != 0):
            fail(f"{where}: timestamps must start at 0 and not decrease")
        prev = t["timestamp"]
        if t["input_length"] != int(g["input_length"]) or \
                t["output_length"] != int(g["output_length"]):
            fail(f"{where}: lengths differ between trace and ground truth")
        h = t["hash_ids"]
        if not h or not all(isinstance(x, int) and x > 0 for x in h):
            fail(f"{where}: hash_ids must be non-empty positive integers")
        elif len(h) != math.ceil(t["input_length"] / BLOCK):
            fail(f"{where}: {len(h)} hash_ids for input_length {t['input_length']}")
        ttft, e2e = float(g["ttft_ms"]), float(g["e2e_ms"])
        arr, first, last = (float(g[k]) for k in ("arrival_ms", "first_token_ms",
                                                  "last_token_ms"))
        if not (0 <= float(g["queue_ms"]) <= ttft <= e2e):
            fail(f"{where}: expected 0 <= queue_ms <= ttft_ms <= e2e_ms")
        if not close(first - arr, ttft, 0.0021) or not close(last - arr, e2e, 0.0021):
            fail(f"{where}: first/last_token_ms inconsistent with ttft/e2e")
        n = int(g["output_length"])
        if n > 1 and not close(float(g["itl_ms"]) * (n - 1), e2e - ttft, 0.002 + 5e-5 * n):
            fail(f"{where}: itl_ms * (output_length - 1) != e2e_ms - ttft_ms")


def check_aggregates(run, trace, gt, meta):
    rec = meta["recorded"]
    if rec["requests"] != len(gt):
        fail(f"{run}/run.json: recorded.requests {rec['requests']} != {len(gt)} rows")
    for m in ("ttft_ms", "e2e_ms", "itl_ms"):
        xs = [float(x[m]) for x in gt]
        calc = {"mean": statistics.mean(xs), "p50": pct(xs, 50), "p90": pct(xs, 90),
                "p99": pct(xs, 99)}
        for s, v in calc.items():
            if not close(v, rec["aggregates"][m][s], 0.0006):
                fail(f"{run}/run.json: recorded.aggregates.{m}.{s} {rec['aggregates'][m][s]} "
                     f"!= {v:.4f} recomputed")
        if not close(sum(xs), rec["sums"][m], 1e-6 * max(1.0, abs(sum(xs))) + 0.001):
            fail(f"{run}/run.json: recorded.sums.{m} != {sum(xs):.4f}")
    for m in ("input_length", "output_length"):
        if sum(int(x[m]) for x in gt) != rec["sums"][m] or \
                sum(t[m] for t in trace) != rec["sums"][m]:
            fail(f"{run}/run.json: recorded.sums.{m} differs from the data")
    me, eng = meta.get("mocker_engine", {}), meta.get("engine", {})
    for k in ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
              "max_model_len", "enable_prefix_caching", "enable_chunked_prefill"):
        if me.get(k) != eng.get(k):
            fail(f"{run}/run.json: mocker_engine.{k} != engine.{k}")
    if me.get("dp_size") != eng.get("data_parallel_size"):
        fail(f"{run}/run.json: mocker_engine.dp_size != engine.data_parallel_size")
    if eng.get("block_size") != BLOCK:
        fail(f"{run}/run.json: block_size {eng.get('block_size')}, hash_ids are per {BLOCK}")


def check_run(rdir):
    run = rdir.name
    present = {p.name for p in rdir.iterdir()}
    if present != RUN_FILES:
        fail(f"{run}: files {sorted(present)}, expected {sorted(RUN_FILES)}")
        if not RUN_FILES - {"config.json"} <= present:
            return
    trace = []
    for n, line in enumerate((rdir / "trace.jsonl").read_text().splitlines(), 1):
        row = json.loads(line)
        if set(row) != TRACE_KEYS:
            fail(f"{run}/trace.jsonl line {n}: keys {sorted(row)}")
            return
        trace.append(row)
    with open(rdir / "ground_truth.csv", newline="") as f:
        rd = csv.DictReader(f)
        if rd.fieldnames != GT_COLS:
            fail(f"{run}/ground_truth.csv: columns {rd.fieldnames}")
            return
        gt = list(rd)
    meta = json.loads((rdir / "run.json").read_text())
    if meta.get("run") != run:
        fail(f"{run}/run.json: names run {meta.get('run')!r}")
    if len(trace) != len(gt):
        fail(f"{run}: {len(trace)} trace lines but {len(gt)} ground-truth rows")
        return
    check_rows(run, trace, gt)
    check_aggregates(run, trace, gt, meta)


def check_sums(root):
    listed = {}
    for line in (root / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.strip()] = digest
    for name, digest in sorted(listed.items()):
        path = root / name
        if not path.is_file():
            fail(f"SHA256SUMS: {name} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            fail(f"SHA256SUMS: {name} has a different sha256")
    for path in sorted(root.glob("*/*")):
        if str(path.relative_to(root)) not in listed:
            fail(f"SHA256SUMS: {path.relative_to(root)} is not listed")


def main():
    default = Path(__file__).resolve().parents[2] / "data" / "calibration" / "recorded"
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    if not runs:
        fail(f"{root}: no run directories")
    for rdir in runs:
        check_run(rdir)
    check_sums(root)
    for e in errors:
        print(e)
    print(f"{len(runs)} runs checked, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
