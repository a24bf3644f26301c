#!/usr/bin/env python3
"""Zero-shot accuracy of mocker's timing models on recorded vLLM runs (docs/benchmarks.md).

For each run directory (trace.jsonl + ground_truth.csv + run.json, the format of
data/calibration/README.md), replays the trace with `mocker replay` (trace block size 16, the run's
`mocker_engine` settings) once with the roofline model and its default coefficients (the run's
model config.json, GPU, TP and expert parallelism) and once with the default polynomial model, and prints the
absolute percentage error of TTFT mean/p90/p99, E2E mean/p90/p99 and ITL
((mean E2E - mean TTFT) / (mean output tokens - 1)) per run and the median across runs.

    scripts/roofline_zero_shot.py --mocker build/tools/mocker RUN_DIR...
"""
import argparse, csv, json, os, statistics, subprocess, sys, tempfile

MODELS = {  # run.json "model" -> config.json in data/calibration/models
    "meta-llama/Llama-3.1-8B": "Llama-3.1-8B.json",
    "Qwen/Qwen3-32B": "Qwen3-32B.json",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "Qwen3-30B-A3B-Instruct-2507.json",
}
METRICS = ["ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "itl"]


def percentile(xs, q):  # numpy's default (linear between order statistics)
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(ttft, e2e, out_len):
    s = {"ttft_mean": statistics.mean(ttft), "ttft_p90": percentile(ttft, 0.9),
         "ttft_p99": percentile(ttft, 0.99), "e2e_mean": statistics.mean(e2e),
         "e2e_p90": percentile(e2e, 0.9), "e2e_p99": percentile(e2e, 0.99)}
    s["itl"] = (s["e2e_mean"] - s["ttft_mean"]) / (statistics.mean(out_len) - 1)
    return s


def replay(mocker, run, extra):
    eng = json.load(open(os.path.join(run, "run.json")))["mocker_engine"]
    args = [mocker, "replay", os.path.join(run, "trace.jsonl"), "--trace-block-size", "16",
            "--engine-type", eng["engine_type"], "--block-size", str(eng["block_size"]),
            "--max-num-seqs", str(eng["max_num_seqs"]),
            "--max-num-batched-tokens", str(eng["max_num_batched_tokens"]),
            "--max-model-len", str(eng["max_model_len"]), "--dp-size", str(eng["dp_size"])]
    if not eng["enable_prefix_caching"]:
        args.append("--no-enable-prefix-caching")
    if eng.get("num_gpu_blocks"):
        args += ["--num-gpu-blocks", str(eng["num_gpu_blocks"])]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "req.jsonl")
        subprocess.run(args + extra + ["--requests-jsonl", path], check=True,
                       stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(path)]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mocker", default="build/tools/mocker")
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                     "calibration", "models"))
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    table = {"roofline": {}, "polynomial": {}}
    for run in a.runs:
        meta = json.load(open(os.path.join(run, "run.json")))
        truth = list(csv.DictReader(open(os.path.join(run, "ground_truth.csv"))))
        real = summary([float(r["ttft_ms"]) for r in truth], [float(r["e2e_ms"]) for r in truth],
                       [int(r["output_length"]) for r in truth])
        label = meta["hardware"]["label"]
        tp = meta["engine"]["tensor_parallel_size"]
        roof = ["--timing-model", "roofline", "--gpu", label, "--tp", str(tp),
                "--model-config", os.path.join(a.models, MODELS[meta["model"]])]
        if meta["engine"].get("enable_expert_parallel"):
            roof.append("--enable-expert-parallel")  # experts over TP x DP GPUs
        for name, extra in (("roofline", roof), ("polynomial", [])):
            rows = replay(a.mocker, run, extra)
            sim = summary([r["ttft_ms"] for r in rows], [r["e2e_latency_ms"] for r in rows],
                          [r["output_length"] for r in rows])
            err = {m: abs(sim[m] - real[m]) / real[m] * 100 for m in METRICS}
            table[name][os.path.basename(run.rstrip("/"))] = (err, sim, real)
    for name, runs in table.items():
        print(f"\n{name}: absolute % error (simulated / recorded mean E2E ms)")
        print("| run | " + " | ".join(METRICS) + " | E2E mean sim / real |")
        print("|---|" + "---:|" * (len(METRICS) + 1))
        for run, (err, sim, real) in runs.items():
            print(f"| {run} | " + " | ".join(f"{err[m]:.1f}" for m in METRICS) +
                  f" | {sim['e2e_mean']:.0f} / {real['e2e_mean']:.0f} |")
        med = {m: statistics.median(e[m] for e, _, _ in runs.values()) for m in METRICS}
        print("| **median** | " + " | ".join(f"**{med[m]:.1f}**" for m in METRICS) + " | |")


if __name__ == "__main__":
    sys.exit(main())
