#!/usr/bin/env python3
"""`linfuse trace export --sqlite` queried back (Python's own sqlite3 module) against the trace
verbs and the JSON itself: every event in one table, kernels by name with the time
`trace stats cuda_gpu_kern_sum` gives, the steps `trace summary` counts and their kernels per step
(work counted in the step its launching call lies in, joined through the flows view), calls that
launched work joined to it, ranks of a merged trace apart, names through the strings table; an
export that fails (a trace cut short) leaves no database behind and an existing one as it was; a
FIFO (as a device) is refused, a link followed; a torch 1.13 trace's steps.
usage: export_check.py LINFUSE WORKDIR TRACE.json [MERGED.json]"""
import json
import os
import shutil
import sqlite3
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


def export(trace, db):
    if os.path.exists(db):
        os.unlink(db)
    p = subprocess.run([BIN, "trace", "export", trace, "--sqlite", db], capture_output=True, text=True)
    check(p.returncode == 0 and os.path.exists(db), "export %s: %s" % (trace, p.stderr[-300:]))
    return sqlite3.connect(db)


def one(trace, name):
    db = export(trace, os.path.join(WORK, name + ".db"))
    t = json.load(open(trace))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X" or (e.get("ph") == "i" and e.get("name") == "[memory]")]
    n = sum(db.execute("SELECT count(*) FROM %s" % tb).fetchone()[0] for tb in ("kernels", "memops", "calls", "ops",
                                                                             "memory"))
    check(n == len(ev), "%s: every event in a table: %d of %d" % (name, n, len(ev)))
    p = subprocess.run([BIN, "trace", "stats", trace, "--report", "cuda_gpu_kern_sum", "--format", "json"],
                       capture_output=True, text=True)
    want = {r["Name"]: (r["Instances"], r["Total Time (ns)"]) for r in json.loads(p.stdout)}
    got = {k: (c, s) for k, c, s in db.execute("SELECT name, count(*), sum(dur_ns) FROM kernels_named GROUP BY name")}
    check(got == want, "%s: kernels by name as trace stats sums them" % name)
    p = subprocess.run([BIN, "trace", "summary", trace, "--json"], capture_output=True, text=True)
    for s in json.loads(p.stdout)["ranks"]:  # a rank's steps, and kernels per step in the step their call lies in
        r = s.get("rank", db.execute("SELECT min(rank) FROM ranks").fetchone()[0])
        steps = db.execute("SELECT count(*) FROM steps WHERE rank = ?", (r,)).fetchone()[0]
        check(steps == s["steps"], "%s rank %s: %d steps, summary says %d" % (name, r, steps, s["steps"]))
        per = db.execute("SELECT count(*) FROM flows f JOIN calls c ON c.id = f.call_id JOIN steps s ON c.rank = "
                         "s.rank AND c.ts_ns >= s.ts_ns AND c.ts_ns <= s.ts_ns + s.dur_ns WHERE f.work = 'kernel' "
                         "AND c.rank = ?", (r,)).fetchone()[0]
        check(steps == 0 or abs(per / steps - s["kernels_per_step"]) < 1e-9,
              "%s rank %s: kernels per step through flows and steps: %s, summary %s" % (
                  name, r, per / max(steps, 1), s["kernels_per_step"]))
    orphans = db.execute("SELECT count(*) FROM kernels k WHERE k.correlation != 0 AND NOT EXISTS (SELECT 1 FROM "
                         "calls c WHERE c.rank IS k.rank AND c.correlation = k.correlation)").fetchone()[0]
    check(orphans == 0, "%s: every kernel joins its launching call (%d do not)" % (name, orphans))
    bad = db.execute("SELECT count(*) FROM kernels WHERE name_id NOT IN (SELECT id FROM strings)").fetchone()[0]
    check(bad == 0, "%s: names through the strings table" % name)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    check(meta.get("base_ns") == t.get("baseTimeNanoseconds", 0) and meta.get("events") == len(ev),
          "%s: meta: %s" % (name, meta))
    return db


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    one(sys.argv[3], "trace")
    if len(sys.argv) > 4:
        db = one(sys.argv[4], "merged")
        ranks = [r[0] for r in db.execute("SELECT rank FROM ranks ORDER BY rank")]
        by_rank = dict(db.execute("SELECT rank, count(*) FROM kernels GROUP BY rank"))
        check(len(ranks) >= 2 and all(by_rank.get(r, 0) > 0 for r in ranks), "merged: ranks apart: %s %s" % (
            ranks, by_rank))
    # an export that fails leaves nothing, and an existing database as it was
    cut = os.path.join(WORK, "cut.json")
    text = open(sys.argv[3]).read()
    open(cut, "w").write(text[: len(text) // 2])
    db = os.path.join(WORK, "kept.db")
    open(db, "w").write("before")
    p = subprocess.run([BIN, "trace", "export", cut, "--sqlite", db], capture_output=True, text=True)
    left = [f for f in os.listdir(WORK) if f.startswith("kept.db.")]
    check(p.returncode != 0 and open(db).read() == "before" and not left,
          "a failed export: exit %d, the database kept, no temporary left (%s): %s" % (p.returncode, left,
                                                                                     p.stderr[-200:]))
    # what is no regular file is no database to replace (a FIFO here; a device the same); a link is
    # followed, the database written where it points
    fifo = os.path.join(WORK, "fifo")
    os.mkfifo(fifo)
    p = subprocess.run([BIN, "trace", "export", sys.argv[3], "--sqlite", fifo], capture_output=True, text=True)
    check(p.returncode != 0 and "not a regular file" in p.stderr and os.path.exists(fifo) and
          not os.path.isfile(fifo), "a FIFO refused, left as it was: %s" % p.stderr[-200:])
    target, link = os.path.join(WORK, "target.db"), os.path.join(WORK, "link.db")
    open(target, "w").write("old")
    os.symlink("target.db", link)
    p = subprocess.run([BIN, "trace", "export", sys.argv[3], "--sqlite", link], capture_output=True, text=True)
    check(p.returncode == 0 and os.path.islink(link) and sqlite3.connect(target).execute(
        "SELECT count(*) FROM kernels").fetchone()[0] > 0, "through a link: the database where it points")
    # torch 1.13's traces (a bare array, no categories): its steps and ops as the verbs read them
    legacy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch113_legacy_steps.json")
    db = export(legacy, os.path.join(WORK, "legacy.db"))
    kinds = dict(db.execute("SELECT kind, count(*) FROM ops GROUP BY kind"))
    check(db.execute("SELECT count(*) FROM steps").fetchone()[0] == 3 and "other" not in kinds,
          "a torch 1.13 trace: 3 steps, its events ops and ranges: %s" % kinds)
    print("export_check: %d checks, %d failed" % (checks, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
