#!/usr/bin/env python3
"""The commands and C snippets of README.md and docs/*.md, run and compiled for real.

Markdown marks each excerpt with the command that made it:

    <!-- run: build/linfuse linear --batch 1024 -->
    ```text
    $ build/linfuse linear --batch 1024
    ...its output...
    ```

`<!-- run gpu: CMD -->` marks an excerpt made on a GPU machine, and `exit=N` after `run` one
whose command exits N (`<!-- run exit=1: CMD -->`, e.g. a `trace expect` whose guess is wrong).
`exact` after `run` marks an excerpt whose text must match the command's output byte for byte
(`<!-- run exact: build/linfuse tour --help -->`: docs/cli.md's reference); the others only
have to run, as timings change. Commands run from the repository root through
`bash -o pipefail -c` (a pipeline fails when its first command does), with `build/linfuse`
standing for the binary given.

Every ```c block is compiled (`cc -std=c11 -Wall -Wextra -Werror -fsyntax-only` against
include/): its #include lines and the lines from a column-0 function definition to its closing
`}` at file scope, the rest as the body of a function; nothing is included for it, so a snippet
pasted into a file needs only a main() around it. A block that defines `int main(` is a whole
program: it is built against the library beside the binary given, run, and must exit 0 and print. A snippet that continues an earlier one names what it uses in a
`<!-- c: DECLARATIONS -->` line just above it.

`check` also fails when a command that `linfuse --help` lists (or a trace verb `linfuse trace
--help` lists) has no `--help` excerpt in docs/cli.md.

usage:
  scripts/docs.py update BIN [--gpu] [FILE...]  rerun each excerpt's command (CPU ones; with
                                                --gpu only the GPU ones) and write its output
                                                under the marker
  scripts/docs.py check BIN [FILE...]           run every CPU excerpt's command and every
                                                `build/linfuse` line of the ```sh blocks;
                                                fail if one exits other than it should

FILE defaults to README.md and every docs/*.md.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ["README.md"] + sorted(os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "docs", "*.md")))
MARK = re.compile(r"^<!-- run( gpu)?( exact)?(?: exit=(\d+))?: (.*) -->$")
CMARK = re.compile(r"^<!-- c: (.*) -->$")
# what a command may leave behind or print that would change between runs of a document
NO_COLOR = {"NO_COLOR": "1", "LC_ALL": "C"}


def run(cmd, binary):
    real = re.sub(r"(^|[\s;|&(])(\./)?build/linfuse\b", lambda m: m.group(1) + binary, cmd)
    # linfuse's own settings unset, as a reader's plain shell has them (`--help-env` shows them)
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("LINFUSE_")}, **NO_COLOR)
    p = subprocess.run(["bash", "-o", "pipefail", "-c", real], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       text=True, errors="replace")
    return p.returncode, p.stdout


def excerpts(lines):
    """(index of the marker, gpu, expected exit, command) for each marker."""
    for i, line in enumerate(lines):
        m = MARK.match(line.rstrip("\n"))
        if m:
            yield i, bool(m.group(1)), int(m.group(3) or 0), m.group(4)


def exact_marks(lines):
    """(index of the marker, command) for each `run exact` marker."""
    for i, line in enumerate(lines):
        m = MARK.match(line.rstrip("\n"))
        if m and m.group(2):
            yield i, m.group(4)


def block_end(lines, start):
    """The index just past the fenced block that starts at lines[start] (or start when none)."""
    if start >= len(lines) or not lines[start].startswith("```"):
        return start
    for j in range(start + 1, len(lines)):
        if lines[j].startswith("```"):
            return j + 1
    return len(lines)


def update(binary, files, gpu):
    bad = 0
    for f in files:
        path = os.path.join(ROOT, f)
        lines = open(path).read().split("\n")
        out, i = [], 0
        marks = {k: (g, e, c) for k, g, e, c in excerpts(lines)}
        while i < len(lines):
            out.append(lines[i])
            if i in marks and marks[i][0] == gpu:
                _, want, cmd = marks[i]
                code, text = run(cmd, binary)
                if code != want:
                    print("%s: '%s' exited %d, expected %d:\n%s" % (f, cmd, code, want, text[-2000:]))
                    bad += 1
                out += ["```text", "$ " + cmd] + text.rstrip("\n").split("\n") + ["```"]
                i = block_end(lines, i + 1)
                continue
            i += 1
        open(path, "w").write("\n".join(out))
    return bad


def sh_lines(lines):
    """Each `build/linfuse ...` line of a ```sh block."""
    inside = False
    for line in lines:
        if line.startswith("```"):
            inside = line.strip() == "```sh" and not inside
            continue
        cmd = line.split(" #")[0].strip()
        if inside and re.match(r"(\./)?build/linfuse\s", cmd):
            yield cmd


def c_blocks(lines):
    """(line number, prelude, code) for each ```c block."""
    prelude = ""
    for i, line in enumerate(lines):
        m = CMARK.match(line.rstrip("\n"))
        if m:
            prelude = m.group(1)
        elif line.strip() == "```c":
            end = block_end(lines, i)
            yield i + 1, prelude, lines[i + 1:end - 1]
            prelude = ""
        elif line.strip():
            prelude = "" if not line.startswith("<!--") else prelude


def run_program(code, binary):
    """A snippet that is a whole program (it defines main): built against the library beside the
    binary given, run, and held to exit 0 with something printed; None, else what went wrong."""
    libdir = os.path.dirname(binary)
    lib = os.path.join(libdir, "liblinfuse.so")
    # a library built with sanitizers (make test's) links only into a program built with them
    ldd = subprocess.run(["ldd", lib], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    sanitize = ["-fsanitize=address,undefined"] if "libasan" in ldd else []
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "snippet.c"), os.path.join(d, "snippet")
        open(src, "w").write("\n".join(code) + "\n")
        p = subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror"] + sanitize +
                           ["-I", os.path.join(ROOT, "include"), src, "-L", libdir, "-llinfuse", "-Wl,-rpath," + libdir,
                            "-o", exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            return p.stdout[-1500:]
        r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode or not r.stdout.strip():
            return "the program exited %d, printing %r" % (r.returncode, r.stdout[-500:])
    return None


def compile_snippet(prelude, code, binary):
    """None when the snippet compiles warning-free (a whole program: and runs), else the complaint."""
    if any(re.match(r"^int main\(", line) for line in code):
        return run_program(code, binary)
    top, body, inside = [], [], False
    for line in code:
        if line.startswith("#include"):
            top.append(line)
        elif inside or re.match(r"^(static\s+)?[a-z_][\w\s\*]*\b\w+\(.*\)\s*$", line):
            top.append(line)
            inside = line != "}"
        else:
            body.append(line)
    src = "\n".join(top +
                    ["int main(void)", "{", prelude] + body + ["return 0;", "}", ""])
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(src)
    try:
        p = subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused",
                            "-Wno-unused-parameter", "-fsyntax-only", "-I", os.path.join(ROOT, "include"), f.name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        os.unlink(f.name)
    return None if p.returncode == 0 else p.stdout[-1500:]


def listed_commands(binary):
    """The commands `linfuse --help` lists and the verbs of `linfuse trace --help`, as the
    words that follow `linfuse` ("tour", "bench cpu", "trace table")."""
    cmds = []
    _, top = run("build/linfuse --help", binary)
    for line in top.split("\n"):
        m = re.match(r"^  ([a-z][a-z-]*(?: [a-z]+)?)\s{2,}", line)
        if m and m.group(1) != "help":
            cmds.append(m.group(1))
    _, tr = run("build/linfuse trace --help", binary)
    for line in tr.split("\n"):
        m = re.match(r"^  (?:linfuse trace )?([a-z]+)\b", line)
        if m and m.group(1) not in ("linfuse", "help"):
            cmds.append("trace " + m.group(1))
    return sorted(set(cmds))


def check(binary, files):
    bad = n = 0
    for f in files:
        lines = open(os.path.join(ROOT, f)).read().split("\n")
        todo = [(c, e) for _, g, e, c in excerpts(lines) if not g] + [(c, 0) for c in sh_lines(lines)]
        for cmd, want in todo:
            n += 1
            code, text = run(cmd, binary)
            if code != want:
                bad += 1
                print("FAIL: %s: '%s' exited %d, expected %d:\n%s" % (f, cmd, code, want, text[-1500:]))
        for i, cmd in exact_marks(lines):
            n += 1
            end = block_end(lines, i + 1)
            shown = "\n".join(lines[i + 3:end - 1])
            _, text = run(cmd, binary)
            if shown != text.rstrip("\n"):
                bad += 1
                print("FAIL: %s:%d: the excerpt of '%s' is not what it prints now (scripts/docs.py update)" %
                      (f, i + 1, cmd))
        for line_no, prelude, code in c_blocks(lines):
            n += 1
            why = compile_snippet(prelude, code, binary)
            if why:
                bad += 1
                print("FAIL: %s:%d: the C snippet does not compile warning-free:\n%s" % (f, line_no, why))
    if "docs/cli.md" in files:
        shown = set(c for _, c in exact_marks(open(os.path.join(ROOT, "docs/cli.md")).read().split("\n")))
        for cmd in listed_commands(binary):
            n += 1
            if "build/linfuse %s --help" % cmd not in shown:
                bad += 1
                print("FAIL: docs/cli.md has no reference for 'linfuse %s' (a `run exact` excerpt of its --help)" % cmd)
    print("%d passed, %d failed" % (n - bad, bad))
    return bad


def main(argv):
    if len(argv) < 3 or argv[1] not in ("update", "check"):
        print(__doc__)
        return 2
    binary = os.path.abspath(argv[2])
    gpu = "--gpu" in argv[3:]
    files = [a for a in argv[3:] if not a.startswith("--")] or FILES
    bad = update(binary, files, gpu) if argv[1] == "update" else check(binary, files)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
