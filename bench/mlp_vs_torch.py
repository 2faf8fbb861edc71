#!/usr/bin/env python3
"""The GeGLU MLP forward, linfuse against PyTorch on the GPU, in one run.

linfuse: eager (5 kernels), compiled (4, one CUDA graph; 2 with --gated), kernels-mlp's fused
middle (4), the gated GEMM + down (2), and the gated GEMM alone against one cuBLASLt GEMM over
the stacked [Wg; Wu] (same FLOPs, no epilogue).
PyTorch: eager, torch.compile, torch.compile(mode="max-autotune-no-cudagraphs"), and x @ [Wg; Wu]^T.
All timed the same way: forwards queued back to back, one synchronize, divided; median of 20
samples. usage: bench/mlp_vs_torch.py build/linfuse"""
import sys, time

import torch
import torch.nn.functional as F

from torch_timing import bench, linfuse_cases

ours = {}
for which in ("mlp_", "gemm_"):
    ours.update({k: v[0] for k, v in linfuse_cases(sys.argv[1], which).items()})

dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)

print("\nGPU time per forward, us (back-to-back forwards, one synchronize, median of 20)", flush=True)
nan = float("nan")
with torch.no_grad():
    for bs, seq, d, h in ((64, 128, 768, 3072), (8, 1024, 4096, 11008)):
        tag = "%dx%dx%dx%d" % (bs, seq, d, h)
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        x = torch.rand(bs, seq, d, device=dev, dtype=dt) * 2 - 1

        def mlp(x=x):
            return dn(F.gelu(g(x), approximate="tanh") * u(x))

        torch_t = {"torch eager": bench(mlp)}
        t0 = time.perf_counter()
        torch_t["torch.compile"] = bench(torch.compile(mlp))
        t1 = time.perf_counter()
        torch._dynamo.reset()
        torch_t["max-autotune-no-cudagraphs"] = bench(torch.compile(mlp, mode="max-autotune-no-cudagraphs"))
        t2 = time.perf_counter()
        best_name = min(torch_t, key=torch_t.get)
        best = torch_t[best_name]
        rows = [("linfuse eager (5 kernels)", ours.get("mlp_" + tag, nan)),
                ("linfuse compiled (4 kernels, 1 graph)", ours.get("compiled_mlp_" + tag, nan)),
                ("linfuse compiled --gated (2 kernels)", ours.get("compiled_gated_mlp_" + tag, nan)),
                ("linfuse kernels-mlp (4 kernels)", ours.get("mlp_%s_fused" % tag, nan)),
                ("linfuse gated (2 kernels)", ours.get("mlp_%s_gated" % tag, nan))]
        rows += list(torch_t.items())
        print("\nMLP %s bf16 (torch.compile took %.0f s, max-autotune %.0f s)" % (tag, t1 - t0, t2 - t1))
        print("%-34s %10s %14s" % ("forward", "us", "vs best torch"))
        for name, t in rows:
            print("%-34s %10.2f %14.3f" % (name, t, t / best))
        print("best PyTorch mode: %s" % best_name, flush=True)

        # the gated GEMM alone against one plain GEMM with the same FLOPs
        wgu = torch.cat([g.weight, u.weight])
        x2 = x.reshape(-1, d)
        t_torch = bench(lambda: x2 @ wgu.t())
        tokens = bs * seq
        gated = ours.get("gemm_gated_%dx%dx%d" % (tokens, d, h), nan)
        concat = ours.get("gemm_concat_%dx%dx%d" % (tokens, d, 2 * h), nan)
        flops = 2.0 * tokens * d * 2 * h
        print("first layer alone, %d x %d x %d (2H = %d): gated %.2f us (%.0f TFLOP/s), cuBLASLt over [Wg; Wu] %.2f us, "
              "torch x @ [Wg; Wu]^T %.2f us; gated / cuBLASLt = %.3f"
              % (tokens, d, h, 2 * h, gated, flops / gated / 1e6, concat, t_torch, gated / concat), flush=True)
        torch._dynamo.reset()

# compiled --gated against the eager gated call, wherever both were timed (goal: <= 1.01)
print("\ncompiled --gated / eager gated (goal <= 1.01):", flush=True)
for name, t in sorted(ours.items()):
    if name.startswith("compiled_gated_mlp_"):
        tag = name[len("compiled_gated_mlp_"):]
        eager = ours.get("mlp_%s_gated" % tag)
        if eager:
            print("  %-22s %10.2f us / %10.2f us = %.3f" % (tag, t, eager, t / eager))
