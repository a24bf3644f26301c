#!/usr/bin/env python3
"""Check the roofline model's default coefficients against per-operator GPU kernel profiles.

Re-states the per-operator formulas of docs/engine.md "Roofline timing" (GEMM, attention, MoE) and
reports, per profile, the mean absolute log error (|ln(model/measured)|, 0.10 ~ 10 %) of the model
at the given coefficients against the measured kernel times: vidur's mlp.csv (A100, H100: QKV, O,
up, down projections) and LLMServingSim's dense.csv / attention.csv / moe.csv (RTX 4090, RTX PRO
6000). PROFILES is the `profiles/` folder of the calibration reference data (its README gives the
formats and sources). Stdlib only.

    scripts/roofline_profile_check.py PROFILES [--stride N]
"""
import argparse, csv, glob, json, math, os, statistics as st

GPU = {"RTX4090": (165.2, 1008.0), "RTXPRO6000": (503.8, 1792.0), "h100": (989.4, 3350.0),
       "a100": (312.0, 2039.0)}  # engine/gpu_spec.cpp
DEFAULTS = dict(kernel_us=8.0, gemm_compute=0.75, gemm_memory=0.85, attn_prefill=0.4,
                attn_decode=0.7, mixed_factor=0.5, moe_compute=0.5, moe_memory=0.8)


def gemm_us(gpu, c, tokens, din, dout):
    peak, bw = GPU[gpu]
    compute = 2 * tokens * din * dout / (peak * 1e12 * c["gemm_compute"])
    memory = (din * dout * 2 + tokens * (din + dout) * 2) / (bw * 1e9 * c["gemm_memory"])
    return c["kernel_us"] + max(compute, memory) * 1e6


def attention_us(gpu, c, heads, kv_heads, hd, chunk, kv_prefill, n_decode, kv_decode):
    peak, bw = GPU[gpu]
    def one(n, ctx, eff):
        flops = 4 * heads * hd * n * (ctx + (n + 1) / 2)
        nbytes = (ctx + n) * 2 * kv_heads * hd * 2 + n * 2 * heads * hd * 2
        return max(flops / (peak * 1e12 * c["attn_prefill"]), nbytes / (bw * 1e9 * eff))
    s = one(chunk, kv_prefill, c["attn_decode"]) if chunk else 0.0
    if n_decode:
        eff = c["attn_decode"] * (c["mixed_factor"] if chunk > 1 else 1.0)
        s += n_decode * one(1, max(kv_decode - 1, 0), eff)
    return c["kernel_us"] + s * 1e6


def moe_us(gpu, c, tokens, active, h, inter, experts, topk):
    peak, bw = GPU[gpu]
    flops = 2 * tokens * topk * 3 * h * inter
    nbytes = active * 3 * h * inter * 2 + tokens * topk * (2 * h + 3 * inter) * 2
    return (gemm_us(gpu, c, tokens, h, experts) + 2 * c["kernel_us"] +
            max(flops / (peak * 1e12 * c["moe_compute"]), nbytes / (bw * 1e9 * c["moe_memory"])) * 1e6)


def err(pairs):
    return st.mean(abs(math.log(m / t)) for m, t in pairs), len(pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles")
    ap.add_argument("--stride", type=int, default=1, help="use every Nth profile row (speed)")
    a = ap.parse_args()
    c = DEFAULTS
    models = json.load(open(os.path.join(a.profiles, "models.json")))["models"]
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
        print(f"{gpu} {model} tp{tp} dense GEMMs: mean |log err| %.3f over %d" % err(pairs))
        rows = list(csv.DictReader(open(os.path.join(path, "attention.csv"))))[::a.stride]
        pairs = [(attention_us(gpu, c, heads, kvh, hd, int(r["prefill_chunk"]),
                               int(r["kv_prefill"]), int(r["n_decode"]), int(r["kv_decode"])),
                  float(r["time_us"])) for r in rows]
        print(f"{gpu} {model} tp{tp} attention: mean |log err| %.3f over %d" % err(pairs))
        moe = os.path.join(path, "moe.csv")
        if os.path.exists(moe) and m.get("moe"):
            e = m["moe"]
            pairs = [(moe_us(gpu, c, int(r["tokens"]), int(r["activated_experts"]), h,
                             e["moe_intermediate_size"], e["num_experts"], e["experts_per_token"]),
                      float(r["time_us"])) for r in csv.DictReader(open(moe))]
            print(f"{gpu} {model} tp{tp} MoE block: mean |log err| %.3f over %d" % err(pairs))
    for path in sorted(glob.glob(os.path.join(a.profiles, "vidur/compute/*/*/*/mlp.csv"))):
        gpu = path.split(os.sep)[-4]
        pairs = []
        for i, r in enumerate(csv.DictReader(open(path))):
            tokens = int(r["num_tokens"])
            if i % a.stride or tokens > 4096:
                continue
            tp = int(r["num_tensor_parallel_workers"])
            h, nh, nkv = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
            inter, hd = int(r["n_expanded_embd"]) // tp, h // nh
            q, kv = nh * hd // tp, max(1, nkv // tp) * hd
            up = (2 if r["use_gated_mlp"] == "True" else 1) * inter
            for op, (din, dout) in {"attn_pre_proj": (h, q + 2 * kv), "attn_post_proj": (q, h),
                                    "mlp_up_proj": (h, up), "mlp_down_proj": (inter, h)}.items():
                pairs.append((gemm_us(gpu, c, tokens, din, dout),
                              float(r[f"time_stats.{op}.median"]) * 1000))
        print(f"{gpu} {'/'.join(path.split(os.sep)[-3:-1])} GEMMs: mean |log err| %.3f over %d"
              % err(pairs))


if __name__ == "__main__":
    main()
