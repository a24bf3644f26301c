#!/usr/bin/env python3
"""Check the roofline model's default coefficients against per-operator GPU kernel profiles.

Re-states the per-operator formulas of docs/engine.md "Roofline timing" (GEMM, attention, MoE) and
reports, per profile, the mean absolute log error (|ln(model/measured)|, 0.10 ~ 10 %) of the model
at the given coefficients against the measured kernel times: vidur's mlp.csv (A100, H100: QKV, O,
up, down projections), vidur's NCCL all_reduce.csv (NVLink and PCIe nodes) and LLMServingSim's
dense.csv / attention.csv / moe.csv (RTX 4090, RTX PRO 6000). PROFILES is the `profiles/` folder of the calibration reference data (its README gives the
formats and sources). Stdlib only.

    scripts/roofline_profile_check.py PROFILES [--stride N] [--bounds FILE] [--measure-scales]

--measure-scales prints instead each GPU's memory-bound efficiencies (dense GEMMs of 1-16 tokens
and >= 50 MB of weights; decode-only attention, least squares of launch + per-sequence + bytes /
bandwidth) and their ratio to the default efficiencies: the GPU table's memory and attention
efficiency scales.

With --bounds (a JSON object: report line label -> largest accepted mean |log err|), exits 1 when
a profile's error exceeds its bound or a bounded profile is missing: the CI check that a change
to the roofline formulas keeps agreeing with real kernels (data/calibration/profiles/bounds.json).
"""
import argparse, csv, glob, json, math, os, statistics as st, sys

# engine/gpu_spec.cpp: BF16 TFLOP/s, GB/s, SMs, compute, memory and attention efficiency scales
GPU = {"RTX4090": (165.2, 1008.0, 128, 1.3, 1.13, 1.27),
       "RTXPRO6000": (503.8, 1792.0, 188, 1.0, 1.04, 1.03),
       "h100": (989.4, 3350.0, 132, 1.0, 1.12, 1.0), "a100": (312.0, 2039.0, 108, 1.0, 1.0, 1.0)}
DEFAULTS = dict(kernel_us=8.0, gemm_compute=0.75, gemm_memory=0.85, attn_prefill=0.5,
                attn_decode=0.7, mixed_factor=2.0, moe_compute=0.5, moe_memory=0.8,
                allreduce=0.7, allreduce_latency_us=36.0)
QUERY_TILE = 64  # engine/roofline.cpp kAttentionQueryTile
# vidur network profiles: (node, GPUs) -> per-direction link bandwidth an all-reduce crosses
# (NVLink 3/4 per direction; the 4-GPU rings of the pairwise-NVLink nodes cross PCIe Gen4/Gen5).
LINKS = {("a100_dgx", 2): 300.0, ("a100_dgx", 4): 300.0, ("a100_dgx", 8): 300.0,
         ("h100_dgx", 2): 450.0, ("h100_dgx", 4): 450.0, ("h100_dgx", 8): 450.0,
         ("a100_pairwise_nvlink", 2): 300.0, ("h100_pairwise_nvlink", 2): 450.0,
         ("a100_pairwise_nvlink", 4): 32.0, ("h100_pairwise_nvlink", 4): 64.0}


def gemm_us(gpu, c, tokens, din, dout):
    peak, bw, _, scale, mem_scale, _ = GPU[gpu]
    compute = 2 * tokens * din * dout / (peak * scale * 1e12 * c["gemm_compute"])
    memory = (din * dout * 2 + tokens * (din + dout) * 2) / (bw * mem_scale * 1e9 * c["gemm_memory"])
    return c["kernel_us"] + max(compute, memory) * 1e6


def attention_us(gpu, c, heads, kv_heads, hd, chunk, kv_prefill, n_decode, kv_decode):
    peak, bw, sms, _, _, attn_scale = GPU[gpu]
    bw *= attn_scale
    blocks = heads * math.ceil(chunk / QUERY_TILE) if chunk > 1 else 0
    wave = blocks / (math.ceil(blocks / sms) * sms) if blocks else 1.0
    def one(n, ctx, eff, util=1.0, kv_width=kv_heads):
        flops = 4 * heads * hd * n * (ctx + (n + 1) / 2)
        nbytes = (ctx + n) * 2 * kv_width * hd * 2 + n * 2 * heads * hd * 2
        return max(flops / (peak * 1e12 * c["attn_prefill"] * util), nbytes / (bw * 1e9 * eff))
    s = one(chunk, kv_prefill, c["attn_decode"], wave) if chunk else 0.0
    if n_decode:
        # Beside a prompt chunk, decodes read K/V once per query head (varlen prefill kernel).
        eff = c["attn_decode"] * (c["mixed_factor"] if chunk > 1 else 1.0)
        s += n_decode * one(1, max(kv_decode - 1, 0), eff, 1.0, heads if chunk > 1 else kv_heads)
    return c["kernel_us"] + s * 1e6


def moe_us(gpu, c, tokens, active, h, inter, experts, topk):
    peak, bw, _, scale, _, _ = GPU[gpu]
    peak *= scale
    flops = 2 * tokens * topk * 3 * h * inter
    nbytes = active * 3 * h * inter * 2 + tokens * topk * (2 * h + 3 * inter) * 2
    return (gemm_us(gpu, c, tokens, h, experts) + 2 * c["kernel_us"] +
            max(flops / (peak * 1e12 * c["moe_compute"]), nbytes / (bw * 1e9 * c["moe_memory"])) * 1e6)


def allreduce_us(c, gpus, link_gbps, nbytes):
    return c["allreduce_latency_us"] + 2 * (gpus - 1) / gpus * nbytes / (
        link_gbps * 1e9 * c["allreduce"]) * 1e6


def err(pairs):
    return st.mean(abs(math.log(m / t)) for m, t in pairs), len(pairs)


RESULTS = {}
KERNEL_US = 8.0  # DEFAULTS["kernel_us"]: the launch subtracted before measuring a bandwidth


def vidur_gemms(path, stride=1, max_tokens=4096):
    """(tokens, in, out, measured µs) of every GEMM in a vidur mlp.csv (every `stride`th row)."""
    for i, r in enumerate(csv.DictReader(open(path))):
        tokens = int(r["num_tokens"])
        if i % stride or tokens > max_tokens:
            continue
        tp = int(r["num_tensor_parallel_workers"])
        h, nh, nkv = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
        inter, hd = int(r["n_expanded_embd"]) // tp, h // nh
        q, kv = nh * hd // tp, max(1, nkv // tp) * hd
        up = (2 if r["use_gated_mlp"] == "True" else 1) * inter
        for op, (din, dout) in {"attn_pre_proj": (h, q + 2 * kv), "attn_post_proj": (q, h),
                                "mlp_up_proj": (h, up), "mlp_down_proj": (inter, h)}.items():
            yield tokens, din, dout, float(r[f"time_stats.{op}.median"]) * 1000


def solve3(rows, ys, ws):
    """Weighted least squares of ys ~ rows (3 columns) by the normal equations."""
    a = [[sum(w * r[i] * r[j] for r, w in zip(rows, ws)) for j in range(3)] for i in range(3)]
    b = [sum(w * r[i] * y for r, y, w in zip(rows, ys, ws)) for i in range(3)]
    for i in range(3):  # Gaussian elimination with partial pivoting
        p = max(range(i, 3), key=lambda k: abs(a[k][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        for k in range(i + 1, 3):
            f = a[k][i] / a[i][i]
            a[k] = [x - f * y for x, y in zip(a[k], a[i])]
            b[k] -= f * b[i]
    x = [0.0] * 3
    for i in (2, 1, 0):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, 3))) / a[i][i]
    return x


def measure_scales(profiles, models):
    """Prints each GPU's measured memory-bound efficiencies and the scales over the defaults
    (engine/gpu_spec.cpp's memory_efficiency_scale and attention_efficiency_scale)."""
    gemm, attn = {}, {}
    def gemm_row(gpu, tokens, din, dout, time_us):
        nbytes = din * dout * 2 + tokens * (din + dout) * 2
        if tokens <= 16 and din * dout * 2 >= 50e6:
            gemm.setdefault(gpu, []).append(nbytes / ((time_us - KERNEL_US) * GPU[gpu][1] * 1e3))
    for path in sorted(glob.glob(os.path.join(profiles, "llmservingsim/*/*/*/*/tp*"))):
        gpu, model = path.split(os.sep)[-5], "/".join(path.split(os.sep)[-4:-2])
        tp, m = int(path.split(os.sep)[-1][2:]), models["/".join(path.split(os.sep)[-4:-2])]
        hd, heads = m["head_dim"], m["num_attention_heads"] // tp
        kvh, h, inter = max(1, m["num_kv_heads"] // tp), m["hidden_size"], m["intermediate_size"] // tp
        shapes = {"qkv_proj": (h, (heads + 2 * kvh) * hd), "o_proj": (heads * hd, h),
                  "gate_up_proj": (h, 2 * inter), "down_proj": (inter, h)}
        for r in csv.DictReader(open(os.path.join(path, "dense.csv"))):
            if r["layer"] in shapes:
                gemm_row(gpu, int(r["tokens"]), *shapes[r["layer"]], float(r["time_us"]))
        rows, ys = [], []
        for r in csv.DictReader(open(os.path.join(path, "attention.csv"))):
            n = int(r["n_decode"])
            if int(r["prefill_chunk"]) == 0 and n > 0:  # time = launch + per-seq + bytes / (e·B)
                nbytes = n * int(r["kv_decode"]) * 2 * kvh * hd * 2
                rows.append((1.0, n, nbytes / (GPU[gpu][1] * 1e3)))
                ys.append(float(r["time_us"]))
        if rows:
            x = solve3(rows, ys, [1.0 / y ** 2 for y in ys])  # relative error
            attn.setdefault(gpu, []).append(1.0 / x[2])
            print(f"{gpu} {model} tp{tp} decode attention: launch %.1f us, per sequence %.2f us, "
                  "bandwidth fraction %.3f" % (x[0], x[1], 1.0 / x[2]))
    for path in sorted(glob.glob(os.path.join(profiles, "vidur/compute/*/*/*/mlp.csv"))):
        for row in vidur_gemms(path):
            gemm_row(path.split(os.sep)[-4], *row)
    for gpu in sorted(gemm):
        g = st.median(gemm[gpu])
        line = (f"{gpu}: memory-bound dense GEMMs %.3f of bandwidth over %d kernels, "
                "memory_efficiency_scale %.2f" % (g, len(gemm[gpu]), g / DEFAULTS["gemm_memory"]))
        if gpu in attn:
            a = st.median(attn[gpu])
            line += ("; decode attention %.3f, attention_efficiency_scale %.2f"
                     % (a, a / DEFAULTS["attn_decode"]))
        print(line)


def report(label, pairs):
    e, n = err(pairs)
    RESULTS[label] = e
    print(f"{label}: mean |log err| %.3f over %d" % (e, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles")
    ap.add_argument("--stride", type=int, default=1, help="use every Nth profile row (speed)")
    ap.add_argument("--bounds", help="JSON: label -> largest accepted mean |log err|")
    ap.add_argument("--measure-scales", action="store_true",
                    help="print each GPU's measured memory and attention efficiency scales")
    a = ap.parse_args()
    c = DEFAULTS
    models = json.load(open(os.path.join(a.profiles, "models.json")))["models"]
    if a.measure_scales:
        measure_scales(a.profiles, models)
        return
    lss = os.path.join(a.profiles, "llmservingsim")
    for path in sorted(glob.glob(os.path.join(lss, "*/*/*/bf16/tp*"))):
        gpu = path.split(os.sep)[-5]
        model = "/".join(path.split(os.sep)[-4:-2])
        tp = int(path.split(os.sep)[-1][2:])
        m = models[model]
        h, hd = m["hidden_size"], m["head_dim"]
        heads, kvh = m["num_attention_heads"] // tp, max(1, m["num_kv_heads"] // tp)
        q, kv, inter = heads * hd, kvh * hd, m["intermediate_size"] // tp
        shapes = {"qkv_proj": (h, q + 2 * kv), "o_proj": (q, h), "gate_up_proj": (h, 2 * inter),
                  "down_proj": (inter, h)}
        rows = list(csv.DictReader(open(os.path.join(path, "dense.csv"))))
        pairs = [(gemm_us(gpu, c, int(r["tokens"]), *shapes[r["layer"]]), float(r["time_us"]))
                 for r in rows if r["layer"] in shapes]
        report(f"{gpu} {model} tp{tp} dense GEMMs", pairs)
        rows = list(csv.DictReader(open(os.path.join(path, "attention.csv"))))[::a.stride]
        pairs = [(attention_us(gpu, c, heads, kvh, hd, int(r["prefill_chunk"]),
                               int(r["kv_prefill"]), int(r["n_decode"]), int(r["kv_decode"])),
                  float(r["time_us"])) for r in rows]
        report(f"{gpu} {model} tp{tp} attention", pairs)
        moe = os.path.join(path, "moe.csv")
        if os.path.exists(moe) and m.get("moe"):
            e = m["moe"]
            pairs = [(moe_us(gpu, c, int(r["tokens"]), int(r["activated_experts"]), h,
                             e["moe_intermediate_size"], e["num_experts"], e["experts_per_token"]),
                      float(r["time_us"])) for r in csv.DictReader(open(moe))]
            report(f"{gpu} {model} tp{tp} MoE block", pairs)
    for path in sorted(glob.glob(os.path.join(a.profiles, "vidur/compute/*/*/*/mlp.csv"))):
        gpu = path.split(os.sep)[-4]
        pairs = [(gemm_us(gpu, c, tokens, din, dout), t)
                 for tokens, din, dout, t in vidur_gemms(path, a.stride)]
        report(f"{gpu} {'/'.join(path.split(os.sep)[-3:-1])} GEMMs", pairs)
    for path in sorted(glob.glob(os.path.join(a.profiles, "vidur/network/*/all_reduce.csv"))):
        node = path.split(os.sep)[-2]
        by_gpus = {}
        for r in csv.DictReader(open(path)):
            gpus, size = int(r["num_workers"]), int(r["size"])
            link = LINKS.get((node, gpus))
            # One node (devices_per_node = GPUs); 8 KiB..64 MiB = 2..8,192 tokens of 4,096.
            if link and int(r["devices_per_node"]) == gpus and 8192 <= size <= 64 << 20:
                by_gpus.setdefault(gpus, []).append(
                    (allreduce_us(c, gpus, link, size),
                     float(r["time_stats.all_reduce.median"]) * 1000))
        for gpus, pairs in sorted(by_gpus.items()):
            report(f"{node} {gpus} GPUs all-reduce", pairs)
    if a.bounds:
        failed = []
        for label, bound in json.load(open(a.bounds)).items():
            if label not in RESULTS:
                failed.append(f"{label}: no such profile in {a.profiles}")
            elif not RESULTS[label] <= bound:
                failed.append(f"{label}: mean |log err| {RESULTS[label]:.3f} > bound {bound}")
        for f in failed:
            print("FAIL " + f)
        if failed:
            sys.exit(1)
        print("all %d profiles within their bounds" % len(json.load(open(a.bounds))))


if __name__ == "__main__":
    main()
