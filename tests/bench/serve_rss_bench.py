#!/usr/bin/python3
"""Memory of `mocker serve` processes: a deep queue, and a fleet of idle processes.

    serve_rss_bench.py --mocker BUILD/tools/mocker queued [--requests N] [--tokens T]
    serve_rss_bench.py --mocker BUILD/tools/mocker fleet [--workers W]

queued: one `mocker serve` child (ephemeral loopback endpoints, max_num_seqs 1, speedup_ratio
  1e-4 so the one running request's first pass lasts minutes, max_submit_backlog > N, unlimited
  submit SNDHWM so no ack is ever dropped) receives N submits of T-token prompts (distinct token
  ids, 16 output tokens each) from one DEALER (default high-water marks, so the submits wait on
  the client side, not in the service) that drains the acks as it goes. Once a stats round trip shows running + waiting == N, it reads
  VmRSS and VmHWM from /proc/PID/status. Reports the idle RSS (after start-up and one stats
  round trip), the RSS with the queue, and (queued RSS - idle RSS) / N per queued request.

fleet: W `mocker serve` children with the default engine configuration, every endpoint on
  tcp://127.0.0.1:* , started all at once. Reports the time from the first spawn until every
  child has printed `ready`, and the sum (and mean) of their VmRSS once all are ready. This is W
  separate processes: there is no in-process multi-worker fleet yet.

Children are always terminated (SIGTERM, then SIGKILL after 5 s), also on SIGINT/SIGTERM and on
errors. Prints one `json:` line for scripts. Uses python3-zmq and python3-msgpack.
"""
import argparse
import atexit
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

ENDPOINT_FLAGS = [
    f"--{name}-endpoint=tcp://127.0.0.1:*"
    for name in ("submit", "cancel", "kv-events", "kv-replay", "fpm")
] + ["--http-endpoint=127.0.0.1:0"]
STARTUP_TIMEOUT_S = 120.0

_children = []


def _cleanup():
    for proc in _children:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 5.0
    for proc in _children:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _children.clear()


def _on_signal(signum, _frame):
    _cleanup()
    sys.exit(128 + signum)


def spawn(mocker, flags):
    """Starts `mocker serve`; stderr goes to a temporary file (read on failure)."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([mocker, "serve", *ENDPOINT_FLAGS, *flags], stdout=subprocess.PIPE,
                            stderr=err, stdin=subprocess.DEVNULL)
    proc.err_file = err
    proc.out_buf = b""
    proc.endpoints = None
    _children.append(proc)
    return proc


def stderr_text(proc):
    proc.err_file.seek(0)
    return proc.err_file.read().decode(errors="replace").strip()


def wait_ready(procs, timeout_s):
    """Reads the children's stdout until each has printed `ready`; fills proc.endpoints."""
    deadline = time.monotonic() + timeout_s
    pending = {p.stdout.fileno(): p for p in procs}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(pending)} `mocker serve` printed no `ready` in {timeout_s} s")
        ready, _, _ = select.select(list(pending), [], [], left)
        for fd in ready:
            proc = pending[fd]
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait()
                raise RuntimeError(f"mocker serve exited ({proc.returncode}) before `ready`: "
                                   f"{stderr_text(proc)}")
            proc.out_buf += chunk
            lines = proc.out_buf.split(b"\n")
            if b"ready" in lines[:-1]:
                proc.endpoints = dict(
                    line.decode().split(" ", 1) for line in lines[:lines.index(b"ready")])
                del pending[fd]


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


def pack(message):
    return msgpack.packb({"v": 1, **message}, use_bin_type=True)


def stats(sock, timeout_s=30.0):
    """One stats round trip; other messages (acks) received meanwhile are dropped."""
    sock.send(pack({"type": "stats"}))
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000)):
            raise RuntimeError("no stats_reply")
        m = msgpack.unpackb(sock.recv(), raw=False)
        if m.get("type") == "stats_reply":
            return m
        if m.get("type") in ("submit_reject", "error"):
            raise RuntimeError(f"service answered {m}")


def run_queued(args):
    proc = spawn(args.mocker, [
        "--max-num-seqs=1", "--speedup-ratio=0.0001",
        f"--max-submit-backlog={args.requests + 1}", "--submit-sndhwm=0", "--no-kv-events",
        "--no-fpm"])
    wait_ready([proc], STARTUP_TIMEOUT_S)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SNDTIMEO, 60_000)  # a dead service fails the bench instead of hanging it
    sock.connect(proc.endpoints["submit"])
    stats(sock)
    idle_kib = proc_status_kib(proc.pid, "VmRSS")

    t0 = time.monotonic()
    acks = 0
    for i in range(args.requests):
        sock.send(pack({"type": "submit", "id": f"q{i}", "prompt": list(range(i, i + args.tokens)),
                        "max_tokens": 16}))
        while sock.poll(0):
            m = msgpack.unpackb(sock.recv(), raw=False)
            if m.get("type") == "submit_ack":
                acks += 1
            elif m.get("type") in ("submit_reject", "error", "output"):
                raise RuntimeError(f"unexpected {m.get('type')}: {m}")
    deadline = time.monotonic() + 300.0
    while True:
        reply = stats(sock)
        running = sum(r["running"] for r in reply["ranks"])
        waiting = sum(r["waiting"] for r in reply["ranks"])
        if running + waiting >= args.requests or time.monotonic() > deadline:
            break
    submit_s = time.monotonic() - t0
    rss_kib = proc_status_kib(proc.pid, "VmRSS")
    hwm_kib = proc_status_kib(proc.pid, "VmHWM")
    ctx.destroy(linger=0)
    _cleanup()
    if running + waiting != args.requests:
        raise RuntimeError(f"service holds {running} running + {waiting} waiting, "
                           f"expected {args.requests}")
    per_request = (rss_kib - idle_kib) * 1024 / args.requests
    print(f"queued: {args.requests} requests x {args.tokens} prompt tokens held by `mocker serve` "
          f"({running} running, {waiting} waiting) after {submit_s:.1f} s")
    print(f"  VmRSS idle {idle_kib / 1024:.1f} MiB, queued {rss_kib / 1024:.1f} MiB "
          f"(VmHWM {hwm_kib / 1024:.1f} MiB) => {per_request:.0f} bytes per queued request "
          f"({4 * args.tokens} bytes of token ids)")
    print("json: " + json.dumps({
        "mode": "queued", "requests": args.requests, "tokens": args.tokens, "running": running,
        "waiting": waiting, "idle_rss_kib": idle_kib, "rss_kib": rss_kib, "hwm_kib": hwm_kib,
        "bytes_per_request": round(per_request), "submit_s": round(submit_s, 3)}))
    return 0


def run_fleet(args):
    t0 = time.monotonic()
    procs = [spawn(args.mocker, []) for _ in range(args.workers)]
    spawned_s = time.monotonic() - t0
    wait_ready(procs, STARTUP_TIMEOUT_S)
    ready_s = time.monotonic() - t0
    rss = [proc_status_kib(p.pid, "VmRSS") for p in procs]
    _cleanup()
    total_mib = sum(rss) / 1024
    print(f"fleet: {args.workers} `mocker serve` processes (default engine, 5 ephemeral "
          f"endpoints each) ready {ready_s:.2f} s after the first spawn (spawning took "
          f"{spawned_s:.2f} s)")
    print(f"  VmRSS total {total_mib:.1f} MiB, mean {total_mib / args.workers:.1f} MiB, "
          f"min {min(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB")
    print("json: " + json.dumps({
        "mode": "fleet", "workers": args.workers, "ready_s": round(ready_s, 3),
        "spawn_s": round(spawned_s, 3),
        "total_rss_kib": sum(rss), "mean_rss_kib": round(sum(rss) / args.workers)}))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mocker", required=True, help="path of the mocker binary")
    sub = parser.add_subparsers(dest="mode", required=True)
    q = sub.add_parser("queued", help="RSS with N queued requests")
    q.add_argument("--requests", type=int, default=100_000)
    q.add_argument("--tokens", type=int, default=1_000)
    f = sub.add_parser("fleet", help="total RSS of W idle processes")
    f.add_argument("--workers", type=int, default=256)
    args = parser.parse_args()
    if getattr(args, "requests", 1) < 1 or getattr(args, "tokens", 1) < 1 or \
            getattr(args, "workers", 1) < 1:
        parser.error("counts must be >= 1")
    atexit.register(_cleanup)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        return run_queued(args) if args.mode == "queued" else run_fleet(args)
    except (RuntimeError, zmq.ZMQError) as e:
        print(f"serve_rss_bench: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
