#!/usr/bin/env python3
"""Compile mode against torch.compile, in one run: `linfuse bench cuda --case compiled_` (each
linfuse forward one CUDA-graph replay of a compiled plan), then the same forwards in PyTorch under
torch.compile (default mode) and mode="reduce-overhead" (CUDA graphs). Host time per call: one
call timed alone after the queue drained; GPU time per forward: back to back, one synchronize.
usage: bench/compile_vs_torch.py build/linfuse"""
import sys

import torch
import torch.nn.functional as F

from torch_timing import bench, host, linfuse_cases

ours = {k[len("compiled_"):]: v for k, v in linfuse_cases(sys.argv[1], "compiled_").items()}

dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)


def cases():
    lin = torch.nn.Linear(32, 64, device=dev, dtype=dt)
    x = torch.rand(1024, 32, device=dev, dtype=dt)
    yield "linear_1024x32x64", lambda: lin(x)
    a, w, b = (torch.rand(4096, 4096, device=dev, dtype=dt) * 2 - 1 for _ in range(3))
    yield "matmul_add_4096", lambda: torch.add(torch.matmul(a, w), b)
    for (bs, seq, d, h) in ((1, 16, 768, 3072), (64, 128, 768, 3072), (8, 1024, 4096, 11008)):
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        xm = torch.rand(bs, seq, d, device=dev, dtype=dt) * 2 - 1
        yield "mlp_%dx%dx%dx%d" % (bs, seq, d, h), lambda xm=xm, g=g, u=u, dn=dn: dn(F.gelu(g(xm), approximate="tanh") * u(xm))


nan = (float("nan"), float("nan"))
rows = []
with torch.no_grad():
    for name, fn in cases():
        comp = torch.compile(fn)
        ro = torch.compile(fn, mode="reduce-overhead")
        bench(comp), bench(ro)  # compile and warm both before timing
        r = (name, ours.get(name, nan), (bench(comp), host(comp)), (bench(ro), host(ro)))
        rows.append(r)
        if name == "mlp_64x128x768x3072":
            rows.append(("gated_mlp_64x128x768x3072", ours.get("gated_mlp_64x128x768x3072", nan), r[2], r[3]))
        torch._dynamo.reset()

print("\nhost time per call, us (one call after the queue drained; linfuse: one graph launch)")
print("%-36s %10s %14s %16s %12s %12s" % ("case", "linfuse", "torch.compile", "reduce-overhead", "vs compile", "vs r-o"))
for name, (og, oh), (cg, ch), (rg, rh) in rows:
    print("%-36s %10.2f %14.2f %16.2f %12.3f %12.3f" % (name, oh, ch, rh, oh / ch, oh / rh))
print("\nGPU time per forward, us (back to back, one synchronize)")
print("%-36s %10s %14s %16s %12s %12s" % ("case", "linfuse", "torch.compile", "reduce-overhead", "vs compile", "vs r-o"))
for name, (og, oh), (cg, ch), (rg, rh) in rows:
    print("%-36s %10.2f %14.2f %16.2f %12.3f %12.3f" % (name, og, cg, rg, og / cg, og / rg))
