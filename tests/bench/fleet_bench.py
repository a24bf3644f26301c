#!/usr/bin/python3
"""An in-process fleet (`mocker serve --num-workers N`): start time, idle CPU, RSS, and pass
lateness under a live replay spread over the workers.

    fleet_bench.py --mocker BUILD/tools/mocker idle [--workers 256] [--idle-s 10]
    fleet_bench.py --mocker BUILD/tools/mocker replay [--workers 64] [--speedup-ratio 10]
                   [--requests 1000] [--arrival-speedup-ratio 20]

idle: one `mocker serve --num-workers W` child, default engine configuration, every endpoint on
  tcp://127.0.0.1:* (HTTP on 127.0.0.1:0). Reports the time from spawning it to its `ready`
  line, its VmRSS and thread count once ready, and its CPU time (utime + stime from
  /proc/PID/stat) over --idle-s seconds of idleness, as a percentage of one core.

replay: one `mocker serve --num-workers W --speedup-ratio S --fleet-file F` child, then
  `mocker replay TRACE --fleet F --router R` (--router, default round_robin) with the first --requests requests of
  data/traces/mooncake_synthetic_trace.jsonl at --arrival-speedup-ratio; then each worker's
  `stats` reply (its `timing` map: passes, resyncs, lateness percentiles in ms, histogram bounds
  within 1/16). Reports the passes, resyncs, and over the workers the median and the maximum of
  their lateness p50 and p99, and the maximum of their max.

The machine's load is printed with the figures (os.getloadavg): on a shared machine they are
an upper bound of what the fleet itself costs. The child is always terminated (SIGTERM, then
SIGKILL after 10 s). Prints one `json:` line for scripts. Uses python3-zmq and python3-msgpack.
"""
import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from mocker_client import MockerClient, load_fleet  # noqa: E402

ENDPOINT_FLAGS = [
    f"--{name}-endpoint=tcp://127.0.0.1:*"
    for name in ("submit", "cancel", "kv-events", "kv-replay", "fpm")
] + ["--http-endpoint=127.0.0.1:0"]
TRACE = os.path.join(ROOT, "data", "traces", "mooncake_synthetic_trace.jsonl")
STARTUP_TIMEOUT_S = 120.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def start(mocker, args):
    """Spawns `mocker serve ARGS`; returns (process, seconds until `ready`, stdout lines)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([mocker, "serve", *ENDPOINT_FLAGS, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    buf = b""
    deadline = t0 + STARTUP_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            stop(proc)
            sys.exit("fleet_bench: no `ready` within %s s" % STARTUP_TIMEOUT_S)
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        if not chunk:
            stop(proc)
            sys.exit("fleet_bench: mocker serve exited before `ready`")
        buf += chunk
        lines = buf.split(b"\n")
        if b"ready" in lines[:-1]:
            return proc, time.monotonic() - t0, [line.decode() for line in lines]


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def run_idle(args):
    proc, ready_s, _ = start(args.mocker, ["--num-workers", str(args.workers)])
    try:
        rss_kib = proc_status(proc.pid, "VmRSS")
        threads = proc_status(proc.pid, "Threads")
        load_before = os.getloadavg()[0]
        t0, c0 = time.monotonic(), cpu_ticks(proc.pid)
        time.sleep(args.idle_s)  # the measurement window, not a wait for an event
        t1, c1 = time.monotonic(), cpu_ticks(proc.pid)
        cpu_pct = 100.0 * (c1 - c0) / CLK_TCK / (t1 - t0)
    finally:
        stop(proc)
    print("fleet idle: %d workers in one process (default engine, ephemeral endpoints)"
          % args.workers)
    print("  start → ready   %.3f s" % ready_s)
    print("  RSS             %.1f MiB (%d threads)" % (rss_kib / 1024, threads))
    print("  idle CPU        %.2f %% of one core over %.0f s" % (cpu_pct, t1 - t0))
    print("  load average    %.2f (machine shared with other builds)" % load_before)
    print("json: " + json.dumps({"mode": "idle", "workers": args.workers,
                                 "ready_s": round(ready_s, 3), "rss_mib": round(rss_kib / 1024, 1),
                                 "threads": threads, "idle_cpu_pct": round(cpu_pct, 2),
                                 "loadavg": load_before}))


def run_replay(args):
    with tempfile.TemporaryDirectory(prefix="mocker-fleet-bench-") as tmp:
        fleet_file = os.path.join(tmp, "fleet.json")
        trace = os.path.join(tmp, "trace.jsonl")
        with open(TRACE) as src, open(trace, "w") as dst:
            for i, line in enumerate(src):
                if i >= args.requests:
                    break
                dst.write(line)
        proc, ready_s, _ = start(args.mocker, [
            "--num-workers", str(args.workers), "--speedup-ratio", str(args.speedup_ratio),
            "--fleet-file", fleet_file])
        try:
            fleet = load_fleet(fleet_file)
            load_before = os.getloadavg()[0]
            t0, c0 = time.monotonic(), cpu_ticks(proc.pid)
            children0 = os.times()
            r = subprocess.run([args.mocker, "replay", trace, "--fleet", fleet_file,
                                "--router", args.router, "--arrival-speedup-ratio",
                                str(args.arrival_speedup_ratio)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            replay_s = time.monotonic() - t0
            # Whether the two cores were saturated: the fleet's CPU and the replay client's
            # (this process's waited-for children: only `mocker replay` ended meanwhile).
            fleet_cpu_pct = 100.0 * (cpu_ticks(proc.pid) - c0) / CLK_TCK / replay_s
            children1 = os.times()
            client_cpu_pct = 100.0 * ((children1.children_user - children0.children_user) +
                                      (children1.children_system - children0.children_system)
                                      ) / replay_s
            if r.returncode != 0:
                sys.exit("fleet_bench: mocker replay failed: " + r.stderr)
            timings = []
            for w in fleet.workers:
                with MockerClient.connect(w.submit, w.cancel) as c:
                    timings.append(c.stats()["timing"])
        finally:
            stop(proc)
    passes = sum(t["passes"] for t in timings)
    resyncs = sum(t["resyncs"] for t in timings)
    busy = [t for t in timings if t["passes"] > 0]
    p50s = [t["lateness_p50_ms"] for t in busy]
    p99s = [t["lateness_p99_ms"] for t in busy]
    maxes = [t["lateness_max_ms"] for t in busy]
    print("fleet replay: %d workers, speedup_ratio %g, %d requests at arrival speedup %g, "
          "router %s (replay %.1f s, start %.2f s)" % (args.workers, args.speedup_ratio,
                                                      args.requests, args.arrival_speedup_ratio,
                                                      args.router, replay_s, ready_s))
    print("  passes %d (resyncs %d) on %d busy workers" % (passes, resyncs, len(busy)))
    if busy:
        print("  lateness p50  median %.3f ms, max %.3f ms (over workers)"
              % (statistics.median(p50s), max(p50s)))
        print("  lateness p99  median %.3f ms, max %.3f ms" % (statistics.median(p99s), max(p99s)))
        print("  lateness max  %.3f ms" % max(maxes))
    print("  CPU during the replay: fleet %.0f %%, replay client %.0f %% of one core (2 cores: "
          "200 %%)" % (fleet_cpu_pct, client_cpu_pct))
    print("  load average  %.2f (machine shared with other builds)" % load_before)
    print("json: " + json.dumps({
        "mode": "replay", "workers": args.workers, "speedup_ratio": args.speedup_ratio,
        "requests": args.requests, "router": args.router, "passes": passes, "resyncs": resyncs,
        "p50_median_ms": statistics.median(p50s) if busy else None,
        "p50_max_ms": max(p50s) if busy else None,
        "p99_median_ms": statistics.median(p99s) if busy else None,
        "p99_max_ms": max(p99s) if busy else None,
        "max_ms": max(maxes) if busy else None, "loadavg": load_before,
        "fleet_cpu_pct": round(fleet_cpu_pct, 1), "client_cpu_pct": round(client_cpu_pct, 1)}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocker", required=True, help="path to the mocker binary")
    sub = p.add_subparsers(dest="mode", required=True)
    idle = sub.add_parser("idle", help="start time, RSS and idle CPU of W workers")
    idle.add_argument("--workers", type=int, default=256)
    idle.add_argument("--idle-s", type=float, default=10.0)
    rep = sub.add_parser("replay", help="pass lateness under a live replay over W workers")
    rep.add_argument("--workers", type=int, default=64)
    rep.add_argument("--speedup-ratio", type=float, default=10.0)
    rep.add_argument("--requests", type=int, default=1000)
    rep.add_argument("--arrival-speedup-ratio", type=float, default=20.0)
    rep.add_argument("--router", choices=("round_robin", "random", "kv"), default="round_robin",
                     help="the replay's router; kv subscribes to every rank's KV events (an "
                          "in-process `mocker index`)")
    args = p.parse_args()
    if args.mode == "idle":
        run_idle(args)
    else:
        run_replay(args)


if __name__ == "__main__":
    main()
