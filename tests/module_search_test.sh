#!/bin/sh
# The CUDA module's libraries found where PyTorch users have them (src/backend/module.c), on a
# machine without a GPU: a stand-in driver (libcuda.so.1), a stand-in module that needs a
# stand-in CUDA library (libfakecublas.so.13) the linker cannot find, and `linfuse --version`,
# which says whether the module loaded or why not. Found in $CUDA_HOME, or in the nvidia/cu13
# folder of the site-packages of a library the process has loaded (as torch brings its own), the
# library loads and the module goes on (here to its own refusal: it is no linfuse module); found
# nowhere, the message names the library and the places looked in.
# Usage: module_search_test.sh <linfuse binary>
set -u
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 checks=0
cc=${CC:-cc}

mkdir -p "$work/driver" "$work/cuda/lib64" "$work/mod" "$work/sp/site-packages/nvidia/cu13/lib" \
    "$work/sp/site-packages/torch/lib" "$work/nowhere"
printf 'int cuInit(unsigned f) { return (int)f; }\n' >"$work/drv.c"
printf 'int fake_cublas(void) { return 13; }\n' >"$work/lib.c"
printf 'int fake_cublas(void);\nint module_entry(void) { return fake_cublas(); }\n' >"$work/mod.c"
printf 'int torch_stub(void) { return 1; }\n' >"$work/torch.c"
$cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/driver/libcuda.so.1" "$work/drv.c" &&
    $cc -shared -fPIC -Wl,-soname,libfakecublas.so.13 -o "$work/cuda/lib64/libfakecublas.so.13" "$work/lib.c" &&
    cp "$work/cuda/lib64/libfakecublas.so.13" "$work/sp/site-packages/nvidia/cu13/lib/" &&
    $cc -shared -fPIC -o "$work/mod/liblinfuse_cuda.so" "$work/mod.c" -L"$work/cuda/lib64" -l:libfakecublas.so.13 &&
    $cc -shared -fPIC -o "$work/sp/site-packages/torch/lib/libtorch_stub.so" "$work/torch.c" || {
    echo "FAIL: could not build the stand-ins"
    exit 1
}

expect() { # expect "what" "needle" env...
    what="$1" needle="$2"
    shift 2
    checks=$((checks + 1))
    out=$(env LD_LIBRARY_PATH="$work/driver" LINFUSE_CUDA_MODULE="$work/mod/liblinfuse_cuda.so" \
        ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" "$@" "$bin" --version 2>&1)
    case "$out" in
    *"$needle"*) ;;
    *) fails=$((fails + 1)); echo "FAIL: $what: no '$needle' in:"; echo "$out" ;;
    esac
}

expect "found nowhere: the library and where it was looked for" \
    "libfakecublas.so.13 was not found" CUDA_HOME="$work/nowhere" CUDA_PATH=
expect "found nowhere: the places named" "$work/nowhere" CUDA_HOME="$work/nowhere" CUDA_PATH=
expect "in \$CUDA_HOME/lib64: loaded, and the module goes on" \
    "is not a linfuse cuda module of this version" CUDA_HOME="$work/cuda" CUDA_PATH=
expect "in the nvidia/cu13 package beside a loaded library's site-packages" \
    "is not a linfuse cuda module of this version" CUDA_HOME="$work/nowhere" CUDA_PATH= \
    LD_PRELOAD="$work/sp/site-packages/torch/lib/libtorch_stub.so"

echo "module_search: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
