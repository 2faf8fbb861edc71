#!/usr/bin/env python3
"""The GeGLU MLP split over the GPUs (Megatron-LM's tensor parallel: gate and up by rows, down by
columns, one all-reduce), linfuse against PyTorch, in one run on one machine.

Run under torchrun, one process per GPU:
    torchrun --nproc-per-node 2 bench/tp_vs_torch.py build/linfuse
Rank 0 first runs `linfuse bench tp` (one thread per GPU, NCCL: each variant with and without
overlap, and compiled) and `linfuse bench cuda` for linfuse's own one-GPU times, while the other
ranks wait on a CPU (gloo) barrier so no GPU is busy; then every rank times PyTorch's split of
the same MLP over NCCL: eager, and torch.compile of each rank's local part with the all-reduce
after it; rank 0 also times PyTorch on one GPU. Timed as every bench/*_vs_torch.py is: forwards
queued back to back, one synchronize, divided, median of 20 samples (torch_timing.py).
Efficiency is one GPU's time over N times the N-GPU time."""
import datetime, os, re, subprocess, sys, time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from torch_timing import bench

SHAPES = ((64, 128, 768, 3072), (8, 1024, 4096, 11008), (1, 16, 4096, 11008))
nan = float("nan")


def linfuse(binary, *args):
    out = subprocess.run([binary, "bench", *args, "--reps", "20"], capture_output=True, text=True, timeout=400)
    print(out.stdout, end="", flush=True)
    if out.returncode:
        sys.exit(out.stderr)
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"case=(\S+) linfuse_us_per_forward=([\d.]+)", out.stdout)}


def main():
    binary = os.path.abspath(sys.argv[1])
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    cpu = dist.new_group(backend="gloo", timeout=datetime.timedelta(minutes=30))
    ours = {}
    if rank == 0:
        ours.update(linfuse(binary, "tp", "--tp", str(world)))
        ours.update(linfuse(binary, "cuda", "--case", "mlp_"))
    dist.barrier(group=cpu)
    dt = torch.bfloat16
    rows = {}
    with torch.no_grad():
        for b, s, d, h in SHAPES:
            tag = "%dx%dx%dx%d" % (b, s, d, h)
            g = torch.Generator(device="cuda").manual_seed(0)
            wg = torch.randn(h, d, device="cuda", dtype=dt, generator=g) * 0.02
            wu = torch.randn(h, d, device="cuda", dtype=dt, generator=g) * 0.02
            wd = torch.randn(d, h, device="cuda", dtype=dt, generator=g) * 0.02
            x = torch.rand(b * s, d, device="cuda", dtype=dt, generator=g) * 2 - 1
            hs = h // world
            wg_r, wu_r = wg[rank * hs:(rank + 1) * hs].contiguous(), wu[rank * hs:(rank + 1) * hs].contiguous()
            wd_r = wd[:, rank * hs:(rank + 1) * hs].contiguous()

            def local(x=x):
                return F.linear(F.gelu(F.linear(x, wg_r), approximate="tanh") * F.linear(x, wu_r), wd_r)

            compiled = torch.compile(local)

            def tp_eager():
                y = local()
                dist.all_reduce(y)
                return y

            def tp_compiled():
                y = compiled()
                dist.all_reduce(y)
                return y

            t = {"torch TP eager": bench(tp_eager)}
            t0 = time.perf_counter()
            t["torch TP compile"] = bench(tp_compiled)
            t["_compile_s"] = time.perf_counter() - t0
            torch._dynamo.reset()
            dist.barrier(group=cpu)
            if rank == 0:  # one GPU, the whole MLP, while the others wait off the GPU
                def full(x=x):
                    return F.linear(F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd)
                t["torch 1 GPU eager"] = bench(full)
                t["torch 1 GPU compile"] = bench(torch.compile(full))
                torch._dynamo.reset()
            dist.barrier(group=cpu)
            rows[tag] = t
    if rank == 0:
        print("\nGPU time per forward, us, %d GPUs (back-to-back forwards, one synchronize, median of 20)" % world)
        for b, s, d, h in SHAPES:
            tag = "%dx%dx%dx%d" % (b, s, d, h)
            t = rows[tag]
            torch_tp = min(t["torch TP eager"], t["torch TP compile"])
            mine = {k[len("tp%d_mlp_%s_" % (world, tag)):]: v for k, v in ours.items()
                    if k.startswith("tp%d_mlp_%s_" % (world, tag))}
            one = {k: v for k, v in ours.items() if k.startswith("mlp_" + tag) or k == "compiled_mlp_" + tag}
            lin_one = min(one.values()) if one else nan
            best_mine = min(mine.values()) if mine else nan
            print("\nMLP %s bf16 (torch.compile of the local part took %.0f s)" % (tag, t["_compile_s"]))
            print("%-40s %10s %14s %12s" % ("forward", "us", "vs torch TP", "efficiency"))
            for name, us in sorted(mine.items(), key=lambda kv: kv[1]):
                print("%-40s %10.2f %14.3f %12.3f" % ("linfuse TP " + name, us, us / torch_tp, lin_one / (world * us)))
            print("%-40s %10.2f %14.3f %12.3f" % ("torch TP eager", t["torch TP eager"], t["torch TP eager"] / torch_tp,
                                                  t["torch 1 GPU eager"] / (world * t["torch TP eager"])))
            print("%-40s %10.2f %14.3f %12.3f" % ("torch TP compile", t["torch TP compile"],
                                                  t["torch TP compile"] / torch_tp,
                                                  t["torch 1 GPU compile"] / (world * t["torch TP compile"])))
            for name, us in sorted(one.items()):
                print("%-40s %10.2f" % ("linfuse 1 GPU " + name, us))
            print("%-40s %10.2f" % ("torch 1 GPU eager", t["torch 1 GPU eager"]))
            print("%-40s %10.2f" % ("torch 1 GPU compile", t["torch 1 GPU compile"]))
            print("best linfuse TP / best torch TP: %.3f; best linfuse TP / best linfuse 1 GPU: %.3f; "
                  "linfuse efficiency %.3f" % (best_mine / torch_tp, best_mine / lin_one, lin_one / (world * best_mine)),
                  flush=True)
    dist.barrier(group=cpu)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
