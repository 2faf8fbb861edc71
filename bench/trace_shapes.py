#!/usr/bin/env python3
"""Hostile shapes for the trace tools: every verb must stay O(n log n). Builds, in a temporary
folder, (a) a trace of 300k ops with distinct names, (b) two traces of 100k distinct names each,
(c) a trace of 100k steps written in reverse order, (e) a trace of 100k ops each nested in the one
before, and (d) the same shapes at a third of the size; times `linfuse trace
summary|table|diff|svg|breakdown` (and table --group-by-stack) on each (wall seconds, one run each) and
prints the ratio of the large to the small: near 3 (or 3 log 3 / log n) is n log n, near 9 is
quadratic.

usage: bench/trace_shapes.py BUILD/linfuse"""
import json, os, subprocess, sys, tempfile, time


def trace(events):
    return {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", "baseTimeNanoseconds": 0,
            "traceEvents": events}


def ops_trace(n, prefix):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
           "dur": float(n + 10)}]
    for i in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "%s_op_%d" % (prefix, i), "pid": 1, "tid": 1,
                   "ts": float(i + 1), "dur": 0.5})
    return trace(ev)


def steps_trace(n):
    ev = []
    for i in reversed(range(n)):  # written last step first
        ev.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % i, "pid": 1, "tid": 1,
                   "ts": float(10 * i), "dur": 9.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": float(10 * i + 1),
                   "dur": 5.0})
    return trace(ev)


def nested_trace(n):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
           "dur": float(4 * n)}]
    for i in range(n):  # each op inside the one before: a stack n deep
        ev.append({"ph": "X", "cat": "cpu_op", "name": "op%d" % (i % 10), "pid": 1, "tid": 1, "ts": float(1 + i),
                   "dur": float(2 * n - 2 * i)})
    return trace(ev)


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("%s failed: %s" % (" ".join(cmd), p.stderr[-500:]))
    return dt


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_ = sys.argv[1]
    tmp = tempfile.mkdtemp()
    rows = []
    for scale in (3, 1):
        k = 1000 // scale
        files = {}
        for name, obj in (("names", ops_trace(300 * k, "a")), ("names_a", ops_trace(100 * k, "a")),
                          ("names_b", ops_trace(100 * k, "b")), ("steps", steps_trace(100 * k)),
                          ("nested", nested_trace(100 * k))):
            files[name] = os.path.join(tmp, "%s_%d.json" % (name, scale))
            with open(files[name], "w") as f:
                json.dump(obj, f)
        rows.append((scale, {
            "summary, 300k names": run([bin_, "trace", "summary", files["names"]]),
            "table, 300k names": run([bin_, "trace", "table", files["names"], "--row-limit", "5"]),
            "diff, 2 x 100k names": run([bin_, "trace", "diff", files["names_a"], files["names_b"]]),
            "svg, 100k steps reversed": run([bin_, "trace", "svg", files["steps"], "--step", "99",
                                             "-o", os.path.join(tmp, "s.svg")]),
            "breakdown, 100k steps rev.": run([bin_, "trace", "breakdown", files["steps"]]),
            "table by stack, 100k nested": run([bin_, "trace", "table", "--group-by-stack", "1", files["nested"]]),
        }))
    big, small = rows[1][1], rows[0][1]
    print("%-28s %10s %10s %7s" % ("verb and shape", "full s", "1/3 s", "ratio"))
    for key in big:
        print("%-28s %10.2f %10.2f %7.2f" % (key, big[key], small[key], big[key] / max(small[key], 1e-9)))
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
