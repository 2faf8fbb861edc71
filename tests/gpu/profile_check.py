#!/usr/bin/env python3
"""`linfuse profile` on a GPU, against PyTorch's own profiler and linfuse's in-process one
(tests/gpu/profile_prog.py holds the programs):
 1. the blog's MLP in eager and compiled modes, with record_function and NVTX ranges, profiled by
    torch.profiler and by `linfuse profile --steps 2:4`: the same kernels per step by name and
    count, device time per step and per kernel within 5%, the "mlp_fwd" range's device time too;
 2. `linfuse kernels-mlp` traced from outside: the kernels of its in-process trace, by name, the
    number of forwards it ran times each;
 3. a CUDA graph replay: every node's kernel tied to its cudaGraphLaunch; a plain CUDA C++ program
    (tests/gpu/profile_c_prog.cu: <<<>>>, cudaLaunchKernelEx, cuLaunchKernel, a graph, copies, a
    memset, NVTX steps, a second thread, exit status 5) traced whole;
 4. two torchrun ranks: two rank files that `linfuse trace merge` joins (skipped on one GPU);
 and the ways a process ends: exit() from a thread, SIGTERM, Ctrl-C in Python, --duration;
 --capture-range and --kernels-only; where traces go (a relative --output for a CMD that changes
 directory, never over CMD's redirected output, no directories left when nothing was traced); and a program that runs torch.profiler itself (CUPTI takes one
 client per process): linfuse says its buffers went to the other client.
usage: tests/gpu/profile_check.py build/linfuse WORKDIR"""
import collections
import glob
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile_prog.py")
PY = sys.executable
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
checks = fails = 0


def check(what, ok, detail=""):
    global checks, fails
    checks += 1
    print("%s: %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    fails += not ok


def sh(args, timeout=600, **kw):
    t = time.time()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    print("$ %s  (%.1f s, exit %d)" % (" ".join(args)[:160], time.time() - t, p.returncode), flush=True)
    return p


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def per_step(trace):
    """Kernels of each ProfilerStep#N, by their launch (the call with their correlation): name ->
    (count, total us) over the steps, and the number of steps."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kern = collections.defaultdict(lambda: [0, 0.0])
    for e in ev:
        if e.get("cat") != "kernel":
            continue
        t = launch.get(e["args"].get("correlation"), e["ts"])
        if any(a <= t <= b for a, b in steps):
            kern[e["name"]][0] += 1
            kern[e["name"]][1] += e["dur"]
    return kern, len(steps)


def within(a, b, tol=0.05):
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-9)


def profile_run(args, out, cmd, **kw):
    return sh([BIN, "profile", "--row-limit", "8"] + args + ["-o", out, "--"] + cmd, **kw)


def one_trace(path_or_dir):
    if os.path.isfile(path_or_dir):
        return path_or_dir
    found = sorted(glob.glob(os.path.join(path_or_dir, "*.json*")))
    return found[0] if len(found) == 1 else None


def table_row(trace_path, name):
    p = sh([BIN, "trace", "table", trace_path, "--format", "json", "--row-limit", "-1"])
    rows = json.loads(p.stdout)["rows"] if p.returncode == 0 else []
    return next((r for r in rows if r["name"] == name), None)


# --- 1. the blog's MLP: torch.profiler against linfuse profile ---
def check_mlp(mode):
    torch_json = os.path.join(WORK, "torch_%s.json" % mode)
    ours_json = os.path.join(WORK, "ours_%s.json" % mode)
    p = sh([PY, PROG, "mlp", mode, "torch", torch_json])
    check("mlp %s under torch.profiler" % mode, p.returncode == 0 and os.path.exists(torch_json), p.stderr[-500:])
    p = profile_run(["--steps", "2:4"], ours_json, [PY, PROG, "mlp", mode, "nvtx"])
    check("mlp %s under linfuse profile" % mode, p.returncode == 0 and os.path.exists(ours_json), p.stderr[-2000:])
    check("mlp %s: no word of another CUPTI client" % mode, "another CUPTI client" not in p.stderr, p.stderr[-800:])
    if not (os.path.exists(torch_json) and os.path.exists(ours_json)):
        return
    print(p.stderr[-3000:])
    tk, tn = per_step(load(torch_json))
    ok, on = per_step(load(ours_json))
    check("mlp %s: 3 steps each" % mode, tn == 3 and on == 3, "torch %d, ours %d" % (tn, on))
    check("mlp %s: the same kernel names" % mode, set(tk) == set(ok),
          "only torch: %s; only ours: %s" % (sorted(set(tk) - set(ok))[:3], sorted(set(ok) - set(tk))[:3]))
    for name in sorted(set(tk) & set(ok)):
        tc, tt = tk[name][0] / max(tn, 1), tk[name][1] / max(tn, 1)
        oc, ot = ok[name][0] / max(on, 1), ok[name][1] / max(on, 1)
        check("mlp %s: %.50s: %g/step, %.2f us (torch %g, %.2f us)" % (mode, name, oc, ot, tc, tt),
              tc == oc and within(tt, ot))
    tt = sum(v[1] for v in tk.values()) / max(tn, 1)
    ot = sum(v[1] for v in ok.values()) / max(on, 1)
    check("mlp %s: device time per step %.2f us (torch %.2f us) within 5%%" % (mode, ot, tt), within(tt, ot))
    tr, orow = table_row(torch_json, "mlp_fwd"), table_row(ours_json, "mlp_fwd")
    check("mlp %s: mlp_fwd's device time in the table (ours %s, torch %s)" % (
        mode, orow and orow["device_total_us"], tr and tr["device_total_us"]),
          tr is not None and orow is not None and orow["calls"] == 3 and within(
              orow["device_total_us"], sum(v[1] for v in ok.values())))


# --- 2. kernels-mlp from outside against its own trace ---
def trace_printed(stdout):
    paths = [l.split(": ", 1)[1] for l in stdout.splitlines() if l.startswith("trace: ")]
    return paths[-1] if paths else None


def check_kernels_mlp():
    flags = ["kernels-mlp", "--no-gemm-autotune"]
    p = sh([BIN] + flags + ["--out", os.path.join(WORK, "inproc")])
    inproc = trace_printed(p.stdout)
    check("kernels-mlp in process", p.returncode == 0 and inproc, p.stderr[-500:])
    out = os.path.join(WORK, "outside")
    q = profile_run([], out, [BIN] + flags + ["--out", os.path.join(WORK, "inproc2")])
    ours = one_trace(out)
    check("kernels-mlp under linfuse profile: one trace", q.returncode == 0 and ours, q.stderr[-2000:])
    if not (inproc and ours):
        return
    k_in, steps = per_step(load(inproc))
    forwards = 5  # the schedule's wait 1 + warmup 1 + active 3, each one forward
    whole = collections.Counter(e["name"] for e in load(ours)["traceEvents"] if e.get("cat") == "kernel")
    for name, (n, _) in sorted(k_in.items()):
        check("kernels-mlp: %.60s: %d in %d forwards (in process %g a step)" % (name, whole.get(name, 0), forwards,
                                                                              n / steps),
              whole.get(name, 0) == forwards * n / steps)
    extra = set(whole) - set(k_in)
    print("kernels-mlp: kernels outside the steps only: %s" % (sorted(extra) or "none"))


# --- 3. a CUDA graph's node kernels tied to their launch ---
def check_graph():
    out = os.path.join(WORK, "graph.json")
    p = profile_run(["--steps", "0:4"], out, [PY, PROG, "graph"])
    check("graph replay under linfuse profile", p.returncode == 0 and os.path.exists(out), p.stderr[-2000:])
    if not os.path.exists(out):
        return
    ev = load(out)["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaGraphLaunch"}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    per = collections.Counter(e["args"].get("correlation") for e in kernels)
    check("graph: 5 replays, each a cudaGraphLaunch", len(launches) == 5, "%d" % len(launches))
    check("graph: every kernel tied to a graph launch, with its graph ids",
          all(e["args"].get("correlation") in launches and "graph id" in e["args"] for e in kernels),
          "%d kernels" % len(kernels))
    check("graph: each replay's node kernels (5: 3 GEMMs, gelu, mul)",
          sorted(per[c] for c in launches) == [5] * 5, str(dict(per)))
    s = json.loads(sh([BIN, "trace", "summary", out, "--json"]).stdout)["ranks"][0]
    check("graph: trace summary counts them as graph kernels", s["graph_kernels_per_step"] == 5 and
          s["kernels_per_step"] == 5, str(s))


# --- 3b. a plain CUDA C++ program: no framework, every way of launching ---
def c_program():
    """tests/gpu/profile_c_prog.cu built: LINFUSE_PROFILE_C_PROG names one built already, else nvcc
    (on PATH or in /usr/local/cuda/bin) builds it; None when there is no nvcc."""
    given = os.environ.get("LINFUSE_PROFILE_C_PROG")
    if given:
        return given
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        return None
    exe = os.path.join(WORK, "profile_c_prog")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile_c_prog.cu")
    p = sh([nvcc, "-O2", "-arch=sm_90", "-o", exe, src, "-lcuda"])
    return exe if p.returncode == 0 else None


def check_c_program():
    exe = c_program()
    if not exe:
        print("c program: skipped (no nvcc to build tests/gpu/profile_c_prog.cu)")
        return
    out = os.path.join(WORK, "cprog.json")
    p = profile_run([], out, [exe])
    check("C program: its exit status 5 passed on, its trace written", p.returncode == 5 and os.path.exists(out),
          "exit %d: %s" % (p.returncode, p.stderr[-1500:]))
    if not os.path.exists(out):
        return
    ev = [e for e in load(out)["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    by = collections.Counter(e["name"].split("(")[0] for e in kernels)
    check("C program: saxpy 4, scale 6, add 6 kernels", (by["saxpy"], by["scale"], by["add"]) == (4, 6, 6), str(by))
    launched = collections.Counter(calls[e["args"]["correlation"]]["name"] for e in kernels
                                   if e["args"].get("correlation") in calls)
    check("C program: each kernel under its launch: <<<>>>, cudaLaunchKernelEx, cuLaunchKernel, cudaGraphLaunch",
          sum(launched.values()) == 16 and launched["cuLaunchKernel"] == 3 and launched["cudaGraphLaunch"] == 6 and
          any(n.startswith("cudaLaunchKernelEx") and c == 3 for n, c in launched.items()), str(dict(launched)))
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    sets = [e for e in ev if e.get("cat") == "gpu_memset"]
    check("C program: 6 copies of 4 MiB, 3 sets", len(copies) == 6 and len(sets) == 3 and
          all(e["args"].get("bytes") == 4 << 20 for e in copies + sets),
          "%d copies %s, %d sets" % (len(copies), [e["args"].get("bytes") for e in copies][:2], len(sets)))
    ranges = collections.Counter(e["name"] for e in ev if e.get("cat") == "user_annotation")
    check("C program: NVTX ranges: 3 steps, 3 io, the capture's", ranges == {
        "ProfilerStep#1": 1, "ProfilerStep#2": 1, "ProfilerStep#3": 1, "io": 3, "capture": 1, "scale_part": 1,
        "add_part": 1}, str(dict(ranges)))
    # the graph's kernels, replayed in each step, traced back to the ranges open at their capture:
    # scale under capture > scale_part, add under capture > add_part, an instance per replay
    spans = {e["args"].get("External id"): e for e in ev if e.get("cat") == "gpu_user_annotation"}
    replayed = [e for e in kernels if e["args"].get("correlation") in calls and
                calls[e["args"]["correlation"]]["name"] == "cudaGraphLaunch"]
    under = collections.Counter((e["name"].split("(")[0], spans[e["args"]["External id"]]["name"]) for e in replayed
                                if e["args"].get("External id") in spans)
    check("C program: replayed scale under scale_part, add under add_part, 3 each",
          under == {("scale", "scale_part"): 3, ("add", "add_part"): 3}, str(dict(under)))
    check("C program: each replayed kernel names its capture's call",
          all(e["args"].get("captured by", "").startswith("cudaLaunchKernel") for e in replayed),
          str([e["args"].get("captured by") for e in replayed][:3]))
    outer = collections.Counter(e["name"] for e in ev if e.get("cat") == "gpu_user_annotation")
    check("C program: the capture range spans both kernels once a replay", outer["capture"] == 3, str(dict(outer)))
    tids = {calls[e["args"]["correlation"]]["tid"] for e in kernels if e["name"].startswith("saxpy")
            and e["args"].get("correlation") in calls}
    check("C program: the second thread's launch on its own thread", len(tids) == 2, str(tids))
    s = json.loads(sh([BIN, "trace", "summary", out, "--json"]).stdout)["ranks"][0]
    check("C program: trace summary: 3 steps, 5 kernels a step, 2 of them graph kernels, all of their time ranged",
          s["steps"] == 3 and s["kernels_per_step"] == 5 and s["graph_kernels_per_step"] == 2 and
          s.get("graph_ranged", 0) > 0.999, str(s))


# --- 4. two torchrun ranks, merged ---
def check_ranks():
    import torch
    if torch.cuda.device_count() < 2:
        print("ranks: skipped: this machine has %d GPU (two are needed)" % torch.cuda.device_count())
        return
    out = os.path.join(WORK, "ranks")
    p = profile_run([], out, [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", PROG, "dist"])
    files = sorted(glob.glob(os.path.join(out, "*_rank*.json")))
    check("torchrun: two rank files", p.returncode == 0 and len(files) == 2, "%s %s" % (files, p.stderr[-1500:]))
    if len(files) != 2:
        return
    merged = os.path.join(WORK, "merged.json")
    m = sh([BIN, "trace", "merge"] + files + ["-o", merged])
    s = sh([BIN, "trace", "summary", merged])
    check("torchrun: trace merge joins them", m.returncode == 0 and s.stdout.count("rank=") == 2, m.stderr + s.stdout)


# --- how a process ends, and the filters ---
def kernels_in(path):
    return [e for e in load(path)["traceEvents"] if e.get("cat") == "kernel"] if path and os.path.exists(path) else []


def check_endings():
    out = os.path.join(WORK, "exit_thread.json")
    p = profile_run([], out, [PY, PROG, "exit-thread"])
    check("exit(3) from a thread: status 3, trace written", p.returncode == 3 and len(kernels_in(out)) >= 10,
          "exit %d, %d kernels" % (p.returncode, len(kernels_in(out))))
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT (Ctrl-C in Python)")):
        out = os.path.join(WORK, "killed_%d.json" % sig)
        proc = subprocess.Popen([BIN, "profile", "--row-limit", "0", "-o", out, "--", PY, PROG, "loop", "60"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.readline()  # "ready"
        time.sleep(2)
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read()
        check("%s: status %d, trace written" % (name, rc), rc in (128 + sig, 1) and len(kernels_in(out)) > 10,
              "%d kernels; %s" % (len(kernels_in(out)), err[-500:]))
    out = os.path.join(WORK, "duration.json")
    t = time.time()
    p = profile_run(["--duration", "3"], out, [PY, PROG, "loop", "12"])
    k = kernels_in(out)
    span = (max(e["ts"] + e["dur"] for e in k) - min(e["ts"] for e in k)) / 1e6 if k else 0
    check("--duration 3: the trace stops, the program runs on (%.1f s of kernels, %.0f s run)" % (span, time.time() - t),
          p.returncode == 0 and k and span < 3.5)
    out = os.path.join(WORK, "capture.json")
    p = profile_run(["--capture-range", "mlp_fwd"], out, [PY, PROG, "mlp", "eager", "nvtx"])
    ev = [e for e in load(out)["traceEvents"] if e.get("ph") == "X"] if os.path.exists(out) else []
    names = collections.Counter(e["name"] for e in ev if e.get("cat") == "user_annotation")
    kernels = sum(e.get("cat") == "kernel" for e in ev)
    check("--capture-range mlp_fwd: its 5 forwards' 25 kernels, no step ranges", p.returncode == 0 and
          kernels == 25 and names == {"mlp_fwd": 5}, "%d kernels, ranges %s" % (kernels, dict(names)))
    out = os.path.join(WORK, "kernels_only.json")
    p = profile_run(["--kernels-only"], out, [PY, PROG, "mlp", "eager", "nvtx"])
    ev = [e for e in load(out)["traceEvents"] if e.get("ph") == "X"] if os.path.exists(out) else []
    cats = collections.Counter(e.get("cat") for e in ev)
    check("--kernels-only: kernels and ranges, no calls", p.returncode == 0 and cats["kernel"] >= 40 and
          cats["cuda_runtime"] == 0 and cats["cuda_driver"] == 0 and cats["user_annotation"] >= 10, str(dict(cats)))


# --- where the traces go: a relative --output for a CMD that changes directory, never over
# CMD's own output, no directories left when nothing was traced ---
def check_places():
    sub = os.path.join(WORK, "places")
    os.makedirs(os.path.join(sub, "elsewhere"))
    p = sh([BIN, "profile", "--row-limit", "0", "-o", "rel", "--", "sh", "-c",
            "cd elsewhere && exec %s %s loop 1" % (PY, PROG)], cwd=sub)
    found = glob.glob(os.path.join(sub, "rel", "*.json"))
    check("a relative --output, CMD in another directory: its trace in ./rel", p.returncode == 0 and len(found) == 1
          and kernels_in(found[0]), "%s %s" % (found, p.stderr[-800:]))
    with open(os.path.join(sub, "run.txt"), "w") as f:
        f.write("CMD's output\n")
    with open(os.path.join(sub, "run.txt"), "a") as f:
        p = subprocess.run([BIN, "profile", "-o", "run.json", "--", PY, PROG, "loop", "1"], stdout=f,
                           stderr=subprocess.PIPE, text=True, cwd=sub, timeout=600)
    kept = open(os.path.join(sub, "run.txt")).read()
    check("-o run.json with CMD's output in run.txt: refused (exit 2), run.txt kept",
          p.returncode == 2 and "standard output" in p.stderr and kept.startswith("CMD's output"),
          "exit %d: %s" % (p.returncode, p.stderr[-400:]))
    p = sh([BIN, "profile", "-o", "new/a/b", "--", "true"], cwd=sub)
    check("nothing traced: the directories the run made are gone", p.returncode == 0 and
          not os.path.exists(os.path.join(sub, "new")), p.stderr[-400:])


# --- a program that runs torch.profiler itself: CUPTI's one client per process ---
def check_torch_profiler_inside():
    out = os.path.join(WORK, "inside.json")
    p = profile_run([], out, [PY, PROG, "mlp", "eager", "torch", os.path.join(WORK, "inside_torch.json")])
    check("a program under torch.profiler, profiled: it runs, and linfuse says its buffers went to another CUPTI "
          "client", p.returncode == 0 and "went to another CUPTI client" in p.stderr, p.stderr[-1500:])


def main():
    subprocess.run(["nvidia-smi", "-L"])
    check_mlp("eager")
    check_mlp("compile")
    check_kernels_mlp()
    check_graph()
    check_c_program()
    check_ranks()
    check_endings()
    check_places()
    check_torch_profiler_inside()
    print("profile_check: %d checks, %d failed" % (checks, fails))
    sys.exit(1 if fails else 0)


main()
