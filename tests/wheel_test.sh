#!/bin/sh
# The wheel as a user gets it: built from this tree by pip with Debian's setuptools and wheel
# (nothing fetched), installed into a fresh venv that sees Debian's numpy and torch
# (--system-site-packages), then, with no PYTHONPATH or LINFUSE_LIBRARY, from outside the tree:
# what the wheel holds (tests/wheel_check.py: every RUNPATH relative to $ORIGIN, every needed
# library carried or a system or CUDA one, every file the package loads present), the `linfuse`
# command naming the library it runs, and the package's own tests (tests/python_test.py
# --installed, tests/python_torch_test.py).
# Usage: wheel_test.sh <source dir> <work dir>
set -u
src=$(cd "$1" && pwd)
work="$2"
py=/usr/bin/python3 # Debian's: its setuptools, wheel, venv and numpy/torch
rm -rf "$work"
mkdir -p "$work"
fail() {
    echo "FAIL: $*"
    exit 1
}

env LINFUSE_WHEEL_BUILD_DIR="$work/build" JOBS="${JOBS:-2}" \
    "$py" -m pip wheel --no-build-isolation --no-deps --no-index -w "$work/dist" "$src" >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log"; fail "pip wheel"; }
whl=$(ls "$work"/dist/linfuse-*.whl) || fail "no wheel written"
case "$whl" in
*-py3-none-linux_*.whl) ;;
*) fail "the wheel's tags: $whl (py3-none-<platform>)" ;;
esac
"$py" -m venv --system-site-packages "$work/venv" || fail "python3 -m venv"
"$work/venv/bin/python" -m pip install --no-index --no-deps --quiet "$whl" || fail "pip install $whl"

cd "$work" || exit 1
unset PYTHONPATH LINFUSE_LIBRARY LINFUSE_CUDA_MODULE
"$work/venv/bin/python" "$src/tests/wheel_check.py" "$work/venv" || fail "the wheel's contents"
out=$("$work/venv/bin/linfuse" --version) || fail "linfuse --version"
site=$("$work/venv/bin/python" -c 'import linfuse, os; print(os.path.dirname(linfuse.__file__))')
case "$out" in
"linfuse "*"library: $site/lib/liblinfuse.so."*) ;;
*) fail "linfuse --version does not name the wheel's library under $site: $out" ;;
esac
"$work/venv/bin/linfuse" linear --batch 8 --out "$work/traces" >/dev/null || fail "linfuse linear from the wheel"
OMP_NUM_THREADS=2 "$work/venv/bin/python" "$src/tests/python_test.py" --installed || fail "python_test --installed"
if "$work/venv/bin/python" -c 'import torch' 2>/dev/null; then
    OMP_NUM_THREADS=2 "$work/venv/bin/python" "$src/tests/python_torch_test.py" || fail "python_torch_test from the wheel"
fi
echo "wheel: $(basename "$whl") installed and tested"
