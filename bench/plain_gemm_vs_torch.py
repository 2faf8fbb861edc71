#!/usr/bin/env python3
"""Plain bf16 GEMMs (x (M, K) . W^T, W (N, K), no bias: an MLP's down projection) through
linfuse.linear against PyTorch's F.linear, linfuse once per LINFUSE_PLAIN_GEMM setting (cublaslt,
pingpong: the Hopper ping-pong kernel's plain form, auto: the rule's choice). GPU time per call:
each side captured in a CUDA graph of --per calls and replayed (median of --samples replays), so
launch and Python time are not counted; the settings are read at each call, so one process
captures all of them, shape by shape, in --rounds turns.

Prints per shape and turn: PyTorch us, linfuse's us per setting, and pingpong / PyTorch, auto /
PyTorch; the error of pingpong's result against float64 (relative to the largest output). Nothing
is asserted. usage (from the repository root, a CUDA build in build/):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so python3 bench/plain_gemm_vs_torch.py \\
      [--tokens 512,8192] [--shapes 3072x768,...] [--rounds 2]"""
import argparse
import os

import torch

import linfuse

# K x N: down projections (the blog MLP, Qwen2.5-0.5B, -1.5B, -7B, Llama-2-7B, Llama-3-8B,
# Llama-2-13B) and two others (an up projection, an attention output)
SHAPES = "3072x768,4864x896,8960x1536,18944x3584,11008x4096,14336x4096,13824x5120,768x3072,4096x4096"


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


def lf_us(setting, x, w, per, samples):
    os.environ["LINFUSE_PLAIN_GEMM"] = setting
    try:
        return graph_us(lambda: linfuse.linear(x, w), per, samples)
    finally:
        del os.environ["LINFUSE_PLAIN_GEMM"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="512,1024,2048,4096,8192")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--per", type=int, default=10)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print("torch %s, %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        w = torch.randn((N, K), device="cuda", generator=gen).to(torch.bfloat16)
        for m in (int(t) for t in args.tokens.split(",")):
            x = torch.randn((m, K), device="cuda", generator=gen).to(torch.bfloat16)
            ref = torch.nn.functional.linear(x.double(), w.double())
            os.environ["LINFUSE_PLAIN_GEMM"] = "pingpong"
            got = linfuse.linear(x, w)
            del os.environ["LINFUSE_PLAIN_GEMM"]
            err = float((got.double() - ref).abs().max() / ref.abs().max())
            for r in range(args.rounds):
                t = {"torch": graph_us(lambda: torch.nn.functional.linear(x, w), args.per, args.samples)}
                for s in ("cublaslt", "pingpong", "auto"):
                    t[s] = lf_us(s, x, w, args.per, args.samples)
                print("%5d x %5d -> %5d turn %d  torch %8.2f  cublaslt %8.2f  pingpong %8.2f  auto %8.2f us"
                      "  pingpong/torch %.3f  auto/torch %.3f  (err %.1e)"
                      % (m, K, N, r + 1, t["torch"], t["cublaslt"], t["pingpong"], t["auto"],
                         t["pingpong"] / t["torch"], t["auto"] / t["torch"], err), flush=True)
            del x
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
