#!/usr/bin/env python3
"""CUDA graph replays traced back to their captures by `linfuse profile`, on a GPU
(tests/gpu/graph_prog.py holds the programs):
 1. four MLP layers with an NVTX range each, run eagerly and replayed as a torch.cuda.graph of the
    same work: the same kernels under each range, and each range's device time within 5%;
 2. a transformers Llama with a range per decoder layer, its forward captured with
    torch.cuda.graph (as vLLM and SGLang capture): the share of replayed kernel time under a
    capture-time range (goal: >= 99%) and under a Python frame of the model's own source
    (modeling_llama.py; goal: >= 95%);
 3. the same under torch.compile(mode="reduce-overhead"): the shares under a range, under the
    generated code's frames, and under the model's source;
 4. what it costs: a graph replay loop's wall time profiled with and without the captures
    recorded (goal <= 1.03x); a host-bound eager loop unprofiled, profiled, with --python-stack
    (goal <= 1.5x of unprofiled) and under torch.profiler(with_stack=True), in one run.
Prints every number; writes them to WORKDIR/graph_check.json.
usage: tests/gpu/graph_check.py build/linfuse WORKDIR"""
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_prog.py")
PY = sys.executable
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
checks = fails = 0
numbers = {}


def check(what, ok, detail=""):
    global checks, fails
    checks += 1
    print("%s: %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    fails += not ok


def sh(args, timeout=600, env=None):
    t = time.time()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    print("$ %s  (%.1f s, exit %d)" % (" ".join(args)[:160], time.time() - t, p.returncode), flush=True)
    if p.returncode:
        print(p.stderr[-3000:])
    return p


def profile(name, args, flags=()):
    out = os.path.join(WORK, name + ".json")
    p = sh([BIN, "profile", "--row-limit", "0"] + list(flags) + ["-o", out, "--", PY, PROG] + args)
    return (json.load(open(out)) if os.path.exists(out) else None), p


def events(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def kernels_by_range(trace, only=None):
    """Each GPU span's name -> (kernels under it as their innermost range: count, us), of the
    kernels `only` holds (None: every one)."""
    ev = events(trace)
    span = {e["args"]["External id"]: e["name"] for e in ev
            if e.get("cat") == "gpu_user_annotation" and "External id" in e.get("args", {})}
    keep = None if only is None else {id(k) for k in only}
    out = collections.defaultdict(lambda: [0, 0.0])
    for e in ev:
        if keep is not None and id(e) not in keep:
            continue
        if e.get("cat") == "kernel" and e.get("args", {}).get("External id") in span:
            r = out[span[e["args"]["External id"]]]
            r[0] += 1
            r[1] += e["dur"]
    return out


def replayed(trace):
    ev = events(trace)
    calls = {e["args"]["correlation"]: e["name"] for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    return [e for e in ev if e.get("cat") == "kernel" and
            calls.get(e.get("args", {}).get("correlation"), "").startswith("cudaGraphLaunch")]


def shares(trace, frame_has):
    """Of the replayed kernels' time: under a GPU span, and with a frame holding each text."""
    ks = replayed(trace)
    ev = events(trace)
    spans = {e["args"]["External id"] for e in ev if e.get("cat") == "gpu_user_annotation"}
    total = sum(k["dur"] for k in ks) or 1e-9
    ranged = sum(k["dur"] for k in ks if k.get("args", {}).get("External id") in spans) / total
    framed = {t: sum(k["dur"] for k in ks if any(t in f for f in k["args"].get("Python stack", []))) / total
              for t in frame_has}
    return len(ks), ranged, framed


def check_layers():
    eager, _ = profile("layers_eager", ["layers", "eager"])
    graph, _ = profile("layers_graph", ["layers", "graph"])
    if not eager or not graph:
        check("layers: both traces written", False)
        return
    # six eager steps against six replays (the graph's warm-ups on a side stream left out)
    a, b = kernels_by_range(eager), kernels_by_range(graph, replayed(graph))
    layers = ["layer.%d" % i for i in range(4)]
    for name in layers:
        ea, ga = a.get(name, [0, 0.0]), b.get(name, [0, 0.0])
        check("layers: %s: the same kernels (eager %d in 6 steps, graph %d in 6 replays)" % (name, ea[0], ga[0]),
              ea[0] == ga[0] and ea[0] > 0)
        check("layers: %s: device time within 5%% (eager %.1f us, graph %.1f us)" % (name, ea[1], ga[1]),
              abs(ea[1] - ga[1]) <= 0.05 * max(ea[1], ga[1]))
    n, ranged, framed = shares(graph, ["graph_prog.py"])
    numbers["layers_graph"] = {"replayed": n, "ranged": ranged, "framed_own_source": framed["graph_prog.py"]}
    check("layers: every replayed kernel under a capture range (%.4f) with the program's frames (%.4f)" % (
        ranged, framed["graph_prog.py"]), n > 0 and ranged >= 0.99 and framed["graph_prog.py"] >= 0.95)


def check_llama():
    t, p = profile("llama_graph", ["llama_graph"])
    if not t:
        check("llama torch.cuda.graph: trace written", False, p.stderr[-1000:])
        return
    n, ranged, framed = shares(t, ["modeling_llama.py"])
    numbers["llama_graph"] = {"replayed": n, "ranged": ranged, "framed_model_source": framed["modeling_llama.py"]}
    check("llama torch.cuda.graph: %d replayed kernels, %.2f%% of their time under a capture-time range (>= 99%%)"
          % (n, 100 * ranged), n > 0 and ranged >= 0.99)
    check("llama torch.cuda.graph: %.2f%% under a frame of modeling_llama.py (>= 95%%)"
          % (100 * framed["modeling_llama.py"]), framed["modeling_llama.py"] >= 0.95)
    t, p = profile("llama_compile", ["llama_compile"])
    if not t:
        check("llama torch.compile: trace written", False, p.stderr[-1000:])
        return
    n, ranged, framed = shares(t, ["modeling_llama.py", "torchinductor"])
    numbers["llama_compile"] = {"replayed": n, "ranged": ranged, "framed_model_source": framed["modeling_llama.py"],
                                "framed_generated": framed["torchinductor"]}
    check("llama torch.compile(reduce-overhead): %d replayed kernels; %.2f%% under a range, %.2f%% under generated "
          "code's frames, %.2f%% under modeling_llama.py" % (n, 100 * ranged, 100 * framed["torchinductor"],
                                                             100 * framed["modeling_llama.py"]),
          n > 0 and ranged >= 0.99)


def timed(cmd, env=None):
    p = sh(cmd, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("loop_s="):
            return float(line[7:])
    return float("nan")


def check_cost():
    prof = [BIN, "profile", "--row-limit", "0", "-o", os.path.join(WORK, "cost")]
    with_c, without = [], []
    for _ in range(3):  # taking turns, so drift falls on both
        with_c.append(timed(prof + ["--", PY, PROG, "loop_graph", "20000"]))
        without.append(timed(prof + ["--no-graph-captures", "--", PY, PROG, "loop_graph", "20000"]))
    r = statistics.median(with_c) / statistics.median(without)
    numbers["graph_loop"] = {"with_captures_s": with_c, "without_s": without, "ratio": r}
    check("graph replay loop: %.3fx with captures recorded (%s s) against without (%s s) (<= 1.03x)" % (
        r, ["%.4f" % v for v in with_c], ["%.4f" % v for v in without]), r <= 1.03)
    plain, traced, stack, torchp = [], [], [], []
    for _ in range(3):
        plain.append(timed([PY, PROG, "loop_eager", "2000"]))
        traced.append(timed(prof + ["--", PY, PROG, "loop_eager", "2000"]))
        stack.append(timed(prof + ["--python-stack", "--", PY, PROG, "loop_eager", "2000"]))
        torchp.append(timed([PY, PROG, "loop_eager", "2000", "torch"]))
    m = {k: statistics.median(v) for k, v in (("plain", plain), ("traced", traced), ("python_stack", stack),
                                              ("torch_with_stack", torchp))}
    numbers["eager_loop"] = {"runs": {"plain": plain, "traced": traced, "python_stack": stack,
                                      "torch_with_stack": torchp}, "medians": m}
    r = m["python_stack"] / m["plain"]
    check("eager loop: --python-stack %.2fx of unprofiled (<= 1.5x); traced %.2fx; torch.profiler(with_stack) %.2fx"
          % (r, m["traced"] / m["plain"], m["torch_with_stack"] / m["plain"]), r <= 1.5)


check_layers()
check_llama()
check_cost()
json.dump(numbers, open(os.path.join(WORK, "graph_check.json"), "w"), indent=1)
print(json.dumps(numbers, indent=1))
print("graph_check: %d checks, %d failed" % (checks, fails))
sys.exit(1 if fails else 0)
