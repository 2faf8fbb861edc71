#!/bin/sh
# `linfuse trace` on PyTorch's reference traces: the table is PyTorch's own, byte for byte; the
# diff tells the blog's eager-versus-compile story; expect's exit status; the SVG renders in
# headless Chromium with the kernels where the SVG says; bad files exit 2 with a message.
# Usage: trace_cli_test.sh <linfuse binary> <ref dir> <work dir>
set -u
bin="$1" ref="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
fails=0 checks=0
check() { # check "what" expected_status command...
    what="$1" want="$2"
    shift 2
    checks=$((checks + 1))
    LAST=$("$@" 2>&1)
    got=$?
    if [ "$got" != "$want" ]; then
        fails=$((fails + 1))
        echo "FAIL: $what: exit $got, expected $want"
        echo "$LAST" | head -8
    fi
}
contains() {
    checks=$((checks + 1))
    case "$LAST" in
    *"$2"*) ;;
    *) fails=$((fails + 1)); echo "FAIL: $1: output lacks '$2'"; echo "$LAST" | head -30 ;;
    esac
}

# table: PyTorch's own text for the same trace
# every shared table, the eager MLP's too: its cudaLaunchKernel average is 8.5265 us, which PyTorch
# prints 8.526 because it adds start-relative microseconds in doubles (docs/trace_format.md)
for stem in linear_1024x32x64_eager linear_1024x32x64_compile matmul_add_64_eager mlp_64x128x768x3072_eager \
    mlp_64x128x768x3072_compile; do
    checks=$((checks + 1))
    "$bin" trace table "$ref/$stem.json" --sort-by cuda_time_total --row-limit 25 >"$work/$stem.txt" 2>&1
    if ! cmp -s "$work/$stem.txt" "$ref/$stem.txt"; then
        fails=$((fails + 1))
        echo "FAIL: table of $stem differs from PyTorch's:"
        diff "$work/$stem.txt" "$ref/$stem.txt" | head -10
    fi
done
check "table sorted by self CPU" 0 "$bin" trace table "$ref/mlp_64x128x768x3072_eager.json" --sort-by self_cpu_time_total --row-limit 3
contains "self cpu first" "aten::mm"
check "bad sort key" 2 "$bin" trace table "$ref/linear_1024x32x64_eager.json" --sort-by speed
contains "bad sort key" "unknown sort key 'speed'"

# diff: the blog's reading of eager vs compile
check "diff mlp" 0 "$bin" trace diff "$ref/mlp_64x128x768x3072_eager.json" "$ref/mlp_64x128x768x3072_compile.json"
contains "diff kernels" "B runs 4 kernels per step where A ran 5 (2 vanished, 1 appeared); 3 pieces of device work kept their exact names and count"
contains "diff fused" "0 -> 1          0.000us -> 37.440us     triton_poi_fused__unsafe_view_gelu_mul_0"
contains "diff units" "CPU time (step wall time)           322.279us      456.563us"
contains "diff same work" "(same kernel)"
contains "diff ops" "removed       1 -> 0     aten::gelu"
# names cut as PyTorch's table cuts them (55 characters), but never into two alike: the vanished
# elementwise kernels share their first 62 characters, so each keeps 16 past them; --json has
# them whole. Every line of the text stays short (the 345- and 451-character names are gone)
contains "diff cut names: gelu" "0.000us      void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelIm...
"
contains "diff cut names: mul" "0.000us      void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c1...
"
contains "diff cut names: short ones whole" "    triton_poi_fused__unsafe_view_gelu_mul_0
"
checks=$((checks + 1))
long=$(printf '%s\n' "$LAST" | grep -v '^In summary' | awk 'length > 160' | head -1)
[ -z "$long" ] || { fails=$((fails + 1)); echo "FAIL: diff: a line past 160 characters: $long"; }
check "breakdown: names cut" 0 "$bin" trace breakdown "$ref/mlp_64x128x768x3072_eager.json"
contains "breakdown cut names" "  void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelIm...
"
checks=$((checks + 1))
long=$(printf '%s\n' "$LAST" | grep -v '^launches' | awk 'length > 160' | head -1)
[ -z "$long" ] || { fails=$((fails + 1)); echo "FAIL: breakdown: a line past 160 characters: $long"; }
check "expect: names cut" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernel zzz --no-kernel Gelu
contains "expect cut names: the list" "  void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c1... (1 per step)"
contains "expect cut names: the hit" "kernel 'void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelIm...' matches"
check "diff --json: names whole" 0 "$bin" trace diff "$ref/mlp_64x128x768x3072_eager.json" "$ref/mlp_64x128x768x3072_compile.json" --json
contains "diff json full names" "binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
check "expect --json: names whole" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --no-kernel Gelu --json
contains "expect json full names" "at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#4}"
check "breakdown --json: names whole" 0 "$bin" trace breakdown "$ref/mlp_64x128x768x3072_eager.json" --json
contains "breakdown json full names" "std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16"
# the same kernel launched another number of times per step: the same name, not the same work
python3 - "$ref/linear_1024x32x64_eager.json" "$work/twice.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
k = [e for e in ev if e.get("cat") == "kernel"]
ev.extend(dict(e, ts=e["ts"] + e["dur"] / 4, dur=e["dur"] / 4) for e in k)  # each kernel twice a step
json.dump(t, open(sys.argv[2], "w"))
PY
check "diff of a kernel launched twice as often" 0 "$bin" trace diff "$ref/linear_1024x32x64_eager.json" "$work/twice.json"
contains "diff of a kernel launched twice as often: not the same work" "0 pieces of device work kept their exact names and count"
contains "diff of a kernel launched twice as often: said" "kept its name but ran another number of times per step"
check "diff --json of a kernel launched twice as often" 0 "$bin" trace diff "$ref/linear_1024x32x64_eager.json" "$work/twice.json" --json
checks=$((checks + 1))
case "$LAST" in *same_work*) fails=$((fails + 1)); echo "FAIL: diff --json: same_work for a kernel launched 1 -> 2 times a step" ;; esac
# device work outside every step (the steps moved before it): no device work in the steps, yet the
# trace has some, so the device is idle there, not absent
python3 - "$ref/mlp_64x128x768x3072_eager.json" "$work/early_steps.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
t0 = min(e["ts"] for e in ev if "ts" in e)
for k, e in enumerate(e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")):
    e["ts"], e["dur"] = t0 - 1000 + 100 * k, 50
json.dump(t, open(sys.argv[2], "w"))
PY
check "summary: device work only outside the steps" 0 "$bin" trace summary "$work/early_steps.json"
contains "summary: device work only outside the steps: not no-device-work" "verdict=overhead-bound"
check "diff json" 0 "$bin" trace diff "$ref/linear_1024x32x64_eager.json" "$ref/linear_1024x32x64_compile.json" --json
contains "diff json same work" '"change": "stayed", "per_step": [1, 1]'
contains "diff json same work flag" '"same_work": true'
checks=$((checks + 1))
echo "$LAST" | python3 -c 'import json,sys; json.load(sys.stdin)' || { fails=$((fails + 1)); echo "FAIL: diff --json is not JSON"; }

# expect: guess first, then look
check "expect right" 0 "$bin" trace expect "$ref/linear_1024x32x64_eager.json" --kernels-per-step 1 --kernel 'bias' --no-kernel 'elementwise'
check "kernels-per-step nan" 2 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernels-per-step nan
contains "kernels-per-step nan" "needs a number from 0 to 1e9, got 'nan'"
check "kernels-per-step inf" 2 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernels-per-step inf
check "max-bytes" 2 "$bin" trace summary "$ref/linear_1024x32x64_eager.json" --max-bytes 1000
contains "max-bytes" "is over the 1000 bytes (0.0 GB) a trace may have"
check "max-bytes raised" 0 "$bin" trace summary "$ref/linear_1024x32x64_eager.json" --max-bytes=100000
check "expect wrong count" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernels-per-step 4
contains "expect says why" "kernels per step: expected 4, the trace has 5"
check "expect forbidden kernel" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --no-kernel 'elementwise'
check "expect missing kernel" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernel 'triton_poi'
contains "expect lists kernels" "no kernel matches --kernel 'triton_poi'"
check "expect compiled" 0 "$bin" trace expect "$ref/mlp_64x128x768x3072_compile.json" --kernels-per-step 4 --kernel 'triton_poi_fused.*gelu_mul'
check "expect bad regex" 2 "$bin" trace expect "$ref/mlp_64x128x768x3072_compile.json" --kernel '('
check "expect no guess" 2 "$bin" trace expect "$ref/mlp_64x128x768x3072_compile.json"

# summary
check "summary" 0 "$bin" trace summary "$ref/linear_1024x32x64_eager.json"
contains "summary line" "kernels/step=1 cpu_ops/step=5 device_busy=2% verdict=overhead-bound"

# bad files
: >"$work/empty.json"
check "empty file" 2 "$bin" trace summary "$work/empty.json"
contains "empty file" "is empty"
check "directory" 2 "$bin" trace table "$work"
contains "directory" "is a directory"
printf '{"traceEvents": [{"ph": "X",\n "name": ' >"$work/cut.json"
check "truncated" 2 "$bin" trace table "$work/cut.json"
contains "truncated position" "cut.json:2:"
check "missing file" 2 "$bin" trace diff "$work/none.json" "$ref/linear_1024x32x64_eager.json"
check "unknown verb" 2 "$bin" trace frob

# svg: draw a step, render it with Chromium, find the first kernel where the SVG put it
svg="$work/step.svg" png="$work/step.png"
# steps by their ProfilerStep number, as breakdown and report name them (this trace has #2 to #4)
check "svg" 0 "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" --step 3 -o "$svg"
check "svg draws the step asked for" 0 grep -q 'font-weight="bold">ProfilerStep#3 ' "$svg"
check "svg --step 2" 0 "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" --step 2 -o "$work/s2.svg"
check "svg --step 2 is ProfilerStep#2" 0 grep -q 'font-weight="bold">ProfilerStep#2 ' "$work/s2.svg"
# PyTorch without Kineto (Debian's torch 1.13): a bare array of events with no category, its
# ops and record_function ranges alike; the table is PyTorch's own, byte for byte (it was empty)
check "a trace of torch without Kineto: torch 1.13's own table, byte for byte" 0 sh -c \
    '"$0" trace table "$1.json" --sort-by cpu_time_total --row-limit -1 | cmp - "$1.txt"' "$bin" \
    "$(dirname "$0")/data/torch113_legacy"
# and its steps: prof.step()'s ProfilerStep#N ranges are steps there too (the trace was read as
# one step); the table stays torch's own; no device work is no bound of the device. Recorded with
# Debian's torch 1.13: Linear(16, 32), GELU, Linear(32, 16) on 4 tokens, schedule(wait=1,
# warmup=1, active=3) over 5 steps, export_chrome_trace and key_averages().table(sort_by=
# "cpu_time_total", row_limit=-1)
d="$(dirname "$0")/data/torch113_legacy_steps"
check "a legacy trace with steps: torch's table, byte for byte" 0 sh -c \
    '"$0" trace table "$1.json" --sort-by cpu_time_total --row-limit -1 | cmp - "$1.txt"' "$bin" "$d"
check "a legacy trace with steps: summary" 0 "$bin" trace summary "$d.json"
contains "a legacy trace with steps: three steps" "steps=3 "
contains "a legacy trace with steps: no device work" "verdict=no-device-work"
check "a legacy trace with steps: svg --step 2" 0 "$bin" trace svg "$d.json" --step 2 -o "$work/legacy2.svg"
check "a legacy trace with steps: svg draws ProfilerStep#2" 0 grep -q 'font-weight="bold">ProfilerStep#2 ' "$work/legacy2.svg"
check "a legacy trace with steps: breakdown (a CPU trace: no device windows)" 0 "$bin" trace breakdown "$d.json"
check "a legacy trace with steps: diff against itself" 0 "$bin" trace diff "$d.json" "$d.json"
contains "a legacy trace with steps: diff counts ops a step (66 in one step before)" "CPU ops                                    22             22"
check "svg: the first step by default" 0 "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" -o "$work/s0.svg"
# a write past `ulimit -f` (2 KiB: LLVM's OpenMP runtime needs 1 KiB at start-up): EFBIG, exit 1,
# nothing left (SIGXFSZ used to kill the verb mid-write and leave its temporary)
check "svg past ulimit -f" 1 sh -c 'ulimit -f 4; exec "$0" "$@"' "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" \
    -o "$work/fsize.svg"
contains "svg past ulimit -f" "File too large"
checks=$((checks + 1))
[ ! -e "$work/fsize.svg" ] && [ -z "$(find "$work" -name 'fsize.svg*')" ] ||
    { fails=$((fails + 1)); echo "FAIL: svg past ulimit -f left files behind"; }
check "svg: the default is ProfilerStep#2" 0 grep -q 'font-weight="bold">ProfilerStep#2 ' "$work/s0.svg"
check "svg bad step" 2 "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" --step 9 -o "$work/x.svg"
contains "svg bad step: the range" "no ProfilerStep#9; its steps are ProfilerStep#2 to #4"
check "svg: a step index is no step number" 2 "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" --step 0 -o "$work/x.svg"
[ ! -e "$work/x.svg" ] || { fails=$((fails + 1)); echo "FAIL: a failed svg left a file"; }
checks=$((checks + 1))
chrome=$(command -v chromium || command -v chromium-browser || true)
checks=$((checks + 1))
if [ -z "$chrome" ]; then
    fails=$((fails + 1))
    echo "FAIL: chromium is missing (scripts/deps.sh test installs it)"
else
    timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
        --user-data-dir="$work/chrome" --window-size=1400,300 --screenshot="$png" "file://$svg" >/dev/null 2>&1
    python3 - "$svg" "$png" "$(dirname "$0")" <<'PY' || fails=$((fails + 1))
import re, sys
sys.path.insert(0, sys.argv[3])
from pngread import pixels
svg = open(sys.argv[1]).read()
w, h, px = pixels(sys.argv[2])
# the first kernel rectangle in the SVG, and its colour on screen at its centre
m = re.search(r'<g class="kernel"><title>[^<]*</title><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="(\d+)" fill="#e6550d"', svg)
assert m, "no kernel rectangle in the SVG"
x, y, wd, ht = (float(v) for v in m.groups())
cx, cy = int(x + min(wd, 30) / 2), int(y + ht / 2)
r, g, b = px(cx, cy)
assert abs(r - 0xe6) < 40 and abs(g - 0x55) < 40 and abs(b - 0x0d) < 40, ("kernel pixel", (cx, cy), (r, g, b))
# the host lane's ops are drawn too: some non-white pixels in the first lane, and text (dark pixels)
dark = sum(1 for yy in range(0, h, 2) for xx in range(0, w, 2) if sum(px(xx, yy)) < 200)
assert dark > 200, ("too little text or outline", dark)
print("svg rendered: kernel at", (cx, cy), "is", (r, g, b), "; dark pixels", dark)
PY
fi
# tensor parallel: PyTorch's two rank traces (NCCL) from two H200s
x2="$ref/../torch-h200x2"
for r in 0 1; do
    stem="tp_64x128x768x3072_rank$r"
    checks=$((checks + 1))
    "$bin" trace table "$x2/$stem.json" --sort-by cuda_time_total --row-limit 25 >"$work/$stem.txt" 2>&1
    printf '\n' >>"$work/$stem.txt" # the reference script wrote the table and a newline after it
    if ! cmp -s "$work/$stem.txt" "$x2/$stem.txt"; then
        fails=$((fails + 1))
        echo "FAIL: table of $stem differs from PyTorch's (record_param_comms, the async nccl:all_reduce):"
        diff "$work/$stem.txt" "$x2/$stem.txt" | head -10
    fi
done
check "summary of a rank: communication" 0 "$bin" trace summary "$x2/tp_64x128x768x3072_rank0.json"
contains "comm per step" "comm/step=58.752us exposed_comm/step=58.752us overlap=0%"
check "summary of the waiting rank" 0 "$bin" trace summary "$x2/tp_64x128x768x3072_rank1.json"
contains "rank 1 waits on its all-reduce" "verdict=comm-bound"
check "merge" 0 "$bin" trace merge "$x2/tp_64x128x768x3072_rank0.json" "$x2/tp_64x128x768x3072_rank1.json" -o "$work/merged.json"
contains "merge: every event" "2 ranks, 322 events"
check "summary of the merged trace" 0 "$bin" trace summary "$work/merged.json"
contains "a line per rank" "rank=1 kernels/step=6"
contains "rank 0's line" "rank=0 kernels/step=6 cpu_ops/step=22 device_busy=32%"
contains "rank 1's line: busy in its all-reduce, not idle while its host ran 7 ms ahead" "rank=1 kernels/step=6 cpu_ops/step=22 device_busy=93%"
checks=$((checks + 1))
python3 - "$work/merged.json" "$x2/tp_64x128x768x3072_rank0.json" "$x2/tp_64x128x768x3072_rank1.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: the merged trace"; }
import json, sys

def no_twice(pairs):  # a key written twice (an arg kept and made again) is an error
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)

t = json.load(open(sys.argv[1]), object_pairs_hook=no_twice)
ev = t["traceEvents"]
# every arg of every complete event is carried over, with its value (a GPU event's stream too,
# though its track is now a lane of the rank's process); the ids are renumbered (ranks' ids
# apart), Ev Idx and Record function id are the writer's own
made = {"External id", "correlation", "Ev Idx", "Record function id"}
for rank, path in enumerate(sys.argv[2:]):
    src = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    out = {}
    for e in ev:
        if e.get("ph") == "X" and e["pid"] == rank:
            out.setdefault((e["name"], round(e["dur"], 3)), []).append(e["args"])
    for e in src:
        got = out[(e["name"], round(e["dur"], 3))]
        want = {k: v for k, v in e.get("args", {}).items() if k not in made}
        assert any(all(a.get(k) == v for k, v in want.items()) for a in got), (e["name"], want, got)
k0 = [e["args"] for e in ev if e.get("ph") == "X" and e["cat"] == "kernel"][0]
assert {"grid", "block", "registers per thread", "shared memory"} <= set(k0), k0
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
assert procs == {0: "rank 0", 1: "rank 1"}, procs
x = [e for e in ev if e.get("ph") == "X"]
assert len(x) == 322 and {e["pid"] for e in x} == {0, 1}, (len(x), {e["pid"] for e in x})
k = [e for e in x if e["cat"] == "kernel" and e["name"].startswith("ncclDevKernel")]
assert len(k) == 6 and {e["pid"] for e in k} == {0, 1}
# flows stay within a rank: every flow id has one start and one end, on one process
flows = {}
for e in ev:
    if e.get("ph") in ("s", "f"):
        flows.setdefault(e["id"], []).append(e["pid"])
assert flows and all(len(v) == 2 and v[0] == v[1] for v in flows.values())
# clocks aligned: rank 1's NCCL kernels end within a few microseconds of rank 0's (they finish together)
ends = sorted((e["ts"] + e["dur"], e["pid"]) for e in k)
assert all(abs(ends[i][0] - ends[i + 1][0]) < 50 for i in range(0, 6, 2)), ends
print("merged trace: 2 processes, 322 events, flows per rank, all-reduces end together")
PY
# every arg carried over in a merge of two single-GPU traces as well: the compiled MLP (Triton
# launches are CPU ops with a "stream" arg) and the gzip trace with stacks and memory events
check "merge keeps every arg" 0 "$bin" trace merge "$x2/stack_mem_64x128x768x3072.json.gz" \
    "$ref/mlp_64x128x768x3072_compile.json" -o "$work/args.json.gz"
checks=$((checks + 1))
python3 - "$work/args.json.gz" "$x2/stack_mem_64x128x768x3072.json.gz" "$ref/mlp_64x128x768x3072_compile.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: merge lost or changed args"; }
import gzip, json, sys

def load(p):
    def no_twice(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)
    with (gzip.open if p.endswith(".gz") else open)(p, "rt") as f:
        return json.load(f, object_pairs_hook=no_twice)["traceEvents"]

def kept(e):
    return e.get("ph") == "X" or (e.get("ph") == "i" and e.get("name") == "[memory]")

made = {"External id", "correlation", "Ev Idx", "Record function id"}  # renumbered or the writer's own
out = load(sys.argv[1])
n = 0
for rank, path in enumerate(sys.argv[2:]):
    got = {}
    for e in out:
        if kept(e) and e["pid"] == rank:
            got.setdefault((e["name"], e["ts"]), []).append(e["args"])
    src = [e for e in load(path) if kept(e)]
    base = min(e["ts"] for e in src)
    base_out = min(k[1] for k in got)
    for e in src:
        cands = got[(e["name"], round(e["ts"] - base + base_out, 3))]
        want = {k: v for k, v in e.get("args", {}).items() if k not in made}
        assert any(all(a.get(k) == v for k, v in want.items()) for a in cands), (e["name"], want, cands)
        n += 1
print("merge of two single-GPU traces: every arg of %d events carried over" % n)
PY
# FLOPs per op only when every rank counted them: with_flops from the first input made a reader
# of the merged file count the other rank's ops from their shapes
checks=$((checks + 1))
if ! gzip -dc "$x2/stack_mem_64x128x768x3072.json.gz" | grep -q '"with_flops": 1' ||
    gzip -dc "$work/args.json.gz" | grep -q '"with_flops"'; then
    fails=$((fails + 1))
    echo "FAIL: a merge of a with_flops trace and one without says with_flops"
fi
# a conv2d whose Concrete Inputs overflow PyTorch's FLOP formula (a padding of 2^62, a stride of
# 2^63 - 1): no FLOPs counted for it, and no undefined behaviour (only the sanitized build of
# make test can fail here: UBSan aborts on the overflow; a release build wrapped silently)
for conc in '"[1, 1]","[4611686018427387904, 0]","[1, 1]"' '"[9223372036854775807, 2]","[0, 0]","[1, 1]"' \
    '"[1, 1]","[0, 0]","[4611686018427387904, 1]"'; do
    printf '{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::conv2d","pid":1,"tid":1,"ts":0,"dur":10,"args":{"Input Dims":[[1,3,8,8],[4,3,3,3],[4],[],[],[],[]],"Input type":["float","float","float","ScalarList","ScalarList","ScalarList","Scalar"],"Concrete Inputs":["","","",%s,"1"]}}]}' \
        "$conc" > "$work/conv.json"
    check "conv2d with overflowing Concrete Inputs" 0 "$bin" trace table "$work/conv.json"
    contains "conv2d with overflowing Concrete Inputs: listed" "aten::conv2d"
done
# the launch-to-kernel flows (ac2g) start where PyTorch's do, at the launch call's time and thread,
# after a merge; a forward-to-backward flow (fwdbwd) whose id is a kernel's correlation id changes
# nothing of that kernel's launch
python3 - "$ref/mlp_64x128x768x3072_eager.json" "$work/fwdbwd.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
k = next(e for e in t["traceEvents"] if e.get("cat") == "kernel")
t["traceEvents"].append({"ph": "s", "id": k["args"]["correlation"], "pid": 1, "tid": 999, "ts": k["ts"],
                         "cat": "fwdbwd", "name": "fwdbwd"})
json.dump(t, open(sys.argv[2], "w"))
PY
check "merge of one trace with a fwdbwd flow" 0 "$bin" trace merge "$work/fwdbwd.json" -o "$work/flows.json"
# Kineto before 2022 named the same launch flows "async"/"launch": read as launches too
python3 - "$ref/mlp_64x128x768x3072_eager.json" "$work/async.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for e in t["traceEvents"]:
    if e.get("cat") == "ac2g":
        e["cat"], e["name"] = "async", "launch"
json.dump(t, open(sys.argv[2], "w"))
PY
check "merge of a trace with the old flow names" 0 "$bin" trace merge "$work/async.json" -o "$work/async_m.json"
checks=$((checks + 1))
[ "$(grep -c '"ph": "s"' "$work/async_m.json")" = "$(grep -c '"ph": "s"' "$work/flows.json")" ] ||
    { fails=$((fails + 1)); echo "FAIL: the old flow names lost launch arrows"; }
checks=$((checks + 1))
python3 - "$ref/mlp_64x128x768x3072_eager.json" "$work/flows.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: flows after a merge"; }
import json, sys
def starts(path):
    ev = json.load(open(path))["traceEvents"]
    return {e["id"]: (round(float(e["ts"]), 3), e["tid"]) for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
a, b = starts(sys.argv[1]), starts(sys.argv[2])
assert a, "no flows in the reference"
# rank 0 keeps its ids; every flow the merge wrote (one per device event) starts where PyTorch's did;
# the one left is the cudaDeviceSynchronize's, which has no device event to point to
assert len(b) == len(a) - 1 and set(b) <= set(a), (len(a), len(b))
bad = [(i, a[i], b[i]) for i in b if a[i][0] != b[i][0]]
assert not bad, "flow starts moved: %s" % bad[:3]
assert all(y[1] != 999 for y in b.values()), "a fwdbwd flow was taken for a launch"
PY
# ranks that are not 0 to n - 1: rank 1 merged alone, ranks 0 and 2 (two of a larger job)
check "merge of rank 1 alone" 0 "$bin" trace merge "$x2/tp_64x128x768x3072_rank1.json" -o "$work/r1only.json"
check "summary of rank 1 alone" 0 "$bin" trace summary "$work/r1only.json"
contains "summary of rank 1 alone: its events" "rank=1 steps=3 step_time=361.036us device_time/step=739.435us events=161"
sed 's/"rank": 1,/"rank": 2,/' "$x2/tp_64x128x768x3072_rank1.json" > "$work/rank2.json"
check "merge of ranks 0 and 2" 0 "$bin" trace merge "$x2/tp_64x128x768x3072_rank0.json" "$work/rank2.json" -o "$work/r02.json"
check "breakdown of ranks 0 and 2" 0 "$bin" trace breakdown "$work/r02.json"
contains "breakdown of ranks 0 and 2: rank 2" "rank 2: device time per step"
check "diff - -" 2 "$bin" trace diff - - < "$ref/mlp_64x128x768x3072_eager.json"
contains "diff - -: why" "both traces are standard input"
check "diff of a merged trace" 2 "$bin" trace diff "$work/r02.json" "$x2/tp_64x128x768x3072_rank0.json"
contains "diff of a merged trace: why" "is a merged trace of 2 ranks"
# report refuses the same pair (its "what changed" had come from rank averages: "8 kernels per step"
# where the ranks ran 6 and 6 of other kernels), in either place, and writes nothing
for pair in "$x2/tp_64x128x768x3072_rank0.json $work/r02.json" "$work/r02.json $x2/tp_64x128x768x3072_rank0.json"; do
    # shellcheck disable=SC2086
    check "report of a merged pair" 2 "$bin" trace report $pair -o "$work/pair.html"
    contains "report of a merged pair: why" "is a merged trace of 2 ranks; what changed between two traces"
    [ ! -e "$work/pair.html" ] || { fails=$((fails + 1)); echo "FAIL: report of a merged pair wrote a file"; }
done
# a merged trace alone: a section per rank, each rank's own reading (never their average)
check "report of a merged trace" 0 "$bin" trace report "$work/r02.json" -o "$work/r02.html"
checks=$((checks + 1))
python3 - "$work/r02.html" "$x2/tp_64x128x768x3072_rank0.json" "$bin" <<'PY' || { fails=$((fails + 1)); echo "FAIL: report of a merged trace"; }
import re, subprocess, sys
html = open(sys.argv[1]).read()
assert '<h1 id="rank0">Rank 0</h1>' in html and '<h1 id="rank2">Rank 2</h1>' in html, "no section per rank"
own = subprocess.run([sys.argv[3], "trace", "summary", sys.argv[2]], capture_output=True, text=True).stdout
kps = re.search(r"kernels/step=(\S+)", own).group(1)
sec = html.split('<h1 id="rank0">')[1].split('<h1 id="rank2">')[0]
assert "kernels/step=%s " % kps in sec, "rank 0's reading is not its own trace's (kernels/step=%s)" % kps
PY
check "expect of a merged trace" 2 "$bin" trace expect "$work/r02.json" --kernels-per-step 6
contains "expect of a merged trace: why" "a merged trace of 2 ranks"
check "table --row-limit -5" 2 "$bin" trace table "$ref/mlp_64x128x768x3072_eager.json" --row-limit -5
contains "table --row-limit -5: what it takes" "must be -1 (every row) or an integer from 1 to 1000000"
# -o - : standard output holds the file alone (svg, report and merge say what they wrote on stderr)
checks=$((checks + 1))
{ "$bin" trace merge "$x2/tp_64x128x768x3072_rank0.json" "$x2/tp_64x128x768x3072_rank1.json" -o - > "$work/m_stdout.json" &&
    "$bin" trace svg "$ref/mlp_64x128x768x3072_eager.json" -o - > "$work/s_stdout.svg" &&
    "$bin" trace report "$ref/mlp_64x128x768x3072_eager.json" -o - > "$work/r_stdout.html"; } 2> "$work/stdout_notes.txt" &&
    python3 - "$work/m_stdout.json" "$work/s_stdout.svg" "$work/r_stdout.html" <<'PY' || { fails=$((fails + 1)); echo "FAIL: -o - wrote more than the file to standard output"; cat "$work/stdout_notes.txt"; }
import json, sys, xml.etree.ElementTree as ET
assert len(json.load(open(sys.argv[1]))["traceEvents"]) > 0
ET.parse(sys.argv[2])
html = open(sys.argv[3]).read().rstrip()
assert html.endswith("</html>"), html[-80:]
PY
check "merge: one rank twice" 2 "$bin" trace merge "$x2/tp_64x128x768x3072_rank0.json" "$x2/tp_64x128x768x3072_rank0.json" -o "$work/bad.json"
contains "merge: one rank twice" "both rank 0"
check "merge: no output" 2 "$bin" trace merge "$x2/tp_64x128x768x3072_rank0.json"
check "merge of a merged trace" 2 "$bin" trace merge "$work/merged.json" -o "$work/bad.json"
# values the reader takes but a merge cannot offset (ranks' ids, clock bases): refused by name, where
# the arithmetic overflowed (UBSan) or wrote a file linfuse then refused; a negative time is kept
python3 - "$work" <<'PY'
import json, sys
ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 50, "args": {"External id": 1}}]
def d(o, f):
    json.dump(o, open(sys.argv[1] + "/" + f, "w"))
d({"distributedInfo": {"rank": 8388608, "world_size": 8388609}, "traceEvents": ev}, "r_big.json")
d({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ev}, "r0.json")
d({"baseTimeNanoseconds": 4700000000000000000, "traceEvents": ev}, "b_hi.json")
d({"baseTimeNanoseconds": 1, "traceEvents": ev}, "b_lo.json")  # a negative base is refused when read
d({"baseTimeNanoseconds": 1790857026000000000, "traceEvents": ev}, "b_real.json")
d({"traceEvents": ev}, "b_none.json")
ev2 = [ev[0], dict(ev[1], args={"External id": 9223372036854775000})]
d({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ev2}, "e0.json")
d({"distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": ev2}, "e1.json")
d({"traceEvents": [dict(ev[0], ts=-1000, dur=900), dict(ev[1], ts=-900, dur=300)]}, "neg.json")
PY
for o in "r0.json r_big.json:ranks 0 to 4194303" "b_hi.json b_lo.json:clock base" "b_real.json b_none.json:clock base" \
    "e0.json e1.json:outside 0 to 2^40"; do
    # shellcheck disable=SC2086
    check "merge refuses ${o%%:*}" 2 "$bin" trace merge $(for f in ${o%%:*}; do echo "$work/$f"; done) -o "$work/bad.json"
    contains "merge refuses ${o%%:*}" "${o#*:}"
done
check "merge of a trace that starts before its base" 0 "$bin" trace merge "$work/neg.json" -o "$work/negm.json"
check "its table" 0 "$bin" trace table "$work/neg.json"
before="$LAST"
check "the merged one's table" 0 "$bin" trace table "$work/negm.json"
checks=$((checks + 1))
[ "$before" = "$LAST" ] || { fails=$((fails + 1)); echo "FAIL: merging changed a trace's table (negative times)"; }
# a UTF-8 byte order mark before the trace is skipped (the opener took it, the parser did not);
# a setting's bad value is shown escaped, as every text from outside is
printf '\357\273\277' > "$work/bom.json"
cat "$ref/linear_1024x32x64_eager.json" >> "$work/bom.json"
check "a trace after a byte order mark" 0 "$bin" trace summary "$work/bom.json"
check "a setting's value with an escape" 0 env "LINFUSE_TRACE_MAX_BYTES=$(printf '\033]0;x\a12')" "$bin" trace summary "$work/bom.json"
contains "a setting's value with an escape" 'LINFUSE_TRACE_MAX_BYTES=\x1b]0;x\x0712 is not an integer'
# -o naming an input (by its name, another path or a link) would replace it: refused, input untouched
cp "$ref/linear_1024x32x64_eager.json" "$work/in.json"
ln -sf in.json "$work/in_link.json"
sum_in=$(cksum < "$work/in.json")
for v in "svg $work/in.json -o $work/in.json" "report $work/in.json -o $work/./in.json" \
    "svg $work/in.json -o $work/in_link.json" "merge $work/r0.json $work/in.json -o $work/in.json"; do
    # shellcheck disable=SC2086
    check "trace $v" 2 "$bin" trace $v
    contains "trace $v" "the output would replace it"
done
checks=$((checks + 1))
[ "$(cksum < "$work/in.json")" = "$sum_in" ] || { fails=$((fails + 1)); echo "FAIL: an input trace was replaced"; }

# gzip and pipes: tensorboard_trace_handler(use_gzip=True)'s trace, with memory, FLOPs, shapes and
# stacks; its tables are PyTorch's own (the reference script printed a newline after each)
sm="$x2/stack_mem_64x128x768x3072"
for kind in "" ".shapes"; do
    checks=$((checks + 1))
    flag=""
    [ "$kind" = ".shapes" ] && flag="--group-by-input-shape"
    # shellcheck disable=SC2086
    "$bin" trace table "$sm.json.gz" --row-limit 25 $flag >"$work/sm$kind.txt" 2>&1
    printf '\n' >>"$work/sm$kind.txt"
    if ! cmp -s "$work/sm$kind.txt" "$sm$kind.txt"; then
        fails=$((fails + 1))
        echo "FAIL: table$kind of the gzip trace differs from PyTorch's (memory columns, Total MFLOPs, Input Shapes):"
        diff "$work/sm$kind.txt" "$sm$kind.txt" | head -10
    fi
done
check "table from standard input, gzip" 0 sh -c "cat '$sm.json.gz' | '$bin' trace table - --row-limit 25"
contains "stdin gzip: FLOPs from shapes" "347892.351"
check "summary from a pipe, plain" 0 sh -c "cat '$x2/tp_64x128x768x3072_rank0.json' | '$bin' trace summary -"
contains "stdin summary" "comm/step=58.752us"
gzip -c "$x2/tp_64x128x768x3072_rank0.json" >"$work/r0.json.gz"
gzip -c "$x2/tp_64x128x768x3072_rank1.json" >"$work/r1.json.gz"
check "merge reads gzip, writes gzip" 0 "$bin" trace merge "$work/r0.json.gz" "$work/r1.json.gz" -o "$work/m.json.gz"
contains "merge gz" "2 ranks, 322 events"
check "the gzip output is gzip" 0 sh -c "gzip -t '$work/m.json.gz' && gzip -dc '$work/m.json.gz' | python3 -c 'import json,sys; assert len(json.load(sys.stdin)[\"traceEvents\"]) > 322'"
check "summary of the gzip merge" 0 "$bin" trace summary "$work/m.json.gz"
contains "gz merged: rank 1" "rank=1 kernels/step=6"
check "diff of gzip traces" 0 "$bin" trace diff "$work/r0.json.gz" "$x2/tp_64x128x768x3072_rank1.json"
check "expect on gzip" 0 "$bin" trace expect "$work/r0.json.gz" --kernel ncclDevKernel
check "svg of gzip" 0 "$bin" trace svg "$sm.json.gz" -o "$work/sm.svg"
head -c 3000 "$work/r0.json.gz" >"$work/cut.json.gz"
check "truncated gzip" 2 "$bin" trace table "$work/cut.json.gz"
contains "truncated gzip says so" "ends early"
printf 'not json at all' | gzip -c >"$work/notjson.json.gz"
check "gzip of not-JSON" 2 "$bin" trace summary "$work/notjson.json.gz"
contains "inflated, not JSON" "inflated, does not start like a JSON trace"
check "a gzip inflating past the limit" 2 "$bin" trace table "$sm.json.gz" --max-bytes 100000
contains "limit on the inflated size" "inflates to more than the 100000 bytes"
{ cat "$work/r0.json.gz"; printf 'junk'; } >"$work/junk.json.gz"
check "bytes after the gzip data" 2 "$bin" trace table "$work/junk.json.gz"
contains "trailing junk named" "bytes after the end of the gzip data"
check "empty standard input" 2 sh -c "'$bin' trace table - </dev/null"
contains "empty stdin" "standard input: is empty"
# the table for programs: every column, full names, plain numbers
check "table as csv" 0 "$bin" trace table "$sm.json.gz" --format csv --row-limit -1 --group-by-input-shape
printf '%s\n' "$LAST" >"$work/t.csv"
check "table as json" 0 "$bin" trace table "$sm.json.gz" --format json --row-limit -1 --group-by-stack 2
printf '%s\n' "$LAST" >"$work/t.json"
checks=$((checks + 1))
python3 - "$work/t.csv" "$work/t.json" "$sm.shapes.txt" <<'PY' || { fails=$((fails + 1)); echo "FAIL: csv/json tables"; }
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
text = open(sys.argv[3]).read().splitlines()
# every row of PyTorch's shapes table is in the csv with the same numbers (printed rounded there)
mm = [r for r in rows if r["name"] == "aten::mm"]
assert len(mm) == 2 and {r["input_shapes"] for r in mm} == {"[[8192, 768], [768, 3072]]", "[[8192, 3072], [3072, 768]]"}, mm
big = next(r for r in mm if r["input_shapes"] == "[[8192, 768], [768, 3072]]")
assert big["calls"] == "6" and abs(float(big["flops"]) - 231928233984) < 1 and big["device_mem_bytes"] == str(288 << 20), big
assert abs(float(big["self_device_us"]) - 343.040) < 1e-6 and abs(float(big["self_cpu_us"]) - 131.847) < 1e-6, big
# full names, never cut with "..."
assert any(r["name"].startswith("void at::native::vectorized_elementwise_kernel<8, at::native::") for r in rows)
assert sum(float(r["self_cpu_us"]) for r in rows) > 852.8
t = json.load(open(sys.argv[2]))
assert t["device"] == "CUDA" and abs(t["self_cpu_total_us"] - 852.832) < 1e-6, t["self_cpu_total_us"]
lin = [r for r in t["rows"] if r["name"] == "aten::linear"]
assert lin and lin[0]["stack"] == ["ref_torch_turn2.py(37): <lambda>", "ref_torch_turn2.py(43): <module>"], lin
print("csv:", len(rows), "rows; json:", len(t["rows"]), "rows, stacks of", lin[0]["stack"])
PY
check "table grouped by stack" 0 "$bin" trace table "$sm.json.gz" --group-by-stack 2 --row-limit 6
contains "source location column" "Source Location"
contains "the frame of the call" "ref_torch_turn2.py(37): <lambda>"
# breakdown: HTA's questions, checked against sums computed here another way (interval sets)
for f in "$x2/graphs_64x128x768x3072.json" "$x2/tp_64x128x768x3072_rank0.json" "$x2/tp_64x128x768x3072_rank1.json" \
    "$ref/mlp_64x128x768x3072_eager.json"; do
    checks=$((checks + 1))
    if ! "$bin" trace breakdown "$f" --json >"$work/bd.json" 2>"$work/bd.err"; then
        fails=$((fails + 1)); echo "FAIL: breakdown of $f"; cat "$work/bd.err"; continue
    fi
    python3 - "$f" "$work/bd.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: breakdown numbers of $f"; }
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
got = json.load(open(sys.argv[2]))["ranks"][0]
ns = lambda us: round(us * 1000)
calls = {e["args"]["correlation"]: e for e in t if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
ops = {}
for e in t:
    if e.get("cat") == "cpu_op" and "External id" in e.get("args", {}):
        ops.setdefault(e["args"]["External id"], e)
work = [e for e in t if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
def launched(e):
    c = calls.get(e["args"].get("correlation"))
    if c: return ns(c["ts"])
    o = ops.get(e["args"].get("External id"))
    return ns(o["ts"]) if o else ns(e["ts"])
steps = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), int(e["name"].split("#")[1])) for e in t
               if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
def union(iv):
    out = []
    for lo, hi in sorted(iv):
        if out and lo <= out[-1][1]: out[-1][1] = max(out[-1][1], hi)
        else: out.append([lo, hi])
    return out
def length(iv): return sum(hi - lo for lo, hi in iv)
def minus(a, b):  # a - b, both unions
    out = []
    for lo, hi in a:
        cur = lo
        for blo, bhi in b:
            if bhi <= cur or blo >= hi: continue
            if blo > cur: out.append([cur, blo])
            cur = max(cur, bhi)
        if cur < hi: out.append([cur, hi])
    return out
rows = {}
for e in work:
    w = launched(e)
    st = [s for s in steps if s[0] <= w <= s[1]]
    if steps and not st: continue
    key = (st[0][2] if steps else -1, e["args"].get("device", e["pid"]))
    kind = "memory" if e["cat"] != "kernel" else ("comm" if e["name"].startswith("nccl") else "compute")
    rows.setdefault(key, []).append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), kind, w))
assert len(rows) == len(got["steps"]), (len(rows), len(got["steps"]))
for s in got["steps"]:
    iv = rows[(s["step"], s["device"])]
    lo, hi = min(i[0] for i in iv), max(i[1] for i in iv)
    comp = union([(a, b) for a, b, k, _ in iv if k == "compute"])
    comm = minus(union([(a, b) for a, b, k, _ in iv if k == "comm"]), comp)
    mem = minus(minus(union([(a, b) for a, b, k, _ in iv if k == "memory"]), comp), union([(a, b) for a, b, k, _ in iv if k == "comm"]))
    allu = union([(a, b) for a, b, _, _ in iv])
    host = other = 0
    for (a0, a1), (b0, b1) in zip(allu, allu[1:]):
        first = min(w for a, b, k, w in iv if a == b0)
        if first >= a1: host += b0 - a1
        else: other += b0 - a1
    want = {"window_us": hi - lo, "compute_us": length(comp), "comm_us": length(comm), "memory_us": length(mem),
            "idle_us": (hi - lo) - length(allu), "idle_host_us": host, "idle_other_us": other}
    for k, v in want.items():
        assert abs(s[k] - v / 1000) < 2e-3, (s["step"], k, s[k], v / 1000)
    assert abs(s["compute_us"] + s["comm_us"] + s["memory_us"] + s["idle_us"] - s["window_us"]) < 5e-3, s
def pct(v, q):
    v = sorted(v); p = q * (len(v) - 1); i = int(p)
    return v[i] + (v[i + 1] - v[i]) * (p - i) if i + 1 < len(v) else v[-1]
for k in got["kernels"]:
    d = [ns(e["dur"]) / 1000 for e in work if e["name"] == k["name"]
         and (not steps or any(s[0] <= launched(e) <= s[1] for s in steps))]
    assert k["count"] == len(d), (k["name"], k["count"], len(d))
    for q, key in ((0.5, "median_us"), (0.9, "p90_us")):
        assert abs(k[key] - pct(d, q)) < 2e-3, (k["name"], key, k[key], pct(d, q))
    assert abs(k["min_us"] - min(d)) < 2e-3 and abs(k["max_us"] - max(d)) < 2e-3
print("breakdown of", sys.argv[1].split("/")[-1], "matches:", len(got["steps"]), "step rows,", len(got["kernels"]), "kernels")
PY
done
check "breakdown of the graph trace" 0 "$bin" trace breakdown "$x2/graphs_64x128x768x3072.json"
contains "graph replays by op" "Torch-Compiled Region: 0/0"
contains "graph kernels counted" "CUDA graph replays, by the op that launched them"
check "summary counts graph kernels" 0 "$bin" trace summary "$x2/graphs_64x128x768x3072.json"
contains "graph kernels per step" "kernels/step=5 graph_kernels/step=4"
check "summary --json" 0 "$bin" trace summary "$work/m.json.gz" --json
contains "json ranks" '"rank": 1, "steps": 3'
check "breakdown of a merged trace: a section per rank" 0 "$bin" trace breakdown "$work/m.json.gz"
contains "rank 1's section" "rank 1: device time per step"
check "expect --json, a wrong guess" 1 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernels-per-step 4 --no-kernel '^nvjet' --json
contains "expect json: not matched" '"matched": false, "steps": 3, "kernels_per_step": 5'
contains "expect json: the no-kernel hit" "matches --no-kernel '^nvjet'"
echo "$LAST" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["differences"]) == 3 and len(d["kernels"]) == 5, d' ||
    { fails=$((fails + 1)); echo "FAIL: expect --json"; }
check "expect --json, a right guess" 0 "$bin" trace expect "$ref/mlp_64x128x768x3072_eager.json" --kernels-per-step 5 --json
contains "expect json: matched" '"matched": true'
# serve: the trace on loopback with Perfetto's CORS header; one name, nothing else
wait_url() { # wait_url LOG: the URL the server printed, waiting up to 10 s
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        u=$(sed -n 's/^serving .* at \(http[^ ]*\)$/\1/p' "$1")
        [ -n "$u" ] && { echo "$u"; return; }
        sleep 0.5
    done
}
timeout 60 "$bin" trace serve "$x2/tp_64x128x768x3072_rank0.json" --port 0 >"$work/serve.log" 2>&1 &
spid=$!
url=$(wait_url "$work/serve.log")
base=${url%/*}
checks=$((checks + 1))
if [ -z "$url" ]; then
    fails=$((fails + 1)); echo "FAIL: serve printed no URL"; cat "$work/serve.log"
else
    check "serve: the link" 0 cat "$work/serve.log"
    contains "perfetto link" "https://ui.perfetto.dev/#!/?url=$url"
    check "serve: GET the trace" 0 curl -sS -D "$work/h.txt" -o "$work/got.json" "$url"
    check "serve: the bytes" 0 cmp "$work/got.json" "$x2/tp_64x128x768x3072_rank0.json"
    check "serve: CORS header" 0 grep -qi '^Access-Control-Allow-Origin: https://ui.perfetto.dev' "$work/h.txt"
    check "serve: another path" 0 curl -s -o /dev/null -w '%{http_code}' "$base/etc/passwd"
    contains "404 for another path" "404"
    check "serve: a path with .." 0 curl -s --path-as-is -o /dev/null -w '%{http_code}' "$base/../../etc/passwd"
    contains "404 for .." "404"
    check "serve: POST" 0 curl -s -X POST -o /dev/null -w '%{http_code}' "$url"
    contains "405 for POST" "405"
    check "serve: HEAD" 0 curl -s -I -o /dev/null -w '%{http_code} %{size_download}' "$url"
    contains "HEAD: headers only" "200 0"
    check "serve: not HTTP" 0 python3 -c "
import socket, sys
h, p = sys.argv[1].split('//')[1].split('/')[0].split(':')
s = socket.create_connection((h, int(p))); s.sendall(b'hello there\r\n\r\n'); print(s.recv(100).decode().split()[1])" "$url"
    contains "400 for garbage" "400"
    check "serve: still serving after all that" 0 curl -sS -o /dev/null "$url"
    # clients side by side: 40 connections that say nothing (more than the 32 it keeps) and one
    # that sends a byte every 0.5 s hold nobody: a GET comes back at once, and the slow client is
    # dropped when its 3 s for a request are up (one connection at a time, a GET waited 61 s
    # behind six idle ones, and a byte every 8 s held the server 80 s)
    check "serve: a GET beside idle and slow clients" 0 python3 -c "
import socket, sys, time, urllib.request
url = sys.argv[1]
h, p = url.split('//')[1].split('/')[0].split(':')
idle = [socket.create_connection((h, int(p))) for _ in range(40)]
slow = socket.create_connection((h, int(p)))
slow.sendall(b'G')
t = time.time()
body = urllib.request.urlopen(url, timeout=30).read()
dt = time.time() - t
assert dt < 2 and body == open(sys.argv[2], 'rb').read(), ('GET took %.1f s' % dt)
slow.settimeout(0.5)
closed = None
while closed is None and time.time() - t < 10:
    try:
        slow.sendall(b'E')
        if slow.recv(100) == b'':
            closed = time.time() - t
    except socket.timeout:
        pass
    except OSError:
        closed = time.time() - t
assert closed is not None and closed < 5, ('the slow client was not dropped', closed)
print('GET in %.2f s; slow client dropped after %.1f s' % (dt, closed))" "$url" "$x2/tp_64x128x768x3072_rank0.json"
    contains "serve: answered at once" "slow client dropped"
    check "serve: still serving after the crowd" 0 curl -sS -o /dev/null "$url"
fi
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
timeout 30 "$bin" trace serve "$work/r0.json.gz" --port 0 --once >"$work/once.log" 2>&1 &
opid=$!
url=$(wait_url "$work/once.log")
check "serve --once: GET" 0 curl -sS -o "$work/once.gz" "$url"
checks=$((checks + 1))
if wait "$opid"; then :; else fails=$((fails + 1)); echo "FAIL: serve --once did not exit by itself after the trace was sent"; fi
check "serve --once: gzip sent as is" 0 cmp "$work/once.gz" "$work/r0.json.gz"
# from standard input (a trace piped from another machine), served under a name that says gzip
timeout 30 sh -c "'$bin' trace serve - --port 0 --once <'$work/r0.json.gz'" >"$work/stdin.log" 2>&1 &
sipid=$!
url=$(wait_url "$work/stdin.log")
case "$url" in */stdin.json.gz) ;; *) fails=$((fails + 1)); echo "FAIL: serve - names gzip stdin.json.gz: $url" ;; esac
checks=$((checks + 1))
check "serve -: GET" 0 curl -sS -o "$work/stdin.gz" "$url"
check "serve -: the piped bytes" 0 cmp "$work/stdin.gz" "$work/r0.json.gz"
wait "$sipid" 2>/dev/null
check "serve -: empty standard input" 2 sh -c "'$bin' trace serve - --port 0 </dev/null"
contains "serve -: says empty" "standard input: is empty"
check "serve -: standard input past --max-bytes, counted as it comes" 2 sh -c "head -c 50000 /dev/zero | tr '\\0' ' ' | '$bin' trace serve - --port 0 --max-bytes 1000"
contains "serve -: says the limit" "standard input: more than the 1000 bytes"
mkfifo "$work/fifo.json"
check "serve: a named pipe is refused, not waited on" 2 timeout 10 "$bin" trace serve "$work/fifo.json" --port 0
contains "serve: says named pipe" "is a named pipe (FIFO)"
check "serve: a file that is no trace" 2 "$bin" trace serve "$work/t.csv" --port 0
contains "serve refuses a non-trace" "neither a JSON trace nor a gzip one"
check "serve: bad port" 2 "$bin" trace serve "$work/r0.json.gz" --port 70000
# report: one self-contained HTML file, rendered by Chromium: the timeline's kernels and the
# roofline's dots where the HTML puts them
check "report" 0 "$bin" trace report "$sm.json.gz" -o "$work/report.html"
check "report with a diff" 0 "$bin" trace report "$ref/mlp_64x128x768x3072_compile.json" "$ref/mlp_64x128x768x3072_eager.json" -o "$work/report2.html"
check "report: the diff is in it" 0 grep -q "What changed from this trace (A) to .*mlp_64x128x768x3072_eager.json (B)" "$work/report2.html"
# report A B shows what trace diff A B shows: A the baseline, B the new one
"$bin" trace diff "$ref/mlp_64x128x768x3072_compile.json" "$ref/mlp_64x128x768x3072_eager.json" >"$work/d.txt"
checks=$((checks + 1))
python3 - "$work/report2.html" "$work/d.txt" <<'PY' || { fails=$((fails + 1)); echo "FAIL: report A B differs from diff A B"; }
import html, re, sys
page = open(sys.argv[1]).read()
got = html.unescape(re.search(r"<h2>What changed[^<]*</h2>\n<pre>(.*?)</pre>", page, re.S).group(1))
want = open(sys.argv[2]).read().split("\n\n", 1)[1]  # less its "A: ..., B: ..." lines
assert got == want, (got[-300:], want[-300:])
assert "B runs 5 kernels per step where A ran 4" in got
print("report A B: the diff of trace diff A B")
PY
check "report: steps by number" 0 "$bin" trace report "$ref/mlp_64x128x768x3072_eager.json" --step 4 -o "$work/r4.html"
check "report: the step's heading" 0 grep -q "One step on the timeline: ProfilerStep#4<" "$work/r4.html"
check "report: the breakdown by the same numbers" 0 grep -q "<tr><td>#4</td>" "$work/r4.html"
check "report: nothing from the network" 1 sh -c "grep -o 'https\?://[^\"<> ]*' '$work/report.html' | grep -v '^http://www.w3.org/2000/svg\$'"
check "report: a step that is not there" 2 "$bin" trace report "$sm.json.gz" --step 9 -o "$work/none.html"
contains "report: the steps it has" "its steps are ProfilerStep#2 to #4"
[ ! -e "$work/none.html" ] || { fails=$((fails + 1)); echo "FAIL: a failed report left a file"; }
check "report: bad peak" 2 "$bin" trace report "$sm.json.gz" --peak-tflops -1 -o "$work/none.html"
# a trace recorded without with_flops: each GEMM's TFLOP/s from its op's sizes, checked against
# 2*M*N*K over the kernels' durations computed here from the trace itself
checks=$((checks + 1))
python3 - "$ref/mlp_64x128x768x3072_compile.json" "$work/report2.html" <<'PY' || { fails=$((fails + 1)); echo "FAIL: report FLOPs from shapes"; }
import json, re, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op" and e.get("name") in ("aten::mm", "aten::addmm")}
want, intensity = {}, {}
for e in ev:
    op = ops.get(e.get("args", {}).get("External id")) if e.get("cat") == "kernel" else None
    if op:
        first = 1 if op["name"] == "aten::addmm" else 0  # addmm(bias, mat1, mat2); mm may list out= last
        a, b = op["args"]["Input Dims"][first:first + 2]
        f, us = want.get(e["name"], (0.0, 0.0))
        want[e["name"]] = (f + 2 * a[0] * a[1] * b[1], us + e["dur"])
        # bf16 operands and result, each counted once (mm's out= operand is the result)
        intensity[e["name"]] = 2 * a[0] * a[1] * b[1] / (2 * (a[0] * a[1] + b[0] * b[1] + a[0] * b[1]))
assert want, "no GEMM kernels found"
page = open(sys.argv[2]).read()
for name, (f, us) in want.items():
    row = re.search(r"<td class=\"n\">" + re.escape(name) + r"</td>((?:<td>[^<]*</td>)+)", page)
    assert row, name
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    got = float(cells[3])  # calls, total us, avg us, TFLOP/s
    assert abs(got - f / us / 1e6) <= 0.05 + 1e-3 * got, (name, got, f / us / 1e6)
    assert abs(float(cells[7]) - intensity[name]) <= 0.05, (name, cells[7], intensity[name])
print("report TFLOP/s from shapes:", {k: round(f / us / 1e6, 1) for k, (f, us) in want.items()})
PY
if [ -n "$chrome" ]; then
    timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
        --user-data-dir="$work/chrome" --window-size=1300,2400 --screenshot="$work/report.png" "file://$work/report.html" >/dev/null 2>&1
    checks=$((checks + 1))
    python3 - "$work/report.html" "$work/report.png" "$(dirname "$0")" <<'PY' || { fails=$((fails + 1)); echo "FAIL: the report as rendered"; }
import sys
sys.path.insert(0, sys.argv[3])
from pngread import pixels
page = open(sys.argv[1]).read()
assert page.count('<circle class="kernel"') == 2 and '<g class="kernel">' in page, "two roofline dots, kernels on the timeline"
w, h, px = pixels(sys.argv[2])
near = lambda c, t: all(abs(a - b) < 40 for a, b in zip(c, t))
orange = [(x, y) for y in range(0, h, 2) for x in range(0, w, 2) if near(px(x, y), (0xe6, 0x55, 0x0d))]
dots = [(x, y) for y in range(0, h, 2) for x in range(0, w, 2) if near(px(x, y), (0xd0, 0x1c, 0x8b))]
assert len(orange) > 50, ("timeline kernels on screen", len(orange))
assert len(dots) > 10 and min(y for _, y in dots) > max(y for _, y in orange), ("roofline dots below the timeline", len(dots))
print("report rendered:", len(orange), "kernel pixels on the timeline,", len(dots), "roofline dot pixels below it")
PY
fi
check "bad format" 2 "$bin" trace table "$sm.json.gz" --format xml
contains "bad format named" "--format must be text, csv or json"
check "bad stack depth" 2 "$bin" trace table "$sm.json.gz" --group-by-stack 0
# breakdown of linfuse's own CPU trace: its kernels counted per step, no launch statistics made up
"$bin" simple-mlp --out "$work/lt" --batch 1 --seq 16 --dim 64 --hidden 128 >/dev/null 2>&1
check "breakdown of a linfuse CPU trace" 0 "$bin" trace breakdown "$(ls "$work"/lt/simple-mlp/*.json | head -1)"
contains "CPU kernels per step" "lf_cpu_gemm_bf16"
contains "no launch statistics for CPU kernels" "no kernel here has a launch call of its own"
# its report shows what a CPU trace has: no GPU roofline, columns or TFLOP/s, the device named CPU
check "report of a linfuse CPU trace" 0 "$bin" trace report "$(ls "$work"/lt/simple-mlp/*.json | head -1)" -o "$work/cpu.html"
checks=$((checks + 1))
python3 - "$work/cpu.html" <<'PY' || { fails=$((fails + 1)); echo "FAIL: the report of a CPU trace"; }
import re, sys
page = open(sys.argv[1]).read()
body = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)  # PyTorch's table keeps its own column names
for bad in ("<th>GPU</th>", "TFLOP/s", "class=\"roofline\"", "CUDA graphs", "device: CPU-dev", "Launches:"):
    assert bad not in body, bad
for good in ("device: CPU (linfuse's CPU kernels", "<th>GFLOP/s</th>", "lf_cpu_gemm_bf16", "ProfilerStep#2"):
    assert good in body, good
print("CPU report: no GPU columns or roofline, GFLOP/s, device CPU")
PY
# a large trace (52 MB, past the 50 MB progress line and the 32 MB pages the reader gives back):
# read whole and right, silent through a pipe, a progress line on a terminal (script(1) gives one),
# and an error on its last line still placed at its line and column, plain and gzip
python3 - "$work/big.json" <<'PY'
import gzip, sys
ev = '  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d, "dur": 1, "args": {"External id": %d}},\n'
body = ''.join(ev % (2 * i, i) for i in range(400000))
good = '{"traceEvents": [\n' + body + '  {"ph": "i", "name": "end", "pid": 1, "tid": 1, "ts": 0, "s": "t"}\n]}\n'
bad_last = '  {"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 1 "args": {}}\n]}\n'
bad = '{"traceEvents": [\n' + body + bad_last
open(sys.argv[1], 'w').write(good)
open(sys.argv[1] + '.bad.json', 'w').write(bad)
open(sys.argv[1] + '.bad.json.gz', 'wb').write(gzip.compress(bad.encode(), 1))
# where jansson stops: the last event's line, the column just past the '"args"' it did not expect
open(sys.argv[1] + '.where', 'w').write('%d:%d' % (bad.count('\n') - 1, bad_last.index('"args"') + len('"args"')))
PY
checks=$((checks + 1))
"$bin" trace summary "$work/big.json" >"$work/big.out" 2>"$work/big.err"
if [ "$?" != 0 ] || [ -s "$work/big.err" ] || ! grep -q "cpu_ops/step=400000" "$work/big.out" ||
    ! grep -q "events=400000" "$work/big.out"; then
    fails=$((fails + 1))
    echo "FAIL: the 52 MB trace: not read whole, or not silent through a pipe"
    cat "$work/big.out" "$work/big.err" | head -5
fi
# the same 52 MB as three gzip members cut mid-event (a reader inflating as it parses must carry
# an event across members and across its own refills): the same summary as the plain file
python3 - "$work/big.json" "$work/big3.json.gz" <<'PY'
import gzip, sys
text = open(sys.argv[1], 'rb').read()
cuts = [0, len(text) // 3 + 17, 2 * len(text) // 3 + 5, len(text)]
open(sys.argv[2], 'wb').write(b''.join(gzip.compress(text[a:b], 1) for a, b in zip(cuts, cuts[1:])))
PY
check "three gzip members cut mid-event" 0 "$bin" trace summary "$work/big3.json.gz"
checks=$((checks + 1))
[ "$LAST" = "$(cat "$work/big.out")" ] || { fails=$((fails + 1)); echo "FAIL: the 3-member gzip reads differently: $LAST"; }
where=$(cat "$work/big.json.where")
for f in big.json.bad.json big.json.bad.json.gz; do
    check "an error past the pages given back ($f)" 2 script -qec "$bin trace summary $work/$f" /dev/null
    contains "progress on a terminal ($f)" "reading $work/$f:"
    contains "progress percent ($f)" "% ("
    contains "the error's line and column ($f)" "$work/$f:$where: not valid JSON"
done
# baseTimeNanoseconds read exactly (a double kept 1733616000000000123 as ...000000), and one that is
# no integer of nanoseconds refused at its place (a string or 9e18 had been read as 0 silently)
printf '{"baseTimeNanoseconds": 1733616000000000123, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}' > "$work/base.json"
check "base time kept exactly" 0 "$bin" trace merge "$work/base.json" -o "$work/base_m.json"
checks=$((checks + 1))
grep -q '"baseTimeNanoseconds": 1733616000000000123,' "$work/base_m.json" || { fails=$((fails + 1)); echo "FAIL: base time not kept to the ns"; }
for v in '"1733616000000000000"' 9e18 1.7336e18 -5 9223372036854775808; do
    printf '{"baseTimeNanoseconds": %s, "traceEvents": []}' "$v" > "$work/base_bad.json"
    check "baseTimeNanoseconds $v" 2 "$bin" trace summary "$work/base_bad.json"
    contains "baseTimeNanoseconds $v: why" "base_bad.json:1:25: baseTimeNanoseconds is not an integer number of nanoseconds"
done
# what could not be trusted is counted and said by every verb, never summed in silently: a drop the
# profiler recorded, a kernel launched outside the steps, two kernels overlapping on one stream, a
# negative duration (read as 0), a duration no measurement has
cat >"$work/untrusted.json" <<'JSON'
{"linfuse_dropped_events": 3, "traceEvents": [
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"correlation": 1}},
{"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 20, "dur": 30, "args": {"correlation": 1, "stream": 7, "device": 0}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 5, "args": {"correlation": 2}},
{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 40, "dur": 30, "args": {"correlation": 2, "stream": 7, "device": 0}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 200, "dur": 5, "args": {"correlation": 3}},
{"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 210, "dur": -4, "args": {"correlation": 3, "stream": 7, "device": 0}},
{"ph": "X", "cat": "cpu_op", "name": "aten::forever", "pid": 1, "tid": 1, "ts": 1, "dur": 90000000000},
{"ph": "X", "cat": "kernel", "name": "k_long", "pid": 0, "tid": 8, "ts": 20, "dur": 2000000, "args": {"correlation": 1, "stream": 8, "device": 0}}
]}
JSON
trust="not trusted: 3 records the profiler dropped, 1 kernels, copies or sets launched outside every step"
for verb in "summary" "table" "breakdown" "expect --kernels-per-step 3" "stats --report cuda_gpu_kern_sum"; do
    # shellcheck disable=SC2086
    check "trace $verb of an untrusted trace" 0 "$bin" trace $verb "$work/untrusted.json"
    contains "trace $verb: the drops and the launch outside the steps" "$trust"
    contains "trace $verb: the overlap" "1 kernels, copies or sets overlapping the last on their stream"
    contains "trace $verb: the negative duration" "1 negative durations (read as 0)"
    contains "trace $verb: the absurd duration (a 2 s kernel is none)" "1 durations over a day"
done
check "trace diff of an untrusted trace" 0 "$bin" trace diff "$work/untrusted.json" "$ref/linear_1024x32x64_eager.json"
contains "trace diff: A's, said as A's" "A $trust"
check "trace summary --json of an untrusted trace" 0 "$bin" trace summary --json "$work/untrusted.json"
contains "summary --json: the counts" '"trust": {"dropped": 3, "outside_steps": 1, "stream_overlaps": 1, "negative_durations": 1, "absurd_durations": 1}'
check "trace summary of a trusted trace" 0 "$bin" trace summary "$ref/linear_1024x32x64_eager.json"
case "$LAST" in *"not trusted"*) fails=$((fails + 1)); echo "FAIL: a clean trace said not trusted" ;; esac

# an older Kineto's times since the epoch (HTA's test traces), with no baseTimeNanoseconds: read
# from a base of their own, which the trace's base takes
printf '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1695835542514261.5,"dur":5,"args":{"correlation":1}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1695835542514250,"dur":3,"args":{"correlation":1}}]}' >"$work/epoch.json"
check "a trace of epoch microseconds" 0 "$bin" trace stats "$work/epoch.json" --report cuda_kern_exec_sum --format csv
contains "epoch microseconds: the times read to the half microsecond" "1,1,0,1,1,16500.0,16500.0,16500,16500,0.0,3000.0,3000.0,3000,3000,0.0,8500.0"
check "merged, its base the epoch's" 0 "$bin" trace merge "$work/epoch.json" -o "$work/epoch_m.json"
check "read back" 0 "$bin" trace summary "$work/epoch_m.json"

# standard output that cannot take what is printed (a full disk, /dev/full, past ulimit -f): exit 1
# with the reason, never 0 with the output lost or cut to invalid JSON
full="$ref/mlp_64x128x768x3072_eager.json"
for args in "trace table $full" "trace table $full --format json" "trace summary $full" "trace breakdown $full" \
    "trace diff $full $ref/mlp_64x128x768x3072_compile.json" "trace expect $full --kernels-per-step 5" \
    "trace table --help" "--help" "help" "--version" "--help-env"; do
    # shellcheck disable=SC2086
    check "$args > /dev/full" 1 sh -c 'exec "$@" > /dev/full' sh "$bin" $args
    contains "$args > /dev/full: why" "linfuse: standard output: "
    contains "$args > /dev/full: what it means" "what was printed is cut short or lost"
done
check "table --format json past ulimit -f" 1 sh -c 'ulimit -f 2; exec "$@" > "$0"' "$work/cut.json" "$bin" trace table \
    "$full" --format json --row-limit -1
contains "past ulimit -f: why" "standard output: File too large"
rm -rf "$work"
echo "$((checks - fails)) passed, $fails failed"
[ "$fails" = 0 ]
