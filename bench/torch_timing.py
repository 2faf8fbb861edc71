"""How every bench/*_vs_torch.py script times PyTorch, the same way `linfuse bench cuda` times
linfuse: GPU time per forward from forwards queued back to back, one synchronize, divided
(median of samples); host time per call from one call timed alone after the queue drained."""
import time

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


def host(fn, samples=20):
    """one call timed alone after the queue has drained: the caller's host time to queue it, us"""
    ts = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2] * 1e6
