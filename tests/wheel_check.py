#!/usr/bin/env python3
"""What an installed wheel holds (tests/wheel_test.sh runs it with the venv's python):
  - the package's files: the library _install.py names, the tool, and the CUDA module and the
    injection library when CMake built them (in the build folder beside VENV);
  - every ELF file's RUNPATH relative to $ORIGIN, and no path of the source tree in linfuse's own
    files (__FILE__ written relative: -ffile-prefix-map);
  - every library an ELF file needs carried in the package's lib/, or one every Linux system has
    (glibc's, the GCC runtime's), or CUDA's (the driver, cuBLASLt, CUPTI, NVRTC: from the nvidia-*
    packages or the system);
  - the files pip recorded (RECORD) all present.
usage: wheel_check.py VENV"""
import os
import re
import subprocess
import sys

SYSTEM = re.compile(r"^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux-x86-64|ld-linux-aarch64)\.so")
CUDA = re.compile(r"^(libcuda\.so\.1|libcublasLt\.so\.\d+|libcublas\.so\.\d+|libcupti\.so\.\d+|libnvrtc\.so\.\d+)$")
fails = 0


def check(ok, what):
    global fails
    print("%s: %s" % ("ok  " if ok else "FAIL", what))
    fails += not ok


def dynamic(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*?)\]", out)
    return needed, [p for r in runpath for p in r.split(":") if p]


def main():
    venv = sys.argv[1]
    import linfuse
    from linfuse import _install
    pkg = os.path.dirname(os.path.abspath(linfuse.__file__))
    check(pkg.startswith(os.path.abspath(venv)), "linfuse comes from the venv: %s" % pkg)
    lib = os.path.join(pkg, "lib")
    files = sorted(os.listdir(lib))
    check(_install.LIBDIR == "lib" and _install.SONAME in files, "the library _install.py names: %s" % _install.SONAME)
    tool = os.path.join(pkg, "bin", "linfuse")
    check(os.access(tool, os.X_OK), "the tool: %s" % tool)
    cmake = os.path.join(os.path.dirname(os.path.abspath(venv)), "build", "cmake")
    with_cuda = os.path.exists(os.path.join(cmake, "liblinfuse_cuda.so"))
    for mod in ("liblinfuse_cuda.so", "liblinfuse_inject.so"):
        check((mod in files) == with_cuda, "%s %s (the build %s it)" % (mod, "carried" if mod in files else "absent",
                                                                     "made" if with_cuda else "did not make"))
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).encode()  # the tree it was built from
    for path in [tool] + [os.path.join(lib, f) for f in files]:
        needed, runpath = dynamic(path)
        name = os.path.relpath(path, pkg)
        if f"{name}".startswith(("bin/", "lib/liblinfuse")):
            check(source not in open(path, "rb").read(), "%s: no path of the tree it was built from in it" % name)
        bad = [p for p in runpath if not p.startswith("$ORIGIN")]
        check(not bad, "%s: RUNPATH %s relative to $ORIGIN" % (name, runpath))
        alien = [n for n in needed if n not in files and not SYSTEM.match(n) and not CUDA.match(n)]
        check(not alien, "%s: needs only carried, system or CUDA libraries%s" % (
            name, (": not %s" % alien) if alien else ""))
    dist = [d for d in os.listdir(os.path.dirname(pkg)) if d.startswith("linfuse-") and d.endswith(".dist-info")]
    check(len(dist) == 1, "one dist-info: %s" % dist)
    if dist:
        site = os.path.dirname(pkg)
        rows = [r.split(",")[0] for r in open(os.path.join(site, dist[0], "RECORD")).read().splitlines() if r]
        missing = [r for r in rows if not os.path.exists(os.path.normpath(os.path.join(site, r)))]
        check(not missing, "every file of RECORD present (%d)%s" % (len(rows), (": missing %s" % missing) if missing
                                                                    else ""))
    print("wheel_check: %s" % ("failed" if fails else "passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
