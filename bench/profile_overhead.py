#!/usr/bin/env python3
"""What `linfuse profile` costs a program, beside what torch.profiler costs it, in one run.

Two PyTorch loops of the blog's eager MLP (dim 768, hidden 3072, bf16, GeGLU): 8 tokens (short
kernels, the host is the bottleneck) and 8192 tokens (x [64, 128, 768]: the GPU is). Each loop is
timed unprofiled, under `linfuse profile` (and with --kernels-only), and inside torch.profiler
(CPU and CUDA activities): forwards back to back, one synchronize, the wall time divided; each
process times REPS samples and the median is kept. Then a C program launching short kernels
(bench/short_kernels.cu) from 1 and 4 threads, plain and under `linfuse profile`: the events a
second the tracer kept (kernels and launch calls in the timed stretch) and what it dropped.
Goals (issue 35): <= 1.25x on the 8-token loop, <= 1.03x on the 8192-token one, >= 1 million
events a second recorded without drops.

usage: bench/profile_overhead.py build/linfuse [WORKDIR]   (build/short_kernels beside the tool:
       cmake --build build --target short_kernels)"""
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

REPS = 5


def worker(tokens, prof, steps):
    """One process: REPS samples of `steps` forwards, printed one a line as 'us_per_step X'."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    g = torch.nn.Linear(768, 3072, bias=False, device=dev, dtype=dt)
    u = torch.nn.Linear(768, 3072, bias=False, device=dev, dtype=dt)
    d = torch.nn.Linear(3072, 768, bias=False, device=dev, dtype=dt)
    shape = (1, 8, 768) if tokens == 8 else (tokens // 128, 128, 768)
    x = torch.rand(*shape, device=dev, dtype=dt) * 2 - 1

    def loop():
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.cuda.nvtx.range_push("timed")
        for _ in range(steps):
            d(F.gelu(g(x), approximate="tanh") * u(x))
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        return (time.perf_counter() - t) * 1e6 / steps

    with torch.no_grad():
        for _ in range(50):
            d(F.gelu(g(x), approximate="tanh") * u(x))
        for _ in range(REPS):
            if prof == "torch":
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                    us = loop()
            else:
                us = loop()
            print("us_per_step %.3f" % us, flush=True)


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def recorded(trace_path, range_name):
    """Kernels and calls kept inside the NVTX ranges named range_name, a second of them, and the
    trace's dropped count."""
    t = load(trace_path)
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation" and e["name"] == range_name]
    if not spans:
        return 0, 0.0, t.get("linfuse_dropped_events", 0)
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    n = sum(1 for e in ev if e.get("cat") in ("kernel", "cuda_runtime", "cuda_driver") and lo <= e["ts"] <= hi)
    busy = sum(b - a for a, b in spans) / 1e6 / max(1, len(set(e["tid"] for e in ev if e.get("name") == range_name)))
    return n, n / busy if busy > 0 else 0.0, t.get("linfuse_dropped_events", 0)


def run(cmd, env=None):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t
    if p.returncode != 0:
        print("FAILED (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p, wall


MODES = ("plain", "linfuse", "linfuse --kernels-only", "torch.profiler")


def loops(binary, work):
    """Each loop in each mode, the modes taking turns, twice: the host's speed drifts between
    processes (seen: the same unprofiled loop at 77 and at 108 us a step), and turns spread it."""
    me = os.path.abspath(__file__)
    rows = []
    for tokens, steps in ((8, 4000), (8192, 1000)):
        samples = {m: [] for m in MODES}
        for rnd in (1, 2):
            for mode in MODES:
                cmd = [sys.executable, me, "--worker", str(tokens), "torch" if mode == "torch.profiler" else "none",
                       str(steps)]
                trace = os.path.join(work, "loop_%d_%s_%d.json" % (tokens, mode.split()[-1].strip("-"), rnd))
                if mode.startswith("linfuse"):
                    cmd = [binary, "profile", "--row-limit", "0", "-o", trace] + mode.split()[1:] + ["--"] + cmd
                p, wall = run(cmd)
                us = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("us_per_step ")]
                samples[mode] += us
                extra = ""
                if mode.startswith("linfuse") and os.path.exists(trace):
                    n, rate, dropped = recorded(trace, "timed")
                    extra = "  %d events kept in the timed loops (%.0f/s), %d dropped" % (n, rate, dropped)
                print("%5d tokens  round %d  %-24s samples %s us/step  (process %.1f s)%s" % (
                    tokens, rnd, mode, " ".join("%.1f" % v for v in us), wall, extra), flush=True)
        base = statistics.median(samples["plain"]) if samples["plain"] else float("nan")
        for mode in MODES:
            med = statistics.median(samples[mode]) if samples[mode] else float("nan")
            print("%5d tokens  %-24s median %9.2f us/step  %6.3fx" % (tokens, mode, med, med / base), flush=True)
            rows.append((tokens, mode, med / base))
    return rows


def calls(binary, work):
    """What one CUDA call that launches nothing (cudaGetDevice) costs, plain and traced: a framework
    makes dozens a step, and CUPTI sees each one."""
    me = os.path.abspath(__file__)
    for mode in ("plain", "linfuse", "linfuse --kernels-only"):
        cmd = [sys.executable, me, "--calls"]
        if mode != "plain":
            cmd = [binary, "profile", "--row-limit", "0", "-o", os.path.join(work, "calls.json")] + mode.split()[1:] + \
                ["--"] + cmd
        p, _ = run(cmd)
        print("cudaGetDevice, %-24s %s" % (mode, p.stdout.strip()), flush=True)


def calls_worker():
    import ctypes
    import torch
    torch.zeros(1, device="cuda")
    rt = ctypes.CDLL("libcudart.so.13")
    dev = ctypes.c_int()
    n = 1000000
    t = time.perf_counter()
    for _ in range(n):
        rt.cudaGetDevice(ctypes.byref(dev))
    loop = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n):
        pass
    empty = time.perf_counter() - t
    print("%.0f ns a call" % ((loop - empty) * 1e9 / n))


def short_kernels(binary, work):
    prog = os.path.join(os.path.dirname(binary), "short_kernels")
    if not os.path.exists(prog):
        print("short_kernels: %s not built (cmake --build build --target short_kernels): skipped" % prog)
        return []
    rows = []
    for threads in (1, 4):
        n = 200000 // threads
        plain, _ = run([prog, str(n), str(threads)])
        trace = os.path.join(work, "short_kernels_%d.json" % threads)
        prof, wall = run([binary, "profile", "--row-limit", "0", "-o", trace, "--", prog, str(n), str(threads)])

        def per_launch(p):
            for l in p.stdout.splitlines():
                if l.startswith("short_kernels:"):
                    return float(l.split(" us a launch")[0].split()[-1])
            return float("nan")
        a, b = per_launch(plain), per_launch(prof)
        kept, rate, dropped = recorded(trace, "launches") if os.path.exists(trace) else (0, 0.0, -1)
        print("short kernels, %d thread%s: %.3f -> %.3f us a launch (%.3fx); %d events kept, %.2f million/s, "
              "%d dropped (process %.1f s)" % (threads, "s" if threads > 1 else "", a, b, b / a, kept, rate / 1e6,
                                               dropped, wall), flush=True)
        rows.append((threads, b / a, rate, dropped))
    return rows


def main():
    binary = os.path.abspath(sys.argv[1])
    work = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "profile-overhead")
    os.makedirs(work, exist_ok=True)
    subprocess.run(["nvidia-smi", "-L"])
    print("\nwall time per step (%d samples a process, two processes a mode); ratio to the unprofiled run" % REPS)
    rows = loops(binary, work)
    print()
    calls(binary, work)
    print()
    sk = short_kernels(binary, work)
    print("\ngoals: 8 tokens <= 1.25x, 8192 tokens <= 1.03x, >= 1 million events/s without drops")
    for tokens, mode, r in rows:
        if mode == "linfuse":
            goal = 1.25 if tokens == 8 else 1.03
            print("  %5d tokens: linfuse profile %.3fx (goal %.2fx): %s" % (tokens, r, goal, "met" if r <= goal else
                                                                            "NOT met"))
    for threads, r, rate, dropped in sk:
        print("  short kernels, %d threads: %.2f million events/s, %d dropped: %s" % (
            threads, rate / 1e6, dropped, "met" if rate >= 1e6 and dropped == 0 else "NOT met"))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--calls":
        calls_worker()
    else:
        main()
