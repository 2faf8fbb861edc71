#!/usr/bin/env python3
"""The programs tests/gpu/profile_check.py profiles: the blog's MLP (x [64, 128, 768], hidden 3072,
bf16, GeGLU) in eager or compiled mode, each step a ProfilerStep#N and each forward an "mlp_fwd"
range, both as record_function (torch.profiler sees them) and as NVTX (linfuse profile sees them);
the same MLP replayed as a CUDA graph; a two-rank torchrun step; and programs that end in the ways
a trace must survive.

usage: profile_prog.py mlp eager|compile torch|nvtx [OUT.json]   five steps; torch: torch.profiler
                                                                 (wait 1, warmup 1, active 3) to OUT
       profile_prog.py graph                                     five replays of a captured MLP
       profile_prog.py dist                                      one torchrun rank: matmul + all_reduce
       profile_prog.py loop SECONDS                              the MLP forwards for SECONDS
       profile_prog.py exit-thread                               a few kernels, then exit(3) from a thread
"""
import contextlib
import ctypes
import os
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

DEV, DT = "cuda", torch.bfloat16
B, S, D, H = 64, 128, 768, 3072


def mlp_parts():
    torch.manual_seed(0)
    g = torch.nn.Linear(D, H, bias=False, device=DEV, dtype=DT)
    u = torch.nn.Linear(D, H, bias=False, device=DEV, dtype=DT)
    d = torch.nn.Linear(H, D, bias=False, device=DEV, dtype=DT)
    x = torch.rand(B, S, D, device=DEV, dtype=DT) * 2 - 1
    return x, (lambda t: d(F.gelu(g(t), approximate="tanh") * u(t)))


@contextlib.contextmanager
def both(name):
    """A range torch.profiler sees (record_function) and linfuse profile sees (NVTX)."""
    with record_function(name):
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


def run_mlp(mode, prof, out):
    x, f = mlp_parts()
    fwd = torch.compile(f) if mode == "compile" else f
    with torch.no_grad():
        for _ in range(3):  # compiled and warm before any step
            fwd(x)
        torch.cuda.synchronize()
        if prof == "torch":
            sched = schedule(wait=1, warmup=1, active=3)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                         on_trace_ready=lambda p: p.export_chrome_trace(out)) as p:
                for _ in range(5):
                    with both("mlp_fwd"):
                        fwd(x)
                    torch.cuda.synchronize()
                    p.step()
        else:  # the steps as NVTX ranges, numbered as torch.profiler numbers them
            for i in range(5):
                torch.cuda.nvtx.range_push("ProfilerStep#%d" % i)
                with both("mlp_fwd"):
                    fwd(x)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()


def run_graph():
    x, f = mlp_parts()
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as torch.cuda.graphs asks
            for _ in range(3):
                f(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = f(x)
        torch.cuda.synchronize()
        for i in range(5):
            torch.cuda.nvtx.range_push("ProfilerStep#%d" % i)
            g.replay()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        print("graph replayed: %s" % list(y.shape))


def run_dist():
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    torch.manual_seed(rank)
    x = torch.rand(4096, 4096, device=DEV, dtype=DT)
    w = torch.rand(4096, 4096, device=DEV, dtype=DT)
    for i in range(5):
        torch.cuda.nvtx.range_push("ProfilerStep#%d" % i)
        y = x @ w
        dist.all_reduce(y)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    dist.destroy_process_group()
    print("rank %d done" % rank)


def run_loop(seconds):
    x, f = mlp_parts()
    end = time.time() + seconds
    n = 0
    print("ready", flush=True)
    with torch.no_grad():
        while time.time() < end:
            f(x)
            torch.cuda.synchronize()
            n += 1
    print("forwards: %d" % n)


def run_exit_thread():
    x = torch.ones(1 << 20, device=DEV)
    for _ in range(10):
        x = x * 2
    torch.cuda.synchronize()
    threading.Thread(target=lambda: ctypes.CDLL(None).exit(3)).start()
    time.sleep(30)  # never reached: exit() ends the process from the other thread


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "mlp":
        run_mlp(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif what == "graph":
        run_graph()
    elif what == "dist":
        run_dist()
    elif what == "loop":
        run_loop(float(sys.argv[2]))
    elif what == "exit-thread":
        run_exit_thread()
    else:
        sys.exit(__doc__)
