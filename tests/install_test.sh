#!/bin/sh
# `make install` gives a C program what it needs: build the library as a user would (release,
# no sanitizers, the CUDA module too when nvcc is here), install it into a scratch prefix, then
# build a small consumer twice, with pkg-config and with CMake's find_package. The consumer
# computes on the CPU, asks for the GPU, and must load no CUDA library either way: none in its
# link (ldd) and none mapped while it runs (/proc/self/maps), whether or not the build had CUDA.
# A second consumer reads a PyTorch trace through the public trace API alone (the headers installed,
# built warning-free with -Wall -Wextra -Werror): its key_averages table must be PyTorch's own,
# byte for byte, and its summary and a checked guess must come out. The installed tool runs from
# the prefix.
# Usage: install_test.sh <source dir> <scratch dir> [<PyTorch reference traces dir>]
set -eu
source_dir="$1" scratch="$2" ref="${3:-$1/../shared/ref/torch-h200}"
rm -rf "$scratch"
mkdir -p "$scratch/src"
cmake -S "$source_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=OFF >/dev/null
cmake --build "$scratch/build" -j "$(nproc)" >/dev/null
cmake --install "$scratch/build" --prefix "$scratch/prefix" >/dev/null
fails=0
cuda_libs='libcuda\.so|libcudart|libcublas|libcupti|libnvrtc'
cat >"$scratch/src/main.c" <<'C'
#include <linfuse/nn.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    lf_nn_linear lin;
    lf_nn_linear_opts o = {4, 3, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    const float xv[4] = {1, 2, 3, 4};
    int64_t xs[2] = {1, 4};
    lf_tensor *x = NULL, *y = NULL;
    if (lf_nn_linear_init(&lin, &o, &rng) || lf_tensor_from_f32(&x, LF_DTYPE_F32, 2, xs, xv, LF_DEVICE_CPU) ||
        lf_nn_linear_forward(&lin, x, &y)) {
        fprintf(stderr, "consumer: %s\n", lf_last_error());
        return 1;
    }
    printf("consumer ok: y has %lld values\n", (long long)lf_tensor_numel(y));
    /* asking for the GPU on a machine without one is an answer, not a crash */
    if (lf_device_require(LF_DEVICE_CUDA) != LF_OK)
        printf("cuda: %s\n", lf_last_error());
    /* what this process has mapped: the CPU path must not have pulled in CUDA */
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m && fgets(line, sizeof line, m))
        if (strstr(line, ".so"))
            printf("mapped: %s", line);
    if (m)
        fclose(m);
    lf_tensor_free(x), lf_tensor_free(y), lf_nn_linear_free(&lin);
    return 0;
}
C
check_consumer() { # check_consumer NAME BINARY
    out=$("$2")
    echo "$out" | grep -v '^mapped:'
    if ldd "$2" | grep -E "$cuda_libs"; then
        echo "FAIL: $1 links a CUDA library"
        fails=$((fails + 1))
    fi
    if echo "$out" | grep '^mapped:' | grep -E "$cuda_libs"; then
        echo "FAIL: $1 mapped a CUDA library while computing on the CPU"
        fails=$((fails + 1))
    fi
    echo "$out" | grep -q '^cuda: no cuda device: ' || { echo "FAIL: $1: no reason given for the missing GPU"; fails=$((fails + 1)); }
}
# pkg-config
PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig:$scratch/prefix/lib/x86_64-linux-gnu/pkgconfig"
export PKG_CONFIG_PATH
pkg-config --exists linfuse
# shellcheck disable=SC2046
cc -std=c11 "$scratch/src/main.c" $(pkg-config --cflags --libs linfuse) -o "$scratch/pc_consumer"
check_consumer pkg-config "$scratch/pc_consumer"
# find_package
cat >"$scratch/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(linfuse REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE linfuse::linfuse)
CM
cmake -S "$scratch/src" -B "$scratch/cm" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/cm" >/dev/null
check_consumer find_package "$scratch/cm/consumer"
# the trace reader API, from the installed headers alone
cat >"$scratch/src/trace_main.c" <<'C'
/* Read a Kineto trace, write its key_averages table (sorted by device time, 25 rows, as PyTorch's
 * prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)) to a file, print the summary
 * and check a guess about its kernels. */
#include <linfuse/linfuse.h>
#include <stdio.h>
#include <stdlib.h>

static int put_text(FILE *f, void *text)
{
    return fputs(text, f) < 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "trace consumer: %s: %s\n", what, lf_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    lf_trace *t = NULL;
    if (lf_trace_read_json(&t, argv[1]) != LF_OK)
        return fail("read");
    lf_table_opts o = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 25, .style = LF_TABLE_TEXT};
    lf_table tab;
    char *table = NULL, *summary = NULL, *report = NULL;
    if (lf_table_build_opts(t, &o, &tab) != LF_OK)
        return fail("table");
    if (lf_table_format(&tab, &o, &table) != LF_OK)
        return fail("format");
    lf_table_free(&tab);
    if (lf_write_file_atomic(argv[2], put_text, table) != LF_OK)
        return fail("write");
    if (lf_trace_summary_format(t, -1, 0, &summary) != LF_OK)
        return fail("summary");
    fputs(summary, stdout);
    const lf_expect_pattern p[] = {{"gemm|nvjet|Kernel|kernel", LF_EXPECT_PRESENT}};
    const lf_expect_opts eo = {.kernels_per_step = -1, .patterns = p, .n_patterns = 1};
    lf_trace_expect *e = NULL;
    int differences = -1;
    if (lf_trace_expect_create(&e, &eo) != LF_OK || lf_trace_expect_check(e, t, 0, &report, &differences) != LF_OK)
        return fail("expect");
    printf("expect: %d differences: %s", differences, report);
    free(table), free(summary), free(report);
    lf_trace_expect_free(e);
    lf_trace_free(t);
    return differences == 0 ? 0 : 1;
}
C
check_trace_consumer() { # check_trace_consumer NAME BINARY
    stem=mlp_64x128x768x3072_eager
    if ! out=$("$2" "$ref/$stem.json" "$scratch/$1_table.txt"); then
        echo "FAIL: $1: the trace consumer failed: $out"
        fails=$((fails + 1))
        return
    fi
    echo "$out"
    cmp -s "$scratch/$1_table.txt" "$ref/$stem.txt" ||
        { echo "FAIL: $1: the table differs from PyTorch's"; diff "$scratch/$1_table.txt" "$ref/$stem.txt" | head -5; fails=$((fails + 1)); }
    echo "$out" | grep -q '^kernels/step=.* verdict=' || { echo "FAIL: $1: no summary line"; fails=$((fails + 1)); }
    echo "$out" | grep -q '^expect: 0 differences: as expected' || { echo "FAIL: $1: the guess was not checked"; fails=$((fails + 1)); }
}
if [ -f "$ref/mlp_64x128x768x3072_eager.json" ]; then
    # shellcheck disable=SC2046
    cc -std=c11 -Wall -Wextra -Werror "$scratch/src/trace_main.c" $(pkg-config --cflags --libs linfuse) -o "$scratch/pc_trace"
    check_trace_consumer pkg-config "$scratch/pc_trace"
    cat >"$scratch/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(trace_consumer C)
find_package(linfuse REQUIRED)
add_executable(trace_consumer trace_main.c)
set_target_properties(trace_consumer PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(trace_consumer PRIVATE -Wall -Wextra -Werror)
target_link_libraries(trace_consumer PRIVATE linfuse::linfuse)
CM
    cmake -S "$scratch/src" -B "$scratch/cm_trace" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
    cmake --build "$scratch/cm_trace" >/dev/null
    check_trace_consumer find_package "$scratch/cm_trace/trace_consumer"
else
    echo "FAIL: no reference traces at $ref"
    fails=$((fails + 1))
fi
# the module is installed beside the library when this build had CUDA, and a missing module
# is named as such
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    ls "$scratch"/prefix/lib*/liblinfuse_cuda.so "$scratch"/prefix/lib/*/liblinfuse_cuda.so 2>/dev/null | grep -q . ||
        { echo "FAIL: nvcc is here but no CUDA module was installed"; fails=$((fails + 1)); }
fi
out=$(LINFUSE_CUDA_MODULE=/nonexistent/liblinfuse_cuda.so "$scratch/pc_consumer" | grep '^cuda:')
echo "$out" | grep -q 'LINFUSE_CUDA_MODULE=/nonexistent/liblinfuse_cuda.so: no such readable file' ||
    { echo "FAIL: a missing module is not named: $out"; fails=$((fails + 1)); }
# the Python package from the prefix (no PYTHONPATH into the source tree, no LINFUSE_LIBRARY): it
# finds the installed library through its _install.py and runs one linear
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    out=$(cd / && env -u LINFUSE_LIBRARY -u LD_PRELOAD PYTHONPATH="$scratch/prefix/lib/python3/dist-packages" \
        PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import numpy as np, linfuse
y = linfuse.linear(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.ones(4, np.float32), act="relu")
print("python:", linfuse.library_source + ":", linfuse.library_path, y.tolist())' 2>&1) || true
    echo "$out"
    case "$out" in
    *"python: the install's libdir: $scratch/prefix/"*"[[4.0, 4.0, 4.0, 4.0], [4.0, 4.0, 4.0, 4.0]]"*) ;;
    *) echo "FAIL: the installed Python package did not run a linear on the installed library"; fails=$((fails + 1)) ;;
    esac
else
    echo "install: no /usr/bin/python3 with numpy here: the Python package's check is skipped"
fi
# the installed tool finds its library from the prefix
"$scratch/prefix/bin/linfuse" --version || { echo "FAIL: the installed linfuse does not start"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "1 passed, 0 failed" || { echo "0 passed, 1 failed ($fails problems)"; exit 1; }
