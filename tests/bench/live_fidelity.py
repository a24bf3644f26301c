#!/usr/bin/python3
"""Live fidelity: does `mocker serve` reproduce the offline timelines, scaled by the speedup?

    live_fidelity.py --mocker BUILD/tools/mocker [--speedups 10,50] [--workloads mooncake,synthetic]
                     [--mooncake-requests 500] [--synthetic-requests 2000] [--streams 1000]

For each workload and each speedup R it runs the same workload twice with `mocker replay`:
offline (virtual clock, `--speedup-ratio R --arrival-speedup-ratio R`) and live against one
fresh `mocker serve --speedup-ratio R` child (ephemeral loopback endpoints, KV events and FPM on,
nobody subscribed) driven by `mocker replay --mode live --arrival-speedup-ratio R`. It prints,
per R, the live/offline ratio of TTFT, ITL and E2E p50 and p99, the service's per-pass lateness
(wall time a pass was published after its modelled end: mean, p50, p99, max, resyncs; from the
service's `stats_reply.timing`), the driver's own lag (from the live replay's footer), the
service's CPU during the live run and when idle (/proc/PID/stat, % of one core), how long the
service's threads waited on a run queue during the live run (ready to run, no CPU free:
/proc/PID/task/TID/schedstat: time the machine, not the server, cost), and the E2E
error per output-length quartile (live − offline, mean over the requests of the quartile, in
% of the quartile's offline mean: it must not grow with the output length).

Workloads:
  mooncake   the first N requests of data/traces/mooncake_synthetic_trace.jsonl
  synthetic  N requests, 2,000-token prompts, 200-token outputs, Poisson 10 req/s (seed 1)
  streams    speedup 1 only: N concurrent streams (a burst), 1,024-token prompts, 160 output
             tokens, so every request completes a KV block in the same passes (KV events on)

Defaults take about two minutes on a 2-core machine; widen with --speedups 1,2,10,50 and the
full sizes. Children are always terminated. Prints one `json:` line per (workload, R).
Uses python3-zmq and python3-msgpack.
"""
import argparse
import atexit
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACE = os.path.join(ROOT, "data", "traces", "mooncake_synthetic_trace.jsonl")
ENDPOINT_FLAGS = [
    f"--{name}-endpoint=tcp://127.0.0.1:*"
    for name in ("submit", "cancel", "kv-events", "kv-replay", "fpm")
] + ["--http-endpoint=127.0.0.1:0"]  # an ephemeral HTTP port, not the default 8000
CLK_TCK = os.sysconf("SC_CLK_TCK")
_children = []


def _cleanup():
    for proc in _children:
        if proc.poll() is None:
            proc.terminate()
    for proc in _children:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _children.clear()


def _on_signal(signum, _frame):
    _cleanup()
    sys.exit(128 + signum)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def start_serve(mocker, flags, timeout_s=60.0):
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([mocker, "serve", *ENDPOINT_FLAGS, *flags], stdout=subprocess.PIPE,
                            stderr=err, stdin=subprocess.DEVNULL)
    _children.append(proc)
    buf = b""
    deadline = time.monotonic() + timeout_s
    while b"\nready\n" not in b"\n" + buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError("mocker serve printed no `ready`")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                err.seek(0)
                raise RuntimeError(f"mocker serve exited: {err.read().decode(errors='replace')}")
            buf += chunk
    lines = buf.decode().splitlines()
    proc.endpoints = dict(line.split(" ", 1) for line in lines[:lines.index("ready")])
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _children.remove(proc)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def run_queue_ms(pid):
    """Run-queue wait so far (ms, /proc/PID/task/TID/schedstat field 2): of the main thread
    (`mocker serve` runs its loop there) and of all the process's threads (libzmq's I/O threads
    and the HTTP threads too). Time a thread was ready to run but had no CPU."""
    main, total = 0.0, 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                waited = int(f.read().split()[1]) / 1e6
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
        total += waited
        if int(tid) == pid:
            main = waited
    return main, total


def stats(endpoint, timeout_s=10.0):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send(msgpack.packb({"v": 1, "type": "stats"}, use_bin_type=True))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000)):
                raise RuntimeError("no stats_reply")
            m = msgpack.unpackb(sock.recv(), raw=False)
            if m.get("type") == "stats_reply":
                return m
    finally:
        sock.close()


def replay(mocker, workload_args, extra, tmp, tag):
    report = os.path.join(tmp, f"{tag}.json")
    requests = os.path.join(tmp, f"{tag}.jsonl")
    cmd = [mocker, "replay", *workload_args, *extra, "--report-json", report, "--requests-jsonl",
           requests, "--no-progress"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr}")
    with open(report, encoding="utf-8") as f:
        rep = json.load(f)
    per_request = []
    with open(requests, encoding="utf-8") as f:
        for line in f:
            per_request.append(json.loads(line))
    return rep, per_request, proc.stdout


def e2e_by_output_quartile(offline, live):
    """Mean (live − offline) E2E per output-length quartile, in % of the offline mean."""
    def key(r):
        return (r.get("session_id"), r.get("turn_index"))

    def e2e(r):
        if r.get("terminal_status") != "completed":
            return None
        return r.get("e2e_latency_ms")

    live_by = {key(r): r for r in live}
    pairs = []
    for r in offline:
        other = live_by.get(key(r))
        a, b = e2e(r), e2e(other) if other else None
        if a is None or b is None or a <= 0:
            continue
        pairs.append((r.get("output_length", 0), a, b))
    if len(pairs) < 8:
        return []
    pairs.sort()
    out = []
    for q in range(4):
        chunk = pairs[q * len(pairs) // 4:(q + 1) * len(pairs) // 4]
        off = sum(p[1] for p in chunk) / len(chunk)
        liv = sum(p[2] for p in chunk) / len(chunk)
        out.append((chunk[0][0], chunk[-1][0], 100.0 * (liv - off) / off))
    return out


def wakeup_latency_ms(seconds=1.0, period_s=0.002):
    """The machine's wake-up latency floor: how late 2 ms sleeps end (p50, p99, max), measured
    by this process (Python adds some tens of microseconds). Lateness of the service's passes
    cannot be below what the scheduler gives any sleeping thread. Measured with a 1 ns timer
    slack, as the service and the live driver set for their waiting threads."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK, 1 ns
    except (OSError, AttributeError):
        pass  # the default 50 us slack then adds to the figure
    late = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        due = time.monotonic() + period_s
        time.sleep(period_s)
        late.append((time.monotonic() - due) * 1000.0)
    late.sort()
    return late[len(late) // 2], late[min(len(late) - 1, int(0.99 * len(late)))], late[-1]


def live_floor(args, tmp):
    """The live path's own latency: TTFT of 2,000-token, one-token requests (100 req/s, one at
    a time) against a server whose modelled passes take 0 ms (`--timing-model fixed`), so
    offline TTFT is 0 and everything measured is the path itself: the driver's send, libzmq
    both ways, the server's receive, pass and publish, the driver's receive. A live TTFT cannot
    be closer to offline than this."""
    workload = ["--format", "synthetic", "--num-requests", "300", "--input-tokens-mean", "2000",
                "--output-tokens-mean", "1", "--request-rate", "100", "--seed", "1"]
    serve = start_serve(args.mocker, ["--timing-model", "fixed", "--fixed-prefill-ms", "0",
                                      "--fixed-decode-ms", "0", *args.serve_flag])
    try:
        rep, _, _ = replay(args.mocker, workload,
                           ["--connect", serve.endpoints["submit"], "--connect-cancel",
                            serve.endpoints["cancel"]], tmp, "floor")
    finally:
        stop(serve)
    return rep.get("median_ttft_ms", float("nan")), rep.get("p99_ttft_ms", float("nan"))


def ratio(live, offline, key):
    o = offline.get(key) or 0.0
    return live.get(key, 0.0) / o if o > 0 else float("nan")


def run_one(args, name, workload_args, r, tmp):
    flags = ["--speedup-ratio", str(r), "--arrival-speedup-ratio", str(r)]
    offline, off_req, _ = replay(args.mocker, workload_args, flags, tmp, f"{name}-{r}-offline")
    serve = start_serve(args.mocker, ["--speedup-ratio", str(r), *args.serve_flag])
    try:
        idle0 = cpu_seconds(serve.pid)
        time.sleep(args.idle_seconds)
        idle_pct = 100.0 * (cpu_seconds(serve.pid) - idle0) / args.idle_seconds
        cpu0, t0 = cpu_seconds(serve.pid), time.monotonic()
        rq0 = run_queue_ms(serve.pid)
        live, live_req, footer = replay(
            args.mocker, workload_args,
            ["--arrival-speedup-ratio", str(r), "--connect", serve.endpoints["submit"],
             "--connect-cancel", serve.endpoints["cancel"]], tmp, f"{name}-{r}-live")
        busy_pct = 100.0 * (cpu_seconds(serve.pid) - cpu0) / (time.monotonic() - t0)
        rq1 = run_queue_ms(serve.pid)
        rq_main, rq_all = rq1[0] - rq0[0], rq1[1] - rq0[1]
        timing = stats(serve.endpoints["submit"]).get("timing", {})
    finally:
        stop(serve)
    lag = next((line for line in footer.splitlines() if line.startswith("Live")), "")
    row = {"workload": name, "speedup": r, "requests": offline["num_requests"],
           "live_completed": live["completed_requests"], "timing": timing,
           "serve_cpu_pct": round(busy_pct, 1), "serve_idle_cpu_pct": round(idle_pct, 2),
           "serve_run_queue_ms": {"loop_thread": round(rq_main, 1), "all_threads": round(rq_all, 1)}}
    for metric, stem in (("ttft", "ttft_ms"), ("itl", "itl_ms"), ("e2e", "e2e_latency_ms")):
        for p, prefix in (("p50", "median_"), ("p99", "p99_")):
            row[f"{metric}_{p}_ratio"] = round(ratio(live, offline, prefix + stem), 4)
            row[f"{metric}_{p}_offline_ms"] = round(offline.get(prefix + stem, 0.0), 3)
    row["ttft_p50_excess_ms"] = round(live.get("median_ttft_ms", 0.0) -
                                      offline.get("median_ttft_ms", 0.0), 3)
    row["e2e_error_by_output_quartile_pct"] = [
        {"output_len": f"{lo}-{hi}", "error_pct": round(err, 2)}
        for lo, hi, err in e2e_by_output_quartile(off_req, live_req)]
    print(f"{name:9s} R={r:<4g} live/offline  TTFT p50 {row['ttft_p50_ratio']:.3f} p99 "
          f"{row['ttft_p99_ratio']:.3f} | ITL p50 {row['itl_p50_ratio']:.3f} p99 "
          f"{row['itl_p99_ratio']:.3f} | E2E p50 {row['e2e_p50_ratio']:.3f} p99 "
          f"{row['e2e_p99_ratio']:.3f}  ({live['completed_requests']}/{offline['num_requests']} "
          "completed live)")
    print(f"{'':9s}        TTFT p50 live − offline: {row['ttft_p50_excess_ms']:+.3f} ms "
          f"(offline {row['ttft_p50_offline_ms']:.3f} ms)")
    if timing:
        print(f"{'':9s}        pass lateness over {timing['passes']} passes: mean "
              f"{timing['lateness_mean_ms']:.3f} ms, p50 {timing['lateness_p50_ms']:.3f}, p99 "
              f"{timing['lateness_p99_ms']:.3f}, max {timing['lateness_max_ms']:.3f} ms; "
              f"{timing['resyncs']} resyncs")
        if timing["passes"]:
            print(f"{'':9s}        run-queue wait (ready, no CPU) during the live run: loop "
                  f"thread {rq_main:.1f} ms = {rq_main / timing['passes']:.3f} ms per pass, all "
                  f"threads {rq_all:.1f} ms")
    else:
        print(f"{'':9s}        pass lateness: the service reports none (no stats timing)")
    print(f"{'':9s}        serve CPU {busy_pct:.1f} % of a core while live, {idle_pct:.2f} % "
          f"idle; driver: {lag.strip()}")
    if row["e2e_error_by_output_quartile_pct"]:
        print(f"{'':9s}        E2E error by output length: " + ", ".join(
            f"{q['output_len']} tok {q['error_pct']:+.2f} %"
            for q in row["e2e_error_by_output_quartile_pct"]))
    print("json: " + json.dumps(row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mocker", required=True, help="path to the mocker binary")
    parser.add_argument("--speedups", default="10,50", help="comma-separated speedup ratios")
    parser.add_argument("--workloads", default="mooncake,synthetic,streams",
                        help="comma-separated subset of: mooncake, synthetic, streams")
    parser.add_argument("--mooncake-requests", type=int, default=500)
    parser.add_argument("--synthetic-requests", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=1000,
                        help="concurrent streams of the `streams` workload (speedup 1)")
    parser.add_argument("--serve-flag", action="append", default=[],
                        help="extra `mocker serve` flag (repeat), e.g. --serve-flag=--no-kv-events")
    parser.add_argument("--idle-seconds", type=float, default=2.0,
                        help="idle CPU sample before each live run")
    args = parser.parse_args()
    atexit.register(_cleanup)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    speedups = [float(s) for s in args.speedups.split(",") if s]
    names = [w for w in args.workloads.split(",") if w]
    for w in names:
        if w not in ("mooncake", "synthetic", "streams"):
            parser.error(f"unknown workload '{w}'")
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} ({os.cpu_count()} CPUs)")
    p50, p99, worst = wakeup_latency_ms()
    print(f"machine wake-up latency (2 ms sleeps, 1 s): p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
          f"max {worst:.3f} ms")
    with tempfile.TemporaryDirectory(prefix="live_fidelity.") as tmp:
        floor50, floor99 = live_floor(args, tmp)
        print(f"live path floor (0 ms modelled passes, 2,000-token prompts, 1 token each): "
              f"TTFT p50 {floor50:.3f} ms, p99 {floor99:.3f} ms")
        print(f"json: {json.dumps({'live_floor_ttft_p50_ms': round(floor50, 3), 'live_floor_ttft_p99_ms': round(floor99, 3)})}")
        for name in names:
            if name == "mooncake":
                trace = os.path.join(tmp, "mooncake.jsonl")
                with open(TRACE, encoding="utf-8") as src, open(trace, "w",
                                                                encoding="utf-8") as dst:
                    for i, line in enumerate(src):
                        if i >= args.mooncake_requests:
                            break
                        dst.write(line)
                workload, rs = [trace], speedups
            elif name == "synthetic":
                workload = ["--format", "synthetic", "--num-requests",
                            str(args.synthetic_requests), "--input-tokens-mean", "2000",
                            "--output-tokens-mean", "200", "--request-rate", "10", "--seed", "1"]
                rs = speedups
            else:
                workload = ["--format", "synthetic", "--num-requests", str(args.streams),
                            "--input-tokens-mean", "1024", "--output-tokens-mean", "160",
                            "--arrival", "burst", "--seed", "1"]
                rs = [1.0]
            for r in rs:
                run_one(args, name, workload, r, tmp)
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
