#!/usr/bin/python3
"""Runs the project's benchmarks and prints one markdown table (`scripts/dev bench`).

    tests/bench/run_benchmarks.py --build-dir BUILD [--trace TRACE] [--write [DOC]] [--only NAMES]

Each row is a figure (metric | value | command); the command column is what to run (from the
repository root, with BUILD = build/) to reproduce it alone. Sizes suit a 2-core machine; the
whole run takes a few minutes. With --write DOC, the machine line and the table replace the part
of DOC between the `<!-- bench:begin -->` and `<!-- bench:end -->` markers. The benches print
their full output to stderr as they run; only the table goes to stdout. Policy: figures that
vary with host noise are the median of several runs/rounds (said in the row).
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
RUNS = 3  # process runs of the short benches whose figures vary with host noise; median


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run(cmd, stdout_to=None):
    """Runs cmd; its output is echoed to stderr and returned. Raises on a non-zero exit."""
    log(" ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    sys.stderr.write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
    return proc.stdout


def json_lines(output):
    return [json.loads(line[len("json: "):]) for line in output.splitlines()
            if line.startswith("json: ")]


def show(cmd, build):
    """The command as a user types it from the repository root."""
    text = " ".join(cmd)
    text = text.replace(build + "/", "build/").replace(ROOT + "/", "")
    return f"`{text}`"


def build_type(build):
    """CMAKE_BUILD_TYPE (and sanitizers, if any) of the build directory, from its cache."""
    values = {}
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
        for line in f:
            for key in ("CMAKE_BUILD_TYPE", "MOCKER_SANITIZE"):
                if line.startswith(key + ":"):
                    values[key] = line.split("=", 1)[1].strip()
    text = values.get("CMAKE_BUILD_TYPE") or "no build type"
    if values.get("MOCKER_SANITIZE"):
        text += ", sanitizers " + values["MOCKER_SANITIZE"]
    return text


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo", encoding="utf-8") as f:
        mem_kib = int(f.readline().split()[1])
    return (f"{model}, {os.cpu_count()} cores, {mem_kib / 1024 / 1024:.1f} GiB RAM, "
            f"Linux {platform.release()}; load average at start "
            f"{os.getloadavg()[0]:.2f}; {datetime.date.today().isoformat()}")


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


# --- the benches ------------------------------------------------------------------------------

def time_replay(cmd):
    """Runs `cmd` (a mocker replay) RUNS times: median wall and median CPU (user + sys) in s."""
    walls, cpus = [], []
    for _ in range(RUNS):
        log(" ".join(cmd))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False)
        walls.append(time.monotonic() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"mocker replay exited {proc.returncode}: {proc.stderr}")
    return statistics.median(walls), statistics.median(cpus)


def scaled_trace(ctx, tmp, copies):
    trace = os.path.join(tmp, f"trace_x{copies}.jsonl")
    with open(trace, "w", encoding="utf-8") as out:
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "bench", "scale_trace.py"),
                        ctx.trace, str(copies)], stdout=out, check=True)
    return trace


def bench_replay(ctx):
    """Offline replay of the trace 1x, 2x and 4x concatenated; process wall time, median."""
    rows = []
    mocker = os.path.join(ctx.build, "tools", "mocker")
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (1, 2, 4):
            trace = scaled_trace(ctx, tmp, copies)
            report_path = os.path.join(tmp, "report.json")
            wall, _ = time_replay([mocker, "replay", trace, "--report-json", report_path])
            with open(report_path, encoding="utf-8") as f:
                report = json.load(f)
            n = report["num_requests"]
            span_s = report["duration_ms"] / 1000
            shown = ["build/tools/mocker", "replay",
                     "TRACE" if copies == 1 else f"TRACE_x{copies}", "--report-json", "r.json"]
            rows.append((
                f"offline replay {copies}× trace ({fmt(n)} requests, simulated span "
                f"{fmt(span_s, 1)} s)",
                f"{fmt(wall, 2)} s wall, {fmt(n / wall)} req/s, {fmt(span_s / wall)}× real time",
                "`" + " ".join(shown) + "`"))
    ctx.notes.append(f"TRACE = `{os.path.relpath(ctx.trace, ROOT)}` (the sample Mooncake trace); "
                     "TRACE_xN = `tools/bench/scale_trace.py TRACE N > TRACE_xN`. Replay rows: "
                     f"median of {RUNS} runs, wall = process start to exit.")
    return rows


def bench_replay_modes(ctx):
    """Engine types and kv-routed fleets against their reference run, in the same run: SGLang at
    page size 1 and 16 against vllm on TRACE; 16 kv-routed workers against one on TRACE_x3."""
    mocker = os.path.join(ctx.build, "tools", "mocker")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        x3 = scaled_trace(ctx, tmp, 3)
        cases = [
            ("TRACE", ctx.trace, ["--engine-type", "vllm"], None),
            ("TRACE", ctx.trace, ["--engine-type", "sglang", "--block-size", "1"], 0),
            ("TRACE", ctx.trace, ["--engine-type", "sglang", "--block-size", "16"], 0),
            ("TRACE_x3", x3, [], None),
            ("TRACE_x3", x3, ["--num-workers", "16", "--router", "kv"], 3),
        ]
        timed = []
        for shown_trace, trace, args, _ in cases:
            timed.append(time_replay([mocker, "replay", trace, *args, "--report-json",
                                      os.path.join(tmp, "r.json")]))
        for (shown_trace, _, args, ref), (wall, cpu) in zip(cases, timed):
            ratio = ""
            if ref is not None:
                ref_args = " ".join(cases[ref][2])
                ratio = (f"; {cpu / timed[ref][1]:.1f}× the CPU of "
                         + (f"`{ref_args}`" if ref_args else "one worker"))
            rows.append((f"offline replay {shown_trace} {' '.join(args) or '(vllm, 1 worker)'}",
                         f"{fmt(wall, 2)} s wall, {fmt(cpu, 2)} s CPU{ratio}",
                         "`" + " ".join(["build/tools/mocker", "replay", shown_trace, *args,
                                         "--report-json", "r.json"]) + "`"))
    ctx.notes.append(f"replay_modes rows: median of {RUNS} runs each; CPU = user + sys of the "
                     "process (steadier than wall on a shared machine).")
    return rows


def bench_live(ctx, label, args, what):
    exe = os.path.join(ctx.build, "tests", "bench", "service_throughput_bench")
    cmd = [exe, *args, "--events", "off", "--label", label]
    out = run(cmd)
    r = json_lines(out)[0]
    return [
        (f"live {what}, KV events and FPM off: service",
         f"{fmt(r['service_messages_per_s'])} messages/s × {fmt(r['tokens_per_message'], 1)} "
         f"tokens/message = {fmt(r['service_tokens_per_s'])} tokens/s", show(cmd, ctx.build)),
        (f"live {what}: raw ROUTER→DEALER baseline, the same messages",
         f"{fmt(r['baseline_messages_per_s'])} messages/s "
         f"({fmt(r['baseline_tokens_per_s'])} tokens/s); service/baseline "
         f"{r['ratio_median']:.2f} (worst {r['ratio_worst']:.2f}, best {r['ratio_best']:.2f}, "
         f"{r['rounds']} rounds)", "same run"),
    ]


def bench_live_wide(ctx):
    return bench_live(ctx, "4x256", ["--clients", "4", "--concurrency", "256", "--requests", "256",
                                     "--max-tokens", "1000", "--rounds", "5"],
                      "4 clients × 256 streams × 1,000 tokens")


def bench_live_many(ctx):
    return bench_live(ctx, "1000x1", ["--clients", "1000", "--client-threads", "2",
                                      "--concurrency", "1", "--requests", "1", "--max-tokens",
                                      "100", "--rounds", "5"],
                      "1,000 clients × 1 stream × 100 tokens")


def span(values, unit, digits=0):
    """'median unit (min-max over N runs)'."""
    return (f"{fmt(statistics.median(values), digits)} {unit} ({fmt(min(values), digits)}–"
            f"{fmt(max(values), digits)} over {len(values)} runs)")


def bench_cancel(ctx):
    exe = os.path.join(ctx.build, "tests", "bench", "cancel_latency_bench")
    rows = []
    for phase, what in (("backlog", "under a 100,000-submit backlog"),
                        ("admission", "while the service admits a 100,000-submit flood")):
        cmd = [exe, "--flood", "100000", "--cancels", "1000", "--phase", phase]
        p50, p99 = [], []
        for _ in range(RUNS):
            m = re.search(r"p50 ([\d.]+) us, p99 ([\d.]+) us", run(cmd))
            if not m:
                raise RuntimeError("cancel_latency_bench: no p50/p99 line")
            p50.append(float(m.group(1)))
            p99.append(float(m.group(2)))
        rows.append((f"cancel → cancel_reply round trip {what} (1,000 cancels)",
                     f"p50 {span(p50, 'µs')}; p99 {span(p99, 'µs')}", show(cmd, ctx.build)))
    return rows


def bench_index(ctx):
    exe = os.path.join(ctx.build, "tests", "bench", "index_bench")
    cmd = [exe, "--batches", "100000", "--blocks", "16", "--sndhwm", "0"]
    published, indexed = [], []
    for _ in range(RUNS):
        out = run(cmd)
        pub = re.search(r"published ([\d.]+) blocks/s", out)
        app = re.search(r"applied\s+\d+/\d+ batches, \d+ blocks in [\d.]+ s = ([\d.]+) blocks/s",
                        out)
        if not pub or not app:
            raise RuntimeError("index_bench: no blocks/s lines")
        published.append(float(pub.group(1)))
        indexed.append(float(app.group(1)))
    return [("KV-event blocks published (PUB) and indexed (`mocker index` subscriber)",
             f"published {span(published, 'blocks/s')}; indexed {span(indexed, 'blocks/s')}",
             show(cmd, ctx.build))]


def bench_queued_rss(ctx):
    script = os.path.join(ROOT, "tests", "bench", "serve_rss_bench.py")
    cmd = ["/usr/bin/python3", script, "--mocker", os.path.join(ctx.build, "tools", "mocker"),
           "queued", "--requests", "100000", "--tokens", "1000"]
    r = json_lines(run(cmd))[0]
    return [("`mocker serve` RSS with 100,000 queued 1,000-token requests",
             f"{fmt(r['rss_kib'] / 1024)} MiB (idle {fmt(r['idle_rss_kib'] / 1024, 1)} MiB; "
             f"{fmt(r['bytes_per_request'])} bytes per queued request)", show(cmd, ctx.build))]


def bench_fleet(ctx):
    script = os.path.join(ROOT, "tests", "bench", "serve_rss_bench.py")
    cmd = ["/usr/bin/python3", script, "--mocker", os.path.join(ctx.build, "tools", "mocker"),
           "fleet", "--workers", "256"]
    r = json_lines(run(cmd))[0]
    return [("256-worker fleet: 256 processes (no in-process fleet yet), default engine",
             f"{fmt(r['total_rss_kib'] / 1024)} MiB RSS total ({fmt(r['mean_rss_kib'] / 1024, 1)}"
             f" MiB each), all ready {fmt(r['ready_s'], 2)} s after the first spawn "
             f"(spawning them one by one took {fmt(r['spawn_s'], 2)} s)",
             show(cmd, ctx.build))]


def bench_fleet_inproc(ctx):
    """`mocker serve --num-workers`: 256 idle workers, and a live replay over 64 (fleet_bench.py)."""
    script = os.path.join(ROOT, "tests", "bench", "fleet_bench.py")
    mocker = os.path.join(ctx.build, "tools", "mocker")
    idle_cmd = ["/usr/bin/python3", script, "--mocker", mocker, "idle", "--workers", "256"]
    i = json_lines(run(idle_cmd))[0]
    replay_cmd = ["/usr/bin/python3", script, "--mocker", mocker, "replay", "--workers", "64",
                  "--speedup-ratio", "10"]
    r = json_lines(run(replay_cmd))[0]
    return [("256-worker fleet in one process (`--num-workers 256`), default engine",
             f"ready {fmt(i['ready_s'], 2)} s after start, {fmt(i['rss_mib'], 1)} MiB RSS "
             f"({i['threads']} threads), idle CPU {fmt(i['idle_cpu_pct'], 2)} % of one core",
             show(idle_cmd, ctx.build)),
            ("64-worker fleet, live replay (1,000 trace requests) at speedup 10: pass lateness",
             f"p50 {fmt(r['p50_median_ms'], 3)} ms (worst worker {fmt(r['p50_max_ms'], 3)}), "
             f"p99 {fmt(r['p99_median_ms'], 2)} ms (worst {fmt(r['p99_max_ms'], 2)}), "
             f"{r['passes']:,} passes, {r['resyncs']} resyncs", show(replay_cmd, ctx.build))]


def bench_floor(ctx):
    """The live floor next to libzmq's: one-token TTFT against `mocker serve` (0 ms passes) and
    against a raw ROUTER sending the same replies (live_floor_bench, alternating rounds)."""
    exe = os.path.join(ctx.build, "tests", "bench", "live_floor_bench")
    cmd = [exe, "--mocker", os.path.join(ctx.build, "tools", "mocker"), "--rounds", "3"]
    found = re.findall(r"service TTFT p50 ([\d.]+) p99 ([\d.]+) mean [\d.]+ ms \| raw p50 "
                       r"([\d.]+) p99 ([\d.]+)", run(cmd))
    if not found:
        raise RuntimeError("live_floor_bench: no round lines")
    col = [[float(f[i]) for f in found] for i in range(4)]
    return [("live floor next to libzmq's: TTFT of 2,000-token one-token requests, one at a "
             "time, 0 ms passes: `mocker serve` / a raw ROUTER answering with the same messages",
             f"service p50 {span(col[0], 'ms', 3)}, p99 {span(col[1], 'ms', 3)}; raw p50 "
             f"{span(col[2], 'ms', 3)}, p99 {span(col[3], 'ms', 3)}", show(cmd, ctx.build))]


def bench_live_fidelity(ctx):
    """Live vs offline at speedups 10 and 50 (tests/bench/live_fidelity.py, its defaults)."""
    script = os.path.join(ROOT, "tests", "bench", "live_fidelity.py")
    cmd = ["/usr/bin/python3", script, "--mocker", os.path.join(ctx.build, "tools", "mocker")]
    rows = []
    for r in json_lines(run(cmd)):
        if "live_floor_ttft_p50_ms" in r:
            rows.append(("live path floor: TTFT of 2,000-token one-token requests, 0 ms modelled "
                         "passes (what any live TTFT carries on top of the model)",
                         f"p50 {r['live_floor_ttft_p50_ms']:.3f} ms, p99 "
                         f"{r['live_floor_ttft_p99_ms']:.3f} ms", show(cmd, ctx.build)))
            continue
        t = r.get("timing") or {}
        rows.append((
            f"live/offline, {r['workload']} ({r['requests']} requests), speedup {r['speedup']:g}",
            f"TTFT p50 {r['ttft_p50_ratio']:.3f} ({r['ttft_p50_excess_ms']:+.3f} ms) p99 "
            f"{r['ttft_p99_ratio']:.3f}, ITL p50 "
            f"{r['itl_p50_ratio']:.3f} p99 {r['itl_p99_ratio']:.3f}, E2E p50 "
            f"{r['e2e_p50_ratio']:.3f} p99 {r['e2e_p99_ratio']:.3f}; pass lateness mean "
            f"{t.get('lateness_mean_ms', float('nan')):.3f} ms, p99 "
            f"{t.get('lateness_p99_ms', float('nan')):.3f} ms; serve CPU "
            f"{r['serve_cpu_pct']:.1f} % (idle {r['serve_idle_cpu_pct']:.2f} %)",
            show(cmd, ctx.build)))
    return rows


def bench_gateway(ctx):
    """Non-streaming throughput direct vs through `mocker gateway`, both driven by `mocker replay`
    (gateway_overhead_bench.py --throughput)."""
    script = os.path.join(ROOT, "tests", "bench", "gateway_overhead_bench.py")
    cmd = ["/usr/bin/python3", script, "--throughput", "30000", "--concurrency", "64", "--tokens",
           "16", "--prefill-ms", "0.1", "--decode-ms", "0.1", "--rounds", "5"]
    env = dict(os.environ, MOCKER_BIN=os.path.join(ctx.build, "tools", "mocker"))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                         timeout=900).stdout
    r = json_lines(out)[-1]
    cpu = r["cpu_us"]
    return [("gateway / direct ZeroMQ, non-streaming 16-token requests, 64 in flight, both driven "
             "by `mocker replay` (median of 5 alternating rounds of 30,000)",
             f"{fmt(100 * r['ratio_of_medians'], 1)} % ({fmt(sorted(r['gateway_rps'])[2])} vs "
             f"{fmt(sorted(r['zeromq_rps'])[2])} req/s; rounds "
             f"{fmt(100 * min(r['ratio_per_round']), 1)}-{fmt(100 * max(r['ratio_per_round']), 1)} "
             "%); CPU per request: gateway "
             f"{fmt(cpu['gateway']['gateway'])} us, its HTTP client {fmt(cpu['gateway']['client'])}"
             f" us, the ZeroMQ client {fmt(cpu['zeromq']['client'])} us",
             show(["MOCKER_BIN=" + env["MOCKER_BIN"]] + cmd, ctx.build)),
            bench_gateway_streaming(script, env, ctx)]


def bench_gateway_streaming(script, env, ctx):
    """TTFT / ITL added by the gateway to streams, about 100 in flight (Poisson arrivals), both
    paths driven by `mocker replay` (gateway_overhead_bench.py --request-rate)."""
    cmd = ["/usr/bin/python3", script, "--request-rate", "180", "--requests", "1000", "--tokens",
           "32", "--rounds", "5"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                         timeout=900).stdout
    r = json_lines(out)[-1]
    added, through = r["added"], r["median"]["gateway"]
    return ("gateway − direct ZeroMQ, streaming 32-token requests, Poisson 180 req/s (about "
            f"{fmt(through['in_flight'])} in flight), 10 ms passes, both driven by `mocker "
            "replay` (medians of 5 alternating rounds)",
            f"TTFT p50 {added['median_ttft_ms']:+.2f} ms (median of the rounds' own differences "
            f"{r['paired_median']['median_ttft_ms']:+.2f}), p99 {added['p99_ttft_ms']:+.2f} ms; ITL "
            f"p50 {added['median_itl_ms']:+.2f} ms, p99 {added['p99_itl_ms']:+.2f} ms (gateway "
            f"TTFT p50 {through['median_ttft_ms']:.2f} ms)",
            show(["MOCKER_BIN=" + env["MOCKER_BIN"]] + cmd, ctx.build))


BENCHES = {
    "replay": bench_replay,
    "replay_modes": bench_replay_modes,
    "live": bench_live_wide,
    "live1000": bench_live_many,
    "cancel": bench_cancel,
    "index": bench_index,
    "queued": bench_queued_rss,
    "fleet": bench_fleet,
    "fleet_inproc": bench_fleet_inproc,
    "live_fidelity": bench_live_fidelity,
    "floor": bench_floor,
    "gateway": bench_gateway,
}


def table(rows):
    lines = ["| metric | value | command |", "|---|---|---|"]
    lines += [f"| {m} | {v} | {c} |" for m, v, c in rows]
    return "\n".join(lines)


def write_doc(path, text):
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    begin, end = doc.find(BEGIN), doc.find(END)
    if begin < 0 or end < begin:
        raise RuntimeError(f"{path}: no {BEGIN} ... {END} markers")
    doc = doc[:begin + len(BEGIN)] + "\n" + text + "\n" + doc[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
    log(f"wrote the table into {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--trace", default=os.path.join(
        ROOT, "data", "traces", "mooncake_synthetic_trace.jsonl"))
    parser.add_argument("--write", metavar="DOC", nargs="?",
                        const=os.path.join(ROOT, "docs", "benchmarks.md"),
                        help="put the table into DOC (default docs/benchmarks.md) between markers")
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(BENCHES))
    args = parser.parse_args()
    args.build = os.path.abspath(args.build_dir)
    args.trace = os.path.abspath(args.trace)
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error("unknown bench: " + ", ".join(unknown))
    args.notes = []
    header = f"Machine: {machine()}; build: {build_type(args.build)}"
    t0 = time.monotonic()
    rows = []
    failed = []
    for name in names:
        try:
            rows += BENCHES[name](args)
        except (RuntimeError, OSError, KeyError, IndexError, ValueError,
                subprocess.SubprocessError) as e:
            log(f"{name} failed: {e}")
            failed.append(name)
            rows.append((name, f"FAILED: {e}", ""))
    if any(n.startswith("live") for n in names):
        args.notes.append("Live rows: the round with the median service/baseline ratio of 5 "
                          "(worst and best in brackets); both sides in the same process run.")
    notes = "".join(f"\n* {n}" for n in args.notes)
    text = (f"{header}; benches took {time.monotonic() - t0:.0f} s; load average at end "
            f"{os.getloadavg()[0]:.2f}\n\n{table(rows)}\n{notes}")
    print(text)
    if args.write and not failed:
        write_doc(args.write, text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
