#!/bin/sh
# Fuzz the trace reader (and the table, diff, summary, breakdown, report and SVG built on it), then the safetensors
# reader, with libFuzzer for a bounded time (two thirds and one third of it). The traces are
# seeded with real ones (PyTorch's reference traces, its gzip ones among them, and traces
# linfuse writes now) and hand-made hostile ones (tests/fuzz/seeds: sums past 64 bits, bad
# UTF-8, numbers at the edge of JSON's grammar, many names, gzip of one member and of two),
# mutated with a dictionary of the trace's keys (tests/fuzz/trace.dict). Earlier crashes live in
# tests/fuzz/regressions and are replayed first; a new crash fails the test and is saved there
# to become a regression test. The safetensors reader is seeded with tests/fuzz/st_seeds (an
# MLP's names, every dtype, a scalar); its findings live in tests/fuzz/st_regressions.
# Usage: fuzz_test.sh <source dir> <ref dir> <linfuse binary> <work dir> [seconds]
set -eu
src="$1" ref="$2" bin="$3" work="$4" secs="${5:-45}"
cc=$(command -v clang || command -v clang-14 || true)
[ -n "$cc" ] || { echo "fuzz_test: clang is missing (scripts/deps.sh test installs it)"; exit 1; }
rm -rf "$work"
mkdir -p "$work/corpus" "$work/traces"
# the whole trace layer (every file of src/trace: a file added there is fuzzed with the rest) and the
# core under it
srcs="$src/tests/fuzz/fuzz_trace.c $src/src/trace/*.c $src/src/core/status.c $src/src/core/text.c $src/src/core/settings.c"
# shellcheck disable=SC2086
"$cc" -g -O1 -std=c11 -D_DEFAULT_SOURCE -DLF_VERSION=\"fuzz\" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$src/include" -I"$src/src" $srcs $(pkg-config --cflags --libs jansson zlib sqlite3) -lm -o "$work/fuzz_trace"
cp "$ref"/*.json "$src"/tests/fuzz/seeds/*.json "$src"/tests/fuzz/seeds/*.json.gz "$work/corpus/"
for g in "$ref"/../torch-h200x2/*.json.gz; do if [ -e "$g" ]; then cp "$g" "$work/corpus/"; fi; done
"$bin" linear --out "$work/traces" --batch 16 >/dev/null
"$bin" simple-mlp --out "$work/traces" --batch 1 --seq 4 --dim 32 --hidden 48 >/dev/null
find "$work/traces" -name '*.json' -exec cp {} "$work/corpus/" \;
# replay the regressions (each must run clean)
if ls "$src"/tests/fuzz/regressions/* >/dev/null 2>&1; then
    "$work/fuzz_trace" "$src"/tests/fuzz/regressions/*
fi
# then search for new failures, bounded in time and memory
"$cc" -g -O1 -std=c11 -D_DEFAULT_SOURCE -DLF_VERSION=\"fuzz\" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$src/include" -I"$src/src" "$src/tests/fuzz/fuzz_safetensors.c" "$src/src/safetensors/read.c" "$src/src/safetensors/file.c" "$src/src/safetensors/fp8.c" "$src/src/tensor/tensor.c" \
    "$src/src/tensor/view.c" "$src/src/tensor/rng.c" "$src/src/tensor/host_memory.c" "$src/src/core/status.c" "$src/src/core/text.c" "$src/src/core/settings.c" \
    $(pkg-config --cflags --libs jansson) -lm -o "$work/fuzz_safetensors"
mkdir -p "$work/st_corpus"
cp "$src"/tests/fuzz/st_seeds/* "$work/st_corpus/"
if ls "$src"/tests/fuzz/st_regressions/* >/dev/null 2>&1; then
    "$work/fuzz_safetensors" "$src"/tests/fuzz/st_regressions/*
fi
status=0
(cd "$work" && ./fuzz_trace -max_total_time=$((secs * 2 / 3)) -rss_limit_mb=2048 -timeout=10 -max_len=262144 \
    -dict="$src/tests/fuzz/trace.dict" -print_final_stats=1 corpus >fuzz.log 2>&1) || status=$?
tail -15 "$work/fuzz.log"
found=regressions
if [ "$status" = 0 ]; then
    found=st_regressions
    (cd "$work" && ./fuzz_safetensors -max_total_time=$((secs - secs * 2 / 3)) -rss_limit_mb=2048 -timeout=10 \
        -max_len=65536 -print_final_stats=1 st_corpus >fuzz_st.log 2>&1) || status=$?
    tail -5 "$work/fuzz_st.log"
fi
if [ "$status" != 0 ]; then
    for f in "$work"/crash-* "$work"/timeout-* "$work"/leak-* "$work"/oom-*; do
        [ -e "$f" ] && cp "$f" "$src/tests/fuzz/$found/" && echo "saved $(basename "$f") to tests/fuzz/$found"
    done
    echo "0 passed, 1 failed"
    exit 1
fi
echo "1 passed, 0 failed"
