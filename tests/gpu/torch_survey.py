#!/usr/bin/env python3
"""linfuse.torch across transformers' causal LMs: every *ForCausalLM class the installed
transformers has, built from one small config (hidden 256, intermediate 512, 2 layers, 4 heads, 4
experts where it has experts; random weights, seed 0) on the GPU in float32 and in bf16, then
linfuse.torch.apply(variant="gated") on the bf16 copy. For each model that builds and runs:

  FAIL  the patched model raises where the unpatched one ran; its logits of 2 x 24 random tokens
        are further from the float32 model's than 1.5 x the unpatched bf16 model's error + 1e-3
        (relative RMS); or a family whose MLP is a known gated one (Llama, Mistral, Qwen2/3, the
        Gemmas, Phi-3, OLMo2, Granite, GLM, Cohere) has nothing replaced;
  PASS  otherwise, with how many MLPs were replaced and left, and the distinct reasons for those
        left (MoE experts held as stacked tensors, MLPs with more than projections and an
        activation, non-gated MLPs are left and say why, or are not MLPs apply looks for).

Classes whose config does not build from these sizes, or whose model does not run on input ids
alone (encoder-decoders, multimodal, recurrent ones with other required sizes), are skipped with
the reason. Each model runs once on the CPU before it goes to the GPU: one that fails there (token
ids outside what it embeds, say) is skipped without a device-side assert, which would lose the
CUDA context and stop the survey. The known families run first; the others in name order until --seconds (300) are
spent. Exit status: the number of failures.

usage (from the repository root, with a CUDA build in build/):
  PYTHONPATH=python LINFUSE_LIBRARY=build/liblinfuse.so LD_LIBRARY_PATH=build:/usr/local/cuda/lib64 \\
      python3 tests/gpu/torch_survey.py [--seconds 300]"""
import argparse
import copy
import logging
import time
import warnings

import torch

import linfuse.torch as lt

GATED = ["Llama", "Mistral", "Qwen2", "Qwen3", "Gemma", "Gemma2", "Gemma3", "Phi3", "Olmo2", "Granite", "Glm",
         "Glm4", "Cohere", "Cohere2"]
FIRST = GATED + ["StableLm", "DeepseekV2", "DeepseekV3", "Mixtral", "Qwen2Moe", "Qwen3Moe", "Starcoder2", "Exaone4",
                 "SmolLM3", "Arcee", "Olmo", "Olmo3", "Helium", "Phi", "Nemotron", "Ernie4_5", "SeedOss",
                 "HunYuanDenseV1", "Apertus", "Dots1", "GptOss", "Llama4", "Lfm2", "Bamba", "Jamba", "FalconH1",
                 "MiniMax", "GraniteMoeShared", "Phimoe", "Ministral", "Doge", "BitNet", "GPTNeoX", "Bloom"]
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=256, pad_token_id=0,
             tie_word_embeddings=False, moe_intermediate_size=256, n_routed_experts=4, num_experts=4,
             num_local_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_shared_experts=1,
             sliding_window=128, kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=32, qk_nope_head_dim=32,
             v_head_dim=64, n_group=1, topk_group=1, shared_expert_intermediate_size=256, decoder_sparse_step=2,
             mlp_only_layers=[0])


def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


def build(transformers, cls):
    """(float32 model, bf16 copy, input ids, float32 logits, bf16 logits), or raises why not."""
    cfg = cls.config_class(**SMALL)
    if hasattr(cfg, "get_text_config") and cfg.get_text_config() is not cfg:
        raise RuntimeError("a composite (multimodal) config")
    torch.manual_seed(0)
    m32 = cls(cfg).eval()
    vocab = min(int(getattr(cfg, "vocab_size", 1000) or 1000), 1000)
    ids = torch.randint(1, vocab, (2, 24))
    with torch.no_grad():  # on the CPU first: an error there is an exception, not a lost CUDA context
        m32(input_ids=ids, use_cache=False)
    m32, ids = m32.to("cuda"), ids.to("cuda")
    m16 = copy.deepcopy(m32).to(torch.bfloat16).eval()
    with torch.no_grad():
        r32 = m32(input_ids=ids, use_cache=False).logits
        r16 = m16(input_ids=ids, use_cache=False).logits
    torch.cuda.synchronize()
    return m32, m16, ids, r32, r16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=300)
    args = ap.parse_args()
    import transformers
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    names = sorted(n for n in dir(transformers) if n.endswith("ForCausalLM") and n != "AutoModelForCausalLM")
    first = [f + "ForCausalLM" for f in FIRST if f + "ForCausalLM" in names]
    order = first + [n for n in names if n not in first]
    print("transformers %s, torch %s, %d causal LM classes" % (transformers.__version__, torch.__version__, len(names)))
    t_end = time.time() + args.seconds
    fails, passed, replaced_any, skipped = [], 0, 0, 0
    for name in order:
        if time.time() > t_end:
            print("time (--seconds %g) spent: stopped before %s" % (args.seconds, name))
            break
        try:
            m32, m16, ids, r32, r16 = build(transformers, getattr(transformers, name))
        except Exception as e:  # not buildable or runnable at these sizes: not linfuse's
            skipped += 1
            why = str(e).strip().split("\n")[0][:100]
            print("skip  %-34s %s" % (name, why), flush=True)
            if "CUDA error" in why:  # the context is gone; nothing after this can run
                print("a CUDA error in an unpatched model: the survey cannot go on")
                break
            continue
        try:
            rep = lt.apply(m16, variant="gated")
            with torch.no_grad():
                p16 = m16(input_ids=ids, use_cache=False).logits
            e_p, e_u = rel(p16, r32), rel(r16, r32)
            bad = []
            if not e_p <= 1.5 * e_u + 1e-3:
                bad.append("logits' error %.4g against the unpatched model's %.4g" % (e_p, e_u))
            if name[:-len("ForCausalLM")] in GATED and not rep.replaced:
                bad.append("a gated MLP family with nothing replaced")
            left = "; ".join(sorted({"%s: %s" % (cls, why[:60]) for _, cls, why in rep.left}))
            line = "%-34s replaced %d, left %d, err %.4g (unpatched %.4g)%s" % (
                name, len(rep.replaced), len(rep.left), e_p, e_u, ("  " + left) if left else "")
            replaced_any += bool(rep.replaced)
        except Exception as e:
            bad = ["the patched model raised: %s" % str(e).strip().split("\n")[-1][:160]]
            line = name
        if bad:
            fails.append(name)
            print("FAIL  %s: %s" % (line, "; ".join(bad)), flush=True)
        else:
            passed += 1
            print("PASS  %s" % line, flush=True)
        del m32, m16
        torch.cuda.empty_cache()
    print("torch_survey: %d passed (%d with an MLP replaced), %d failed, %d skipped" % (
        passed, replaced_any, len(fails), skipped))
    return len(fails)


if __name__ == "__main__":
    raise SystemExit(main())
