#!/usr/bin/env python3
"""The shared library exports exactly what the public headers declare with LF_API: every
function a header marks is in the library's dynamic symbol table, and nothing else is (an
internal name exported by accident would be ABI). Also: every top-level function declaration in
a public header carries LF_API, so none is forgotten.

usage: tests/symbols_test.py INCLUDE_DIR LIBRARY"""
import glob
import os
import re
import subprocess
import sys

inc, lib = sys.argv[1], sys.argv[2]
declared, unmarked = set(), []
for path in sorted(glob.glob(os.path.join(inc, "linfuse", "*.h"))):
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    depth = 0
    for line in text.split("\n"):
        if depth == 0:
            m = re.match(r"^(LF_API\s+)?(?:const\s+)?[A-Za-z_]\w*[\s*]+(?:const[\s*]+)?(lf_\w+)\s*\(", line)
            if m and not line.startswith(("static", "typedef", "return")):
                if m.group(1):
                    declared.add(m.group(2))
                else:
                    unmarked.append(m.group(2))
        depth += line.count("{") - line.count("}")
        if 'extern "C" {' in line:
            depth -= 1
        depth = max(depth, 0)

out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
exported = set()
for line in out.split("\n"):
    parts = line.split()
    if len(parts) == 3 and parts[1] in "TDBRVWiu" and not parts[2].startswith("_"):
        exported.add(parts[2].split("@")[0])

extra = sorted(exported - declared)
missing = sorted(declared - exported)
bad = 0
for name in unmarked:
    print("declared without LF_API in a public header: %s" % name)
    bad += 1
for name in extra:
    print("exported but in no public header: %s" % name)
    bad += 1
for name in missing:
    print("declared LF_API but not exported: %s" % name)
    bad += 1
print("symbols: %d declared, %d exported, %d problems" % (len(declared), len(exported), bad))
sys.exit(1 if bad else 0)
