#!/usr/bin/env python3
"""`linfuse profile` on programs that use no GPU, on a machine with no CUDA driver (CI): its flags,
CMD's exit status passed back as a shell gives it (128+N for signal N, 127 not found, 126 not
runnable), signals sent to the tool passed on to CMD, CMD's own output untouched, the message
without a driver, and --require-gpu refusing to run CMD untraced.

usage: tests/profile_cli_test.py path/to/linfuse WORKDIR"""
import os
import shutil
import signal
import subprocess
import sys
import time

BIN, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
PY = sys.executable
checks = fails = 0


def check(what, ok, detail=""):
    global checks, fails
    checks += 1
    if not ok:
        fails += 1
        print("FAIL: %s%s" % (what, (": " + detail) if detail else ""))


def run(args, timeout=60, **kw):
    p = subprocess.run([BIN, "profile"] + args, capture_output=True, text=True, timeout=timeout, cwd=WORK, **kw)
    return p.returncode, p.stdout, p.stderr


have_driver = os.path.exists("/proc/driver/nvidia")

# --- flags ---
rc, out, err = run(["--help"])
check("--help", rc == 0 and out.startswith("usage: linfuse profile") and "--capture-range" in out, err)
for args, needle in [([], "no program to run"), (["--steps", "4:2", "--", "true"], "--steps"),
                     (["--steps", "x", "--", "true"], "--steps"), (["--delay", "-1", "--", "true"], "--delay"),
                     (["--duration", "abc", "--", "true"], "--duration"), (["--row-limit", "x", "true"], "--row-limit"),
                     (["--bogus", "--", "true"], "unknown flag '--bogus'"), (["--stpes", "1", "true"], "did you mean --steps"),
                     (["--capture-range", "", "true"], "--capture-range"), (["--output", "", "true"], "--output")]:
    rc, out, err = run(args)
    check("%s refused" % args, rc == 2 and needle in err and err.endswith("\n"), "rc %d: %s" % (rc, err))
# flags end at CMD: its own flags are its own
rc, out, err = run(["--steps", "2:4", "--capture-range", "step", "--delay", "0.5", "--duration", "2", "--kernels-only",
                    "--gzip", "-o", "out", "--row-limit", "5", "sh", "-c", "echo $0 $1", "--steps", "x"])
check("every flag, then CMD's own", rc == 0 and out == "--steps x\n", "rc %d out %r err %r" % (rc, out, err))

# --- exit status, output ---
rc, out, err = run(["--", "sh", "-c", "exit 7"])
check("exit status 7 passed back", rc == 7, "rc %d" % rc)
rc, out, err = run(["--", "true"])
check("exit status 0", rc == 0, "rc %d" % rc)
rc, out, err = run(["--", "sh", "-c", "echo hello; echo oops >&2"])
check("CMD's standard output is its own", out == "hello\n", repr(out))
check("CMD's standard error passes", "oops" in err, repr(err))
rc, out, err = run(["--", "sh", "-c", "kill -TERM $$"])
check("a CMD killed by SIGTERM: 143", rc == 128 + signal.SIGTERM, "rc %d" % rc)
rc, out, err = run(["--", "sh", "-c", "kill -KILL $$"])
check("a CMD killed by SIGKILL: 137", rc == 128 + signal.SIGKILL, "rc %d" % rc)
rc, out, err = run(["--", "/nonexistent/program"])
check("a CMD not found: 127", rc == 127 and "cannot run '/nonexistent/program'" in err, "rc %d %s" % (rc, err))
notexec = os.path.join(WORK, "notexec.sh")
open(notexec, "w").write("#!/bin/sh\nexit 0\n")
os.chmod(notexec, 0o644)
rc, out, err = run(["--", notexec])
check("a CMD that cannot run: 126", rc == 126, "rc %d %s" % (rc, err))
rc, out, err = run(["--", "sh", "-c", 'exit "$#"', "x", "a b", "", "c"])
check("arguments passed as they are", rc == 3, "rc %d" % rc)

# --- without a driver ---
if not have_driver:
    rc, out, err = run(["--", "sh", "-c", "echo ${CUDA_INJECTION64_PATH:-unset} ${LINFUSE_PROFILE_OUT:-unset}"])
    check("no driver: CMD runs, untraced", rc == 0 and out == "unset unset\n", repr(out))
    check("no driver: said so", "no CUDA driver" in err and "runs untraced" in err, err)
    rc, out, err = run(["--require-gpu", "--", "sh", "-c", "touch ran"])
    check("--require-gpu without a driver: exit 1", rc == 1 and "--require-gpu" in err and "no CUDA driver" in err,
          "rc %d %s" % (rc, err))
    check("--require-gpu: CMD did not run", not os.path.exists(os.path.join(WORK, "ran")))
    check("no driver: no output directory made", not os.path.exists(os.path.join(WORK, "traces")))
else:
    print("profile_cli_test: a CUDA driver is here: the no-driver cases are skipped")

# --- signals sent to the tool reach CMD ---
CHILD = ("import signal, sys, time\n"
         "signal.signal(signal.SIG%s, lambda *a: sys.exit(42))\n"
         "print('ready', flush=True)\n"
         "time.sleep(30)\n")
for name in ("INT", "TERM", "HUP", "USR1"):
    p = subprocess.Popen([BIN, "profile", "--", PY, "-c", CHILD % name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=WORK)
    line = p.stdout.readline()
    t0 = time.time()
    p.send_signal(getattr(signal, "SIG" + name))
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    p.stdout.close(), p.stderr.close()
    check("SIG%s passed on to CMD, whose handler exits 42" % name, line == "ready\n" and rc == 42,
          "rc %s line %r after %.1fs" % (rc, line, time.time() - t0))
# a CMD that does not handle SIGTERM dies of it, and the tool says so as a shell does
p = subprocess.Popen([BIN, "profile", "--", PY, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=WORK)
line = p.stdout.readline()
p.send_signal(signal.SIGTERM)
try:
    rc = p.wait(timeout=20)
except subprocess.TimeoutExpired:
    p.kill()
    rc = None
p.stdout.close(), p.stderr.close()
check("SIGTERM passed on: CMD dies of it, 143", rc == 143, "rc %s" % rc)
# CMD gets the dispositions the tool was started with: an ignored SIGINT stays ignored (as a
# shell's background job has it), and SIGXFSZ, which the tool ignores for its own writes, is not
def ignored(out):
    mask = int(out.split()[1], 16) if out.startswith("SigIgn:") else -1
    return lambda sig: mask >= 0 and bool(mask & (1 << (sig - 1)))


rc, out, err = run(["--", "grep", "SigIgn", "/proc/self/status"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
check("an ignored SIGINT stays ignored for CMD", ignored(out)(signal.SIGINT), repr(out) + err)
rc, out, err = run(["--", "grep", "SigIgn", "/proc/self/status"])
check("SIGINT and SIGXFSZ are CMD's defaults", not ignored(out)(signal.SIGINT) and not ignored(out)(signal.SIGXFSZ)
      and out.startswith("SigIgn:"), repr(out) + err)

print("profile_cli: %d checks, %d failed" % (checks, fails))
print("%d passed, %d failed" % (checks - fails, fails))
sys.exit(1 if fails else 0)
