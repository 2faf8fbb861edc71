#!/usr/bin/env python3
"""A decode step's Linears (1 to 16 tokens, bf16, no bias) through linfuse.linear against PyTorch's
F.linear, at the projection shapes of common models: GPU time per call, each side captured in a
CUDA graph of --per calls and replayed (median of --samples replays), so launch and Python time are
not counted. Which kernel linfuse runs depends on LINFUSE_GEMV_KERNEL (auto, tma, mma), read once a
process: run the script once per setting, in turns, and compare the ratios to PyTorch.

Prints one line per shape: tokens, K -> N, PyTorch us, linfuse us, ratio (linfuse / PyTorch).
Nothing is asserted. usage (from the repository root, a CUDA build in build/):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so LINFUSE_GEMV_KERNEL=tma \\
      python3 bench/linear_decode_vs_torch.py [--tokens 1,8,16] [--shapes 4096x14336,...]"""
import argparse
import os

import torch

import linfuse

# K x N: Llama-3-8B (q/o, k/v, qkv, gate or up, down, gate and up, lm_head), Qwen2.5-7B (up, down,
# lm_head), Llama-2-13B (gate, down, o), Qwen2.5-1.5B (up, down), Qwen2.5-0.5B (up, down)
SHAPES = ("4096x4096,4096x1024,4096x6144,4096x14336,14336x4096,4096x28672,4096x128256,"
          "3584x18944,18944x3584,3584x152064,5120x13824,13824x5120,5120x5120,"
          "1536x8960,8960x1536,896x4864,4864x896")


def graph_us(fn, per, samples):
    """GPU us per call of fn: per calls captured in one CUDA graph, replayed; median of samples."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per):
            fn()
    for _ in range(3):
        g.replay()
    ts = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end) * 1e3 / per)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="1,8,16")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--per", type=int, default=20)
    ap.add_argument("--samples", type=int, default=30)
    args = ap.parse_args()
    print("LINFUSE_GEMV_KERNEL=%s, torch %s, %s" % (os.environ.get("LINFUSE_GEMV_KERNEL", "auto"), torch.__version__,
                                                  torch.cuda.get_device_name()), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        w = torch.randn((N, K), device="cuda", generator=gen).to(torch.bfloat16)
        for m in (int(t) for t in args.tokens.split(",")):
            x = torch.randn((m, K), device="cuda", generator=gen).to(torch.bfloat16)
            ref = torch.nn.functional.linear(x.double(), w.double())
            got = linfuse.linear(x, w)
            err = float((got.double() - ref).abs().max() / ref.abs().max())
            t_torch = graph_us(lambda: torch.nn.functional.linear(x, w), args.per, args.samples)
            t_lf = graph_us(lambda: linfuse.linear(x, w), args.per, args.samples)
            print("%2d x %5d -> %6d  torch %8.2f us  linfuse %8.2f us  ratio %.3f  (rel err %.1e)"
                  % (m, K, N, t_torch, t_lf, t_lf / t_torch, err), flush=True)
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
