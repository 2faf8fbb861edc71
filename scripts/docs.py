#!/usr/bin/env python3
"""The commands in README.md and docs/walkthrough.md, run for real.

Markdown marks each excerpt with the command that made it:

    <!-- run: build/linfuse linear --batch 1024 -->
    ```text
    $ build/linfuse linear --batch 1024
    ...its output...
    ```

`<!-- run gpu: CMD -->` marks an excerpt made on a GPU machine, and `exit=N` after `run` one
whose command exits N (`<!-- run exit=1: CMD -->`, e.g. a `trace expect` whose guess is wrong).
Commands run from the repository root through `bash -o pipefail -c` (a pipeline fails when its
first command does), with `build/linfuse` standing for the binary given.

usage:
  scripts/docs.py update BIN [--gpu] [FILE...]  rerun each excerpt's command (CPU ones; with
                                                --gpu only the GPU ones) and write its output
                                                under the marker
  scripts/docs.py check BIN [FILE...]           run every CPU excerpt's command and every
                                                `build/linfuse` line of the ```sh blocks;
                                                fail if one exits other than it should

FILE defaults to README.md and docs/walkthrough.md.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ["README.md", "docs/walkthrough.md"]
MARK = re.compile(r"^<!-- run( gpu)?(?: exit=(\d+))?: (.*) -->$")
# what a command may leave behind or print that would change between runs of a document
NO_COLOR = {"NO_COLOR": "1", "LC_ALL": "C"}


def run(cmd, binary):
    real = re.sub(r"(^|[\s;|&(])(\./)?build/linfuse\b", lambda m: m.group(1) + binary, cmd)
    env = dict(os.environ, **NO_COLOR)
    p = subprocess.run(["bash", "-o", "pipefail", "-c", real], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       text=True, errors="replace")
    return p.returncode, p.stdout


def excerpts(lines):
    """(index of the marker, gpu, expected exit, command) for each marker."""
    for i, line in enumerate(lines):
        m = MARK.match(line.rstrip("\n"))
        if m:
            yield i, bool(m.group(1)), int(m.group(2) or 0), m.group(3)


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
