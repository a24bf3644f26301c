"""Overhead of `mocker gateway`: TTFT and ITL of the same streaming requests sent to the same
paced workers directly over ZeroMQ and through the gateway's OpenAI HTTP API, in the same run
(alternating rounds). Prints the p50 / p99 of each path and the difference (the gateway's added
latency). Each request has a prompt of its own (no prefix-cache hits on either path).

    MOCKER_BIN=build/mocker /usr/bin/python3 tests/bench/gateway_overhead_bench.py \
        --streams 100 --requests 1000 --tokens 32 --rounds 3
        # 100 streams in flight, closed loop: both paths driven by `mocker replay` (ZeroMQ live /
        # --openai-url with SSE), the client's own TTFT / ITL
    ... gateway_overhead_bench.py --request-rate 180 --requests 1000 --tokens 32 --rounds 5
        # Poisson arrivals (~100 in flight): the same arrival times on both paths of a round
    ... gateway_overhead_bench.py --client asyncio --streams 100 --tokens 32 --rounds 2
        # one burst of 100 streams opened at once by this script's asyncio clients (pyzmq /
        # raw HTTP): measures how fast the gateway admits a burst as much as its per-request cost
    ... gateway_overhead_bench.py --hold 2000      # 2,000 concurrent streams: the gateway's RSS
    ... gateway_overhead_bench.py --throughput 30000 --concurrency 64 --tokens 16 \
        --prefill-ms 0.1 --decode-ms 0.1 --rounds 5
        # non-streaming requests per second, direct vs through the gateway, both driven by
        # `mocker replay` (ZeroMQ / --openai-url --no-stream), same workers, alternating rounds;
        # CPU per request of the client, the workers and the gateway (30,000 per round: ~1.5 s
        # direct, ~2.5 s through the gateway; rounds of 3,000 lasted 0.2-0.4 s)
"""

import argparse
import asyncio
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))

import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402
from fault_harness import (Serve, mocker_bin, paced, percentile, poll_until,  # noqa: E402
                           proc_status_kib)
from gateway_live_test import Gateway  # noqa: E402
from mocker_client import decode_message, encode_message  # noqa: E402

PROMPT_LEN = 64
# Poisson arrivals: the gateway path's client opens this many connections before the clock
# starts (~100 in flight at the documented rate, peaks ~140; the client keeps 256 at most).
PRECONNECT_POISSON = 200
TRACE_BLOCK = 16  # tokens per hash id of the Poisson traces
_supports_preconnect = {}


def supports_preconnect():
    """Whether MOCKER_BIN's replay has --openai-connections (older binaries, run for before /
    after comparisons, open their connections as needed)."""
    path = mocker_bin()
    if path not in _supports_preconnect:
        out = subprocess.run([path, "replay", "--help"], capture_output=True, text=True).stdout
        _supports_preconnect[path] = "--openai-connections" in out
    return _supports_preconnect[path]


def poisson_trace(path, total, rate, tokens, arrival_seed, first_hash):
    """A Mooncake-format trace of `total` requests arriving as a Poisson process of `rate` req/s
    drawn from `arrival_seed`; each a fresh PROMPT_LEN-token prompt (its own hash ids, from
    `first_hash` on) and exactly `tokens` output tokens."""
    rng = random.Random(arrival_seed)
    per = PROMPT_LEN // TRACE_BLOCK
    t = 0.0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(total):
            ids = list(range(first_hash + i * per, first_hash + (i + 1) * per))
            f.write(json.dumps({"timestamp": round(t, 3), "input_length": PROMPT_LEN,
                                "output_length": tokens, "hash_ids": ids}) + "\n")
            t += rng.expovariate(rate) * 1000.0
_fresh = itertools.count(1_000_000)


def fresh_prompt():
    return [next(_fresh) for _ in range(PROMPT_LEN)]


async def direct_round(serves, streams, tokens):
    """`streams` concurrent requests, round robin over one DEALER per worker; per-request token
    arrival times."""
    ctx = zmq.asyncio.Context()
    socks = []
    for s in serves:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(s.submit)
        socks.append(sock)
    start, times, done = {}, {}, asyncio.Event()
    remaining = [streams]

    async def reader(sock):
        while remaining[0] > 0:
            m = decode_message(await sock.recv())
            if m["type"] != "output":
                continue
            now = time.perf_counter()
            for o in m["outputs"]:
                times[o["id"]].extend([now] * len(o.get("tokens", [])))
                if o.get("finish"):
                    remaining[0] -= 1
        done.set()

    readers = [asyncio.create_task(reader(s)) for s in socks]
    for i in range(streams):
        rid = "d%d" % i
        times[rid] = []
        start[rid] = time.perf_counter()
        await socks[i % len(socks)].send(encode_message("submit", id=rid, prompt=fresh_prompt(),
                                                        max_tokens=tokens))
    await asyncio.wait_for(done.wait(), 120)
    for r in readers:
        r.cancel()
    ctx.destroy(0)
    return [(start[k], v) for k, v in times.items()]


async def http_stream(host, port, tokens):
    reader, writer = await asyncio.open_connection(host, port)
    body = json.dumps({"prompt": fresh_prompt(), "max_tokens": tokens, "ignore_eos": True,
                       "stream": True}).encode()
    t0 = time.perf_counter()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")  # response head (chunked)
    times = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            break
        chunk = await reader.readexactly(size + 2)
        now = time.perf_counter()
        # One " t<hex>" piece per token; nothing else in the compact chunk JSON holds " t" (no
        # json.loads: the client's own cost would dominate what is measured).
        times.extend([now] * chunk.count(b" t"))
    writer.close()
    return t0, times


def replay_run(serves, gw, total, concurrency, tokens, seed, stream=False, rate=None,
               arrival_seed=None):
    """One closed-loop run of mocker's own C++ client, `mocker replay --mode live`: `total`
    synthetic requests (a fresh PROMPT_LEN-token prompt each — `seed` differs per run so no run
    hits the prefix cache of an earlier one — and exactly `tokens` output tokens), `concurrency`
    in flight (or, with `rate`, Poisson arrivals at `rate` req/s and no cap: a trace whose
    arrival times come from `arrival_seed`, so that the two paths of a round get the same
    schedule — the workers' passes, idle between runs, start with its first request, so both
    paths meet the same pass phases and the difference is the path's own delay, not which
    passes each schedule happened to hit — and whose prompts come from `seed`, fresh per path
    and round). Direct (`gw` None): over ZeroMQ to `serves`, round robin (streamed: one output
    message per pass). Through the gateway: `--openai-url`, token-id prompts, /v1/completions on
    keep-alive connections, non-streaming (`--no-stream`) unless `stream`. Both sides time the
    same points: the report's throughput is completed requests over first send to last answer,
    its TTFT / ITL from a request's send to its tokens' arrival, in the client. Returns (req/s,
    client CPU s, serves' CPU s, gateway CPU s, the serves' counters over the run: {"passes": …,
    "output_messages": …}, the report)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        if rate:
            trace = os.path.join(tmp, "trace.jsonl")
            poisson_trace(trace, total, rate, tokens, arrival_seed,
                          seed * total * (PROMPT_LEN // TRACE_BLOCK))
            args = [mocker_bin(), "replay", trace, "--trace-block-size", str(TRACE_BLOCK)]
        else:
            args = [mocker_bin(), "replay", "--format", "synthetic", "--num-prompts", str(total),
                    "--input-tokens-mean", str(PROMPT_LEN), "--input-tokens-stddev", "0",
                    "--output-tokens-mean", str(tokens), "--output-tokens-stddev", "0",
                    "--seed", str(seed), "--concurrency", str(concurrency)]
        args += ["--no-progress", "--report-json", report]
        if gw is None:
            for s in serves:
                args += ["--connect", s.submit, "--connect-cancel", s.cancel]
        else:
            # Its connections opened before the clock starts, as the direct client's are: as
            # many as in flight (closed loop), or enough for the Poisson peak.
            args += ["--openai-url", "http://%s:%d" % (gw.host, gw.port)]
            if supports_preconnect():
                args += ["--openai-connections",
                         str(concurrency if not rate else PRECONNECT_POISSON)]
            if not stream:
                args.append("--no-stream")
        counters_before = worker_counters(serves)
        serves_before = sum(cpu_seconds(s.proc.pid) for s in serves)
        gw_before = cpu_seconds(gw.proc.pid) if gw else 0.0
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=300)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # includes this child now
        if proc.returncode != 0:
            raise RuntimeError("replay failed: %s %s" % (out.decode()[-2000:], err.decode()[-2000:]))
        with open(report, encoding="utf-8") as f:
            r = json.load(f)
    if r["completed_requests"] != total:
        raise RuntimeError("%d of %d requests completed: %s" % (r["completed_requests"], total,
                                                                out.decode()[-2000:]))
    client = usage.ru_utime + usage.ru_stime
    serves_cpu = sum(cpu_seconds(s.proc.pid) for s in serves) - serves_before
    counters = {k: v - counters_before[k] for k, v in worker_counters(serves).items()}
    return (r["request_throughput_rps"], client, serves_cpu,
            cpu_seconds(gw.proc.pid) - gw_before if gw else 0.0, counters, r)


WORKER_COUNTERS = {"passes": "mocker:passes_total", "output_messages": "mocker:output_messages_total"}


def worker_counters(serves):
    """The serves' forward passes and output messages so far, summed (their /metrics)."""
    totals = dict.fromkeys(WORKER_COUNTERS, 0.0)
    for s in serves:
        with urllib.request.urlopen(s.endpoints["http"] + "/metrics", timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            for key, name in WORKER_COUNTERS.items():
                if line.startswith(name + "{") or line.startswith(name + " "):
                    totals[key] += float(line.rsplit(" ", 1)[1])
    return totals


def median(values):
    return sorted(values)[len(values) // 2]


def replay_throughput(serves, gw, args):
    """Both paths driven by `mocker replay`, alternating (direct first in even rounds, the
    gateway first in odd ones): req/s, and CPU per request of the client, the workers and the
    gateway. Prints the table and one JSON line."""
    rates = {"zeromq": [], "gateway": []}
    cpu = {k: {"client": [], "workers": [], "gateway": []} for k in rates}
    per_request = {k: {"passes": [], "output_messages": []} for k in rates}
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = usage.ru_utime + usage.ru_stime  # the clients that ended before
    for i in range(args.rounds):
        order = ("zeromq", "gateway") if i % 2 == 0 else ("gateway", "zeromq")
        for path in order:
            seed = 1 + 2 * i + (path == "gateway")
            rps, client, workers, gateway, counters, _ = replay_run(
                serves, gw if path == "gateway" else None, args.throughput, args.concurrency,
                args.tokens, seed)
            for key, value in counters.items():
                per_request[path][key].append(value / args.throughput)
            rates[path].append(rps)
            per = 1e6 / args.throughput
            cpu[path]["client"].append((client - children) * per)
            children = client
            cpu[path]["workers"].append(workers * per)
            cpu[path]["gateway"].append(gateway * per)
    med = {k: median(v) for k, v in rates.items()}
    print("%d requests x %d tokens per path and round, %d in flight, %d rounds, %d workers "
          "(prefill %g ms, decode %g ms); both paths driven by `mocker replay` (gateway: "
          "--openai-url --no-stream)" % (args.throughput, args.tokens, args.concurrency,
                                         args.rounds, args.workers, args.prefill_ms,
                                         args.decode_ms))
    for k, v in rates.items():
        print("%-8s %s req/s (median %.0f)" % (k, " ".join("%.0f" % r for r in v), med[k]))
    ratios = [100.0 * g / d for d, g in zip(rates["zeromq"], rates["gateway"])]
    print("gateway / zeromq: %.1f %% of the medians; per round %s %% (median %.1f, range "
          "%.1f-%.1f)" % (100.0 * med["gateway"] / med["zeromq"],
                          " ".join("%.1f" % r for r in ratios), median(ratios), min(ratios),
                          max(ratios)))
    for path in rates:
        for who, values in cpu[path].items():
            if path == "zeromq" and who == "gateway":
                continue
            print("%-8s %-7s CPU per request: %s us (median %.0f)" % (
                path, who, " ".join("%.0f" % x for x in values), median(values)))
    # The workers' CPU follows their passes, which run while anything is queued: a path that
    # keeps fewer requests at the workers gets smaller batches, more passes per request.
    for path, counts in per_request.items():
        print("%-8s workers: passes per request %s (median %.2f), output messages per request "
              "%s (median %.2f)" % (
                  path, " ".join("%.2f" % x for x in counts["passes"]), median(counts["passes"]),
                  " ".join("%.2f" % x for x in counts["output_messages"]),
                  median(counts["output_messages"])))
    print("json: " + json.dumps({"zeromq_rps": rates["zeromq"], "gateway_rps": rates["gateway"],
                      "ratio_of_medians": med["gateway"] / med["zeromq"],
                      "ratio_per_round": [r / 100 for r in ratios],
                      "cpu_us": {p: {w: median(v) for w, v in c.items() if v}
                                 for p, c in cpu.items()},
                      "per_request": {p: {k: median(v) for k, v in c.items()}
                                      for p, c in per_request.items()}}))


STREAM_STATS = (("TTFT p50", "median_ttft_ms"), ("TTFT p99", "p99_ttft_ms"),
                ("ITL p50", "median_itl_ms"), ("ITL p99", "p99_itl_ms"),
                ("in flight", "in_flight"))


def replay_streaming(serves, gw, args):
    """Streaming overhead: both paths driven by `mocker replay` (ZeroMQ live / `--openai-url`,
    streamed SSE), `--requests` per path and round, alternating which path goes first; a closed
    loop of `--streams` in flight, or Poisson arrivals at `--request-rate` (no cap; the mean in
    flight, Little's law: completions per second × mean E2E, is printed). Each statistic is the
    client's own (its report: a request's send to its tokens' arrival); the table shows the
    median over rounds of each path's figure and their difference. Prints the table and one
    JSON line."""
    stats = {"zeromq": [], "gateway": []}
    for i in range(args.rounds):
        order = ("zeromq", "gateway") if i % 2 == 0 else ("gateway", "zeromq")
        for path in order:
            report = replay_run(serves, gw if path == "gateway" else None, args.requests,
                                args.streams, args.tokens, 1 + 2 * i + (path == "gateway"),
                                stream=True, rate=args.request_rate, arrival_seed=1000 + i)[5]
            report["in_flight"] = report["request_throughput_rps"] * report[
                "mean_e2e_latency_ms"] / 1000
            stats[path].append({key: report[key] for _, key in STREAM_STATS})
    med = {path: {key: median([r[key] for r in rounds]) for _, key in STREAM_STATS}
           for path, rounds in stats.items()}
    load = ("Poisson arrivals at %g req/s" % args.request_rate if args.request_rate
            else "%d in flight (closed loop)" % args.streams)
    print("%d streaming requests x %d tokens per path and round, %s, %d rounds, %d workers "
          "(prefill %g ms, decode %g ms); both paths driven by `mocker replay` (gateway: "
          "--openai-url, SSE)" % (args.requests, args.tokens, load, args.rounds, args.workers,
                                  args.prefill_ms, args.decode_ms))
    print("%-8s %s" % ("path", " ".join("%10s" % name for name, _ in STREAM_STATS)))
    for path in stats:
        print("%-8s %s" % (path, " ".join("%10.2f" % med[path][key] for _, key in STREAM_STATS)))
    added = {key: med["gateway"][key] - med["zeromq"][key] for _, key in STREAM_STATS}
    print("%-8s %s  (ms, median gateway - median zeromq)" % (
        "added", " ".join("%10.2f" % added[key] for _, key in STREAM_STATS)))
    # The rounds are paired (the same arrival times on both paths, one after the other): each
    # round's own difference, its median and its spread, which the difference of medians hides.
    paired = {key: sorted(g[key] - z[key] for z, g in zip(stats["zeromq"], stats["gateway"]))
              for _, key in STREAM_STATS}
    print("%-8s %s  (ms, median of each round's difference)" % (
        "paired", " ".join("%10.2f" % median(paired[key]) for _, key in STREAM_STATS)))
    print("%-8s %s  (ms, smallest / largest round's difference)" % (
        "range", " ".join("%10s" % ("%.2f/%.2f" % (paired[key][0], paired[key][-1]))
                          for _, key in STREAM_STATS)))
    print("json: " + json.dumps({"rounds": stats, "median": med, "added": added,
                                 "paired_median": {k: median(v) for k, v in paired.items()}}))


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid, encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def gateway_throughput(gw, total, concurrency, tokens):
    """Requests per second of `total` non-streaming /v1/completions, `concurrency` keep-alive
    connections each sending its next request when the previous answer arrived."""
    left = [total]

    async def connection():
        reader, writer = await asyncio.open_connection(gw.host, gw.port)
        while left[0] > 0:
            left[0] -= 1
            body = json.dumps({"prompt": fresh_prompt(), "max_tokens": tokens,
                               "ignore_eos": True}).encode()
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return total / (time.perf_counter() - t0)


async def gateway_round(gw, streams, tokens):
    return await asyncio.gather(*(http_stream(gw.host, gw.port, tokens) for _ in range(streams)))


async def hold(gw, serves, n):
    """Opens `n` long streams at once, waits until every one has its response head, and returns
    the gateway's RSS (KiB) before and while they are held; then closes them all and waits until
    the workers have cancelled every request."""
    rss_before = proc_status_kib(gw.proc.pid, "VmRSS")
    body = json.dumps({"prompt": "hold", "max_tokens": 4000, "ignore_eos": True,
                       "stream": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body))

    async def one():
        reader, writer = await asyncio.open_connection(gw.host, gw.port)
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")  # the stream's head: the request is submitted
        return reader, writer

    conns = await asyncio.gather(*(one() for _ in range(n)))
    rss_held = proc_status_kib(gw.proc.pid, "VmRSS")
    clients = [s.client() for s in serves]
    routes = sum(c.stats()["routes"] for c in clients)
    for _, writer in conns:
        writer.close()
    await asyncio.gather(*(writer.wait_closed() for _, writer in conns))
    try:
        poll_until(lambda: sum(c.stats()["routes"] for c in clients) == 0,
                   "every held stream cancelled", timeout=60)
    except AssertionError:
        print("routes left:", [c.stats()["routes"] for c in clients], "gateway stderr:",
              gw.stderr_text()[-2000:], file=sys.stderr)
        raise
    for c in clients:
        c.close()
    return rss_before, rss_held, routes


def summarize(samples, tokens):
    ttft, itl = [], []
    for t0, ts in samples:
        assert len(ts) == tokens, "a stream got %d of %d tokens" % (len(ts), tokens)
        ttft.append((ts[0] - t0) * 1000)
        itl += [(b - a) * 1000 for a, b in zip(ts, ts[1:])]
    return {"ttft_p50": percentile(ttft, 0.5), "ttft_p99": percentile(ttft, 0.99),
            "itl_p50": percentile(itl, 0.5), "itl_p99": percentile(itl, 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=100,
                    help="streaming requests in flight (default 100)")
    ap.add_argument("--requests", type=int, default=1000,
                    help="streaming, --client replay: requests per path and round (default 1000)")
    ap.add_argument("--request-rate", type=float, default=0,
                    help="streaming, --client replay: Poisson arrivals at this many req/s "
                         "instead of a closed loop of --streams")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefill-ms", type=float, default=10)
    ap.add_argument("--decode-ms", type=float, default=10)
    ap.add_argument("--hold", type=int, default=0,
                    help="instead: hold this many concurrent streams and report the RSS")
    ap.add_argument("--throughput", type=int, default=0,
                    help="instead: this many non-streaming requests per path and round, "
                         "--concurrency in flight: requests per second direct vs gateway")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--client", choices=("replay", "asyncio"), default="replay",
                    help="replay (default): both paths driven by `mocker replay` — streaming: "
                         "a closed loop of --requests with --streams in flight; --throughput: "
                         "the gateway path by `--openai-url --no-stream`. asyncio: this script's "
                         "own clients — streaming: one burst of --streams requests opened at "
                         "once (the earlier figures); --throughput: its asyncio HTTP client (it "
                         "costs as much CPU as the gateway)")
    args = ap.parse_args()
    serves = [Serve(*paced(args.prefill_ms, args.decode_ms)) for _ in range(args.workers)]
    gw = Gateway(serves)
    try:
        if args.hold:
            before, held, routes = asyncio.run(hold(gw, serves, args.hold))
            print("held %d streams (%d running on the workers): gateway RSS %d KiB idle, %d KiB "
                  "holding them; all cancelled on close" % (args.hold, routes, before, held))
            return 0
        if args.throughput and args.client == "replay":
            replay_throughput(serves, gw, args)
            return 0
        if args.throughput:
            rates = {"zeromq": [], "gateway": []}
            cpu = []  # the gateway's CPU per request (µs): its capacity on one core
            client_cpu = []  # this (asyncio HTTP client) process's, on the gateway path
            for i in range(args.rounds):
                rates["zeromq"].append(replay_run(
                    serves, None, args.throughput, args.concurrency, args.tokens, 1 + i)[0])
                before, client_before = cpu_seconds(gw.proc.pid), time.process_time()
                rates["gateway"].append(asyncio.run(gateway_throughput(
                    gw, args.throughput, args.concurrency, args.tokens)))
                cpu.append((cpu_seconds(gw.proc.pid) - before) / args.throughput * 1e6)
                client_cpu.append((time.process_time() - client_before) / args.throughput * 1e6)
            med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
            print("%d requests x %d tokens per path and round, %d in flight, %d rounds, %d workers "
                  "(prefill %g ms, decode %g ms)" % (args.throughput, args.tokens,
                                                      args.concurrency, args.rounds, args.workers,
                                                      args.prefill_ms, args.decode_ms))
            for k, v in rates.items():
                print("%-8s %s req/s (median %.0f)" % (k, " ".join("%.0f" % r for r in v), med[k]))
            print("gateway / zeromq: %.1f %%" % (100.0 * med["gateway"] / med["zeromq"]))
            c = sorted(cpu)[len(cpu) // 2]
            print("gateway CPU per request: %s us (median %.0f: at most %.0f req/s on its cores "
                  "when the client is not the limit)" % (" ".join("%.0f" % x for x in cpu), c,
                                                        1e6 / c if c else float("inf")))
            print("HTTP client CPU per request: %s us (median %.0f)"
                  % (" ".join("%.0f" % x for x in client_cpu),
                     sorted(client_cpu)[len(client_cpu) // 2]))
            return 0
        if args.client == "replay":
            replay_streaming(serves, gw, args)
            return 0
        direct, through = [], []
        for _ in range(args.rounds):
            direct += asyncio.run(direct_round(serves, args.streams, args.tokens))
            through += asyncio.run(gateway_round(gw, args.streams, args.tokens))
        d, g = summarize(direct, args.tokens), summarize(through, args.tokens)
        print("%d streams x %d tokens, %d rounds, %d workers (prefill %g ms, decode %g ms)"
              % (args.streams, args.tokens, args.rounds, args.workers, args.prefill_ms,
                 args.decode_ms))
        print("%-8s %10s %10s %10s %10s" % ("path", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"))
        for name, s in (("zeromq", d), ("gateway", g)):
            print("%-8s %10.2f %10.2f %10.2f %10.2f" % (name, s["ttft_p50"], s["ttft_p99"],
                                                      s["itl_p50"], s["itl_p99"]))
        print("%-8s %10.2f %10.2f %10.2f %10.2f  (ms)" % (
            "added", g["ttft_p50"] - d["ttft_p50"], g["ttft_p99"] - d["ttft_p99"],
            g["itl_p50"] - d["itl_p50"], g["itl_p99"] - d["itl_p99"]))
    finally:
        gw.close()
        for s in serves:
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
