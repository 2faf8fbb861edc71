#!/usr/bin/env python3
"""Scale check for `linfuse trace summary`: build a ~200 MB Kineto trace by repeating the steps
of a real trace, then summarize it twice in one run: with linfuse, and with Python's json module
plus a dictionary aggregation doing the same counting. Reports wall time and peak memory (max
RSS of each child process). --stats also times `linfuse trace stats` over nsys's default reports
and every report; --export times `linfuse trace export --sqlite` (each its own process's peak).

usage: bench/trace_scale.py BUILD/linfuse SOURCE_TRACE.json [--mb 200] [--keep] [--stats] [--export]
"""
import json, os, resource, subprocess, sys, tempfile, time

PY_SUMMARY = r'''
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
         if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
steps.sort()
launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("ph") == "X"
          and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
import bisect
starts = [s for s, _ in steps]
def in_step(t):
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and t <= steps[i][1]
kernels, ops, dev = {}, 0, 0.0
for e in ev:
    if e.get("ph") != "X":
        continue
    c = e.get("cat")
    if c in ("kernel", "gpu_memcpy", "gpu_memset"):
        t = launch.get(e.get("args", {}).get("correlation"), e["ts"])
        if in_step(t):
            dev += e["dur"]
            if c == "kernel":
                kernels[e["name"]] = kernels.get(e["name"], 0) + 1
    elif c == "cpu_op" and in_step(e["ts"]):
        ops += 1
n = len(steps)
busy = dev / sum(b - a for a, b in steps)
print("kernels/step=%g cpu_ops/step=%g device_busy=%.0f%% verdict=%s" % (
    sum(kernels.values()) / n, ops / n, 100 * min(busy, 1), "compute-bound" if busy >= 0.5 else "overhead-bound"))
'''


def grow(src, dst, target_mb):
    d = json.load(open(src))
    ev = d["traceEvents"]
    steps = sorted((e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    body = [e for e in ev if e.get("ph") in ("X", "s", "f") and lo <= e.get("ts", -1) <= hi + 10000]
    meta = [e for e in ev if e.get("ph") == "M"]
    period = hi - lo + 10.0
    with open(dst, "w") as f:
        head = {k: v for k, v in d.items() if k not in ("traceEvents", "traceName")}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        copy, size, first = 0, 0, True
        while size < target_mb * 1e6:
            shift, off = copy * period, copy * 10_000_000
            for e in body:
                e2 = dict(e)
                e2["ts"] = round(e["ts"] + shift, 3)
                if "id" in e2:
                    e2["id"] = e["id"] + off
                if "args" in e2:
                    a = dict(e2["args"])
                    for k in ("External id", "correlation"):
                        if k in a:
                            a[k] = a[k] + off
                    e2["args"] = a
                if e2.get("name", "").startswith("ProfilerStep#"):
                    e2["name"] = "ProfilerStep#%d" % (int(e["name"][13:]) + copy * len(steps))
                s = ("" if first else ",\n") + json.dumps(e2)
                first = False
                f.write(s)
                size += len(s)
            copy += 1
        for e in meta:
            f.write(",\n" + json.dumps(e))
        f.write('\n], "traceName": "%s"}\n' % dst)
    return copy * len(steps), os.path.getsize(dst)


def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if out.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), out.stderr))
    return out.stdout.splitlines()[0], wall, peak_kb, before


# A child's own peak: a wrapper process whose only child it is (RUSAGE_CHILDREN then is that child's).
PEAK = ("import resource, subprocess, sys, time; t = time.time(); r = subprocess.run(sys.argv[1:], "
        "stdout=subprocess.DEVNULL); print('%d %.3f %d' % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
        "time.time() - t, r.returncode))")


def alone(cmd):
    out = subprocess.run([sys.executable, "-c", PEAK] + cmd, capture_output=True, text=True).stdout.split()
    kb, wall, rc = int(out[0]), float(out[1]), int(out[2])
    if rc:
        sys.exit("failed: %s" % " ".join(cmd))
    return wall, kb


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mb = float(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 200
    if "--mb" in sys.argv:
        args.remove(sys.argv[sys.argv.index("--mb") + 1])
    linfuse, src = args
    tmp = tempfile.mkdtemp()
    big = os.path.join(tmp, "big.json")
    steps, size = grow(src, big, mb)
    print("trace: %d steps, %.1f MB (from %s)" % (steps, size / 1e6, src))
    # linfuse first: RUSAGE_CHILDREN's max RSS is the largest child so far, so the smaller
    # process must run first for both readings to be its own
    rows = []
    for name, cmd in (("linfuse", [linfuse, "trace", "summary", big]),
                      ("python json + dict", [sys.executable, "-c", PY_SUMMARY, big])):
        line, wall, peak, before = run(cmd)
        rows.append((name, wall, peak, line, before))
    for name, wall, peak, line, before in rows:
        note = "" if peak > before else " (max RSS not above an earlier child's: bound only)"
        print("%-20s %7.2f s  peak %7.0f MB%s  %s" % (name, wall, peak / 1024, note, line))
    if "--stats" in sys.argv:
        for reports in ("nvtx_sum,cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum",
                        "cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,"
                        "cuda_kern_exec_sum,cuda_gpu_trace,nvtx_sum,nvtx_gpu_proj_sum,comm_sum"):
            wall, kb = alone([linfuse, "trace", "stats", big, "--report", reports])
            print("%-20s %7.2f s  peak %7.0f MB  (%s)" % ("trace stats", wall, kb / 1024, reports))
    if "--export" in sys.argv:
        db = os.path.join(tmp, "big.db")
        wall, kb = alone([linfuse, "trace", "export", big, "--sqlite", db])
        print("%-20s %7.2f s  peak %7.0f MB  (%.1f MB database)" % ("trace export", wall, kb / 1024,
                                                                     os.path.getsize(db) / 1e6))
        os.remove(db)
    if "--keep" not in sys.argv:
        os.remove(big)
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
