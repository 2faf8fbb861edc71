#!/usr/bin/env python3
"""Every linfuse MLP variant against PyTorch eager at many token counts, in one run.

For the goal "no MLP variant slower than PyTorch eager at the same shape": at each token count
and each (dim, hidden), linfuse's eager (5 kernels), fused (4), gated (2), compiled and compiled
--gated forwards (`linfuse bench cuda --mlp`; its fp8 forward is shown too, outside the bf16
goal's list), beside PyTorch's eager and torch.compile of the same
module (three bias-free Linears, GeGLU's gelu_tanh or SwiGLU's silu), all timed the same way
(forwards back to back, one synchronize, median). Prints each variant over PyTorch eager and the
list of (variant, shape) pairs slower than it.

usage: bench/mlp_sweep_vs_torch.py build/linfuse [--act gelu_tanh|silu] [--dims 768x3072,...]
                                   [--tokens 1,16,...] [--reps N] [--no-compile]"""
import argparse, time

import torch
import torch.nn.functional as F

from torch_timing import bench, linfuse_cases

ap = argparse.ArgumentParser(description="linfuse's MLP variants against PyTorch eager over token counts")
ap.add_argument("linfuse")
ap.add_argument("--act", choices=("gelu_tanh", "silu"), default="gelu_tanh")
ap.add_argument("--dims", default="768x3072,4096x14336", help="DIMxHIDDEN pairs, comma-separated")
ap.add_argument("--tokens", default="1,16,17,64,128,256,512,1024,2048,4096,8192,16384")
ap.add_argument("--reps", type=int, default=10, help="samples per linfuse case (PyTorch takes as many)")
ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (it compiles once per shape)")
args = ap.parse_args()

dims = [tuple(int(v) for v in p.split("x")) for p in args.dims.split(",")]
tokens = [int(t) for t in args.tokens.split(",")]
shapes = [(t, d, h) for d, h in dims for t in tokens]
ours = {}
for i in range(0, len(shapes), 32):  # linfuse takes up to 32 shapes a call
    chunk = ",".join("%dx%dx%d" % s for s in shapes[i:i + 32])
    ours.update({k: v[0] for k, v in linfuse_cases(args.linfuse, None, ["--mlp", chunk, "--act", args.act],
                                                     args.reps).items()})

forms = [("eager", "mlp_{a}_1x{s}"), ("fused", "mlp_{a}_1x{s}_fused"), ("gated", "mlp_{a}_1x{s}_gated"),
         ("compiled", "compiled_mlp_{a}_1x{s}"), ("compiled --gated", "compiled_gated_mlp_{a}_1x{s}"),
         ("fp8", "mlp_{a}_1x{s}_fp8")]
# fp8 computes at another precision (bench/fp8_vs_torch.py sets it beside PyTorch's FP8): shown
# here, not counted in the bf16 goal's list
BF16_FORMS = len(forms) - 1
act = (lambda v: F.gelu(v, approximate="tanh")) if args.act == "gelu_tanh" else F.silu
dev, dt, nan = "cuda", torch.bfloat16, float("nan")
torch.manual_seed(0)
slower, rows = [], []
print("\n%s MLP, bf16, GPU us per forward (median of %d); each linfuse form over PyTorch eager"
      % ("GeGLU" if args.act == "gelu_tanh" else "SwiGLU", args.reps))
print("%-18s %10s %10s  %s" % ("tokens x dim x H", "torch eager", "compile", "  ".join("%16s" % f for f, _ in forms)))
with torch.no_grad():
    for t, d, h in shapes:
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        x = torch.rand(1, t, d, device=dev, dtype=dt) * 2 - 1

        def mlp(x=x):
            return dn(act(g(x)) * u(x))

        eager = bench(mlp, samples=args.reps)
        comp = nan
        if not args.no_compile:
            torch._dynamo.reset()
            comp = bench(torch.compile(mlp), samples=args.reps)
        tag = "%dx%dx%d" % (t, d, h)
        cells = []
        for k, (form, pat) in enumerate(forms):
            us = ours.get(pat.format(a=args.act, s=tag), nan)
            cells.append("%8.2f %6.3f" % (us, us / eager))
            if us / eager > 1.0 and k < BF16_FORMS:
                slower.append((form, tag, us / eager))
        print("%-18s %10.2f %10.2f  %s" % (tag, eager, comp, "  ".join(cells)), flush=True)
        del g, u, dn, x

print("\nbf16 forms slower than PyTorch eager at the same shape: %d of %d" % (len(slower), len(shapes) * BF16_FORMS))
for form, tag, r in slower:
    print("  %-18s %-18s %.3f" % (form, tag, r))
