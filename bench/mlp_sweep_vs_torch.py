#!/usr/bin/env python3
"""Every linfuse MLP variant against PyTorch eager at many token counts, in one run.

For the goal "no MLP variant slower than PyTorch eager at the same shape": at each token count
and each (dim, hidden), linfuse's eager (5 kernels), fused (4), gated (2), compiled and compiled
--gated forwards (`linfuse bench cuda --mlp`; its fp8 forward is shown too, outside the bf16
goal's list), beside PyTorch's eager and torch.compile of the same
module (three bias-free Linears, GeGLU's gelu_tanh or SwiGLU's silu), all timed the same way
(forwards back to back, one synchronize, median). Prints each variant over PyTorch eager and the
list of (variant, shape) pairs slower than it.

A single pass swings by several percent at the few-hundred-token shapes (the same kernels read
0.92 and 1.06 of PyTorch in one run), so the comparison runs in rounds: each round times every
linfuse form, then PyTorch, at every shape; a ratio is the median over rounds of the round's
own ratio, and a form counts as slower only if that median is over 1.

Every form, linfuse's and PyTorch's, is timed alone after --settle-ms of idle GPU (500): at the
large shapes the GPU runs at its power limit, and its clock then depends on what ran just before.
Timed among the other forms, linfuse's eager and fused forms ran 7-10% slower at 512 x 4096 ->
14336 than each alone, while PyTorch's eager was timed alone (bench/RESULTS.md, 2026-12-01, 6f4024a).
--settle-ms 0 keeps linfuse's forms taking turns sample by sample.

usage: bench/mlp_sweep_vs_torch.py build/linfuse [--act gelu_tanh|silu] [--dims 768x3072,...]
                                   [--tokens 1,16,...] [--reps N] [--rounds R]
                                   [--settle-ms MS] [--no-compile]"""
import argparse
import time

import torch
import torch.nn.functional as F

from torch_timing import bench, linfuse_cases

ap = argparse.ArgumentParser(description="linfuse's MLP variants against PyTorch eager over token counts")
ap.add_argument("linfuse")
ap.add_argument("--act", choices=("gelu_tanh", "silu"), default="gelu_tanh")
ap.add_argument("--dims", default="768x3072,4096x14336,5120x13824",
                help="DIMxHIDDEN pairs, comma-separated (the third: more down-projection tiles than an H200 has SMs)")
ap.add_argument("--tokens", default="1,16,17,64,128,256,512,1024,2048,4096,8192,16384")
ap.add_argument("--reps", type=int, default=10, help="samples per linfuse case (PyTorch takes as many)")
ap.add_argument("--rounds", type=int, default=3, help="linfuse-then-PyTorch passes; ratios are medians over them")
ap.add_argument("--settle-ms", type=int, default=500, help="idle GPU before each form is timed (0: linfuse's "
                "forms take turns sample by sample)")
ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (it compiles once per shape)")
args = ap.parse_args()
if not 0 <= args.settle_ms <= 10000:
    ap.error("--settle-ms takes 0 to 10000")

dims = [tuple(int(v) for v in p.split("x")) for p in args.dims.split(",")]
tokens = [int(t) for t in args.tokens.split(",")]
shapes = [(t, d, h) for d, h in dims for t in tokens]
forms = [("eager", "mlp_{a}_1x{s}"), ("fused", "mlp_{a}_1x{s}_fused"), ("gated", "mlp_{a}_1x{s}_gated"),
         ("compiled", "compiled_mlp_{a}_1x{s}"), ("compiled --gated", "compiled_gated_mlp_{a}_1x{s}"),
         ("fp8", "mlp_{a}_1x{s}_fp8")]
# fp8 computes at another precision (bench/fp8_vs_torch.py sets it beside PyTorch's FP8): shown
# here, not counted in the bf16 goal's list
BF16_FORMS = len(forms) - 1
act = (lambda v: F.gelu(v, approximate="tanh")) if args.act == "gelu_tanh" else F.silu
dev, dt, nan = "cuda", torch.bfloat16, float("nan")
torch.manual_seed(0)
median = lambda v: sorted(v)[len(v) // 2] if v else nan

# PyTorch's modules, made once and kept for every round (torch.compile compiles each once)
mods = {}
with torch.no_grad():
    for t, d, h in shapes:
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        x = torch.rand(1, t, d, device=dev, dtype=dt) * 2 - 1

        def mlp(x=x, g=g, u=u, dn=dn):
            return dn(act(g(x)) * u(x))
        mods[(t, d, h)] = (mlp, None if args.no_compile else torch.compile(mlp))

ours = {s: {f: [] for f, _ in forms} for s in shapes}     # us per round
theirs = {s: {"eager": [], "compile": []} for s in shapes}
for r in range(args.rounds):
    for i in range(0, len(shapes), 32):  # linfuse takes up to 32 shapes a call
        chunk = ",".join("%dx%dx%d" % s for s in shapes[i:i + 32])
        got = linfuse_cases(args.linfuse, None, ["--mlp", chunk, "--act", args.act, "--settle-ms",
                                                 str(args.settle_ms)], args.reps)
        for s in shapes[i:i + 32]:
            tag = "%dx%dx%d" % s
            for f, pat in forms:
                ours[s][f].append(got.get(pat.format(a=args.act, s=tag), (nan,))[0])
    with torch.no_grad():
        for s in shapes:
            eager_fn, comp_fn = mods[s]
            torch.cuda.synchronize()
            time.sleep(args.settle_ms / 1000)
            theirs[s]["eager"].append(bench(eager_fn, samples=args.reps))
            if comp_fn:
                time.sleep(args.settle_ms / 1000)
            theirs[s]["compile"].append(bench(comp_fn, samples=args.reps) if comp_fn else nan)
    print("round %d of %d done" % (r + 1, args.rounds), flush=True)

slower = []
print("\n%s MLP, bf16, GPU us per forward (median over %d rounds of the median of %d samples; %s); each "
      "linfuse form over PyTorch eager (median of the rounds' ratios)"
      % ("GeGLU" if args.act == "gelu_tanh" else "SwiGLU", args.rounds, args.reps,
         "each form alone after %d ms of idle GPU" % args.settle_ms if args.settle_ms
         else "linfuse's forms taking turns sample by sample"))
print("%-18s %10s %10s  %s" % ("tokens x dim x H", "torch eager", "compile", "  ".join("%16s" % f for f, _ in forms)))
for s in shapes:
    tag = "%dx%dx%d" % s
    te = theirs[s]["eager"]
    cells = []
    for k, (f, _) in enumerate(forms):
        ratios = [a / b for a, b in zip(ours[s][f], te)]
        ratio = median(ratios)
        cells.append("%8.2f %6.3f" % (median(ours[s][f]), ratio))
        if ratio > 1.0 and k < BF16_FORMS:
            slower.append((f, tag, ratio, ratios))
    print("%-18s %10.2f %10.2f  %s" % (tag, median(te), median(theirs[s]["compile"]), "  ".join(cells)), flush=True)

print("\nbf16 forms slower than PyTorch eager at the same shape: %d of %d" % (len(slower), len(shapes) * BF16_FORMS))
for f, tag, r, ratios in slower:
    print("  %-18s %-18s %.3f  (rounds: %s)" % (f, tag, r, " ".join("%.3f" % v for v in ratios)))
print("\nevery round, us (PyTorch eager; then linfuse's forms in the order above):")
for s in shapes:
    print("%-18s %s" % ("%dx%dx%d" % s, " | ".join(
        "%.2f: %s" % (theirs[s]["eager"][r], " ".join("%.2f" % ours[s][f][r] for f, _ in forms))
        for r in range(args.rounds))))
