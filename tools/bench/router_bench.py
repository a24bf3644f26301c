#!/usr/bin/python3
"""Routing benchmark: kv vs round_robin vs random, offline and live (tools/replay/README.md,
"Routers"). Prints one table row per (workload, mode, workers, router): prefix-cache reuse,
TTFT p50/p99 and the fewest/most requests any worker got.

    tools/bench/router_bench.py --mocker build/mocker [--workers 8,32] [--modes offline,live]
        [--routers kv,round_robin,random] [--workloads trace,multiturn,spaced]
        [--speedup 20] [--out DIR]

Workloads:
  trace      data/traces/mooncake_synthetic_trace.jsonl (the shared synthetic trace)
  multiturn  --format synthetic: 300 sessions of 4 turns (--session-context: each turn extends
             the conversation), half of the first prompt shared within 8 groups, Poisson 2/s,
             think time exponential 5 s
  spaced     --format synthetic: 60 single-turn requests 3 s apart (no two in flight at once),
             80 % of each prompt shared within 4 groups: offline and live should agree on reuse
Live mode starts one `mocker serve` per worker (every endpoint on an ephemeral loopback port,
engine --speedup-ratio S) and replays with --arrival-speedup-ratio S, so the live clock runs S
times faster than the model: live TTFT figures are multiplied by S to be in model milliseconds.
The servers are stopped (SIGTERM to the PIDs this script started) after each run.
Uses only the standard library; run with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORKLOADS = {
    "trace": [os.path.join(ROOT, "data/traces/mooncake_synthetic_trace.jsonl")],
    "multiturn": ["--format", "synthetic", "--num-requests", "300", "--turns-per-session", "4",
                  "--session-context", "--input-tokens-mean", "2048", "--input-tokens-stddev",
                  "512", "--output-tokens-mean", "200", "--output-tokens-stddev", "50",
                  "--shared-prefix-ratio", "0.5", "--num-prefix-groups", "8", "--arrival",
                  "poisson", "--request-rate", "2", "--inter-turn-delay", "exponential",
                  "--inter-turn-delay-ms", "5000", "--seed", "7"],
    "spaced": ["--format", "synthetic", "--num-requests", "60", "--input-tokens-mean", "4096",
               "--output-tokens-mean", "16", "--shared-prefix-ratio", "0.8",
               "--num-prefix-groups", "4", "--arrival", "interval", "--arrival-interval-ms",
               "3000", "--seed", "3"],
}


def start_server(mocker: str, speedup: float) -> tuple:
    """Starts `mocker serve` on ephemeral ports; returns (process, endpoints by name)."""
    any_port = "tcp://127.0.0.1:*"
    proc = subprocess.Popen(
        [mocker, "serve", "--submit-endpoint", any_port, "--cancel-endpoint", any_port,
         "--kv-events-endpoint", any_port, "--kv-replay-endpoint", any_port,
         "--fpm-endpoint", any_port, "--no-http", "--speedup-ratio", str(speedup)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    endpoints = {}
    for line in proc.stdout:
        line = line.strip()
        if line == "ready":
            return proc, endpoints
        parts = line.split()
        if len(parts) == 2:
            endpoints[parts[0]] = parts[1]
    raise RuntimeError("mocker serve exited before it was ready")


def stop_servers(procs: list) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=30)


def run(mocker: str, workload: str, mode: str, workers: int, router: str, speedup: float,
        out_dir: str) -> dict:
    report = os.path.join(out_dir, f"{workload}-{mode}-{workers}-{router}.json")
    cmd = [mocker, "replay", *WORKLOADS[workload], "--router", router, "--router-seed", "1",
           "--report-json", report, "--no-progress"]
    procs = []
    if mode == "offline":
        cmd += ["--num-workers", str(workers)]
    else:
        cmd += ["--arrival-speedup-ratio", str(speedup)]
        if router == "kv":
            cmd += ["--router-block-size", "64"]  # mocker serve's default (vllm)
        try:
            for _ in range(workers):
                proc, ep = start_server(mocker, speedup)
                procs.append(proc)
                cmd += ["--connect", ep["submit"], "--connect-cancel", ep["cancel"]]
                if router == "kv":
                    cmd += ["--connect-kv-events", ep["kv_events[0]"],
                            "--connect-kv-replay", ep["kv_replay[0]"]]
        except Exception:
            stop_servers(procs)
            raise
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    finally:
        stop_servers(procs)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}")
    with open(report) as f:
        r = json.load(f)
    counts = []
    for line in done.stdout.splitlines():
        m = re.search(r"[Rr]equests per (?:worker|server) \([a-z_]+\):((?: \d+)+)", line)
        if m:
            counts = [int(x) for x in m.group(1).split()]
    scale = 1.0 if mode == "offline" else speedup
    kv_line = next((l for l in done.stdout.splitlines() if l.startswith("Live kv router")), "")
    return {
        "workload": workload, "mode": mode, "workers": workers, "router": router,
        "completed": r["completed_requests"],
        "reuse": r["prefix_cache_reused_ratio"],
        "ttft_p50": (r["median_ttft_ms"] or 0.0) * scale,
        "ttft_p99": (r["p99_ttft_ms"] or 0.0) * scale,
        "min_per_worker": min(counts) if counts else r["completed_requests"],
        "max_per_worker": max(counts) if counts else r["completed_requests"],
        "wall_s": wall, "kv": kv_line,
        "command": " ".join(cmd),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mocker", default=os.path.join(ROOT, "build/mocker"))
    ap.add_argument("--workers", default="8,32")
    ap.add_argument("--modes", default="offline,live")
    ap.add_argument("--routers", default="kv,round_robin,random")
    ap.add_argument("--workloads", default="trace,multiturn,spaced")
    ap.add_argument("--speedup", type=float, default=20.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    out_dir = a.out or tempfile.mkdtemp(prefix="router_bench.")
    os.makedirs(out_dir, exist_ok=True)
    print(f"reports in {out_dir}; live TTFT x {a.speedup:g} (model ms)", flush=True)
    print(f"{'workload':<10} {'mode':<8} {'workers':>7} {'router':<12} {'done':>5} "
          f"{'reuse':>7} {'ttft p50':>9} {'ttft p99':>9} {'min/max per worker':>19} {'wall s':>7}",
          flush=True)
    for workload in a.workloads.split(","):
        for mode in a.modes.split(","):
            for workers in [int(x) for x in a.workers.split(",")]:
                for router in a.routers.split(","):
                    r = run(a.mocker, workload, mode, workers, router, a.speedup, out_dir)
                    print(f"{workload:<10} {mode:<8} {workers:>7} {router:<12} {r['completed']:>5} "
                          f"{r['reuse'] * 100:>6.2f}% {r['ttft_p50']:>9.1f} {r['ttft_p99']:>9.1f} "
                          f"{r['min_per_worker']:>9}/{r['max_per_worker']:<9} {r['wall_s']:>7.1f}",
                          flush=True)
                    if r["kv"]:
                        print(f"    {r['kv']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
