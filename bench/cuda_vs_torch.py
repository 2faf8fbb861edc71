#!/usr/bin/env python3
"""linfuse against PyTorch on the GPU, in one run: `linfuse bench cuda` then the same forwards in
PyTorch (eager and torch.compile), timed the same way: many forwards back to back, one
synchronize, divided; median of samples. usage: bench/cuda_vs_torch.py build/linfuse"""
import sys

import torch
import torch.nn.functional as F

from torch_timing import bench, host, linfuse_cases

ours = linfuse_cases(sys.argv[1])

dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)


def cases():
    for n in (4096, 64):
        x, w, b = (torch.rand(n, n, device=dev, dtype=dt) * 2 - 1 for _ in range(3))
        yield "matmul_add_%d" % n, lambda x=x, w=w, b=b: torch.add(torch.matmul(x, w), b)
    for (bs, seq, d, h) in ((64, 128, 768, 3072), (8, 1024, 4096, 11008)):
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        x = torch.rand(bs, seq, d, device=dev, dtype=dt) * 2 - 1
        yield "mlp_%dx%dx%dx%d" % (bs, seq, d, h), lambda x=x, g=g, u=u, dn=dn: dn(F.gelu(g(x), approximate="tanh") * u(x))
    lin = torch.nn.Linear(32, 64, device=dev, dtype=dt)
    x = torch.rand(1024, 32, device=dev, dtype=dt)
    yield "linear_1024x32x64", lambda: lin(x)


print("\nGPU time per forward, us (back-to-back forwards, one synchronize)")
print("%-24s %10s %12s %14s %12s" % ("case", "linfuse", "torch eager", "torch.compile", "ratio eager"))
hosts = []
with torch.no_grad():
    for name, fn in cases():
        eager = bench(fn)
        comp_fn = torch.compile(fn)
        comp = bench(comp_fn)
        ours_gpu, ours_host = ours.get(name, (float("nan"), float("nan")))
        print("%-24s %10.2f %12.2f %14.2f %12.3f" % (name, ours_gpu, eager, comp, ours_gpu / eager))
        hosts.append((name, ours_host, host(fn), host(comp_fn)))
print("\nhost time per call, us (one call after the queue drained)")
print("%-24s %10s %12s %14s %12s" % ("case", "linfuse", "torch eager", "torch.compile", "ratio eager"))
for name, o, e, c in hosts:
    print("%-24s %10.2f %12.2f %14.2f %12.3f" % (name, o, e, c, o / e))
