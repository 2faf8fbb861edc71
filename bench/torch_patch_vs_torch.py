#!/usr/bin/env python3
"""A transformers model with linfuse's MLP patched in (linfuse.torch.apply) against the same
model unpatched, each in its best mode, in one run (issue 34's benchmarks).

Model: LlamaForCausalLM at Llama-3-8B's layer sizes (4096 -> 14336 silu MLP, 32 heads, 8 KV heads,
vocab 128256), 4 layers, random weights (transformers' init, seed 0), bf16, batch 1. Three
configurations of that one model: torch (unpatched), linfuse gated, linfuse fp8 (FP8 weights
quantized once by apply). Each is first checked against the unpatched model's logits on 256
tokens (relative RMS error <= 0.03 gated, <= 0.15 fp8) and is not timed if it fails.

  prefill  8192 tokens, use_cache=False, logits of the last token only (logits_to_keep=1, as
           generate's prefill), eager and torch.compile (default mode, fullgraph): ms per forward
           (median of --repeat forwards queued back to back, after warm-up), tokens/s; each
           configuration's best mode; speedup = torch's best / linfuse's best (goals: gated >= 1.04,
           fp8 >= 1.3).
  decode   greedy, batch 1, over a StaticCache of 1024 tokens: a 512-token prompt prefilled, then
           --decode-steps steps of one token (positions 520 on, after 8 warm-up steps), each step
           the model's forward and the argmax under torch.compile(mode="reduce-overhead",
           fullgraph=True): CUDA graphs; ms per token, tokens/s; speedup against torch's (goal
           >= 1.08). Eager decode (32 steps) is printed beside it.
  MLP share, from profiler traces: one eager prefill and 8 eager decode steps under
           torch.profiler with each MLP's forward in a record_function("mlp"); the GPU kernel
           time launched inside those ranges over all GPU kernel time of the step.
           And by ablation, in every mode (--no-ablation skips it): 1 - t(MLPs replaced by the
           identity) / t(configuration), which covers the compiled and CUDA-graph modes a trace
           cannot split by module.

Every run's numbers are printed as they come, then a table and the ratios; the numbers also go
to OUT/torch_patch_vs_torch.json with the traces. Exit status 1 if a configuration failed its
check or a run failed. About 4-5 minutes on an H200 (8 torch.compile runs; --no-ablation: 6).

usage (from the repository root, with a CUDA build in build/):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so LD_LIBRARY_PATH=build:/usr/local/cuda/lib64 \\
      python3 bench/torch_patch_vs_torch.py [--layers 4] [--prefill 8192] [--decode-steps 256] \\
      [--repeat 10] [--out build/torch-bench] [--no-ablation] [--configs torch,gated,fp8] [--cprofile]"""
import argparse
import bisect
import contextlib
import inspect
import json
import os
import sys
import time
import traceback

import torch

import linfuse
import linfuse.torch as lt

CACHE, PROMPT, WARM_STEPS = 1024, 512, 8
RESULTS = {}
FAILED = []


def say(text):
    print(text, flush=True)


def build(layers):
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=128256, hidden_act="silu", mlp_bias=False,
                                   tie_word_embeddings=False, num_hidden_layers=layers, max_position_embeddings=16384,
                                   pad_token_id=0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    return cfg, model


def keep_last_kwargs(model):
    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


def timed(fn, repeat, warm=2):
    """ms per call: `repeat` calls queued back to back, one synchronize (median of 3 such samples)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / repeat * 1e3)
    return sorted(samples)[1]


def mlps(model):
    return [layer.mlp for layer in model.model.layers]


@contextlib.contextmanager
def mlp_ranges(model):
    """Each MLP's forward inside record_function("mlp") (an instance attribute, removed after)."""
    for m in mlps(model):
        inner = m.forward

        def wrapped(x, inner=inner):
            with torch.profiler.record_function("mlp"):
                return inner(x)
        m.forward = wrapped
    try:
        yield
    finally:
        for m in mlps(model):
            del m.forward


@contextlib.contextmanager
def without_mlps(model):
    """The ablation: every MLP's forward returns its input (no kernel)."""
    for m in mlps(model):
        m.forward = lambda x: x
    try:
        yield
    finally:
        for m in mlps(model):
            del m.forward


def mlp_share(path):
    """(GPU kernel time launched inside "mlp" ranges) / (all GPU kernel time) in a Kineto trace."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ranges = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == "mlp":
            ranges.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0)))
    for v in ranges.values():
        v.sort()
    launch = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = (e["ts"], e.get("tid"))
    total = inside = 0.0
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            total += e.get("dur", 0)
            ln = launch.get(e.get("args", {}).get("correlation"))
            if ln is None:
                continue
            rs = ranges.get(ln[1], [])
            i = bisect.bisect_right(rs, (ln[0], float("inf"))) - 1
            if i >= 0 and rs[i][0] <= ln[0] <= rs[i][1]:
                inside += e.get("dur", 0)
    return inside / total if total else float("nan")


def profile_share(model, fn, path):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with mlp_ranges(model):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    return mlp_share(path)


def make_cache(model):
    from transformers import StaticCache
    try:
        return StaticCache(config=model.config, max_cache_len=CACHE)  # transformers 5
    except TypeError:
        return StaticCache(config=model.config, max_batch_size=1, max_cache_len=CACHE, device="cuda",
                           dtype=torch.bfloat16)


def decode_runs(model, steps, compile_it):
    """ms per decoded token: prompt prefilled eagerly into a fresh static cache, WARM_STEPS steps, then
    `steps` timed steps (each depends on the last token)."""
    cache = make_cache(model)
    gen = torch.Generator(device="cuda").manual_seed(2)
    prompt = torch.randint(1, model.config.vocab_size, (1, PROMPT), device="cuda", generator=gen)

    def step(tok, pos):
        out = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    fn = torch.compile(step, mode="reduce-overhead", fullgraph=True) if compile_it else step
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(PROMPT, device="cuda"),
                    use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        pos = PROMPT
        t0 = time.perf_counter()
        for _ in range(WARM_STEPS):
            tok = fn(tok.clone(), torch.tensor([pos], device="cuda"))
            pos += 1
        torch.cuda.synchronize()
        warm_s = time.perf_counter() - t0
        positions = [torch.tensor([p], device="cuda") for p in range(pos, pos + steps)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for p in positions:
            tok = fn(tok.clone(), p)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / steps * 1e3
    return ms, warm_s, (lambda: [fn(tok.clone(), positions[i]) for i in range(8)])


def cprofiled(what, fn):
    """fn under cProfile: the 20 functions with the most time of their own (time in a C call made
    through ctypes counts as its Python caller's own)"""
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    with torch.no_grad():
        prof.enable()
        fn()
        prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
    say("%s under cProfile:\n%s" % (what, out.getvalue()))


def run_config(name, model, args, ids_check, ref_logits, kw):
    """One configuration's runs; returns its numbers."""
    r = RESULTS.setdefault(name, {})
    with torch.no_grad():
        got = model(input_ids=ids_check, use_cache=False).logits.float()
    err = float((got - ref_logits).norm() / ref_logits.norm())
    limit = 0.15 if name == "fp8" else 0.03
    r["check_rel_err"] = err
    say("%-6s check: logits of 256 tokens against the unpatched model's: relative RMS error %.4g (<= %g) %s"
        % (name, err, limit, "ok" if err <= limit else "FAILED: not timed"))
    if not err <= limit:
        FAILED.append("%s: logits differ (%.4g)" % (name, err))
        return r
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(1, model.config.vocab_size, (1, args.prefill), device="cuda", generator=gen)

    def prefill(m=model):
        with torch.no_grad():
            return m(input_ids=ids, use_cache=False, **kw).logits

    r["prefill_eager_ms"] = timed(prefill, args.repeat)
    say("%-6s prefill %d eager: %.3f ms (%.0f tokens/s)" % (name, args.prefill, r["prefill_eager_ms"],
                                                             args.prefill / r["prefill_eager_ms"] * 1e3))
    r["mlp_share_trace_prefill_eager"] = profile_share(model, prefill, os.path.join(args.out, "%s_prefill.json" % name))
    say("%-6s prefill eager: the MLPs' share of GPU kernel time in a profiler trace: %.1f%%"
        % (name, 100 * r["mlp_share_trace_prefill_eager"]))
    torch._dynamo.reset()
    t0 = time.perf_counter()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        compiled(input_ids=ids, use_cache=False, **kw)
    torch.cuda.synchronize()
    r["prefill_compile_s"] = time.perf_counter() - t0
    r["prefill_compile_ms"] = timed(lambda: prefill(compiled), args.repeat)
    say("%-6s prefill %d torch.compile: %.3f ms (%.0f tokens/s; compiled in %.0f s)"
        % (name, args.prefill, r["prefill_compile_ms"], args.prefill / r["prefill_compile_ms"] * 1e3,
           r["prefill_compile_s"]))
    compiled = None
    torch._dynamo.reset()
    ms, _, again = decode_runs(model, 32, compile_it=False)
    r["decode_eager_ms"] = ms
    say("%-6s decode eager: %.3f ms/token (%.0f tokens/s)" % (name, ms, 1e3 / ms))
    if args.cprofile:
        cprofiled("%s: 8 eager decode steps" % name, again)
    r["mlp_share_trace_decode_eager"] = profile_share(model, again, os.path.join(args.out, "%s_decode.json" % name))
    say("%-6s decode eager: the MLPs' share of GPU kernel time in a profiler trace: %.1f%%"
        % (name, 100 * r["mlp_share_trace_decode_eager"]))
    ms, warm_s, _ = decode_runs(model, args.decode_steps, compile_it=True)
    r["decode_graphs_ms"], r["decode_compile_s"] = ms, warm_s
    say("%-6s decode CUDA graphs (reduce-overhead): %.4f ms/token (%.0f tokens/s; compiled and recorded in %.0f s)"
        % (name, ms, 1e3 / ms, warm_s))
    torch._dynamo.reset()
    return r


def ablation(model, args, kw):
    """The same runs with every MLP's forward the identity."""
    r = RESULTS.setdefault("no_mlp", {})
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(1, model.config.vocab_size, (1, args.prefill), device="cuda", generator=gen)
    with without_mlps(model):
        def prefill(m=model):
            with torch.no_grad():
                return m(input_ids=ids, use_cache=False, **kw).logits
        r["prefill_eager_ms"] = timed(prefill, args.repeat)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)
        r["prefill_compile_ms"] = timed(lambda: prefill(compiled), args.repeat)
        compiled = None
        torch._dynamo.reset()
        r["decode_graphs_ms"] = decode_runs(model, args.decode_steps, compile_it=True)[0]
        torch._dynamo.reset()
    say("no MLP (ablation): prefill eager %.3f ms, torch.compile %.3f ms; decode CUDA graphs %.4f ms/token"
        % (r["prefill_eager_ms"], r["prefill_compile_ms"], r["decode_graphs_ms"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--decode-steps", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", default="build/torch-bench")
    ap.add_argument("--configs", default="torch,gated,fp8")
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--cprofile", action="store_true", help="print 8 eager decode steps of each configuration "
                    "under cProfile")
    args = ap.parse_args()
    if PROMPT + WARM_STEPS + args.decode_steps > CACHE:
        sys.exit("--decode-steps: at most %d (the cache holds %d tokens)" % (CACHE - PROMPT - WARM_STEPS, CACHE))
    os.makedirs(args.out, exist_ok=True)
    import transformers
    t_all = time.perf_counter()
    say("torch %s, transformers %s, linfuse %s (library %s), %s" % (
        torch.__version__, transformers.__version__, linfuse.__version__, linfuse.library_version(),
        torch.cuda.get_device_name()))
    cfg, model = build(args.layers)
    kw = keep_last_kwargs(model)
    say("LlamaForCausalLM: %d layers, %d -> %d, vocab %d, bf16; prefill keeps %s" % (
        args.layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, kw or "every token's logits"))
    gen = torch.Generator(device="cuda").manual_seed(3)
    ids_check = torch.randint(1, cfg.vocab_size, (1, 256), device="cuda", generator=gen)
    with torch.no_grad():
        ref_logits = model(input_ids=ids_check, use_cache=False).logits.float()
    for name in args.configs.split(","):
        try:
            lt.unapply(model)
            if name != "torch":
                report = lt.apply(model, variant=name)
                say(str(report))
                if len(report.replaced) != args.layers or any(r[3] != name for r in report.replaced):
                    FAILED.append("%s: apply did not put every MLP on the %s variant" % (name, name))
                    continue
            run_config(name, model, args, ids_check, ref_logits, kw)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            FAILED.append("%s: %s: %s" % (name, type(e).__name__, e))
            torch._dynamo.reset()
    lt.unapply(model)
    if not args.no_ablation:
        try:
            ablation(model, args, kw)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            FAILED.append("ablation: %s: %s" % (type(e).__name__, e))
    summarize(args)
    with open(os.path.join(args.out, "torch_patch_vs_torch.json"), "w") as f:
        json.dump({"results": RESULTS, "failed": FAILED, "args": vars(args)}, f, indent=1)
    say("total %.0f s; numbers and traces in %s" % (time.perf_counter() - t_all, args.out))
    for f in FAILED:
        say("FAILED: " + f)
    return 1 if FAILED else 0


def summarize(args):
    nm = RESULTS.get("no_mlp", {})
    say("\n%-6s %12s %12s %12s %10s %14s %10s %12s %10s %10s %10s" % (
        "config", "prefill eag", "prefill cmp", "best ms", "tok/s", "decode graph", "tok/s", "decode eag",
        "MLP% pre", "MLP% dec", "MLP% abl"))
    best = {}
    for name, r in RESULTS.items():
        if name == "no_mlp" or "prefill_eager_ms" not in r:
            continue
        pb = min(r.get("prefill_eager_ms", float("inf")), r.get("prefill_compile_ms", float("inf")))
        dg = r.get("decode_graphs_ms", float("nan"))
        best[name] = (pb, dg)
        abl = ""
        if nm:
            pnm = nm["prefill_eager_ms"] if pb == r.get("prefill_eager_ms") else nm["prefill_compile_ms"]
            abl = "%.0f/%.0f" % (100 * (1 - pnm / pb), 100 * (1 - nm["decode_graphs_ms"] / dg))
        say("%-6s %12.3f %12.3f %12.3f %10.0f %14.4f %10.0f %12.3f %10.1f %10.1f %10s" % (
            name, r["prefill_eager_ms"], r.get("prefill_compile_ms", float("nan")), pb, args.prefill / pb * 1e3, dg,
            1e3 / dg, r.get("decode_eager_ms", float("nan")), 100 * r.get("mlp_share_trace_prefill_eager", float("nan")),
            100 * r.get("mlp_share_trace_decode_eager", float("nan")), abl))
    say("(ms; prefill of %d tokens in each configuration's best mode; decode per token over a %d-token static cache; "
        "MLP%% pre/dec: from profiler traces of eager prefill and eager decode; MLP%% abl: 1 - t(no MLP)/t in the best "
        "prefill mode / CUDA-graph decode)" % (args.prefill, CACHE))
    if "torch" in best:
        tp, td = best["torch"]
        for name, goal_p, goal_d in (("gated", 1.04, 1.08), ("fp8", 1.3, 1.08)):
            if name in best:
                sp, sd = tp / best[name][0], td / best[name][1]
                RESULTS[name]["speedup_prefill"], RESULTS[name]["speedup_decode"] = sp, sd
                say("linfuse %-5s: prefill %.3fx torch's best (goal >= %.2f: %s); decode with CUDA graphs %.3fx "
                    "torch's (goal >= %.2f: %s)" % (name, sp, goal_p, "met" if sp >= goal_p else "NOT met", sd, goal_d,
                                                  "met" if sd >= goal_d else "NOT met"))


if __name__ == "__main__":
    sys.exit(main())
