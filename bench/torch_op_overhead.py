#!/usr/bin/env python3
"""Host time of one linfuse call from PyTorch, layer by layer, where decode in eager mode feels it:
a one-token gated MLP (Llama-3-8B's sizes on a GPU, small ones on the CPU), each call timed alone
after the GPU queue drained (the caller's time to queue it), median of --calls:

  torch eager MLP      down(silu(gate(x)) * up(x)) as transformers writes it (3 Linears, 2 ops)
  ctypes C call        lf_nn_gated_mlp_forward_out on pre-made handles (linfuse's C path alone)
  linfuse.gated_mlp    the plain Python call (DLPack in, torch.empty out, the stream set and put back)
  torch.ops op         torch.ops.linfuse.gated_mlp (the custom op's dispatch added), where torch has it

then the slowest layer under cProfile (the functions that took the time). On a GPU also:
  blocking      each layer's host time with ~20 ms of GPU work queued ahead of it (a call that
                waits for the GPU takes the 20 ms; one that only queues does not)
  again         the layers once more after a torch.profiler session and a CUDA graph capture
                (what the model benchmark runs before its eager decode)
  --model N     a LlamaForCausalLM of N layers at Llama-3-8B sizes, eager decode over a static cache,
                unpatched and patched (variant gated) taking turns (5 rounds): ms per token, each MLP
                forward's host time, the medians, and the patched steps under cProfile
Nothing is asserted: it prints numbers, for bench/RESULTS.md. usage (from the repository root):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so python3 bench/torch_op_overhead.py [--calls 200] [--device cuda] [--model 2] [--trace T.json]"""
import argparse
import cProfile
import ctypes as C
import io
import pstats
import time

import torch
import torch_timing

import linfuse
import linfuse.torch as lt
from linfuse import _dlpack, _lib, check, lib


def host_us(fn, calls, cuda):
    """median host time of one call, us, each after the queue drained (10 calls to warm up first)"""
    for _ in range(10):
        fn()
    return torch_timing.host(fn, calls, cuda)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", help="where to write the torch.profiler trace of one idle and one blocked call per layer")
    ap.add_argument("--model", type=int, default=0, help="layers of a Llama to decode eagerly (GPU only; 0: none)")
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
        once = linfuse.GatedMlp(gu, dn, act="silu")
        rows.append(("linfuse.GatedMlp (weights once)", lambda: once(x, "gated")))
        if lt.HAS_CUSTOM_OP:
            rows.append(("torch.ops.linfuse.gated_mlp", lambda: torch.ops.linfuse.gated_mlp(x, gu, dn, "silu", "gated")))
        times = report(rows, args.calls, cuda, "each alone after the queue drained")
        name, fn = max(rows, key=lambda r: dict(times)[r[0]])
        profiled(name, fn, 50, cuda)
        if cuda:
            print("\nblocking: host us per call with ~20 ms of GPU work queued ahead (median of 20)")
            for name, fn in rows:
                print("  %-32s %9.1f" % (name, blocked_us(fn, 20)))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                for name, fn in rows:
                    with torch.profiler.record_function("idle: " + name):
                        fn()
                    torch.cuda.synchronize()
                    torch.cuda._sleep(int(20e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3))
                    with torch.profiler.record_function("blocked: " + name):
                        fn()
                torch.cuda.synchronize()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                linfuse.gated_mlp(x, gu, dn, act="silu", variant="gated")
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(graph):
                linfuse.gated_mlp(x, gu, dn, act="silu", variant="gated")
            graph.replay()
            torch.cuda.synchronize()
            report(rows, args.calls, cuda, "again, after a torch.profiler session and a CUDA graph capture")
        lib.lf_nn_gated_mlp_free(C.byref(m))
        keep.__exit__(None, None, None)
    if cuda and args.model:
        model_decode(args.model, min(args.calls, 100))


def report(rows, calls, cuda, how):
    times = [(name, host_us(fn, calls, cuda)) for name, fn in rows]
    print("\nhost us per call (median of %d, %s)" % (calls, how))
    for name, us in times:
        print("  %-32s %9.1f" % (name, us))
    return times


def profiled(name, fn, calls, cuda):
    """fn's calls under cProfile: the 15 functions with the most time of their own"""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    if cuda:
        torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
    print("\n%s under cProfile, %d calls:\n%s" % (name, calls, out.getvalue()))


def blocked_us(fn, calls):
    """median host time of fn with ~20 ms of GPU work queued ahead of it"""
    fn()
    cycles = int(20e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate is in kHz
    return torch_timing.host(fn, calls, before=lambda: torch.cuda._sleep(cycles))


def model_decode(layers, steps, rounds=5):
    """Eager decode of a small Llama at Llama-3-8B sizes over a static cache, unpatched and patched
    (variant gated) taking turns, `rounds` rounds of `steps` steps each (the host's speed drifts
    over a run: only turns compare): ms per token (steps queued back to back, one synchronize) and
    each MLP forward's host time; the medians and their ratio; the patched steps under cProfile."""
    import transformers
    from transformers import StaticCache
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=32000, hidden_act="silu", mlp_bias=False,
                                   num_hidden_layers=layers, max_position_embeddings=4096, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(torch.bfloat16).eval()
    steps = min(steps, 900)
    print("\nLlamaForCausalLM, %d layers, 4096 -> 14336, bf16, eager decode over a static cache, unpatched and "
          "patched taking turns, %d steps a turn" % (layers, steps))
    got = {"torch": [], "gated": []}
    with torch.no_grad():
        for r in range(rounds):
            for name in ("torch", "gated"):
                lt.unapply(model)
                if name != "torch":
                    lt.apply(model, variant=name)
                cache = StaticCache(config=cfg, max_cache_len=1024)
                tok = torch.ones(1, 1, dtype=torch.long, device="cuda")
                pos = [torch.tensor([p], device="cuda") for p in range(steps + 40)]

                def step(i):
                    return model(input_ids=tok, past_key_values=cache, cache_position=pos[i], use_cache=True).logits

                for i in range(10):
                    step(i)
                spent = [0.0, 0, 0.0]  # host seconds inside the MLPs' forwards, calls, when the last began
                hooks = []
                for layer in model.model.layers:
                    hooks.append(layer.mlp.register_forward_pre_hook(
                        lambda *a: spent.__setitem__(2, time.perf_counter())))
                    hooks.append(layer.mlp.register_forward_hook(lambda *a: spent.__setitem__(
                        slice(0, 2), [spent[0] + time.perf_counter() - spent[2], spent[1] + 1])))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(10, 10 + steps):
                    step(i)
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) / steps * 1e3
                for h in hooks:
                    h.remove()
                mlp_us = spent[0] / max(1, spent[1]) * 1e6
                got[name].append((ms, mlp_us))
                print("  round %d %-6s %.3f ms/token (an MLP's forward: %.1f us of host time)" % (r, name, ms, mlp_us))
                if name == "gated" and r == rounds - 1:
                    it = iter(range(10 + steps, 10 + steps + 20))
                    profiled("patched decode step", lambda: step(next(it)), 20, True)
    lt.unapply(model)
    med = {n: (sorted(v[0] for v in got[n])[rounds // 2], sorted(v[1] for v in got[n])[rounds // 2]) for n in got}
    print("  median of %d turns: torch %.3f ms/token (MLP %.1f us), patched %.3f ms/token (MLP %.1f us): patched "
          "takes %.3fx torch's time" % (rounds, med["torch"][0], med["torch"][1], med["gated"][0], med["gated"][1],
                                        med["gated"][0] / med["torch"][0]))


if __name__ == "__main__":
    main()
