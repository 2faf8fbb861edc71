#!/usr/bin/env python3
"""Host time of one linfuse call from PyTorch, layer by layer, where decode in eager mode feels it:
a one-token gated MLP (Llama-3-8B's sizes on a GPU, small ones on the CPU), each call timed alone
after the GPU queue drained (the caller's time to queue it), median of --calls:

  torch eager MLP      down(silu(gate(x)) * up(x)) as transformers writes it (3 Linears, 2 ops)
  ctypes C call        lf_nn_gated_mlp_forward_out on pre-made handles (linfuse's C path alone)
  linfuse.gated_mlp    the plain Python call (DLPack in, torch.empty out, the stream set and put back)
  torch.ops op         torch.ops.linfuse.gated_mlp (the custom op's dispatch added), where torch has it

then the slowest layer under cProfile (the functions that took the time). Nothing is asserted: it
prints numbers, for bench/RESULTS.md. usage (from the repository root):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so python3 bench/torch_op_overhead.py [--calls 200] [--device cuda]"""
import argparse
import cProfile
import ctypes as C
import io
import pstats
import time

import torch

import linfuse
import linfuse.torch as lt
from linfuse import _dlpack, _lib, check, lib


def host_us(fn, calls, cuda):
    """median host time of one call, us, each after the queue drained"""
    for _ in range(10):
        fn()
    ts = []
    for _ in range(calls):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    D, H, dt = (4096, 14336, torch.bfloat16) if cuda else (256, 512, torch.float32)
    torch.manual_seed(0)
    x = torch.randn(1, 1, D, device=args.device, dtype=dt)
    gu = torch.randn(2 * H, D, device=args.device, dtype=dt) * D ** -0.5
    dn = torch.randn(D, H, device=args.device, dtype=dt) * H ** -0.5
    g, u = gu[:H], gu[H:]
    F = torch.nn.functional
    print("torch %s, linfuse %s, %s, x %s %s, weights %d -> %d" % (torch.__version__, linfuse.__version__,
                                                                   args.device, tuple(x.shape), dt, D, H))
    rows = []
    with torch.no_grad():
        rows.append(("torch eager MLP", lambda: F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), dn)))
        # the C call alone, on handles made once (what every Python layer adds to)
        y = torch.empty_like(x)
        m = _lib.GatedMlp()
        keep = _dlpack.Handles(lib, check)
        hgu, hdn = keep.take(gu, "gate_up"), keep.take(dn, "down")
        check(lib.lf_nn_gated_mlp_from_weights(C.byref(m), keep.give(hgu), keep.give(hdn), _lib.ACT["silu"]), "mlp")
        v = _lib.VARIANT["gated"]
        need = C.c_size_t()
        check(lib.lf_nn_gated_mlp_workspace(C.byref(m), v, 1, C.byref(need)), "workspace")
        ws = torch.empty(max(1, need.value // x.element_size() + 1), device=args.device, dtype=dt)
        hx, hy, hw = keep.take(x, "x"), keep.take(y, "y"), keep.take(ws, "ws")
        kind = linfuse.ops._Kind(x)

        def c_call():
            with kind.running():
                check(lib.lf_nn_gated_mlp_forward_out(C.byref(m), v, hx, hy, hw), "forward_out")
        rows.append(("ctypes C call (stream set)", c_call))
        rows.append(("linfuse.gated_mlp", lambda: linfuse.gated_mlp(x, gu, dn, act="silu", variant="gated")))
        if lt.HAS_CUSTOM_OP:
            rows.append(("torch.ops.linfuse.gated_mlp", lambda: torch.ops.linfuse.gated_mlp(x, gu, dn, "silu", "gated")))
        times = [(name, host_us(fn, args.calls, cuda)) for name, fn in rows]
        print("\nhost us per call (median of %d, each alone after the queue drained)" % args.calls)
        for name, us in times:
            print("  %-32s %9.1f" % (name, us))
        name, fn = max(rows, key=lambda r: dict(times)[r[0]])
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            fn()
        prof.disable()
        if cuda:
            torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
        print("\n%s under cProfile, 50 calls:\n%s" % (name, out.getvalue()))
        lib.lf_nn_gated_mlp_free(C.byref(m))
        keep.__exit__(None, None, None)


if __name__ == "__main__":
    main()
