#!/bin/sh
# `make install` gives a C program what it needs: build the library as a user would (release,
# no sanitizers), install it into a scratch prefix, then build a small consumer twice, with
# pkg-config and with CMake's find_package. Usage: install_test.sh <source dir> <scratch dir>
set -eu
source_dir="$1" scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch/src"
cmake -S "$source_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=OFF -DLINFUSE_CUDA=OFF >/dev/null
cmake --build "$scratch/build" -j "$(nproc)" >/dev/null
cmake --install "$scratch/build" --prefix "$scratch/prefix" >/dev/null
cat >"$scratch/src/main.c" <<'C'
#include <linfuse/nn.h>
#include <stdio.h>
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
    lf_tensor_free(x), lf_tensor_free(y), lf_nn_linear_free(&lin);
    return 0;
}
C
# pkg-config
PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig:$scratch/prefix/lib/x86_64-linux-gnu/pkgconfig"
export PKG_CONFIG_PATH
pkg-config --exists linfuse
cc -std=c11 "$scratch/src/main.c" $(pkg-config --cflags --libs linfuse) -o "$scratch/pc_consumer"
"$scratch/pc_consumer"
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
"$scratch/cm/consumer"
echo "1 passed, 0 failed"
