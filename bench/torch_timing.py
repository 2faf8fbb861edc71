"""What every bench/*_vs_torch.py script shares: running `linfuse bench cuda` and reading its
lines, and timing PyTorch the same way linfuse times itself: GPU time per forward from forwards
queued back to back, one synchronize, divided (median of samples); host time per call from one
call timed alone after the queue drained."""
import re, subprocess, sys, time

import torch


def bench(fn, samples=20, per=50):
    """GPU time per call in us: `per` calls back to back, one synchronize; median of samples"""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / per)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def host(fn, samples=20, cuda=True, before=None):
    """one call timed alone after the queue has drained: the caller's host time to queue it, us
    (median). cuda=False: no queue to drain (the CPU). before: run untimed ahead of each call,
    after the drain (e.g. GPU work queued for the call to wait behind, if it waits)."""
    ts = []
    for _ in range(samples):
        if cuda:
            torch.cuda.synchronize()
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def linfuse_cases(binary, only=None, extra=(), reps=20):
    """Run `linfuse bench cuda` (cases whose names contain `only`, or what `extra` flags ask for,
    such as --mlp), echo it, and return {case: (GPU us per forward, host us per call)}; exits
    with linfuse's error if it fails."""
    cmd = [binary, "bench", "cuda", "--reps", str(reps)] + (["--case", only] if only else []) + list(extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    print(out.stdout, end="", flush=True)
    if out.returncode:
        sys.exit(out.stderr)
    found = re.finditer(r"case=(\S+) linfuse_us_per_forward=([\d.]+) linfuse_host_us_per_call=([\d.]+)", out.stdout)
    return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in found}
