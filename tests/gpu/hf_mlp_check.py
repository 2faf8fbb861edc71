#!/usr/bin/env python3
"""transformers' own modules against `linfuse mlp`, at real sizes: LlamaMLP (Llama-3-8B: 4096 ->
14336, silu) and GemmaMLP (Gemma-2B: 2048 -> 16384, gelu_pytorch_tanh) built from their configs
with random weights (bf16), saved with safetensors' save_file under a model's names with the
config.json beside them, run on a fixed input; then `linfuse mlp` on the same files in every
form (eager, fused, gated, compiled, compiled gated) on the GPU, its output against the module's.
The tolerance, stated: the relative error ||y - y_ref|| / ||y_ref|| below 1e-2 (bf16 keeps 8 bits,
2^-8 = 3.9e-3 relative per value, and both sides round g, u and the product) and no element off
by more than 5% of the output's largest magnitude. Needs transformers and a GPU.
usage: tests/gpu/hf_mlp_check.py build/linfuse WORKDIR"""
import json, os, subprocess, sys

import torch
from safetensors.torch import load_file, save_file
from transformers import GemmaConfig, LlamaConfig
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.llama.modeling_llama import LlamaMLP

binary, work = os.path.abspath(sys.argv[1]), sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.manual_seed(0)
fails = 0
for name, cfg, cls, tokens in (
        ("llama-3-8b", LlamaConfig(hidden_size=4096, intermediate_size=14336, hidden_act="silu", mlp_bias=False),
         LlamaMLP, (1, 37)),
        ("gemma-2b", GemmaConfig(hidden_size=2048, intermediate_size=16384, hidden_act="gelu_pytorch_tanh",
                                 hidden_activation="gelu_pytorch_tanh"), GemmaMLP, (16, 300))):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with torch.no_grad():
        mlp = cls(cfg).to("cuda", torch.bfloat16)
        for p in mlp.parameters():  # nn.Linear's default init, scaled as a trained layer's
            p.normal_(0, 0.02)
        save_file({"model.layers.0.mlp." + k: v.contiguous() for k, v in mlp.state_dict().items()},
                  os.path.join(d, "model.safetensors"))
        json.dump(cfg.to_dict(), open(os.path.join(d, "config.json"), "w"))
        for t in tokens:
            x = torch.randn(t, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
            ref = mlp(x).float()
            save_file({"x": x.cpu()}, os.path.join(d, "x%d.safetensors" % t))
            for form in (["--variant", "eager"], ["--variant", "fused"], ["--variant", "gated"], ["--compile"],
                         ["--compile", "--variant", "gated"]):
                out = os.path.join(d, "y%d.safetensors" % t)
                r = subprocess.run([binary, "mlp", "--weights", d, "--prefix", "model.layers.0.mlp", "--input",
                                    os.path.join(d, "x%d.safetensors" % t), "--output", out, "--device", "cuda"] + form,
                                   capture_output=True, text=True)
                what = "%s %d tokens %s" % (name, t, " ".join(form))
                if r.returncode:
                    print("FAIL: %s: %s" % (what, r.stderr.strip()))
                    fails += 1
                    continue
                y = load_file(out)["y"].float().cuda()
                rel = ((y - ref).norm() / ref.norm()).item()
                worst = ((y - ref).abs().max() / ref.abs().max()).item()
                ok = rel < 1e-2 and worst < 5e-2
                fails += not ok
                print("%s %s: relative error %.2e, worst element %.2e of the largest (%s)" % (
                    "ok  " if ok else "FAIL", what, rel, worst, r.stdout.strip().split(";")[0]))
print("hf_mlp_check: %d failed" % fails)
sys.exit(1 if fails else 0)
