#!/usr/bin/env python3
"""Attack the linfuse tool as a hostile user would and count what happened: every attack ends
as handled (the right answer, or a clean error: exit 1 or 2 with a one-line message ending in a
newline), or as a crash (a signal, a sanitizer report, another exit status), a hang (past the
time limit), data lost (a previous output destroyed, a link or device node replaced, directories
left behind) or a wrong answer (accepted what it should refuse, printed what is not true).

usage: scripts/reliability.py BUILD/linfuse [--skip-huge] [--only trace|text|output|memory|checkpoint|silent]

--skip-huge leaves out the attacks that need much memory or disk when they go wrong (a 22 GB
sparse trace, runs sized past the machine's memory): for running an older binary that reads
such files whole. docs/reliability.md has this script's output."""
import json, os, signal, stat, subprocess, sys, tempfile, time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "..", "tests", "fuzz", "seeds")
REGRESSIONS = os.path.join(HERE, "..", "tests", "fuzz", "regressions")
REF = os.path.join(HERE, "..", "..", "shared", "ref", "torch-h200")

rows = []


def run(args, timeout=60, cwd=None):
    """(status, stdout, stderr, seconds); status None on a timeout, negative for a signal."""
    t0 = time.time()
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, cwd=cwd)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), time.time() - t0
    except subprocess.TimeoutExpired:
        return None, "", "", time.time() - t0


def verdict(res, want_status, check=None):
    """Classify one run: want_status is the exit status of the right answer (0 for success, 1
    or 2 for a clean refusal; a tuple where either is right); check(out, err) returns None when the result is right, else what
    was wrong ("data lost: ..." or "wrong: ...")."""
    st, out, err, _ = res
    if st is None:
        return "hang", "no answer within the time limit"
    if st < 0 or st > 2 or "Sanitizer" in err or "runtime error" in err:
        sig = -st if st < 0 else 0
        why = signal.Signals(sig).name if sig else ("exit %d" % st)
        return "crash", why + (": " + err.strip().splitlines()[-1][:100] if err.strip() else "")
    wants = want_status if isinstance(want_status, tuple) else (want_status,)
    if st not in wants:
        return "wrong", "exit %d, expected %s: %s" % (st, " or ".join(map(str, wants)),
                                                       (err.strip() or out.strip())[:100])
    if st != 0 and (not err.startswith("linfuse") or not err.endswith("\n")):
        return "wrong", "a refusal without a clean message: %r" % err[:100]
    try:
        bad = check(out, err) if check else None
    except OSError as e:  # an output that should be there is not
        bad = "data lost: %s" % e
    if bad:
        kind, _, why = bad.partition(": ")
        return kind, why
    return "handled", (err.strip().splitlines()[0] if st else "ok")[:110]


def attack(family, name, args, want, check=None, timeout=60):
    res = run(args, timeout=timeout)
    kind, why = verdict(res, want, check)
    rows.append((family, name, kind, res[3], why))
    print("%-8s %-46s %-9s %6.2fs  %s" % (family, name, kind, res[3], why), flush=True)


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def trace(events):
    return {"schemaVersion": 1, "traceEvents": events}


def op(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def main():
    argv, args, skip_huge, only = sys.argv[1:], [], False, None
    while argv:
        a = argv.pop(0)
        if a == "--skip-huge":
            skip_huge = True
        elif a == "--only" and argv:
            only = argv.pop(0)
        else:
            args.append(a)
    if len(args) != 1:
        sys.exit(__doc__)
    bin_ = os.path.abspath(args[0])
    os.umask(0o022)
    work = tempfile.mkdtemp(prefix="lf_attack_")
    w = lambda *p: os.path.join(work, *p)
    fam = lambda f: only is None or only == f

    real = sorted(os.path.join(REF, f) for f in os.listdir(REF) if f.endswith(".json"))[0]
    real_bytes = open(real, "rb").read()

    if fam("trace"):
        attack("trace", "empty file", [bin_, "trace", "table", write(w("empty.json"), "")], 2)
        attack("trace", "a directory", [bin_, "trace", "summary", work], 2)
        attack("trace", "1 MB of random bytes", [bin_, "trace", "table", write(w("rand.json"), os.urandom(1 << 20))], 2)
        for k in range(1, 11):  # a real trace cut at ten places
            cut = write(w("cut%d.json" % k), real_bytes[: len(real_bytes) * k // 11])
            attack("trace", "PyTorch's trace cut at %d/11" % k, [bin_, "trace", "table", cut], 2)
        if not skip_huge:
            huge = w("sparse.json")
            with open(huge, "wb") as f:
                f.write(b'{"traceEvents": [')
                f.truncate(22 << 30)  # 22 GB, almost all of it a hole
            attack("trace", "22 GB sparse file", [bin_, "trace", "summary", huge], 2, timeout=30)
            os.unlink(huge)
        attack("trace", "--max-bytes below the file's size", [bin_, "trace", "summary", real, "--max-bytes", "1000"], 2)
        for tag, num in [("0x10", "0x10"), ("-Infinity", "-Infinity"), ("01", "01"), ("1.", "1."),
                         ("NUL after a number", "1\u0000")]:
            f = write(w("num.json"), '{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"n","pid":1,"tid":1,"ts":%s,'
                                     '"dur":1}]}' % num)
            attack("trace", "number %s in an event" % tag, [bin_, "trace", "summary", f], 2)
            f = write(w("top.json"), '{"schemaVersion":%s,"traceEvents":[{"ph":"X","cat":"cpu_op","name":"n","pid":1,'
                                     '"tid":1,"ts":1,"dur":1}]}' % num)
            attack("trace", "number %s at the top level" % tag, [bin_, "trace", "summary", f], 2)
        for seed in ("memory_sum_overflow", "dur_sum_overflow"):
            f = os.path.join(SEEDS, seed + ".json")
            attack("trace", seed.replace("_", " ") + " (table)", [bin_, "trace", "table", f], 0,
                   lambda o, e: None if "warning" in o + e and "-446744073709551" not in o
                   else "wrong: a total past 64 bits printed without a warning")
        attack("trace", "overlapping siblings (negative self time)",
               [bin_, "trace", "table", os.path.join(SEEDS, "overlapping_siblings.json")], 0,
               lambda o, e: None if "first" in e + o and "warning" in e + o else "wrong: negative self time, silently")
        for name in sorted(os.listdir(REGRESSIONS)):
            attack("trace", "fuzz regression " + name, [bin_, "trace", "table", os.path.join(REGRESSIONS, name)], (0, 2))
        # names: long Japanese thread names, bytes that are not UTF-8 (escaped as \u00ff is valid)
        cjk = "日本語のとても長いスレッドの名前" * 8
        names = write(w("names.json"), json.dumps(trace([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                                                           "args": {"name": cjk}}, op(cjk, 0, 5),
                                                          op("ProfilerStep#1", 0, 20, cat="user_annotation")])))
        res = subprocess.run([bin_, "trace", "table", names], capture_output=True)
        try:
            res.stdout.decode("utf-8")
            ok = res.returncode == 0
        except UnicodeDecodeError:
            ok = False
        rows.append(("trace", "long CJK names cut in the table", "handled" if ok else "wrong", 0.0,
                     "table is UTF-8" if ok else "a name cut inside a character"))
        print("%-8s %-46s %-9s" % rows[-1][:3])
        svg = w("names.svg")
        st = run([bin_, "trace", "svg", names, "--step", "1", "-o", svg])
        try:
            ET.parse(svg)
            kind, why = ("handled", "the SVG parses as XML") if st[0] == 0 else verdict(st, 0)
        except Exception as e:  # noqa: BLE001 -- any parse failure is the finding
            kind, why = ("wrong", "the SVG is not XML: %s" % e) if st[0] == 0 else verdict(st, 0)
        rows.append(("trace", "long CJK names in the SVG", kind, st[3], why))
        print("%-8s %-46s %-9s %6.2fs  %s" % rows[-1])
        for v in ("nan", "inf", "-1", "1e999"):
            attack("flags", "trace expect --kernels-per-step " + v,
                   [bin_, "trace", "expect", real, "--kernels-per-step", v], 2)
        # the shapes that were quadratic, at full size, with a minute each
        many = write(w("many.json"), json.dumps(trace([op("ProfilerStep#1", 0, 400000, cat="user_annotation")] +
                                                      [op("op_%d" % i, i + 1, 0.5) for i in range(300000)])))
        attack("trace", "summary of 300k distinct names", [bin_, "trace", "summary", many], 0)
        a = write(w("a.json"), json.dumps(trace([op("ProfilerStep#1", 0, 200000, cat="user_annotation")] +
                                                [op("a_%d" % i, i + 1, 0.5) for i in range(100000)])))
        b = write(w("b.json"), json.dumps(trace([op("ProfilerStep#1", 0, 200000, cat="user_annotation")] +
                                                [op("b_%d" % i, i + 1, 0.5) for i in range(100000)])))
        attack("trace", "diff of two 100k-name traces", [bin_, "trace", "diff", a, b], 0)
        steps = write(w("steps.json"), json.dumps(trace([op("ProfilerStep#%d" % i, i * 10.0, 5, cat="user_annotation")
                                                         for i in reversed(range(100000))])))
        attack("trace", "svg of 100k steps in reverse order", [bin_, "trace", "svg", steps, "-o", w("s.svg")], 0)

    if fam("text"):
        # names that would drive the terminal (retitle it, clear it, ring it, split a row): every
        # text output writes them escaped, \x1b as Python's repr would; JSON keeps them exact
        evil = "op\x1b]0;pwned\x07\x1b[2J\x1b[31mred\nsplit\rback\tx\x7f\x9b31m\x85end"
        kern = evil + "<" + "at::native::Functor<float>, " * 14 + "int>"  # 440 characters
        ev = [op("ProfilerStep#2", 0, 200, cat="user_annotation"),
              dict(op(evil, 1, 100), args={"External id": 1}),
              dict(op("cudaLaunchKernel", 2, 5, cat="cuda_runtime"), args={"correlation": 7, "External id": 1}),
              dict(op(kern, 10, 20, tid=7, cat="kernel"), pid=0, args={"correlation": 7, "device": 0, "External id": 1}),
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": evil}}]
        f = write(w("evil.json"), json.dumps(trace(ev)))
        g = write(w("evil2.json"), json.dumps(trace(ev[:3])))

        def safe(o, e, wide=False, named=True):
            bad = sorted({c for c in o + e if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f})
            if bad:
                return "wrong: raw control characters %r reach the terminal" % "".join(bad)
            long = [l for l in o.splitlines() if len(l) > 160 and not l.startswith(("In summary", "launches"))]
            if long and not wide:
                return "wrong: a %d-character line: names not cut" % len(long[0])
            return None if not named or "\\x1b]0;pwned\\x07" in o + e else "wrong: the name is not shown escaped"

        def rows_whole(o, e):  # every row as wide as the separator lines: none split by a newline
            lines = o.splitlines()
            split = [l for l in lines[3: lines.index(lines[0], 3)] if len(l) != len(lines[0])]
            return safe(o, e, wide=True) or ("wrong: a row split: %r" % split[0][:60] if split else None)

        def text_attack(name, args, want, check):  # expect says "differs" with exit 1, on stdout
            res = run(args)
            kind, why = ("handled", "ok") if res[0] == want else verdict(res, want)
            bad = check(res[1], res[2]) if kind == "handled" else None
            if bad:
                kind, _, why = bad.partition(": ")
            rows.append(("text", name, kind, res[3], why))
            print("%-8s %-46s %-9s %6.2fs  %s" % rows[-1], flush=True)
        text_attack("escapes in names: table", [bin_, "trace", "table", f], 0, rows_whole)
        text_attack("escapes in names: table by input shape", [bin_, "trace", "table", f, "--group-by-input-shape"],
                    0, rows_whole)
        text_attack("escapes in names: summary", [bin_, "trace", "summary", f], 0, lambda o, e: safe(o, e, named=False))
        text_attack("escapes in names: breakdown", [bin_, "trace", "breakdown", f], 0, safe)
        text_attack("escapes in names: diff", [bin_, "trace", "diff", f, g], 0, safe)
        text_attack("escapes in names: expect, no match", [bin_, "trace", "expect", f, "--kernel", "^nomatch"], 1, safe)
        text_attack("escapes in names: expect, a forbidden kernel",
                    [bin_, "trace", "expect", f, "--no-kernel", "pwned"], 1, safe)
        attack("text", "escapes in names: table --format json", [bin_, "trace", "table", f, "--format", "json"], 0,
               lambda o, e: None if any(r["name"] == evil for r in json.loads(o)["rows"]) else "wrong: name not exact")
        attack("text", "escapes in names: breakdown --json", [bin_, "trace", "breakdown", f, "--json"], 0,
               lambda o, e: None if any(k["name"] == kern for k in json.loads(o)["ranks"][0]["kernels"])
               else "wrong: name not whole and exact")
        attack("text", "escapes in names: diff --json", [bin_, "trace", "diff", f, g, "--json"], 0,
               lambda o, e: None if any(k["name"] == kern for k in json.loads(o)["kernels"])
               else "wrong: name not whole and exact")
        svg = w("evil.svg")
        attack("text", "escapes in names: svg", [bin_, "trace", "svg", f, "-o", svg], 0,
               lambda o, e: ET.parse(svg) and (None if "\\x1b]0;pwned" in open(svg).read()
                                               else "wrong: the name is not shown escaped"))
        html = w("evil.html")
        attack("text", "escapes in names: report", [bin_, "trace", "report", f, g, "-o", html], 0,
               lambda o, e: safe(open(html).read().replace("\n", " "), "", wide=True))
        bad = write(w("evil_ts.json"), json.dumps(trace([{"ph": "X", "cat": "cpu_op", "name": evil, "pid": 1, "tid": 1,
                                                          "ts": 1e300, "dur": 1}])))
        attack("text", "escapes in a name an error quotes", [bin_, "trace", "table", bad], 2,
               lambda o, e: safe("", e, named=False))

    if fam("output"):
        small = ["--batch", "4"]
        attack("output", "--out under /proc", [bin_, "linear", "--out", "/proc/linfuse-attack"] + small, 2)
        # the table's path is a directory: the run fails, the previous trace stays
        d = w("pair")
        os.makedirs(w("pair", "linear", "4x32x64_bf16_cold_eager.txt"))
        write(w("pair", "linear", "4x32x64_bf16_cold_eager.json"), "previous run\n")

        def pair_kept(o, e):
            kept = open(w("pair", "linear", "4x32x64_bf16_cold_eager.json")).read() == "previous run\n"
            tmps = [f for f in os.listdir(w("pair", "linear")) if ".tmp." in f]
            return None if kept and not tmps else "data lost: the previous trace was replaced or removed"
        attack("output", "table path is a directory", [bin_, "linear", "--out", d] + small, 1, pair_kept)
        # outputs that are symbolic links
        os.rmdir(w("pair", "linear", "4x32x64_bf16_cold_eager.txt"))
        os.symlink("kept_table.txt", w("pair", "linear", "4x32x64_bf16_cold_eager.txt"))

        def link_kept(o, e):
            p = w("pair", "linear", "4x32x64_bf16_cold_eager.txt")
            if not os.path.islink(p):
                return "data lost: the symbolic link was replaced by a file"
            return None if "Self CPU" in open(w("pair", "linear", "kept_table.txt")).read() else "wrong: target not written"
        attack("output", "table path is a symbolic link", [bin_, "linear", "--out", d] + small, 0, link_kept)
        # device nodes as the output: our own copies of /dev/null and /dev/full (as root, a writer
        # that renames over its target would replace the system's nodes: an older linfuse did)
        def node(name, minor):
            try:
                os.mknod(w(name), 0o666 | stat.S_IFCHR, os.makedev(1, minor))
                return w(name)
            except OSError:
                return None

        def still_node(path):
            return lambda o, e: None if stat.S_ISCHR(os.lstat(path).st_mode) else "data lost: the device node was replaced"
        null, full = node("null", 3), node("full", 7)
        if null:
            attack("output", "svg -o a device node (null)", [bin_, "trace", "svg", real, "-o", null], 0, still_node(null))
        if full:
            attack("output", "svg -o a full device (disk full)", [bin_, "trace", "svg", real, "-o", full], 1,
                   lambda o, e: still_node(full)(o, e) or (None if "No space left" in e else "wrong: no reason given"))
        shared = write(w("shared.svg"), "old\n")
        os.chmod(shared, 0o644)
        attack("output", "replacing a 0644 file keeps 0644", [bin_, "trace", "svg", real, "-o", shared], 0,
               lambda o, e: None if stat.S_IMODE(os.stat(shared).st_mode) == 0o644 else
               "wrong: mode %o" % stat.S_IMODE(os.stat(shared).st_mode))
        attack("output", "a new file gets the umask's 0644", [bin_, "trace", "svg", real, "-o", w("new.svg")], 0,
               lambda o, e: None if stat.S_IMODE(os.stat(w("new.svg")).st_mode) == 0o644 else
               "wrong: mode %o" % stat.S_IMODE(os.stat(w("new.svg")).st_mode))
        attack("output", "svg -o a directory", [bin_, "trace", "svg", real, "-o", work], 1,
               lambda o, e: None if os.path.isdir(work) else "data lost: the directory was replaced")
        attack("output", "refused sizes leave no directory",
               [bin_, "linear", "--out", w("fresh", "x"), "--batch", "1099511627776", "--in_dim", "1099511627776"],
               2, lambda o, e: None if not os.path.exists(w("fresh")) else "data lost: empty directories left behind")

    if fam("reader"):
        # what the trace reader is handed to block it or to make it hold gigabytes: a named pipe;
        # standard input past --max-bytes; gzip bombs (white space between events, inside one
        # event, one huge name, a huge top-level string), each checked against the child's peak
        # resident memory, bounds loose enough for an ASan build and far below what was held
        # before (1-4 GB)
        import gzip

        def peak_run(args, timeout=120, stdin=None):
            """run(), with the child's peak resident memory in MB as a fifth item: its VmHWM, read
            every 10 ms until it exits (wait4's ru_maxrss would count this script's own memory,
            which a forked child carries up to its exec)."""
            t0, hwm = time.time(), 0
            with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:
                p = subprocess.Popen(args, stdout=o, stderr=e, stdin=stdin or subprocess.DEVNULL)
                st = None
                while time.time() - t0 < timeout:
                    try:
                        with open("/proc/%d/status" % p.pid) as f:
                            hwm = max([hwm] + [int(l.split()[1]) for l in f if l.startswith("VmHWM:")])
                    except (OSError, ValueError):
                        pass
                    pid, status, _ = os.wait4(p.pid, os.WNOHANG)
                    if pid:
                        st = os.waitstatus_to_exitcode(status)
                        break
                    time.sleep(0.01)
                if st is None:
                    p.kill()
                    os.wait4(p.pid, 0)
                p.returncode = -9 if st is None else st
                o.seek(0), e.seek(0)
                return (st, o.read().decode("utf-8", "replace"), e.read().decode("utf-8", "replace"),
                        time.time() - t0, hwm / 1024.0)

        # AddressSanitizer keeps one shadow byte per 8 bytes of memory the program touches, and on
        # some kernels those pages stay resident after the text's own pages are released: walking
        # 1 GB of inflated text costs an ASan build 128 MB that the release build never holds. The
        # bound grows by walked/8 there (holding the text itself would still be 8 times over it).
        with open(bin_, "rb") as f:
            asan = b"__asan_init" in f.read()

        def mem_attack(name, args, want, mb, needle=None, stdin=None, timeout=120, walked_mb=0):
            res = peak_run(args, timeout, stdin)
            kind, why = verdict(res[:4], want, lambda o, e: None if needle is None or needle in o + e
                                else "wrong: the message lacks %r: %s" % (needle, (e or o).strip()[:80]))
            mb = mb + walked_mb / 8 if mb and asan else mb
            if kind == "handled" and mb and res[4] > mb:
                kind, why = "wrong", "peak %.0f MB, over its %d MB bound" % (res[4], mb)
            elif kind == "handled":
                why = "peak %.0f MB; %s" % (res[4], why)
            rows.append(("reader", name, kind, res[3], why[:110]))
            print("%-8s %-46s %-9s %6.2fs  %s" % rows[-1], flush=True)

        def bomb(name, head, fill, mb, tail):  # gzip members: 1 MB of fill is 1 KB, so mb of them
            one = gzip.compress(fill * (1 << 20), 9)
            with open(w(name), "wb") as f:
                f.write(gzip.compress(head) + one * mb + gzip.compress(tail))
            return w(name)
        ev1, ev2 = b'{"ph":"X","name":"a","ts":1,"dur":1}', b'{"ph":"X","name":"b","ts":2,"dur":1}'
        ws = bomb("ws.json.gz", b'{"traceEvents":[' + ev1 + b",", b" ", 1024, ev2 + b"]}")
        mem_attack("gzip: 1 GB of white space between events", [bin_, "trace", "summary", ws], 0, 150, "events=2",
                   walked_mb=1024)
        mem_attack("gzip: the same under --max-bytes 500 MB",
                   [bin_, "trace", "summary", ws, "--max-bytes", "500000000"], 2, 150, "inflates to more than",
                   walked_mb=500)
        mem_attack("gzip: 1 GB of white space inside one event",
                   [bin_, "trace", "summary", bomb("wsin.json.gz", b'{"traceEvents":[{"ph":"X",', b" ", 1024,
                                                   b'"name":"a","ts":1,"dur":1}]}')], 2, 150, "longer than 64 MB")
        mem_attack("gzip: a name of 1 GB",
                   [bin_, "trace", "summary", bomb("name.json.gz", b'{"traceEvents":[{"ph":"X","name":"', b"a", 1024,
                                                   b'","ts":1,"dur":1}]}')], 2, 400, "longer than 64 MB")
        mem_attack("gzip: a top-level string of 1 GB (skipped)",
                   [bin_, "trace", "summary", bomb("top.json.gz", b'{"junk":"', b"a", 1024,
                                                   b'","traceEvents":[' + ev1 + b"]}")], 0, 150, "events=1",
                   walked_mb=1024)
        one = gzip.compress((ev1 + b",") * 10000, 9)  # 1 M tiny events: 37 MB of text, 184 MB as events
        with open(w("tiny.json.gz"), "wb") as f:
            f.write(gzip.compress(b'{"traceEvents":[') + one * 100 + gzip.compress(ev2 + b"]}"))
        mem_attack("gzip: 1 M tiny events under --max-bytes 100 MB",
                   [bin_, "trace", "summary", w("tiny.json.gz"), "--max-bytes", "100000000"], 2, 0, "events: held")
        with open(w("stdin.json"), "wb") as f:  # in 1 MB writes: this script stays small
            f.write(b'{"traceEvents":[' + ev1 + b",")
            for _ in range(256):
                f.write(b" " * (1 << 20))
            f.write(ev2 + b"]}")
        with open(w("stdin.json"), "rb") as f:
            mem_attack("standard input: 256 MB of white space", [bin_, "trace", "summary", "-"], 0, 150, "events=2",
                       stdin=f, walked_mb=256)
        with open(write(w("small.json"), '{"traceEvents":[' + " " * 50000 + "]}"), "rb") as f:
            mem_attack("standard input: 50 KB under --max-bytes 1000", [bin_, "trace", "table", "-", "--max-bytes",
                                                                       "1000"], 2, 0, "more than the 1000 bytes",
                       stdin=f)
        os.mkfifo(w("fifo.json"))
        mem_attack("a named pipe (FIFO) as the trace", [bin_, "trace", "table", w("fifo.json")], 2, 0, "named pipe",
                   timeout=10)
        for f in ("ws.json.gz", "wsin.json.gz", "name.json.gz", "top.json.gz", "tiny.json.gz", "stdin.json"):
            os.unlink(w(f))

    if fam("net"):
        # trace serve against clients that hold it: idle connections, a client that sends a byte
        # at a time, more connections than it keeps; then a real GET must come back at once
        import socket, urllib.request
        src = write(w("served.json"), json.dumps(trace([op("ProfilerStep#1", 0, 100, cat="user_annotation")])))
        p = subprocess.Popen([bin_, "trace", "serve", src, "--port", "0"], stdout=subprocess.PIPE, text=True)
        url, t0 = None, time.time()
        while not url and time.time() - t0 < 10:
            line = p.stdout.readline()
            url = line.split(" at ")[1].strip() if line.startswith("serving ") else None
        held, t1 = [], time.time()
        try:
            host, port = url.split("//")[1].split("/")[0].split(":")
            held = [socket.create_connection((host, int(port))) for _ in range(40)]
            held[-1].sendall(b"G")
            t1 = time.time()
            body = urllib.request.urlopen(url, timeout=30).read()
            dt = time.time() - t1
            kind, why = (("handled", "answered in %.2f s beside 40 held connections" % dt) if dt < 2
                         and body == open(src, "rb").read() else ("hang", "answered after %.1f s" % dt))
        except Exception as e:  # noqa: BLE001 -- no answer at all is the finding
            kind, why = "hang", "no answer: %s" % e
        rows.append(("net", "serve: a GET beside idle and slow clients", kind, time.time() - t1, why))
        print("%-8s %-46s %-9s %6.2fs  %s" % rows[-1], flush=True)
        for s in held:
            s.close()
        p.kill(), p.wait()
        write(w("big_in.json"), '{"traceEvents":[' + " " * 50000 + "]}")
        attack("net", "serve: standard input past --max-bytes",
               ["sh", "-c", '"$0" trace serve - --port 0 --max-bytes 1000 < "$1"', bin_, w("big_in.json")], 2,
               lambda o, e: None if "more than the 1000 bytes" in e else "wrong: %s" % e.strip()[:80], timeout=10)
        if not os.path.exists(w("fifo.json")):
            os.mkfifo(w("fifo.json"))
        attack("net", "serve: a named pipe (FIFO)", [bin_, "trace", "serve", w("fifo.json"), "--port", "0"], 2,
               lambda o, e: None if "named pipe" in e else "wrong: %s" % e.strip()[:80], timeout=10)

    if fam("memory") and not skip_huge:
        with open("/proc/meminfo") as f:
            kb = sum(int(l.split()[1]) for l in f if l.startswith(("MemAvailable:", "SwapFree:")))
        for need_gib, cmd in [(32.3, ["simple-mlp", "--batch", "1", "--seq", "1048576", "--dim", "64", "--hidden", "4096"]),
                              (40.0, ["matmul-add", "--size", "65536"])]:
            if kb < need_gib * (1 << 20):
                attack("memory", " ".join(cmd[:1] + cmd[-2:]), [bin_] + cmd + ["--out", w("big")], 2,
                       lambda o, e: None if not os.path.exists(w("big")) else "data lost: directories left behind",
                       timeout=180)

    if fam("checkpoint"):
        import struct  # noqa: E402 -- this family's own: safetensors files written here
        ck = w("ck")
        os.makedirs(ck)
        D, H, T = 8, 12, 5
        pre = "model.layers.0.mlp."

        def st_file(path, tensors):  # tensors: name -> (dtype, shape, bytes), in name order
            header, blob = {}, b""
            for name in sorted(tensors):
                dt, shape, data = tensors[name]
                header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
                blob += data
            h = json.dumps(header).encode()
            h += b" " * (-len(h) % 8)
            return write(path, struct.pack("<Q", len(h)) + h + blob)

        f32 = lambda n: struct.pack("<%df" % n, *[(i % 7 - 3) / 8 for i in range(n)])
        W = st_file(os.path.join(ck, "model.safetensors"), {pre + "gate_proj.weight": ("F32", [H, D], f32(H * D)),
                                                            pre + "up_proj.weight": ("F32", [H, D], f32(H * D)),
                                                            pre + "down_proj.weight": ("F32", [D, H], f32(D * H))})
        X = st_file(os.path.join(ck, "x.safetensors"), {"x": ("F32", [T, D], f32(T * D))})
        C = write(os.path.join(ck, "config.json"), '{"hidden_act": "silu"}')

        def mlp(weights, out, *more, inp=X):
            return [bin_, "mlp", "--weights", weights, "--prefix", pre[:-1], "--input", inp, "--output", out,
                    "--device", "cpu"] + list(more)

        kept = {p: open(p, "rb").read() for p in (W, X, C)}

        def restore():  # each attack on a whole checkpoint, whatever the one before did to it
            for p in kept:
                if os.path.isdir(p):
                    os.rmdir(p)
                write(p, kept[p])

        def inputs_kept(o, e):
            lost = [p for p in kept if not os.path.isfile(p) or open(p, "rb").read() != kept[p]]
            tmps = [f for f in os.listdir(ck) if ".tmp." in f]
            return "data lost: %s overwritten" % lost[0] if lost else "data lost: %s left" % tmps[0] if tmps else None

        # outputs that are inputs: refused (exit 2) before the run, the checkpoint intact
        os.symlink("model.safetensors", os.path.join(ck, "link.safetensors"))
        os.link(X, os.path.join(ck, "x_hard.safetensors"))
        for what, weights, out in [("--output is --weights", W, W), ("--output is a shard of --weights DIR", ck, W),
                                   ("--output is --input", ck, X), ("--output links to the weights", ck,
                                                                    os.path.join(ck, "link.safetensors")),
                                   ("--output is a hard link to --input", ck, os.path.join(ck, "x_hard.safetensors")),
                                   ("--output is the config.json read", ck, C)]:
            restore()
            attack("checkpoint", what, mlp(weights, out), 2, inputs_kept)
        restore()
        # where the output cannot go: refused before the run, exit 2 like any bad flag
        attack("checkpoint", "--output is a directory", mlp(ck, ck), 2, inputs_kept)
        attack("checkpoint", "--output in a missing directory", mlp(ck, os.path.join(ck, "no", "y.safetensors")), 2,
               lambda o, e: inputs_kept(o, e) or (None if not os.path.exists(os.path.join(ck, "no")) else
                                                  "data lost: a directory made"))
        # FIFOs where a file is read: refused at once, never waited on
        fifo = w("ck.fifo")
        os.mkfifo(fifo)
        for d in ("fifodir", "fifoshard", "textshard"):
            os.makedirs(w(d))
        os.mkfifo(w("fifodir", "model.safetensors"))
        index = '{"weight_map": {"%sgate_proj.weight": "model-00001-of-00001.safetensors"}}' % pre
        write(w("fifoshard", "model.safetensors.index.json"), index)
        os.symlink(fifo, w("fifoshard", "model-00001-of-00001.safetensors"))
        write(w("textshard", "model.safetensors.index.json"), index)
        os.symlink(C, w("textshard", "model-00001-of-00001.safetensors"))
        y = w("y.safetensors")
        for what, weights, inp in [("--weights a FIFO", fifo, X), ("DIR/model.safetensors a FIFO", w("fifodir"), X),
                                   ("a shard of an index a FIFO", w("fifoshard"), X), ("--input a FIFO", ck, fifo)]:
            restore()
            attack("checkpoint", what, mlp(weights, y, "--act", "silu", inp=inp), 2,
                   lambda o, e: None if "FIFO" in e else "wrong: the FIFO is not named", timeout=20)
        attack("checkpoint", "a text file linked in as a shard", mlp(w("textshard"), y, "--act", "silu"), 2,
               lambda o, e: None if "not a safetensors file" in e and "header length" not in e else
               "wrong: %s" % e.strip()[-80:])
        # FP8: a zero dimension beside a huge one (0 bytes, a valid header), a NaN scale
        e4m3 = bytes([0x38]) * (H * D)
        for what, tag, scale in [("FP8 scale [0, 2^63-1]", "zero", ("F32", [0, (1 << 63) - 1], b"")),
                                 ("FP8 scale NaN", "nan", ("F32", [H, 1], struct.pack("<%df" % H, *([1.0] * (H - 1) +
                                                                                                   [float("nan")]))))]:
            d = w("fp8_" + tag)
            os.makedirs(d)
            st_file(os.path.join(d, "model.safetensors"), {
                pre + "gate_proj.weight": ("F8_E4M3", [H, D], e4m3), pre + "gate_proj.weight_scale": scale,
                pre + "up_proj.weight": ("F32", [H, D], f32(H * D)), pre + "down_proj.weight": ("F32", [D, H], f32(D * H))})
            attack("checkpoint", what, mlp(d, y, "--act", "silu", "--dtype", "f32"), 2,
                   lambda o, e: None if "gate_proj.weight" in e else "wrong: the tensor is not named")
        # a write past `ulimit -f`: EFBIG, exit 1, nothing left (SIGXFSZ killed it mid-write). 2 KiB,
        # not 0: LLVM's OpenMP runtime writes a 1 KiB file in /dev/shm at start-up (clang's build)
        fsize = ["sh", "-c", 'ulimit -f 4; exec "$0" "$@"', bin_]
        restore()
        XB = st_file(w("xbig.safetensors"), {"x": ("F32", [256, D], f32(256 * D))})  # y past 2 KiB
        attack("checkpoint", "mlp past ulimit -f", fsize + mlp(ck, os.path.join(ck, "big.safetensors"), inp=XB)[1:], 1,
               lambda o, e: inputs_kept(o, e) or (None if not os.path.exists(os.path.join(ck, "big.safetensors")) else
                                                  "data lost: a partial output"))
        attack("checkpoint", "simple-mlp past ulimit -f", fsize + ["simple-mlp", "--out", w("fsize", "new"), "--batch", "1",
                                                                   "--seq", "4", "--dim", "32", "--hidden", "48",
                                                                   "--device", "cpu"], 1,
               lambda o, e: None if not os.path.exists(w("fsize")) else "data lost: files or directories left")
        # RANK in the environment without --tp: one device, as asked
        attack("checkpoint", "RANK=0 set, no --tp", ["env", "RANK=0", bin_, "simple-mlp", "--out", w("rank"), "--batch",
                                                     "1", "--seq", "4", "--dim", "32", "--hidden", "48", "--device",
                                                     "cpu"], 0)
        # the weights cut short by another program mid-run (96 MB, cut after 0.3 s): an error naming
        # the file (exit 2) or a right answer, never SIGBUS (the mapping's pages gone under the GEMM)
        if not skip_huge:
            big, bd, bh, bt = w("big.safetensors"), 2048, 4096, 256
            zeros = lambda n: bytes(4 * n)
            st_file(big, {pre + "gate_proj.weight": ("F32", [bh, bd], zeros(bh * bd)),
                          pre + "up_proj.weight": ("F32", [bh, bd], zeros(bh * bd)),
                          pre + "down_proj.weight": ("F32", [bd, bh], zeros(bd * bh))})
            bx = st_file(w("bigx.safetensors"), {"x": ("F32", [bt, bd], f32(bt * bd))})
            t0 = time.time()
            p = subprocess.Popen(mlp(big, w("bigy.safetensors"), "--act", "silu", inp=bx), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            time.sleep(0.3)
            os.truncate(big, 4096)
            try:
                out, err = p.communicate(timeout=120)
                res = (p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.time() - t0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                res = (None, "", "", time.time() - t0)
            kind, why = verdict(res, (0, 2))
            rows.append(("checkpoint", "weights truncated during the run", kind, res[3], why))
            print("%-8s %-46s %-9s %6.2fs  %s" % rows[-1], flush=True)

    if fam("silent"):
        sys.path.insert(0, HERE)
        import reliability_silent  # noqa: E402 -- the family of its own file: wrong answers and lost output
        reliability_silent.attacks(bin_, w, attack, write, trace, op, REF)

    counts = {}
    for r in rows:
        counts[r[2]] = counts.get(r[2], 0) + 1
    print("\n%d attacks: %s" % (len(rows), ", ".join("%s %d" % (k, counts.get(k, 0)) for k in
                                                    ("handled", "crash", "hang", "data lost", "wrong"))))
    subprocess.run(["rm", "-rf", work])
    sys.exit(0 if counts.get("handled", 0) == len(rows) else 1)


if __name__ == "__main__":
    main()
