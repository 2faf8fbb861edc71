#!/usr/bin/env python3
"""Programs for tests/gpu/graph_check.py: PyTorch work with NVTX ranges, run eagerly or replayed
as CUDA graphs, for `linfuse profile` to trace back to its captures.

  graph_prog.py layers eager|graph    four MLP layers, an NVTX range each, six steps run eagerly or
                                      captured once (inside the same ranges) and replayed
  graph_prog.py llama_graph           a small transformers Llama, a range per decoder layer (hooks),
                                      its forward captured with torch.cuda.graph (as vLLM and
                                      SGLang capture) and replayed
  graph_prog.py llama_compile         the same under torch.compile(mode="reduce-overhead")
  graph_prog.py loop_graph N          N replays of the layers' graph, timed: prints loop_s=...
  graph_prog.py loop_eager N [torch]  N steps of a host-bound eager loop, timed (torch: under
                                      torch.profiler(with_stack=True)): prints loop_s=..."""
import sys
import time

import torch
from torch import nn

nvtx = torch.cuda.nvtx


class Layer(nn.Module):
    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.up, self.down = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Model(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(n))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            nvtx.range_push("layer.%d" % i)
            x = layer(x)
            nvtx.range_pop()
        return x


def layers(mode, steps=6):
    torch.manual_seed(0)
    m = Model().cuda().to(torch.bfloat16).eval()
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        if mode == "graph":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm-up on a side stream, as torch.cuda.graphs asks
                for _ in range(3):
                    m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            nvtx.range_push("capture")
            with torch.cuda.graph(g):
                y = m(x)
            nvtx.range_pop()
        for k in range(steps):
            nvtx.range_push("ProfilerStep#%d" % k)
            if mode == "graph":
                g.replay()
            else:
                y = m(x)
            nvtx.range_pop()
        torch.cuda.synchronize()
    print("layers %s: %s" % (mode, list(y.shape)))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=8, vocab_size=2000, max_position_embeddings=256)
    m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    for i, layer in enumerate(m.model.layers):  # a range per decoder layer, as a user adds them
        layer.register_forward_pre_hook(lambda mod, args, i=i: nvtx.range_push("decoder_layer.%d" % i))
        layer.register_forward_hook(lambda mod, args, out: nvtx.range_pop())
    ids = torch.randint(0, 2000, (1, 16), device="cuda")
    return m, ids


def llama_graph(replays=20):
    m, ids = llama()
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m(ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = m(ids, use_cache=False).logits
        for k in range(replays):
            nvtx.range_push("ProfilerStep#%d" % k)
            g.replay()
            nvtx.range_pop()
        torch.cuda.synchronize()
    print("llama graph: %s" % list(out.shape))


def llama_compile(calls=12):
    m, ids = llama()
    c = torch.compile(m, mode="reduce-overhead")
    with torch.no_grad():
        for k in range(calls):
            nvtx.range_push("ProfilerStep#%d" % k)
            out = c(ids, use_cache=False).logits
            nvtx.range_pop()
        torch.cuda.synchronize()
    print("llama compile: %s" % list(out.shape))


def loop_graph(n):
    m = Model(n=2).cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            m(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(x)
        for _ in range(50):
            g.replay()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            g.replay()
        torch.cuda.synchronize()
    print("loop_s=%.6f" % (time.perf_counter() - t))


def loop_eager(n, torch_profiler=False):
    x = torch.randn(16, 16, device="cuda")
    w = torch.randn(16, 16, device="cuda")

    def step():
        y = x
        for _ in range(20):  # small kernels: the host's launches are the cost
            y = torch.relu(y @ w)
        return y

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    if torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True)
    else:
        import contextlib
        ctx = contextlib.nullcontext()
    with ctx:
        t = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
    print("loop_s=%.6f" % dt)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "layers":
        layers(sys.argv[2])
    elif what == "llama_graph":
        llama_graph()
    elif what == "llama_compile":
        llama_compile()
    elif what == "loop_graph":
        loop_graph(int(sys.argv[2]))
    elif what == "loop_eager":
        loop_eager(int(sys.argv[2]), len(sys.argv) > 3 and sys.argv[3] == "torch")
    else:
        sys.exit(__doc__)
