#!/usr/bin/env python3
"""Llama-3-8B's MLP (SwiGLU, 4096 -> 14336, bf16) at 1, 16, 512 and 8192 tokens: linfuse (eager,
the hand-fused middle, the gated GEMM -- a memory-bound gated GEMV at 16 tokens or fewer --,
compiled, compiled gated) against transformers' own LlamaMLP eager, under torch.compile, and
under max-autotune (no CUDA graphs) at 8192 tokens, in one run. At a few tokens a forward only has to
read its weights once (3 x 4096 x 14336 bf16 = 352 MB): the script measures the GPU's read
bandwidth (a sum over a 2 GiB tensor) and prints the bandwidth each forward reached.
At 16 tokens or fewer it then profiles linfuse's gated form (`linfuse kernels-mlp --variant gated`,
20 steps) and prints each kernel's GPU time and the bandwidth its share of the weights was read at,
beside the measured read ceiling.
Timed as every bench/*_vs_torch.py is (torch_timing.py). usage: bench/llama_mlp_vs_torch.py build/linfuse [TOKENS,...] (default 1,16,512,8192)"""
import glob, json, subprocess, sys, tempfile

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

from torch_timing import bench, linfuse_cases

D, H = 4096, 14336
WEIGHTS = 3 * D * H * 2  # bytes
TOKENS = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 16, 512, 8192]
if not TOKENS or any(t not in (1, 16, 512, 8192) for t in TOKENS):
    sys.exit("tokens: a comma-separated choice of 1, 16, 512, 8192 (linfuse bench cuda's llama_mlp_* cases)")
ours = {k: v[0] for k, v in linfuse_cases(sys.argv[1], "llama_mlp_").items()}
torch.manual_seed(0)
big = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda").uniform_()
read_us = bench(lambda: big.sum())
read_bw = big.numel() * 2 / (read_us * 1e-6) / 1e9
print("\nGPU read bandwidth: %.0f GB/s (a sum over 2 GiB of bf16: %.1f us)" % (read_bw, read_us))
del big
cfg = LlamaConfig(hidden_size=D, intermediate_size=H, hidden_act="silu", mlp_bias=False)
with torch.no_grad():
    mlp = LlamaMLP(cfg).to("cuda", torch.bfloat16)
    for T in TOKENS:
        x = torch.rand(1, T, D, device="cuda", dtype=torch.bfloat16) * 2 - 1
        t = {"transformers LlamaMLP eager": bench(lambda: mlp(x))}
        c = torch.compile(mlp)
        t["transformers LlamaMLP torch.compile"] = bench(lambda: c(x))
        torch._dynamo.reset()
        if T == 8192:
            c = torch.compile(mlp, mode="max-autotune-no-cudagraphs")
            t["transformers LlamaMLP max-autotune"] = bench(lambda: c(x))
            torch._dynamo.reset()
        best_name = min(t, key=t.get)
        best = t[best_name]
        rows = [("linfuse eager (5 kernels)", ours.get("llama_mlp_%d" % T)),
                ("linfuse fused (4 kernels)", ours.get("llama_mlp_%d_fused" % T)),
                ("linfuse gated (2 kernels)", ours.get("llama_mlp_%d_gated" % T)),
                ("linfuse compiled (4, 1 graph)", ours.get("compiled_llama_mlp_%d" % T)),
                ("linfuse compiled gated (2, 1 graph)", ours.get("compiled_gated_llama_mlp_%d" % T))]
        rows += list(t.items())
        print("\nLlama-3-8B MLP, %d token%s, bf16" % (T, "" if T == 1 else "s"))
        print("%-40s %10s %12s %12s %14s" % ("forward", "us", "vs best", "vs eager", "weights GB/s"))
        for name, us in rows:
            us = float("nan") if us is None else us
            print("%-40s %10.2f %12.3f %12.3f %10.0f (%2.0f%%)" % (name, us, us / best, us / t["transformers LlamaMLP eager"],
                                                                  WEIGHTS / (us * 1e-6) / 1e9,
                                                                  100 * WEIGHTS / (us * 1e-6) / 1e9 / read_bw))
        print("best PyTorch mode: %s" % best_name, flush=True)


def kernels(T, steps=20):
    """{kernel name: us per step} of linfuse's gated MLP at T tokens, from its own trace"""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.argv[1], "kernels-mlp", "--device", "cuda", "--variant", "gated", "--batch", "1", "--seq", str(T),
               "--dim", str(D), "--hidden", str(H), "--active", str(steps), "--out", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            sys.exit(run.stderr)
        trace = sorted(glob.glob(out + "/kernels-mlp/*.json"))[-1]
        events = json.load(open(trace))["traceEvents"]
    per = {}
    for e in events:
        if e.get("cat") == "kernel":
            per[e["name"]] = per.get(e["name"], 0.0) + e["dur"] / steps
    return per


for T in [t for t in TOKENS if t <= 16]:
    print("\nlinfuse gated (GeGLU, as kernels-mlp runs it), %d token%s: each kernel's share of the weights "
          "(GPU read ceiling %.0f GB/s)" % (T, "" if T == 1 else "s", read_bw))
    total = 0.0
    for name, us in sorted(kernels(T).items(), key=lambda kv: -kv[1]):
        # the gated GEMV reads [Wg; Wu]; the down GEMM (cuBLASLt's nvjet or our GEMV) the down weight; a
        # split-K reduce nothing
        share = 2 * D * H * 2 if "gated" in name else D * H * 2 if any(k in name for k in ("nvjet", "gemm", "gemv")) \
            else 0
        total += us
        bw = share / (us * 1e-6) / 1e9 if share else float("nan")
        print("  %-70s %9.2f us %7.0f GB/s (%3.0f%%)" % (name[:70], us, bw, 100 * bw / read_bw))
    print("  %-70s %9.2f us %7.0f GB/s (%3.0f%%)" % ("sum of the kernels", total, WEIGHTS / (total * 1e-6) / 1e9,
                                                     100 * WEIGHTS / (total * 1e-6) / 1e9 / read_bw), flush=True)
