#!/usr/bin/env python3
"""The FP8 MLP, linfuse against PyTorch's own FP8 path on the same GPU, in one run.

linfuse: the fp8 variant (x per token -> e4m3, the gated GEMM in FP8 writing h in e4m3 with 1 x 128
block scales from its epilogue, down through cuBLASLt's block-scaled FP8 GEMM: three kernels),
beside its bf16 gated variant; and the gated GEMM alone in FP8 against itself in bf16 and against
cuBLASLt's FP8 GEMM over [Wg; Wu].
PyTorch: the bf16 MLP (eager, torch.compile, max-autotune-no-cudagraphs), and the same recipe in
FP8 with torch._scaled_mm and row-wise scales (weights per output channel, quantized once;
activations per token at run time), eager and compiled. Both sides timed the same way (forwards
back to back, one synchronize, median of 20). usage: bench/fp8_vs_torch.py build/linfuse [blog] [big]
(both shapes unless named: PyTorch's compiles take minutes at each)"""
import sys, time

import torch
import torch.nn.functional as F

from torch_timing import bench, linfuse_cases

shapes = {"blog": (64, 128, 768, 3072), "big": (8, 1024, 4096, 11008)}
runs = [shapes[k] for k in (sys.argv[2:] or shapes)]
ours = {}
for which in ["fp8_gated_", "fp8_bf16_gated_", "fp8_concat_"] + ["mlp_%dx%dx%dx%d" % s for s in runs]:
    ours.update({k: v[0] for k, v in linfuse_cases(sys.argv[1], which).items()})
nan = float("nan")
dev, dt, f8 = "cuda", torch.bfloat16, torch.float8_e4m3fn
torch.manual_seed(0)


def rowwise(t):
    """t (rows, cols) -> e4m3 codes and f32 scales (rows, 1): max |row| / 448, as linfuse's"""
    s = t.abs().amax(dim=1, keepdim=True).float() / 448.0
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (t.float() / s).to(f8), s


def rel_rms(y, ref):
    return ((y.double() - ref) ** 2).sum().sqrt().item() / (ref ** 2).sum().sqrt().item()


print("\nGPU time per forward, us (back-to-back forwards, one synchronize, median of 20)", flush=True)
with torch.no_grad():
    for bs, seq, d, h in runs:
        tag, tokens = "%dx%dx%dx%d" % (bs, seq, d, h), bs * seq
        g = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        u = torch.nn.Linear(d, h, bias=False, device=dev, dtype=dt)
        dn = torch.nn.Linear(h, d, bias=False, device=dev, dtype=dt)
        x = torch.rand(bs, seq, d, device=dev, dtype=dt) * 2 - 1
        (gq, gs), (uq, us), (dq, ds) = rowwise(g.weight), rowwise(u.weight), rowwise(dn.weight)

        def mlp(x=x):
            return dn(F.gelu(g(x), approximate="tanh") * u(x))

        def mlp_fp8(x=x):
            x2 = x.reshape(-1, d)
            xq, xs = rowwise(x2)
            a = torch._scaled_mm(xq, gq.t(), scale_a=xs, scale_b=gs.t(), out_dtype=dt)
            b = torch._scaled_mm(xq, uq.t(), scale_a=xs, scale_b=us.t(), out_dtype=dt)
            hq, hs = rowwise(F.gelu(a, approximate="tanh") * b)
            return torch._scaled_mm(hq, dq.t(), scale_a=hs, scale_b=ds.t(), out_dtype=dt).reshape(bs, seq, d)

        bf16_t = {"torch eager": bench(mlp)}
        bf16_t["torch.compile"] = bench(torch.compile(mlp))
        torch._dynamo.reset()
        bf16_t["max-autotune-no-cudagraphs"] = bench(torch.compile(mlp, mode="max-autotune-no-cudagraphs"))
        torch._dynamo.reset()
        fp8_t = {"torch fp8 eager": bench(mlp_fp8)}
        t0 = time.perf_counter()
        fp8_t["torch fp8 torch.compile"] = bench(torch.compile(mlp_fp8))
        torch._dynamo.reset()
        fp8_t["torch fp8 max-autotune-no-cudagraphs"] = bench(torch.compile(mlp_fp8, mode="max-autotune-no-cudagraphs"))
        t1 = time.perf_counter()
        torch._dynamo.reset()
        # PyTorch's FP8 forward against float64, to set beside linfuse's (test_cuda prints its own)
        x64 = x.double().reshape(-1, d)
        ref = F.gelu(x64 @ g.weight.double().t(), approximate="tanh") * (x64 @ u.weight.double().t())
        ref = (ref @ dn.weight.double().t()).reshape(bs, seq, d)
        acc = (rel_rms(mlp_fp8(), ref), rel_rms(mlp(), ref))
        best_bf16 = min(bf16_t, key=bf16_t.get)
        best_fp8 = min(fp8_t, key=fp8_t.get)
        ours_fp8, ours_gated = ours.get("mlp_%s_fp8" % tag, nan), ours.get("mlp_%s_gated" % tag, nan)
        print("\nMLP %s (torch FP8 compiles took %.0f s)" % (tag, t1 - t0))
        print("%-40s %10s %12s %12s" % ("forward", "us", "vs bf16 best", "vs fp8 best"))
        for name, t in [("linfuse fp8 (3 kernels)", ours_fp8), ("linfuse gated bf16 (2 kernels)", ours_gated)] + \
                list(bf16_t.items()) + list(fp8_t.items()):
            print("%-40s %10.2f %12.3f %12.3f" % (name, t, t / bf16_t[best_bf16], t / fp8_t[best_fp8]))
        print("best PyTorch bf16: %s; best PyTorch FP8: %s" % (best_bf16, best_fp8))
        print("goals: linfuse fp8 / best torch fp8 = %.3f (<= 0.85)%s" % (
            ours_fp8 / fp8_t[best_fp8],
            "; / best torch bf16 = %.3f (<= 0.6)" % (ours_fp8 / bf16_t[best_bf16]) if d == 4096 else ""))
        print("PyTorch's forwards against float64: fp8 rel RMS %.2e, bf16 %.2e" % acc, flush=True)

# the gated GEMM alone: FP8 against bf16 (throughput ratio, goal >= 1.6 at 8192 x 4096 -> 22016) and
# against cuBLASLt's FP8 GEMM over [Wg; Wu] (same FLOPs, no epilogue)
print("\nthe gated GEMM alone (x already e4m3)")
for name in sorted(ours):
    if name.startswith("fp8_gated_"):
        shape = name[len("fp8_gated_"):]
        t8, tb, tc = ours[name], ours.get("fp8_bf16_gated_" + shape, nan), ours.get("fp8_concat_" + shape, nan)
        T, D, H = (int(v) for v in shape.split("x"))
        tf = 2.0 * T * D * 2 * H / 1e6
        print("  %-18s fp8 %9.2f us (%4.0f TFLOP/s)  bf16 %9.2f us (%4.0f)  cuBLASLt fp8 %9.2f us (%4.0f)  "
              "fp8 speedup %.2fx  fp8 / cuBLASLt fp8 %.3f" % (shape, t8, tf / t8, tb, tf / tb, tc, tf / tc, tb / t8, t8 / tc))
