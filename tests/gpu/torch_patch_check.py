#!/usr/bin/env python3
"""linfuse.torch on a GPU, on transformers' own models: a LlamaForCausalLM at Llama-3-8B's layer
sizes (4096 -> 14336, 32 heads, 8 KV heads, silu) and a GemmaForCausalLM at Gemma-2B's (2048 ->
16384, 8 heads, 1 KV head, head_dim 256, gelu_pytorch_tanh), 2 layers each, random weights
(transformers' init, seed 0), bf16. For each, patched with linfuse.torch.apply(variant="gated"):

  apply     both MLPs replaced, none left; CUDA memory allocated grows by at most 16 MiB;
  eager     logits of 2 x 64 random tokens. Tolerance (bf16): the patched model's relative RMS
            error against the same model in float32 at most 1.5 x the unpatched bf16 model's plus
            1e-3 (it is as close to the exact model as PyTorch's own bf16 run), and no logit
            further from the unpatched model's than 5% of its largest magnitude;
  compile   torch._dynamo.explain finds 0 graph breaks; torch.compile(fullgraph=True) logits
            within the eager tolerance;
  graph     the forward captured in torch.cuda.graph (warmed up on a side stream, captured on
            torch's capture stream: a stream linfuse first meets inside the capture) and replayed
            on new tokens: within the eager tolerance of the float32 model's logits for them;
  generate  generate() with cache_implementation="static", greedy, 32 new tokens, 8 prompts of
            16 random tokens, patched against unpatched (both without compile): the same tokens.
            A random model's top two logits are often closer than bf16's rounding, so a row may
            part at a near tie: up to its first differing token both models saw the same prefix,
            and there their logits must agree to 2 x the largest difference seen in eager (the
            flip is rounding, not a wrong result); at least one row agrees for all 32 tokens;
  profile   under torch.profiler, each forward shows linfuse::gated_mlp once per layer with at
            least 2 GPU kernels launched beneath it (kernels linked through their launches'
            correlation ids: linfuse started no CUPTI session of its own, or Kineto would see
            none), and `linfuse trace table` of the exported trace lists the op;
  fp8       (Llama) unapply, apply(variant="fp8"): both MLPs on the fp8 variant, memory grown by
            the FP8 weights alone, logits' relative RMS error against float32 at most 0.1.

Each check prints one PASS/FAIL line; the exit status is the number of failures (0: all passed).
About 3-4 minutes on an H200 (two torch.compile runs).

usage (from the repository root, with a CUDA build in build/):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so LD_LIBRARY_PATH=build:/usr/local/cuda/lib64 \\
      python3 tests/gpu/torch_patch_check.py [--linfuse build/linfuse] [--out build/torch-check] \\
      [--models llama,gemma]

--models also takes phi3 (Phi-3's fused gate_up_proj), qwen3, olmo2 and gemma3, each at 2 layers of
2048 -> 5632 (the same checks but fp8)."""
import argparse
import copy
import json
import os
import subprocess
import sys
import time
import traceback

import torch

import linfuse
import linfuse.torch as lt

FAILS = []
MIB = 1 << 20


def check(ok, what):
    print(("PASS  " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


def rel(a, b):
    """||a - b|| / ||b||, in float32."""
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


def max_diff(a, b):
    return float((a.float() - b.float()).abs().max())


# Other models, smaller (2 layers of 2048 -> 5632): the MLP layouts and classes beyond Llama's and
# Gemma's. phi3: one fused gate_up_proj (used as it is); qwen3, olmo2, gemma3: their own MLP classes.
SMALL = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=16, num_key_value_heads=4,
             num_hidden_layers=2, vocab_size=32000, max_position_embeddings=2048, pad_token_id=0,
             tie_word_embeddings=False)
OTHERS = {"phi3": ("Phi3Config", "Phi3ForCausalLM", dict(hidden_act="silu")),
          "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(hidden_act="silu", head_dim=128)),
          "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(hidden_act="silu")),
          "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(hidden_activation="gelu_pytorch_tanh",
                                                                   head_dim=128, sliding_window=512))}


def build(name):
    """The float32 model and its bf16 copy, on the GPU."""
    import transformers
    if name == "llama":
        cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                       num_key_value_heads=8, vocab_size=128256, hidden_act="silu", mlp_bias=False,
                                       tie_word_embeddings=False, num_hidden_layers=2, max_position_embeddings=2048,
                                       pad_token_id=0)
        cls = transformers.LlamaForCausalLM
    elif name == "gemma":
        cfg = transformers.GemmaConfig(hidden_size=2048, intermediate_size=16384, num_attention_heads=8,
                                       num_key_value_heads=1, head_dim=256, vocab_size=256000,
                                       hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                                       num_hidden_layers=2, max_position_embeddings=2048, pad_token_id=0)
        cls = transformers.GemmaForCausalLM
    else:
        cfg_name, cls_name, extra = OTHERS[name]
        cfg = getattr(transformers, cfg_name)(**dict(SMALL, **extra))
        cls = getattr(transformers, cls_name)
    torch.manual_seed(0)
    with torch.device("cuda"):
        m32 = cls(cfg)
    m32.eval()
    m16 = copy.deepcopy(m32).to(torch.bfloat16)
    m16.eval()
    for m in (m32, m16):
        m.generation_config.eos_token_id = None  # 32 tokens every time
        m.generation_config.pad_token_id = 0
    return cfg, m32, m16


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def trace_kernels_under(path, op_name):
    """For each cpu_op named op_name in a Kineto trace: the GPU kernels whose launches (runtime or
    driver calls on the op's thread, inside its time span) it made, linked by correlation id."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("name") == op_name]
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kernels = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "correlation" in e.get("args", {}):
            kernels.setdefault(e["args"]["correlation"], []).append(e["name"])
    out = []
    for op in ops:
        t0, t1 = op["ts"], op["ts"] + op.get("dur", 0)
        names = []
        for ln in launches:
            if ln.get("tid") == op.get("tid") and ln.get("pid") == op.get("pid") and t0 <= ln["ts"] <= t1:
                names += kernels.get(ln.get("args", {}).get("correlation"), [])
        out.append(names)
    return out, sum(len(v) for v in kernels.values())


def check_model(name, args):
    t_start = time.time()
    cfg, m32, m16 = build(name)
    layers, vocab = cfg.num_hidden_layers, cfg.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(1, vocab, (2, 64), device="cuda", generator=gen)
    truth, base = logits(m32, ids), logits(m16, ids)
    e_base = rel(base, truth)
    print("%s: %d layers, hidden %d -> %d, vocab %d; unpatched bf16 logits' error against float32: %.4g"
          % (name, layers, cfg.hidden_size, cfg.intermediate_size, vocab, e_base), flush=True)

    # apply
    torch.cuda.synchronize()
    mem0 = torch.cuda.memory_allocated()
    report = lt.apply(m16, variant="gated")
    print(report, flush=True)
    grew = torch.cuda.memory_allocated() - mem0
    check(len(report.replaced) == layers and not report.left,
          "%s apply: %d of %d MLPs replaced, %d left" % (name, len(report.replaced), layers, len(report.left)))
    check(grew <= 16 * MIB, "%s apply: CUDA memory grew %.1f MiB (<= 16: gate and up stacked, not copied)"
          % (name, grew / MIB))

    # eager
    patched = logits(m16, ids)
    e_patch, d_eager = rel(patched, truth), max_diff(patched, base)
    bound = 1.5 * e_base + 1e-3
    check(e_patch <= bound, "%s eager: patched logits' error against float32 %.4g <= 1.5 x unpatched %.4g + 1e-3"
          % (name, e_patch, e_base))
    big = float(base.abs().max())
    check(d_eager <= 0.05 * big, "%s eager: max |patched - unpatched| = %.4g <= 5%% of max |logit| (%.4g)"
          % (name, d_eager, 0.05 * big))

    # compile
    try:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(m16)(input_ids=ids, use_cache=False)
        if not check(explained.graph_break_count == 0, "%s compile: torch._dynamo.explain: %d graphs, %d graph breaks"
                     % (name, explained.graph_count, explained.graph_break_count)):
            for r in explained.break_reasons[:5]:
                print("      break: %s" % (r.reason,))
        torch._dynamo.reset()
        t0 = time.time()
        compiled = torch.compile(m16, fullgraph=True)
        with torch.no_grad():
            c_logits = compiled(input_ids=ids, use_cache=False).logits.float()
        e_c = rel(c_logits, truth)
        check(e_c <= bound, "%s compile: fullgraph logits' error against float32 %.4g <= %.4g (compiled in %.0f s)"
              % (name, e_c, bound, time.time() - t0))
        del compiled
        torch._dynamo.reset()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        check(False, "%s compile: %s: %s" % (name, type(e).__name__, e))

    # graph
    try:
        static_ids = ids.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                m16(input_ids=static_ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            static_out = m16(input_ids=static_ids, use_cache=False).logits
        new_ids = torch.randint(1, vocab, ids.shape, device="cuda", generator=gen)
        static_ids.copy_(new_ids)
        graph.replay()
        torch.cuda.synchronize()
        e_g, e_ge = rel(static_out, logits(m32, new_ids)), rel(static_out, logits(m16, new_ids))
        check(e_g <= bound, "%s graph: replayed on new tokens, logits' error against float32 %.4g <= %.4g (%.3g from "
              "the patched model's eager logits)" % (name, e_g, bound, e_ge))
        del graph, static_out
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        check(False, "%s graph: %s: %s" % (name, type(e).__name__, e))

    # generate
    try:
        from transformers import GenerationConfig
        gc = GenerationConfig(max_new_tokens=32, do_sample=False, cache_implementation="static", pad_token_id=0,
                              eos_token_id=None, return_dict_in_generate=True, output_logits=True,
                              disable_compile=True)
        rows = 8
        prompts = torch.randint(1, vocab, (rows, 16), device="cuda", generator=gen)
        mask = torch.ones_like(prompts)
        lt.unapply(m16)
        with torch.no_grad():
            ref = m16.generate(prompts, attention_mask=mask, generation_config=gc)
        lt.apply(m16, variant="gated")
        with torch.no_grad():
            got = m16.generate(prompts, attention_mask=mask, generation_config=gc)
        r_tok, g_tok = ref.sequences[:, 16:], got.sequences[:, 16:]
        tie = 2 * d_eager
        same, ties, real = 0, [], []
        for row in range(rows):
            diff = (r_tok[row] != g_tok[row]).nonzero()
            if len(diff) == 0:
                same += 1
                continue
            k = int(diff[0])  # the same prefix so far: both models' logits for the same input
            step_r, step_g = ref.logits[k][row].float(), got.logits[k][row].float()
            gap = float(step_r[r_tok[row, k]] - step_r[g_tok[row, k]])
            dk = max_diff(step_g, step_r)
            (ties if dk <= tie else real).append("row %d from token %d (the unpatched model's gap %.3g, the logits "
                                                 "%.3g apart there)" % (row, k, gap, dk))
        print("      generate: %d of %d rows the same for %d tokens%s" % (
            same, rows, r_tok.shape[1], "".join("; near tie: " + t for t in ties) +
            "".join("; DIFFERS: " + t for t in real)))
        check(r_tok.shape[1] == 32 and not real and same >= 1,
              "%s generate: static cache, greedy, 32 tokens: %d of %d rows identical, %d parted at a near tie (logits "
              "within %.3g), %d real differences" % (name, same, rows, len(ties), tie, len(real)))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        check(False, "%s generate: %s: %s" % (name, type(e).__name__, e))

    # profile
    try:
        from torch.profiler import ProfilerActivity, profile
        logits(m16, ids)  # every shape's GEMM plan chosen before the trace (linfuse times new shapes once)
        torch.cuda.synchronize()
        iters = 2
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                logits(m16, ids)
            torch.cuda.synchronize()
        path = os.path.join(args.out, "%s_patched_trace.json" % name)
        prof.export_chrome_trace(path)
        per_op, n_kernels = trace_kernels_under(path, "linfuse::gated_mlp")
        check(len(per_op) == layers * iters, "%s profile: linfuse::gated_mlp %d times in %d forwards of %d layers"
              % (name, len(per_op), iters, layers))
        check(n_kernels > 0 and per_op and all(len(k) >= 2 for k in per_op),
              "%s profile: GPU kernels under each linfuse::gated_mlp: %s (Kineto saw %d kernels in all)"
              % (name, [len(k) for k in per_op], n_kernels))
        if per_op:
            print("      under the first: %s" % "; ".join(n[:90] for n in per_op[0]))
        r = subprocess.run([args.linfuse, "trace", "table", path, "--row-limit", "40"], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0 and "linfuse::gated_mlp" in r.stdout,
              "%s profile: `linfuse trace table %s` lists linfuse::gated_mlp (exit %d)" % (name, path, r.returncode))
        if r.returncode != 0 or "linfuse::gated_mlp" not in r.stdout:
            print(r.stdout[-2000:] + r.stderr[-2000:])
        else:
            print("\n".join(line for line in r.stdout.splitlines() if "linfuse::" in line or "Name" in line))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        check(False, "%s profile: %s: %s" % (name, type(e).__name__, e))

    # fp8
    if name == "llama":
        try:
            lt.unapply(m16)
            torch.cuda.synchronize()
            mem0 = torch.cuda.memory_allocated()
            report = lt.apply(m16, variant="fp8")
            print(report, flush=True)
            grew = torch.cuda.memory_allocated() - mem0
            H, D = cfg.intermediate_size, cfg.hidden_size
            fp8_bytes = layers * (3 * H * D + 2 * H * 4 + ((D + 127) // 128) * (((H + 127) // 128 + 3) // 4 * 4) * 4)
            check(len(report.replaced) == layers and all(r[3] == "fp8" for r in report.replaced),
                  "%s fp8: %d MLPs on the fp8 variant" % (name, sum(r[3] == "fp8" for r in report.replaced)))
            check(grew <= fp8_bytes + 16 * MIB, "%s fp8: memory grew %.1f MiB, the FP8 weights are %.1f MiB"
                  % (name, grew / MIB, fp8_bytes / MIB))
            e8 = rel(logits(m16, ids), truth)
            check(e8 <= 0.1, "%s fp8: logits' error against float32 %.4g <= 0.1 (bf16's: %.4g)" % (name, e8, e_base))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            check(False, "%s fp8: %s: %s" % (name, type(e).__name__, e))
    lt.unapply(m16)
    print("%s: %.0f s" % (name, time.time() - t_start), flush=True)
    del m32, m16
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--linfuse", default="build/linfuse", help="the linfuse tool (for `trace table`)")
    ap.add_argument("--out", default="build/torch-check", help="where the traces go")
    ap.add_argument("--models", default="llama,gemma", help="of llama, gemma, " + ", ".join(OTHERS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    print("torch %s, transformers %s, linfuse %s (library %s from %s), %s" % (
        torch.__version__, transformers.__version__, linfuse.__version__, linfuse.library_version(),
        linfuse.library_path, torch.cuda.get_device_name()), flush=True)
    check(lt.HAS_CUSTOM_OP, "torch.library.custom_op is here: linfuse::gated_mlp is a custom op")
    for name in args.models.split(","):
        check_model(name, args)
    print("torch_patch_check: %d failed" % len(FAILS))
    for f in FAILS:
        print("  FAILED: " + f)
    return min(len(FAILS), 100)


if __name__ == "__main__":
    sys.exit(main())
