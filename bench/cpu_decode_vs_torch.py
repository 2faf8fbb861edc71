#!/usr/bin/env python3
"""A gated MLP at a decode step's few tokens on the CPU: linfuse.gated_mlp (variant "gated")
against PyTorch's down(silu(gate(x)) * up(x)) on the same tensors, in one process, in f32 and
bf16: wall time per call (the mean of back-to-back calls after warm-up), and linfuse's relative
error against PyTorch's result in float64. Shapes: a small MLP (256 -> 512, where the per-call
cost shows), 1024 -> 2816 and 2048 -> 8192 at 1, 4 and 5 tokens (16 and fewer take the CPU GEMM's
unpacked dot products, bf16 ones through AVX512_BF16 where the CPU has it).
usage (Debian's python3-torch; OPENBLAS_* unset as for every CPU bench):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so \\
      python3 bench/cpu_decode_vs_torch.py"""
import time

import torch

import linfuse
F = torch.nn.functional
torch.manual_seed(0)
for dt in (torch.float32, torch.bfloat16):
    for D, H, T in ((256, 512, 1), (1024, 2816, 1), (1024, 2816, 4), (2048, 8192, 1), (2048, 8192, 4),
                    (2048, 8192, 5)):
        x = torch.randn(T, D).to(dt)
        gu = (torch.randn(2 * H, D) * D ** -0.5).to(dt)
        dn = (torch.randn(D, H) * H ** -0.5).to(dt)
        g, u = gu[:H], gu[H:]
        with torch.no_grad():
            exact = F.linear(F.silu(F.linear(x.double(), g.double())) * F.linear(x.double(), u.double()), dn.double())
            got = linfuse.gated_mlp(x, gu, dn, act="silu", variant="gated")
            err = float((got.double() - exact).norm() / exact.norm())
            res = []
            for fn in (lambda: F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), dn),
                       lambda: linfuse.gated_mlp(x, gu, dn, act="silu", variant="gated")):
                for _ in range(5):
                    fn()
                n = 50 if D > 1000 else 2000
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                res.append((time.perf_counter() - t0) / n * 1e6)
        print("%-8s %5d -> %5d, %d tokens: torch %8.1f us, linfuse gated %8.1f us (%.2fx), rel err %.1e"
              % (str(dt)[6:], D, H, T, res[0], res[1], res[1] / res[0], err), flush=True)
