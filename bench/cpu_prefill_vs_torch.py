#!/usr/bin/env python3
"""bf16 on the CPU past a decode step's few tokens (the packed GEMM path, 17 tokens and more):
linfuse.linear(x, w) against F.linear, and a SwiGLU MLP, linfuse.GatedMlp(gate_up, down) against
PyTorch's down(silu(gate(x)) * up(x)), on the same tensors in one process, both on the same
threads (torch.set_num_threads(N), N the cores or --threads). Wall time per call, the median of
--reps calls after warm-up, and linfuse's relative error against float64. Shapes: a Linear of
1024 -> 5632 and the MLP of 1024 -> 2816, at 32, 64, 128 and 512 tokens.
usage (Debian's python3-torch; OPENBLAS_* unset as for every CPU bench):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so \\
      python3 bench/cpu_prefill_vs_torch.py [--tokens 32,64,128,512] [--reps 20]"""
import argparse
import os
import time

import torch

import linfuse

F = torch.nn.functional


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def rel(got, exact):
    return float((got.double() - exact).norm() / exact.norm())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="32,64,128,512")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bf = torch.bfloat16
    K, N, D, H = 1024, 5632, 1024, 2816
    w = (torch.randn(N, K) * K ** -0.5).to(bf)
    gu = (torch.randn(2 * H, D) * D ** -0.5).to(bf)
    dn = (torch.randn(D, H) * H ** -0.5).to(bf)
    g, u = gu[:H], gu[H:]
    mlp = linfuse.GatedMlp(gu, dn, act="silu")
    print("torch %s, %d threads" % (torch.__version__, args.threads), flush=True)
    with torch.no_grad():
        for T in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(T, K).to(bf)
            e = rel(linfuse.linear(x, w), F.linear(x.double(), w.double()))
            tt = median_ms(lambda: F.linear(x, w), args.reps)
            tl = median_ms(lambda: linfuse.linear(x, w), args.reps)
            print("linear %4d x %d -> %d: torch %7.3f ms, linfuse %7.3f ms (%.2fx), rel err %.1e"
                  % (T, K, N, tt, tl, tl / tt, e), flush=True)
            exact = F.linear(F.silu(F.linear(x.double(), g.double())) * F.linear(x.double(), u.double()), dn.double())
            e = rel(mlp(x, variant="gated"), exact)
            tt = median_ms(lambda: F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), dn), args.reps)
            tl = median_ms(lambda: mlp(x, variant="gated"), args.reps)
            print("mlp    %4d x %d -> %d: torch %7.3f ms, linfuse %7.3f ms (%.2fx), rel err %.1e"
                  % (T, D, H, tt, tl, tl / tt, e), flush=True)


if __name__ == "__main__":
    main()
