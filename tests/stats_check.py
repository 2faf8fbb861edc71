#!/usr/bin/env python3
"""`linfuse trace stats` against a computation of its own: each report of nsys's names recomputed
here from the trace's JSON events in float64 (nsys's definitions, as docs/traces.md gives them)
and compared with the CSV linfuse prints, cell for cell, to the printed precision. Run over the
reference traces given and over a made-up trace whose cases tell each definition from a wrong one:
the sample standard deviation (two values: n-1 and n differ), the median of an even count, a
share of the report's own total, a queue time left out where the kernel began before its call
returned (QCount < Count), an API name's version suffix cut, copies named as nsys names them, a
range projected onto the work launched inside it on its own thread only and counted in every
range around it, a range without GPU work left out, nesting levels and children.
usage: stats_check.py LINFUSE WORKDIR [TRACE.json|DIR ...]"""
import csv
import io
import json
import os
import statistics
import subprocess
import sys

BIN, WORK = sys.argv[1], sys.argv[2]
fails = checks = 0


def check(ok, what):
    global fails, checks
    checks += 1
    if not ok:
        fails += 1
        print("FAIL: " + what)


def events(path):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    out = []
    for e in ev:
        if e.get("ph") != "X":
            continue
        e = dict(e)
        e["t0"] = round(e["ts"] * 1000)
        e["d"] = max(0, round(e["dur"] * 1000))
        out.append(e)
    return t, out


def summary(vals):
    vals = sorted(vals)
    n = len(vals)
    return [sum(vals), n, sum(vals) / n, statistics.median(vals), vals[0], vals[-1],
            statistics.stdev(vals) if n > 1 else 0.0]


def sums(groups, share=True):
    rows = []
    total = sum(sum(v) for v in groups.values())
    for name, v in groups.items():
        s = summary(v)
        rows.append(([100.0 * s[0] / total if total else 0] if share else []) + s + [name])
    return rows


MEM = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
       "PtoP": "Peer-to-Peer"}


def mem_name(e):
    if e["cat"] == "gpu_memset":
        return "[CUDA memset]"
    return next(("[CUDA memcpy %s]" % v for k, v in MEM.items() if k in e["name"]), "[CUDA memcpy Unknown]")


def api_name(n):
    return n[:-6] if len(n) > 6 and n[-6] == "_" and n[-5] == "v" else n


def expected(trace, ev):
    by = {}
    work = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    merged = isinstance(trace, dict) and trace.get("linfuse_merged_ranks", 0) > 0

    def corr(e):  # within a rank in a merged trace: each rank counts its own from 1
        c = e.get("args", {}).get("correlation")
        return (e["pid"], c) if merged else c
    calls = {corr(e): e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    g = {}
    for e in work:
        if e["cat"] == "kernel":
            g.setdefault(e["name"], []).append(e["d"])
    by["cuda_gpu_kern_sum"] = sums(g)
    g = {}
    for e in work:
        if e["cat"] != "kernel":
            g.setdefault(mem_name(e), []).append(e["d"])
    by["cuda_gpu_mem_time_sum"] = sums(g)
    g = {}
    for e in work:
        if e["cat"] != "kernel":
            g.setdefault(mem_name(e), []).append(e["args"].get("bytes", 0) / 1e6)
    by["cuda_gpu_mem_size_sum"] = sums(g, share=False)
    g = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            g.setdefault(api_name(e["name"]), []).append(e["d"])
    by["cuda_api_sum"] = sums(g)
    g = {}
    for k in work:
        a = calls.get(corr(k))
        if k["cat"] != "kernel" or a is None:
            continue
        a_end, k_end = a["t0"] + a["d"], k["t0"] + k["d"]
        key = (a["pid"], a["tid"], k["args"].get("device", k["pid"]), api_name(a["name"]), k["name"])
        q = k["t0"] - a_end
        g.setdefault(key, []).append((max(a_end, k_end) - a["t0"], a["d"], q if q >= 0 else None, k["d"]))
    rows = []
    for key, v in g.items():
        row = [key[0], key[1], key[2], len(v), sum(1 for x in v if x[2] is not None)]
        for i in range(4):
            vals = [x[i] for x in v if x[i] is not None]
            row += (summary(vals)[2:] if vals else [None] * 5)
        rows.append(row + [key[3], key[4]])
    by["cuda_kern_exec_sum"] = rows
    ranges = [e for e in ev if e.get("cat") == "user_annotation"]

    def rname(e):
        return "%s:%s" % (e.get("args", {}).get("domain", ""), e["name"])
    g = {}
    for e in ranges:
        g.setdefault(rname(e), []).append(e["d"])
    by["nvtx_sum"] = [r[:8] + ["PushPop", r[8]] for r in sums(g)]
    launched = {}  # correlation -> (call, [work])
    for k in work:
        a = calls.get(corr(k))
        if a is not None:
            launched.setdefault(corr(k), (a, []))[1].append(k)
    inst = []
    for r in ranges:
        lo, hi = r["t0"], r["t0"] + r["d"]
        mine = [(a, ks) for a, ks in launched.values() if a["pid"] == r["pid"] and a["tid"] == r["tid"] and
                lo <= a["t0"] and a["t0"] + a["d"] <= hi]
        first = min((k["t0"] for _, ks in mine for k in ks), default=None)
        last = max((k["t0"] + k["d"] for _, ks in mine for k in ks), default=None)
        inst.append(dict(r=r, lo=lo, hi=hi, ops=len(mine), proj=(last - first) if mine else 0))
    for x in inst:  # the tightest range around each on its thread
        around = [y for y in inst if y is not x and y["r"]["pid"] == x["r"]["pid"] and y["r"]["tid"] ==
                  x["r"]["tid"] and y["lo"] <= x["lo"] and x["hi"] <= y["hi"] and
                  (y["lo"], -y["hi"]) < (x["lo"], -x["hi"])]
        x["depth"] = len(around)
        x["parent"] = max(around, key=lambda y: (y["lo"], -y["hi"])) if around else None
    for x in inst:
        x["kids"] = sum(1 for y in inst if y["parent"] is x and y["ops"])
    g = {}
    for x in inst:
        if x["ops"]:
            g.setdefault(rname(x["r"]), []).append(x)
    rows = []
    for name, xs in g.items():
        s = summary([x["proj"] for x in xs])
        n = len(xs)
        ops = sum(x["ops"] for x in xs)
        rows.append([name, "PushPop", s[0], sum(x["hi"] - x["lo"] for x in xs), n] + s[2:] +
                    [ops, ops / n, sum(x["depth"] for x in xs) / n, sum(x["kids"] for x in xs) / n])
    by["nvtx_gpu_proj_sum"] = rows
    # comm_sum: the i-th collective of a group and kind on each rank is one; its skew, time, bandwidth
    size_of = {"BFloat16": 2, "Half": 2, "Float": 4, "Double": 8, "Long": 8, "Int": 4, "ComplexFloat": 8}
    seq = {}
    for k in sorted((e for e in work if e["cat"] == "kernel" and e["name"].startswith("nccl")), key=lambda e: e["t0"]):
        a = k.get("args", {})
        kind = a.get("Collective name", k["name"])
        rank = k["pid"] if merged else trace.get("distributedInfo", {}).get("rank", -1)
        lst = seq.setdefault((a.get("Process Group Name", ""), kind, rank), [])
        lst.append(k)
    inst = {}
    for (group, kind, rank), ks in seq.items():
        for i, k in enumerate(ks):
            inst.setdefault((group, kind, i), []).append(k)
    rows = []
    for (group, kind, i), ks in inst.items():
        a = ks[0].get("args", {})
        first, last = min(k["t0"] for k in ks), max(k["t0"] for k in ks)
        end, longest = max(k["t0"] + k["d"] for k in ks), max(k["d"] for k in ks)
        n = a.get("Group size", trace.get("linfuse_merged_ranks") if merged else
                  trace.get("distributedInfo", {}).get("world_size", len(ks)))
        elems = a.get("Out msg nelems" if "gather" in kind else "In msg nelems")
        size = elems * size_of[a["dtype"]] if elems is not None and a.get("dtype") in size_of else None
        time = end - last
        f = 1.0 if n < 2 else (2 * (n - 1) / n if "allreduce" in kind or "all_reduce" in kind else
                               (n - 1) / n if ("gather" in kind and "all" in kind) or "reduce_scatter" in kind
                               or "alltoall" in kind or "all_to_all" in kind else 1.0)
        alg = size / time if size is not None and time > 0 else None
        rows.append([first, kind, group, len(ks), n, size / 1e6 if size is not None else None,
                     last - first if len(ks) > 1 else None, time, longest, alg, alg * f if alg is not None else None,
                     ks[0]["name"]])
    by["comm_sum"] = rows
    return by


def number(text):
    return None if text == "" else float(text)


def compare(report, got_rows, want_rows, header, name):
    ids = 3 if report == "cuda_kern_exec_sum" else 1 if report == "comm_sum" else 0  # numbers that tell rows apart
    got = {tuple([str(int(float(c))) for c in r[:ids]] + [c for c, h in zip(r, header) if not is_num(h)]): r
           for r in got_rows}
    check(len(got_rows) == len(want_rows), "%s %s: %d rows, expected %d" % (name, report, len(got_rows),
                                                                        len(want_rows)))
    for w in want_rows:
        k = tuple([str(int(c)) for c in w[:ids]] + [c for c in w if isinstance(c, str)])
        g = got.get(k)
        if g is None:
            check(False, "%s %s: no row %s" % (name, report, k))
            continue
        nums = [c for c in w if not isinstance(c, str)]
        gnums = [number(c) for c, h in zip(g, header) if is_num(h)]
        decimals = [decimals_of(h, report) for h in header if is_num(h)]
        for h, a, b, d in zip([h for h in header if is_num(h)], gnums, nums, decimals):
            ok = (a is None and b is None) or (a is not None and b is not None and abs(a - round(b, d)) <=
                                                 0.5 * 10 ** -d + 1e-9 * abs(b))
            check(ok, "%s %s %s %s: %s, expected %s" % (name, report, k[-1][:50], h, a, b))


def is_num(h):
    return h not in ("Name", "Operation", "Style", "Range", "API Name", "Kernel Name", "Collective", "Process Group")


def decimals_of(h, report):
    if "(MB)" in h or "(GB/s)" in h:
        return 3
    if h.startswith(("Time (%)", "Avg", "Med", "StdDev", "Proj Avg", "Proj Med", "Proj StdDev", "Avg ")) or \
            (report == "cuda_kern_exec_sum" and h[1:4] in ("Avg", "Med", "Std")):
        return 1
    return 0


def run(path, name):
    trace, ev = events(path)
    want = expected(trace, ev)
    for report, rows in want.items():
        p = subprocess.run([BIN, "trace", "stats", path, "--report", report, "--format", "csv"], capture_output=True,
                           text=True)
        if p.returncode:
            check(False, "%s %s: exit %d: %s" % (name, report, p.returncode, p.stderr[-300:]))
            continue
        r = list(csv.reader(io.StringIO(p.stdout)))
        compare(report, r[1:], rows, r[0], name)


CASES = {"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "layer", "pid": 1, "tid": 1, "ts": 5, "dur": 40,
     "args": {"domain": "model"}},
    {"ph": "X", "cat": "user_annotation", "name": "empty", "pid": 1, "tid": 1, "ts": 50, "dur": 5},
    {"ph": "X", "cat": "user_annotation", "name": "other thread", "pid": 1, "tid": 2, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel_v7000", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 10,
     "args": {"correlation": 1, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel_v7000", "pid": 1, "tid": 1, "ts": 30, "dur": 20,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 35, "dur": 30,
     "args": {"correlation": 2, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 60, "dur": 3,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 70,
     "dur": 4, "args": {"correlation": 3, "device": 0, "stream": 7, "bytes": 4194304}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 80, "dur": 1,
     "args": {"correlation": 4, "device": 0, "stream": 7, "bytes": 8}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 1, "tid": 1, "ts": 78, "dur": 1,
     "args": {"correlation": 4}},
]}


def main():
    os.makedirs(WORK, exist_ok=True)
    cases = os.path.join(WORK, "stats_cases.json")
    json.dump(CASES, open(cases, "w"))
    run(cases, "cases")
    # the definitions a wrong one would miss, by value
    p = subprocess.run([BIN, "trace", "stats", cases, "--report", "cuda_gpu_kern_sum,cuda_kern_exec_sum,"
                        "cuda_api_sum,nvtx_gpu_proj_sum", "--format", "csv", "-o", os.path.join(WORK, "c")],
                       capture_output=True, text=True)
    check(p.returncode == 0, "stats -o PREFIX: %s" % p.stderr[-300:])
    rows = list(csv.reader(open(os.path.join(WORK, "c_cuda_gpu_kern_sum.csv"))))
    check(rows[1][7] == "14142.1", "StdDev of 10 and 30 us is the sample's, 14142.1 ns (not 10000.0): %s" % rows[1])
    check(rows[1][4] == "20000.0", "Med of 10 and 30 us is their mean, 20000.0 ns: %s" % rows[1])
    rows = list(csv.reader(open(os.path.join(WORK, "c_cuda_kern_exec_sum.csv"))))
    check(rows[1][3] == "2" and rows[1][4] == "1", "a queue time left out where the kernel began first: %s" % rows[1])
    rows = list(csv.reader(open(os.path.join(WORK, "c_cuda_api_sum.csv"))))
    check(any(r[-1] == "cudaLaunchKernel" for r in rows), "an API's version suffix cut: %s" % rows)
    rows = {r[0]: r for r in csv.reader(open(os.path.join(WORK, "c_nvtx_gpu_proj_sum.csv")))}
    check(":empty" not in rows and ":other thread" not in rows and "model:layer" in rows and
          rows[":ProfilerStep#1"][10] == "4" and rows["model:layer"][10] == "1",
          "projections: ranges with work on their own thread, every enclosing range counts, a call that ends "
          "after the range does not: %s" % rows)
    for arg in sys.argv[3:]:  # a trace, or a folder of them (its .json files that hold traceEvents)
        r0 = os.path.join(arg, "tp_64x128x768x3072_rank0.json")
        if os.path.isdir(arg) and os.path.exists(r0):  # PyTorch's two ranks merged: comm_sum across them
            merged = os.path.join(WORK, "merged_ranks.json")
            subprocess.run([BIN, "trace", "merge", r0, r0.replace("rank0", "rank1"), "-o", merged],
                           capture_output=True, check=True)
            run(merged, "merged_ranks.json")
        paths = [arg] if not os.path.isdir(arg) else sorted(
            os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(".json") and
            '"traceEvents"' in open(os.path.join(arg, f), errors="replace").read(4096))
        for path in paths:
            run(path, os.path.basename(path))
    print("stats_check: %d checks, %d failed" % (checks, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
