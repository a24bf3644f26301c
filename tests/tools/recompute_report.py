#!/usr/bin/python3
"""Recompute a replay JSON report from its per-request JSONL timelines, independently of the C++
collector, and compare every field the timelines determine.

    tests/tools/recompute_report.py REPORT.json REQUESTS.jsonl

Registered with ctest for the golden pair tests/data/tiny_trace.report.json /
tiny_trace.requests.jsonl, which the C++ golden test pins byte for byte; this script checks that
the report's numbers really follow from the timelines under the metric definitions of
tools/replay/README.md ("Report definitions"), so that a bug in the aggregation cannot hide in a
regenerated golden file.

Everything is recomputed from the raw time fields (arrival, first / last token, terminal), not
from the per-request latencies the JSONL also carries (those are checked too). Floating-point
operations follow the definitions in the same order as the report (sums over the sorted samples,
two-pass population std, numpy's linear percentile), so the comparison is exact: JSON numbers are
printed in shortest round-trip form, and Python floats are IEEE doubles.

The pooled inter-token gaps need every token time, and the JSONL holds only the first, the second
(first + ttst) and the last. For a run on a single DP rank every token is emitted at the end of a
forward pass, one token per running request per pass, so the token times of a request are the
consecutive pass ends from its first to its last token. The script collects every pass end the
file reveals and accepts a request's reconstruction only when its window [first, last] holds
exactly `output_length` of them; otherwise it stops with an error instead of guessing.

Not derivable from the timelines, so not checked: wall_time_ms, processed_tokens_per_s (wall
clock), peak_kv_usage (an engine gauge), and the first-admission reuse ratio unless no request
was readmitted (the JSONL holds the reuse of the last admission only).
Uses only the standard library; run with Debian's /usr/bin/python3.
"""
import json
import math
import sys

PERCENTILES = (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99))


def percentile_linear(xs, p):
    """numpy's default (linear) percentile of an ascending list."""
    h = (len(xs) - 1) * p / 100.0
    lo_h = math.floor(h)
    lo = int(lo_h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo_h) * (xs[hi] - xs[lo])


def summary(samples):
    """count, mean, min, max, percentiles and population std (None when empty)."""
    xs = sorted(samples)
    if not xs:
        return {"count": 0}
    total = 0.0
    for x in xs:  # sequential, in sorted order (not math.fsum)
        total += x
    mean = total / len(xs)
    squares = 0.0
    for x in xs:
        squares += (x - mean) * (x - mean)
    out = {"count": len(xs), "mean": mean, "min": xs[0], "max": xs[-1],
           "std": math.sqrt(squares / len(xs))}
    for name, p in PERCENTILES:
        out[name] = percentile_linear(xs, p)
    return out


def per_second(amount, duration_ms):
    if duration_ms is None or duration_ms <= 0.0:
        return None
    return amount / (duration_ms / 1000.0)


class Checker:
    def __init__(self):
        self.failures = []
        self.checked = 0

    def equal(self, what, got, want):
        self.checked += 1
        if got != want:
            self.failures.append(f"{what}: report has {got!r}, timelines give {want!r}")


def reconstruct_token_times(completed):
    """Token times per request (list of lists), from the pass ends revealed by the file."""
    pass_ends = set()
    for r in completed:
        if r["output_length"] >= 1:
            pass_ends.add(r["first_token_ms"])
            pass_ends.add(r["last_token_ms"])
        if r["output_length"] >= 2:
            pass_ends.add(r["first_token_ms"] + r["ttst_ms"])
    ordered = sorted(pass_ends)
    times = []
    for r in completed:
        n = r["output_length"]
        if n == 0:
            times.append([])
            continue
        window = [t for t in ordered if r["first_token_ms"] <= t <= r["last_token_ms"]]
        if len(window) != n:
            raise SystemExit(
                f"cannot reconstruct the token times of request {r['session_id']} turn "
                f"{r['turn_index']}: {n} tokens but {len(window)} known pass ends in "
                f"[{r['first_token_ms']}, {r['last_token_ms']}]: the file does not reveal every pass end in between")
        times.append(window)
    return times


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        report = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        requests = [json.loads(line) for line in f if line.strip()]

    check = Checker()
    statuses = [r["terminal_status"] for r in requests]
    check.equal("num_requests", report["num_requests"], len(requests))
    for status in ("completed", "rejected", "cancelled", "failed", "incomplete"):
        check.equal(f"{status}_requests", report[f"{status}_requests"], statuses.count(status))

    for status, prefix in (("completed", "cut_short_by_"), ("rejected", "rejected_by_")):
        for limit in ("max_model_len", "kv_capacity", "max_num_batched_tokens"):
            want = sum(1 for r in requests
                       if r["terminal_status"] == status and r["terminal_reason"] == limit)
            check.equal(f"{prefix}{limit}_requests", report[f"{prefix}{limit}_requests"], want)

    completed = [r for r in requests if r["terminal_status"] == "completed"]
    token_times = reconstruct_token_times(completed)

    # The JSONL's own per-request latencies follow from its times.
    for r, tau in zip(completed, token_times):
        who = f"request {r['session_id']}/{r['turn_index']}"
        check.equal(f"{who} output_length", r["output_length"], len(tau))
        if tau:
            check.equal(f"{who} ttft_ms", r["ttft_ms"], tau[0] - r["arrival_time_ms"])
            check.equal(f"{who} e2e_latency_ms", r["e2e_latency_ms"], tau[-1] - r["arrival_time_ms"])
        if len(tau) >= 2:
            check.equal(f"{who} ttst_ms", r["ttst_ms"], tau[1] - tau[0])
            check.equal(f"{who} itl_ms", r["itl_ms"], (tau[-1] - tau[0]) / (len(tau) - 1))

    total_in = sum(r["input_length"] for r in completed)
    total_out = sum(len(tau) for tau in token_times)
    check.equal("total_input_tokens", report["total_input_tokens"], total_in)
    check.equal("total_output_tokens", report["total_output_tokens"], total_out)

    arrivals = [r["arrival_time_ms"] for r in requests]
    terminals = [r["terminal_time_ms"] for r in requests if r["terminal_time_ms"] is not None]
    duration = max(terminals) - min(arrivals) if arrivals and terminals else None
    check.equal("duration_ms", report["duration_ms"], duration)
    check.equal("request_throughput_rps", report["request_throughput_rps"],
                per_second(float(len(completed)), duration))
    check.equal("input_throughput_tok_s", report["input_throughput_tok_s"],
                per_second(float(total_in), duration))
    check.equal("output_throughput_tok_s", report["output_throughput_tok_s"],
                per_second(float(total_out), duration))
    check.equal("total_throughput_tok_s", report["total_throughput_tok_s"],
                per_second(float(total_in + total_out), duration))

    reused = sum(r["reused_input_tokens"] for r in completed)
    ratio = reused / total_in if total_in > 0 else None
    check.equal("prefix_cache_reused_ratio", report["prefix_cache_reused_ratio"], ratio)
    if all(r["admission_count"] == 1 for r in completed):
        check.equal("first_admission_prefix_cache_reused_ratio",
                    report["first_admission_prefix_cache_reused_ratio"], ratio)
    check.equal("total_preemptions", report["total_preemptions"],
                sum(r["admission_count"] - 1 for r in completed))

    samples = {"ttft": [], "ttst": [], "tpot": [], "itl": [], "e2e_latency": [],
               "output_token_throughput_per_user": []}
    for r, tau in zip(completed, token_times):
        if tau:
            samples["ttft"].append(tau[0] - r["arrival_time_ms"])
            samples["e2e_latency"].append(tau[-1] - r["arrival_time_ms"])
        if len(tau) >= 2:
            samples["ttst"].append(tau[1] - tau[0])
            samples["tpot"].append((tau[-1] - tau[0]) / (len(tau) - 1))
        for k in range(1, len(tau)):
            gap = tau[k] - tau[k - 1]
            samples["itl"].append(gap)
            if gap > 0.0:
                samples["output_token_throughput_per_user"].append(1000.0 / gap)
    for metric, xs in samples.items():
        s = summary(xs)
        suffix = "" if metric == "output_token_throughput_per_user" else "_ms"
        for field in ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std"):
            check.equal(f"{field}_{metric}{suffix}", report[f"{field}_{metric}{suffix}"],
                        s.get(field))
        if metric in ("ttft", "ttst", "tpot", "itl", "e2e_latency"):
            # report_version 2: p0..p100 of each latency distribution (null when empty).
            xs_sorted = sorted(xs)
            want = [percentile_linear(xs_sorted, p) for p in range(101)] if xs else None
            check.equal(f"quantiles.{metric}_ms", report["quantiles"][f"{metric}_ms"], want)
    check.equal("report_version", report["report_version"], 2)

    if check.failures:
        print(f"{len(check.failures)} of {check.checked} checks failed:", file=sys.stderr)
        for failure in check.failures:
            print("  " + failure, file=sys.stderr)
        return 1
    print(f"ok: {check.checked} values recomputed from {len(requests)} timelines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
