#!/bin/sh
# The command-line tool: bad flags are usage errors (exit 2) with a message, the demo runs and
# shows the dispatch chain. Usage: cli_test.sh path/to/linfuse
set -u
bin="$1"
fails=0 checks=0
check() { # check "what" expected_status command...
    what="$1" want="$2"
    shift 2
    checks=$((checks + 1))
    out=$("$@" 2>&1)
    got=$?
    if [ "$got" != "$want" ]; then
        fails=$((fails + 1))
        echo "FAIL: $what: exit $got, expected $want"
        echo "$out" | head -5
    fi
    LAST="$out"
}
contains() { # contains "what" needle
    checks=$((checks + 1))
    case "$LAST" in
    *"$2"*) ;;
    *) fails=$((fails + 1)); echo "FAIL: $1: output lacks '$2'"; echo "$LAST" | head -20 ;;
    esac
}

# an experiment whose table cannot be printed: exit 1 with the reason, the trace files kept
check "linear > /dev/full" 1 sh -c 'exec "$@" > /dev/full' sh "$bin" linear --device cpu --out "$(mktemp -d)"
contains "linear > /dev/full: why" "linfuse: standard output: No space left on device"
check "no command" 2 "$bin"
check "unknown command" 2 "$bin" frobnicate
contains "unknown command" "unknown command 'frobnicate'"
check "help" 0 "$bin" help
contains "help lists bench profiler" "bench profiler"
check "version" 0 "$bin" --version
contains "version" "linfuse 0."
# every command and trace verb answers --help with its usage and exit 0
for c in tour matmul-add linear simple-mlp kernels-mlp trace demo bench "trace table" "trace diff" "trace expect" \
    "trace svg" "trace summary"; do
    # shellcheck disable=SC2086
    check "$c --help" 0 "$bin" $c --help
    contains "$c --help" "usage: linfuse"
done
check "kernels-mlp --help" 0 "$bin" kernels-mlp --help
case "$LAST" in *--compile*) fails=$((fails + 1)); echo "FAIL: kernels-mlp --help offers --compile, which it refuses" ;; esac
checks=$((checks + 1))
# error messages end with a newline, so the next line (a usage, a shell prompt) starts on its own
for args in "frobnicate" "demo --bogus" "demo --seq" "linear --batch=0" "linear --no-bias=1" "trace table" \
    "trace table --row-limit 0 x.json" "trace expect x.json --kernels-per-step nan" "trace svg x.json" \
    "trace summary" "trace diff a.json" "bench" "bench --reps x" "tour extra" "linear --repeat 0"; do
    checks=$((checks + 1))
    # shellcheck disable=SC2086
    "$bin" $args >/dev/null 2>"${TMPDIR:-/tmp}/lf_cli_err.$$"
    last=$(tail -c 1 "${TMPDIR:-/tmp}/lf_cli_err.$$" | od -An -c | tr -d ' ')
    [ -s "${TMPDIR:-/tmp}/lf_cli_err.$$" ] && [ "$last" = '\n' ] ||
        { fails=$((fails + 1)); echo "FAIL: 'linfuse $args': message does not end with a newline"; }
done
rm -f "${TMPDIR:-/tmp}/lf_cli_err.$$"
check "unknown flag" 2 "$bin" demo --bogus
contains "unknown flag" "unknown flag '--bogus'"
check "zero size" 2 "$bin" demo --batch 0
contains "zero size" "--batch must be an integer from 1"
check "negative size" 2 "$bin" demo --dim -5
check "not a number" 2 "$bin" demo --hidden 12abc
check "missing value" 2 "$bin" demo --seq
check "bad dtype" 2 "$bin" demo --dtype f64
contains "bad dtype" "unknown dtype 'f64'"
check "size that cannot be allocated" 1 env ASAN_OPTIONS=allocator_may_return_null=1 "$bin" demo --batch 1 --seq 1 --dim 1048576 --hidden 1048576 --reps 1
contains "size that cannot be allocated" "linfuse demo:"
check "bench needs a target" 2 "$bin" bench
# bench cuda --mlp: shapes checked before any device is asked for (so here, with no GPU, too)
for bad in 12x34 1x2x3x -1x2x3 0x64x64 1x65537x64 "" 1x2x3,x; do
    check "bench cuda --mlp '$bad'" 2 "$bin" bench cuda --mlp "$bad"
    contains "bench cuda --mlp '$bad' says what it takes" "--mlp"
done
check "bench --act without cuda" 2 "$bin" bench cpu --act silu
contains "bench --act without cuda" "are for \`linfuse bench cuda\`"
check "bench --flush-l2 without cuda" 2 "$bin" bench cpu --flush-l2
contains "bench --flush-l2 without cuda" "--flush-l2 are for"
check "bench cuda --act without --mlp" 2 "$bin" bench cuda --act silu
check "bench cuda --act unknown" 2 "$bin" bench cuda --mlp 1x64x64 --act relu
contains "bench cuda --act unknown" "gelu_tanh (GeGLU) or silu"
check "bench cuda --mlp with --case" 2 "$bin" bench cuda --mlp 1x64x64 --case mlp
for bad in eagre "eager," ",gated" "fused,,fp8" compiled-gated ""; do
    check "bench cuda --forms '$bad'" 2 "$bin" bench cuda --mlp 1x64x64 --forms "$bad"
    contains "bench cuda --forms '$bad' lists the forms" "compiled_gated"
done
check "bench cuda --forms without --mlp" 2 "$bin" bench cuda --forms eager
contains "bench cuda --forms without --mlp" "--forms and --settle-ms go with --mlp"
check "bench --forms without cuda" 2 "$bin" bench cpu --forms eager
check "bench cuda --settle-ms without --mlp" 2 "$bin" bench cuda --settle-ms 100
for bad in -1 10001 1.5 x; do
    check "bench cuda --settle-ms '$bad'" 2 "$bin" bench cuda --mlp 1x64x64 --settle-ms "$bad"
done
check "bench --help lists --mlp" 0 "$bin" bench --help
contains "bench --help lists --mlp" "--mlp TOKENSxDIMxHIDDEN"
check "demo runs" 0 "$bin" demo --batch 1 --seq 8 --dim 64 --hidden 96 --reps 2
contains "demo chain" "lf::linear([1x8x64], [96x64], None)"
contains "demo kernel" "-> kernel lf_cpu_gemm_bf16_"
contains "demo count" "kernels per forward: 5"
# the experiments: files, table, summary; bad input is exit 2 with nothing left behind
dir=$(mktemp -d)
check "linear runs" 0 "$bin" linear --out "$dir" --batch 64
contains "linear table" "lf_cpu_gemm_bf16_12x32_tn_bias"
contains "linear summary" "kernels/step=1 cpu_ops/step=3"
[ -f "$dir/linear/64x32x64_bf16_cold_eager.json" ] && [ -f "$dir/linear/64x32x64_bf16_cold_eager.txt" ] ||
    { fails=$((fails + 1)); echo "FAIL: linear files missing"; ls -R "$dir"; }
checks=$((checks + 1))
check "dashed and underscored flags" 0 "$bin" linear --out "$dir" --batch 8 --in-dim 16 --out_dim 24 --no-bias
contains "no bias: mm" "lf::mm"
check "--flag=value" 0 "$bin" linear --out="$dir" --batch=8 --in_dim=16 --out-dim=24 --threads=1
[ -f "$dir/linear/8x16x24_bf16_cold_eager.json" ] || { fails=$((fails + 1)); echo "FAIL: --flag=value sizes not taken"; }
checks=$((checks + 1))
check "--repeat 0 is refused" 2 "$bin" linear --out "$dir" --repeat 0
contains "--repeat 0 is refused" "--repeat must be an integer from 1 to 16"
# one trace and table per window, as on_trace_ready hands PyTorch each window
check "--repeat 2" 0 "$bin" linear --out "$dir" --batch 4 --repeat 2 --wait 0 --warmup-steps 0 --active 1
contains "--repeat 2: window 2" "window 2 of 2"
for w in 1 2; do
    checks=$((checks + 1))
    [ -f "$dir/linear/4x32x64_bf16_cold_eager_window$w.json" ] && [ -f "$dir/linear/4x32x64_bf16_cold_eager_window$w.txt" ] ||
        { fails=$((fails + 1)); echo "FAIL: --repeat 2: window $w's files missing"; ls "$dir/linear"; }
done
check "--threads is checked" 2 "$bin" simple-mlp --out "$dir" --threads 0
check "matmul-add warm" 0 "$bin" matmul-add --out "$dir" --size 33 --warmup
contains "matmul-add kernels" "kernels/step=2"
[ -f "$dir/matmul-add/33_bf16_warm_eager.json" ] || { fails=$((fails + 1)); echo "FAIL: warm file name"; }
checks=$((checks + 1))
check "simple-mlp" 0 "$bin" simple-mlp --out "$dir" --batch 1 --seq 4 --dim 32 --hidden 48 --dtype f32
contains "mlp kernels" "kernels/step=5"
check "kernels-mlp" 0 "$bin" kernels-mlp --out "$dir" --batch 1 --seq 5 --dim 32 --hidden 48 --dtype f32
contains "kernels-mlp: 4 kernels" "kernels/step=4"
contains "kernels-mlp: the fused kernel" "lf_cpu_gelu_tanh_mul_f32"
[ -f "$dir/kernels-mlp/1x5x32x48_f32_cold_kernels.json" ] || { fails=$((fails + 1)); echo "FAIL: kernels-mlp file name"; }
checks=$((checks + 1))
check "kernels-mlp gated" 0 "$bin" kernels-mlp --out "$dir" --batch 1 --seq 5 --dim 32 --hidden 48 --variant gated
contains "gated: 2 kernels" "kernels/step=2"
contains "gated: the gated GEMM (5 tokens: dot products from the weight, 1 x nr)" "lf_cpu_gemm_bf16_1x"
contains "gated: the gated epilogue" "_tn_gelu_tanh_gated"
check "gated trace expect" 0 "$bin" trace expect "$dir/kernels-mlp/1x5x32x48_bf16_cold_gated.json" --kernels-per-step 2 --kernel gated --no-kernel 'gelu_tanh_mul'
# a decode step's one token: the GEMMs take dot products from the weights, unpacked (1 x nr)
check "kernels-mlp gated, 1 token" 0 "$bin" kernels-mlp --out "$dir" --batch 1 --seq 1 --dim 32 --hidden 48 --variant gated
contains "gated, 1 token: the few-rows GEMM (1 x the instruction set's nr)" "lf_cpu_gemm_bf16_1x"
contains "gated, 1 token: the gated epilogue" "_tn_gelu_tanh_gated"
# fp8 where the device has no FP8 GEMM (the CPU): the gated kernels run, and the trace says why
check "kernels-mlp fp8 on the cpu" 0 "$bin" kernels-mlp --out "$dir" --batch 1 --seq 5 --dim 32 --hidden 48 --variant fp8 --device cpu
contains "fp8 on the cpu: the gated kernels" "kernels/step=2"
contains "fp8 on the cpu: the reason, whole, on stderr" "--variant fp8: cpu gemm: no FP8 (f8e4m3) GEMM on the CPU; FP8 GEMMs run on Hopper GPUs; the gated bf16 forward runs instead"
# the files are named by what ran: gated
check "fp8 trace expect" 0 "$bin" trace expect "$dir/kernels-mlp/1x5x32x48_bf16_cold_gated.json" --kernels-per-step 2 --kernel gated
grep -q "fp8 variant runs gated bf16 (cpu gemm: no FP8" "$dir/kernels-mlp/1x5x32x48_bf16_cold_gated.json" || { fails=$((fails + 1)); echo "FAIL: the fp8 note in the trace"; }
checks=$((checks + 1))
[ ! -e "$dir/kernels-mlp/1x5x32x48_bf16_cold_fp8.json" ] || { fails=$((fails + 1)); echo "FAIL: a gated run named _fp8"; }
checks=$((checks + 1))
check "fp8 is one device" 2 "$bin" kernels-mlp --out "$dir" --variant fp8 --tp 2
contains "fp8 is one device" "--variant fp8 runs on one device"
check "linear --compile" 0 "$bin" linear --out "$dir" --batch 64 --compile
contains "compiled linear: one kernel, no view op" "kernels/step=1 cpu_ops/step=0"
contains "compiled linear: eager's kernel" "lf_cpu_gemm_bf16_12x32_tn_bias"
contains "compiled linear: the region" "Compiled Region: linear_fwd"
[ -f "$dir/linear/64x32x64_bf16_cold_compile.json" ] || { fails=$((fails + 1)); echo "FAIL: compile file name"; }
checks=$((checks + 1))
check "linear --compile --no-fold-views" 0 "$bin" linear --out "$dir" --batch 64 --compile --no-fold-views
contains "views kept: lf::t dispatched" "lf::t"
check "matmul-add --compile" 0 "$bin" matmul-add --out "$dir" --size 48 --compile
contains "compiled matmul-add: one GEMM reading the bias as C" "kernels/step=1"
contains "compiled matmul-add: C input" "lf_cpu_gemm_bf16_12x32_nn_c"
check "simple-mlp --compile" 0 "$bin" simple-mlp --out "$dir" --batch 1 --seq 8 --dim 32 --hidden 64 --compile
contains "compiled mlp: 4 kernels" "kernels/step=4"
contains "compiled mlp: the fused kernel" "lf_poi_fused_gelu_mul_0"
check "simple-mlp --compile --gated" 0 "$bin" simple-mlp --out "$dir" --batch 1 --seq 8 --dim 32 --hidden 64 --compile --gated
contains "compiled mlp, gated: 2 kernels" "kernels/step=2"
checks=$((checks + 1)) # two plans, two traces: the gated one did not write over the plain one
[ -f "$dir/simple-mlp/1x8x32x64_bf16_cold_compile.json" ] && [ -f "$dir/simple-mlp/1x8x32x64_bf16_cold_compile_gated.json" ] ||
    { fails=$((fails + 1)); echo "FAIL: --compile and --compile --gated share a trace file"; }
# read back, the compiled trace is still the CPU device's: its generated kernel has no lf_cpu_ name
check "compiled mlp's table" 0 "$bin" trace table "$dir/simple-mlp/1x8x32x64_bf16_cold_compile.json"
contains "compiled mlp's table: the CPU device's columns" "Self CPU-dev"
contains "compiled mlp's table: the ops of the eager forward" "lf::linear"
check "schedule flags" 0 "$bin" linear --out "$dir" --batch 4 --wait 0 --warmup-steps 0 --active 2
contains "two steps" "  2  "
check "simple-mlp --compile --fp8 on the cpu" 0 "$bin" simple-mlp --out "$dir" --batch 1 --seq 8 --dim 32 --hidden 64 --compile --fp8 --compile-verbose
contains "--fp8 on the cpu: the plan says why it stays bf16" "fp8: not here (cpu gemm: no FP8"
contains "--fp8 on the cpu: still the gated GEMM" "gated: gelu_tanh(g) * u in the epilogue"
before=$(find "$dir" | wc -l)
check "compile flags need --compile" 2 "$bin" simple-mlp --out "$dir" --gated
contains "compile flags need --compile" "need --compile"
# a command takes and lists only its own flags: --gated and --fp8 fuse an MLP's two GEMMs
check "linear takes no --gated" 2 "$bin" linear --out "$dir" --compile --gated
contains "linear takes no --gated" "unknown flag '--gated'"
contains "linear takes no --gated: whose it is" "--gated is for simple-mlp"
check "matmul-add takes no --fp8" 2 "$bin" matmul-add --out "$dir" --compile --fp8
for c in linear matmul-add; do
    check "$c --help" 0 "$bin" $c --help
    case "$LAST" in *--gated* | *--fp8*) fails=$((fails + 1)); echo "FAIL: $c --help lists --gated or --fp8" ;; esac
    checks=$((checks + 1))
done
check "simple-mlp --help" 0 "$bin" simple-mlp --help
contains "simple-mlp --help lists --gated" "--gated"
# whole flag names only (a prefix would change meaning when a flag is added), with a suggestion;
# underscores still spell dashes
check "a prefix is no flag" 2 "$bin" linear --out "$dir" --in 8
contains "a prefix is no flag" "unknown flag '--in' (linfuse linear --help lists its flags); did you mean --in-dim?"
check "a prefix is no flag: trace" 2 "$bin" trace table x.json --sort cpu_time_total
contains "did you mean --sort-by" "unknown flag '--sort' (linfuse trace table --help lists its flags); did you mean --sort-by?"
check "a typo: did you mean" 2 "$bin" demo --bacth 2
contains "a typo: did you mean" "unknown flag '--bacth' (linfuse demo --help lists its flags); did you mean --batch?"
# the hint is the last line, not scrolled away by the help text
for c in "demo --bacth 2" "linear --bacth 2" "trace table x.json --sortby x" "mlp --wieghts x" "trace tabel x.json" "simpel-mlp"; do
    # shellcheck disable=SC2086
    check "a typo: $c: one line" 2 "$bin" $c
    checks=$((checks + 1))
    [ "$(printf '%s\n' "$LAST" | wc -l)" = 1 ] || { fails=$((fails + 1)); echo "FAIL: a typo: $c: more than one line:"; echo "$LAST" | head -3; }
done
check "a prefix with =" 2 "$bin" trace svg x.json --out=y.svg
contains "a prefix with =" "unknown flag '--out' (linfuse trace svg --help lists its flags); did you mean --output?"
check "nothing near: no guess" 2 "$bin" demo --frobnicate
case "$LAST" in *"did you mean"*) fails=$((fails + 1)); echo "FAIL: a guess for --frobnicate" ;; esac
checks=$((checks + 1))
check "a command typo" 2 "$bin" simpel-mlp
contains "a command typo" "unknown command 'simpel-mlp' (linfuse help lists the commands); did you mean simple-mlp?"
check "a verb typo" 2 "$bin" trace tabel x.json
contains "a verb typo" "unknown verb 'tabel' (linfuse trace --help lists the verbs); did you mean table?"
check "underscores for dashes" 2 "$bin" linear --out "$dir" --out_dim=8 --in_dim 0
contains "underscores for dashes" "--in-dim must be an integer from 1"
check "--=value on a flag without one" 2 "$bin" linear --no-bias=1
contains "takes no value" "'--no-bias' takes no value"
check "kernels-mlp takes no --compile" 2 "$bin" kernels-mlp --out "$dir" --compile
check "cuda without a GPU" 2 "$bin" linear --out "$dir" --device cuda
contains "cuda refused: says why" "--device cuda: no cuda device: "
check "bad device" 2 "$bin" linear --device tpu
check "zero size" 2 "$bin" simple-mlp --out "$dir" --dim 0
check "bad variant" 2 "$bin" kernels-mlp --out "$dir" --variant fastest
contains "bad variant" "--variant must be fused, gated or fp8, got 'fastest'"
check "variant is kernels-mlp's" 2 "$bin" simple-mlp --out "$dir" --variant gated
check "unknown experiment flag" 2 "$bin" matmul-add --in_dim 4
check "size that overflows memory" 2 env ASAN_OPTIONS=allocator_may_return_null=1 "$bin" linear --out "$dir" --batch 1099511627776 --in_dim 1099511627776
check "unwritable out" 2 "$bin" linear --out /proc/linfuse-cannot-write
contains "unwritable out" "--out: cannot"
# a run too big for the machine is refused up front with the numbers, and makes no directory
check "too big for memory" 2 "$bin" matmul-add --out "$dir/fresh/out" --size 4000000 --batched
contains "too big: the estimate" "needs about 756.7 TiB of cpu memory"
contains "too big: what the machine has" "cpu can give"
checks=$((checks + 1))
[ ! -e "$dir/fresh" ] || { fails=$((fails + 1)); echo "FAIL: a refused run made $dir/fresh"; }
# the sizes that used to be killed for memory after a minute, where this machine cannot hold them
avail_kb=$(awk '/^(MemAvailable|SwapFree):/ {s += $2} END {print s}' /proc/meminfo)
if [ "$avail_kb" -lt 33000000 ]; then
    check "mlp over memory" 2 "$bin" simple-mlp --out "$dir/fresh" --batch 1 --seq 1048576 --dim 64 --hidden 4096
    contains "mlp over memory" "needs about 32.3 GiB of cpu memory"
fi
if [ "$avail_kb" -lt 42000000 ]; then
    check "matmul over memory" 2 "$bin" matmul-add --out "$dir/fresh" --size 65536
    contains "matmul over memory" "needs about 40.0 GiB of cpu memory"
fi
after=$(find "$dir" | wc -l)
checks=$((checks + 1))
[ "$before" = "$after" ] || { fails=$((fails + 1)); echo "FAIL: failed runs left files or directories ($before -> $after)"; }
# a trace and its table change together: a table that cannot be written leaves the trace alone
mkdir -p "$dir/pair/linear/4x32x64_bf16_cold_eager.txt"
check "table not writable" 1 "$bin" linear --out "$dir/pair" --batch 4
contains "table not writable: why" "4x32x64_bf16_cold_eager.txt: it is a directory"
checks=$((checks + 1))
[ ! -e "$dir/pair/linear/4x32x64_bf16_cold_eager.json" ] && [ -z "$(find "$dir/pair" -name '*.tmp.*')" ] ||
    { fails=$((fails + 1)); echo "FAIL: the trace was written without its table, or a temporary was left"; }
# through a symbolic link: the link stays, its target gets the trace
rmdir "$dir/pair/linear/4x32x64_bf16_cold_eager.txt"
ln -s table.txt "$dir/pair/linear/4x32x64_bf16_cold_eager.txt"
check "table through a link" 0 "$bin" linear --out "$dir/pair" --batch 4
checks=$((checks + 1))
[ -L "$dir/pair/linear/4x32x64_bf16_cold_eager.txt" ] && grep -q "Self CPU" "$dir/pair/linear/table.txt" ||
    { fails=$((fails + 1)); echo "FAIL: the link was replaced or its target not written"; }
y_close() { # y_close "what" y.safetensors y_ref.json: tensor y, f32 [5, 8], within 1e-4 of the reference
    checks=$((checks + 1))
    python3 - "$2" "$3" <<'PY' || { fails=$((fails + 1)); echo "FAIL: $1"; }
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
b, e = h["y"]["data_offsets"]
assert h["y"]["dtype"] == "F32" and h["y"]["shape"] == [5, 8], h["y"]
vals = struct.unpack("<40f", raw[8 + n + b:8 + n + e])
ref = [v for row in json.load(open(sys.argv[2])) for v in row]
worst = max(abs(a - r) / (abs(r) + 1e-2) for a, r in zip(vals, ref))
assert worst < 1e-4, worst
PY
}
# linfuse mlp: a Hugging Face layer (SwiGLU, f32, with its config.json) on an input file, the
# output against float64 computed here; and its errors, none of which leaves an output behind
mkdir -p "$dir/hf"
python3 - "$dir/hf" <<'PY'
import json, math, random, struct, sys
d = sys.argv[1]
random.seed(7)
D, H, T = 8, 12, 5
def mat(r, c): return [[random.uniform(-1, 1) for _ in range(c)] for _ in range(r)]
def save(path, tensors):
    header, blob = {}, b""
    for name in sorted(tensors):
        rows = tensors[name]
        data = b"".join(struct.pack("<%df" % len(r), *r) for r in rows)
        header[name] = {"dtype": "F32", "shape": [len(rows), len(rows[0])], "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
g, u, dn, x = mat(H, D), mat(H, D), mat(D, H), mat(T, D)
save(d + "/model.safetensors", {"model.layers.0.mlp.gate_proj.weight": g, "model.layers.0.mlp.up_proj.weight": u,
                                "model.layers.0.mlp.down_proj.weight": dn})
save(d + "/x.safetensors", {"x": x})
save(d + "/x_big.safetensors", {"x": mat(256, D)})  # an output past 2 KiB, for ulimit -f
import os
os.makedirs(d + "/phi", exist_ok=True)  # the same layer as Phi-3 names it (one gate_up_proj) and as Meta does
save(d + "/phi/model.safetensors", {"model.layers.0.mlp.gate_up_proj.weight": g + u,
                                    "model.layers.0.mlp.down_proj.weight": dn,
                                    "layers.0.feed_forward.w1.weight": g, "layers.0.feed_forward.w3.weight": u,
                                    "layers.0.feed_forward.w2.weight": dn})
json.dump({"hidden_act": "silu"}, open(d + "/phi/config.json", "w"))
json.dump({"hidden_act": "silu"}, open(d + "/config.json", "w"))
silu = lambda v: v / (1 + math.exp(-v))
y = [[sum(dn[j][k] * silu(sum(x[t][i] * g[k][i] for i in range(D))) * sum(x[t][i] * u[k][i] for i in range(D))
          for k in range(H)) for j in range(D)] for t in range(T)]
json.dump(y, open(d + "/y_ref.json", "w"))
PY
for variant in eager fused gated; do
    check "mlp $variant" 0 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
        --output "$dir/hf/y_$variant.safetensors" --variant "$variant" --device cpu
    contains "mlp $variant: silu from config.json" "(silu, 8 -> 12, f32) on cpu"
    y_close "mlp $variant's y" "$dir/hf/y_$variant.safetensors" "$dir/hf/y_ref.json"
done
for pfx in model.layers.0.mlp layers.0.feed_forward; do
    check "mlp, $pfx named as Phi-3 or Meta name it" 0 "$bin" mlp --weights "$dir/hf/phi" --prefix "$pfx" \
        --input "$dir/hf/x.safetensors" --output "$dir/hf/y_phi.safetensors" --variant gated --device cpu
    y_close "mlp, $pfx named as Phi-3 or Meta name it: y" "$dir/hf/y_phi.safetensors" "$dir/hf/y_ref.json"
done
check "mlp compiled" 0 "$bin" mlp --weights "$dir/hf/model.safetensors" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
    --output "$dir/hf/y_c.safetensors" --compile --device cpu --dtype bf16
contains "mlp compiled, bf16" "bf16) on cpu, compiled eager"
check "mlp: no such layer" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.9.mlp --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors"
contains "mlp: no such layer" "no \"model.layers.9.mlp.gate_proj.weight\""
contains "mlp: no such layer: the layers there are" "the MLP layers there: model.layers.0.mlp"
check "mlp: --prefix copied with its dot" 0 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp. --input "$dir/hf/x.safetensors" \
    --output "$dir/hf/y_dot.safetensors" --device cpu
contains "mlp: --prefix with its dot" "mlp model.layers.0.mlp (silu"
check "mlp: no input" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/none.safetensors" --output "$dir/hf/bad.safetensors"
check "mlp: an input without x" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/model.safetensors" --output "$dir/hf/bad.safetensors"
contains "mlp: an input without x: the file and what it holds" "--input $dir/hf/model.safetensors has no tensor \"x\""
contains "mlp: an input without x: what it holds" "it holds 3: model.layers.0.mlp.down_proj.weight, "
check "mlp: a bad act" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors" --act tanh
check "mlp: flags missing" 2 "$bin" mlp --weights "$dir/hf"
# an output that cannot be written there is refused before the run (exit 2), as a bad flag is
check "mlp: output in no directory" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" --output "$dir/hf/no/y.safetensors" --device cpu
contains "mlp: output in no directory" "no such directory $dir/hf/no"
check "mlp: output is a directory" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" --output "$dir/hf" --device cpu
contains "mlp: output is a directory" "--output: $dir/hf is a directory"
check "mlp: an empty output path" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" --output "" --device cpu
contains "mlp: an empty output path" "the output path is empty"
# --output - : the file on standard output and nothing else (what the run says goes to stderr)
checks=$((checks + 1))
"$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" --output - --device cpu \
    > "$dir/hf/y_stdout.safetensors" 2> "$dir/hf/y_stdout.txt" ||
    { fails=$((fails + 1)); echo "FAIL: mlp --output -: exit $?"; }
grep -q "wrote -" "$dir/hf/y_stdout.txt" || { fails=$((fails + 1)); echo "FAIL: mlp --output -: the note is not on stderr"; }
checks=$((checks + 1))
python3 - "$dir/hf/y_stdout.safetensors" <<'PY' || { fails=$((fails + 1)); echo "FAIL: mlp --output -: stdout is not the file alone"; }
import json, os, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
sys.exit(0 if len(b) == 8 + n + end else 1)
PY
y_close "mlp --output -'s y" "$dir/hf/y_stdout.safetensors" "$dir/hf/y_ref.json"
# --input - : the input file from standard input, as --output - writes to standard output
check "mlp --input -" 0 sh -c 'f=$1; shift; exec "$@" < "$f"' sh "$dir/hf/x.safetensors" "$bin" mlp --weights "$dir/hf" \
    --prefix model.layers.0.mlp --input - --output "$dir/hf/y_stdin.safetensors" --device cpu
y_close "mlp --input -'s y" "$dir/hf/y_stdin.safetensors" "$dir/hf/y_ref.json"
check "mlp --input - of no safetensors" 2 sh -c 'echo hello | exec "$0" "$@"' "$bin" mlp --weights "$dir/hf" \
    --prefix model.layers.0.mlp --input - --output "$dir/hf/bad.safetensors" --device cpu
contains "mlp --input - of no safetensors: named" "standard input"
# weights that are not there: said of them (not of a config.json in the folder above, nor --act)
check "mlp --weights not there" 2 "$bin" mlp --weights "$dir/hf/Meta-Llama-3-8B" --prefix model.layers.0.mlp \
    --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors"
contains "mlp --weights not there: said so" "--weights $dir/hf/Meta-Llama-3-8B: No such file or directory"
case "$LAST" in *--act*) fails=$((fails + 1)); echo "FAIL: mlp --weights not there: blames --act" ;; esac
# two namings of one layer: refused naming both, never one run on the other's tensors
mkdir -p "$dir/hf/two"
cp "$dir/hf/phi/model.safetensors" "$dir/hf/two/model.safetensors"
python3 - "$dir/hf/two/model.safetensors" "$dir/hf/model.safetensors" <<'PY'
import json, struct, sys
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
h, data = read(sys.argv[1])
h2, data2 = read(sys.argv[2])  # gate_proj and up_proj beside the fused gate_up_proj
for k in ("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"):
    b, e = h2[k]["data_offsets"]
    h[k] = dict(h2[k], data_offsets=[len(data), len(data) + e - b])
    data += data2[b:e]
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PY
check "mlp: two namings of one layer" 2 "$bin" mlp --weights "$dir/hf/two" --act silu --prefix model.layers.0.mlp \
    --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors" --device cpu
contains "mlp: two namings of one layer: both named" "two namings of one MLP, gate_proj/up_proj/down_proj and gate_up_proj/down_proj"
[ ! -e "$dir/hf/bad.safetensors" ] || { fails=$((fails + 1)); echo "FAIL: a refused run wrote its output"; }
# an activation in config.json that is there but is no name: said so, not called missing
mkdir -p "$dir/hf/listact" && cp "$dir/hf/model.safetensors" "$dir/hf/listact/"
echo '{"hidden_act": ["silu"]}' > "$dir/hf/listact/config.json"
check "mlp: hidden_act a list" 2 "$bin" mlp --weights "$dir/hf/listact" --prefix model.layers.0.mlp \
    --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors" --device cpu
contains "mlp: hidden_act a list: said" 'hidden_act is ["silu"], not a string'
# an output that is one of the inputs (by any name: the path, a link, a hard link, the shard of a
# directory, the config read) would destroy it: refused, naming both, and nothing changes
sum_w=$(cksum < "$dir/hf/model.safetensors") sum_x=$(cksum < "$dir/hf/x.safetensors") sum_c=$(cksum < "$dir/hf/config.json")
ln -s model.safetensors "$dir/hf/link.safetensors"
ln "$dir/hf/x.safetensors" "$dir/hf/x_hard.safetensors"
for o in "--weights $dir/hf/model.safetensors:model.safetensors:the same file as --weights $dir/hf/model.safetensors" \
    "--weights $dir/hf:model.safetensors:the same file as a file of --weights $dir/hf/model.safetensors" \
    "--weights $dir/hf:link.safetensors:the same file as a file of --weights" \
    "--weights $dir/hf:x.safetensors:the same file as --input $dir/hf/x.safetensors" \
    "--weights $dir/hf:x_hard.safetensors:the same file as --input" \
    "--weights $dir/hf:config.json:the same file as the config beside --weights"; do
    w=${o%%:*} rest=${o#*:}
    # shellcheck disable=SC2086
    check "mlp --output ${rest%%:*} with $w" 2 "$bin" mlp $w --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
        --output "$dir/hf/${rest%%:*}" --device cpu
    contains "mlp --output ${rest%%:*} with $w: names both" "--output $dir/hf/${rest%%:*} is ${rest#*:}"
done
checks=$((checks + 1))
[ "$(cksum < "$dir/hf/model.safetensors")" = "$sum_w" ] && [ "$(cksum < "$dir/hf/x.safetensors")" = "$sum_x" ] &&
    [ "$(cksum < "$dir/hf/config.json")" = "$sum_c" ] && [ -L "$dir/hf/link.safetensors" ] ||
    { fails=$((fails + 1)); echo "FAIL: an input was overwritten by --output"; }
rm -f "$dir/hf/link.safetensors" "$dir/hf/x_hard.safetensors"
# a directory's index and an input given as a directory are inputs too
mkdir -p "$dir/xdir"
cp "$dir/hf/x.safetensors" "$dir/xdir/model.safetensors"
sum_xd=$(cksum < "$dir/xdir/model.safetensors")
check "mlp --output the input directory's file" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp \
    --input "$dir/xdir" --output "$dir/xdir/model.safetensors" --device cpu
contains "mlp --output the input directory's file" "the same file as a file of --input"
printf '{"weight_map": {"x": "model.safetensors"}}' > "$dir/xdir/model.safetensors.index.json"
sum_xi=$(cksum < "$dir/xdir/model.safetensors.index.json")
check "mlp --output the index of --input" 2 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp \
    --input "$dir/xdir" --output "$dir/xdir/model.safetensors.index.json" --device cpu
contains "mlp --output the index of --input" "is the same file as the index of --input"
checks=$((checks + 1))
[ "$(cksum < "$dir/xdir/model.safetensors")" = "$sum_xd" ] &&
    [ "$(cksum < "$dir/xdir/model.safetensors.index.json")" = "$sum_xi" ] ||
    { fails=$((fails + 1)); echo "FAIL: an input directory's file was overwritten by --output"; }
rm -rf "$dir/xdir"
# what is not a regular file is refused at once, not waited on (a FIFO's open() blocks for a writer)
mkfifo "$dir/fifo.safetensors"
mkdir -p "$dir/fifodir" "$dir/fifoshard"
mkfifo "$dir/fifodir/model.safetensors"
ln -s ../fifo.safetensors "$dir/fifoshard/model-00001-of-00001.safetensors"
echo '{"weight_map": {"model.layers.0.mlp.gate_proj.weight": "model-00001-of-00001.safetensors"}}' > "$dir/fifoshard/model.safetensors.index.json"
for w in "$dir/fifo.safetensors" "$dir/fifodir" "$dir/fifoshard"; do
    check "mlp --weights $w (a FIFO)" 2 timeout 20 "$bin" mlp --weights "$w" --act silu --prefix model.layers.0.mlp \
        --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors" --device cpu
    contains "mlp --weights $w (a FIFO)" "a FIFO, not a regular file"
done
check "mlp --input a FIFO" 2 timeout 20 "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp \
    --input "$dir/fifo.safetensors" --output "$dir/hf/bad.safetensors" --device cpu
check "simple-mlp --weights a FIFO" 2 timeout 20 "$bin" simple-mlp --out "$dir" --weights "$dir/fifodir" --act silu --prefix model.layers.0.mlp
# a text file linked in as a shard: not a safetensors file, not a "header length"
ln -sf ../hf/config.json "$dir/fifoshard/model-00001-of-00001.safetensors"
check "mlp: a text file as a shard" 2 "$bin" mlp --weights "$dir/fifoshard" --act silu --prefix model.layers.0.mlp \
    --input "$dir/hf/x.safetensors" --output "$dir/hf/bad.safetensors" --device cpu
contains "mlp: a text file as a shard" "model-00001-of-00001.safetensors: not a safetensors file: it starts with the text"
rm -rf "$dir/fifo.safetensors" "$dir/fifodir" "$dir/fifoshard"
# a write past `ulimit -f`: SIGXFSZ ignored, so the write fails (EFBIG, exit 1) and is cleaned up.
# 2 KiB, not 0: LLVM's OpenMP runtime registers itself in a 1 KiB file in /dev/shm at start-up,
# and under a limit of 0 it dies of SIGBUS (clang's build) before linfuse writes a byte
check "mlp past ulimit -f" 1 sh -c 'ulimit -f 4; exec "$0" "$@"' "$bin" mlp --weights "$dir/hf" --prefix model.layers.0.mlp \
    --input "$dir/hf/x_big.safetensors" --output "$dir/hf/big.safetensors" --device cpu
contains "mlp past ulimit -f" "File too large"
check "simple-mlp past ulimit -f" 1 sh -c 'ulimit -f 4; exec "$0" "$@"' "$bin" simple-mlp --out "$dir/fsize/new" --batch 1 \
    --seq 4 --dim 32 --hidden 48 --device cpu
contains "simple-mlp past ulimit -f" "File too large"
checks=$((checks + 1))
[ ! -e "$dir/hf/big.safetensors" ] && [ ! -e "$dir/fsize" ] && [ -z "$(find "$dir" -name '*.tmp.*')" ] ||
    { fails=$((fails + 1)); echo "FAIL: a write past ulimit -f left files or directories"; }
checks=$((checks + 1))
[ ! -e "$dir/hf/bad.safetensors" ] && [ -z "$(find "$dir/hf" -name '*.tmp.*')" ] || { fails=$((fails + 1)); echo "FAIL: a failed mlp left a file"; }
# an FP8 checkpoint (E4M3 weights, an F32 scale per row as llm-compressor writes them):
# dequantized at load, run in f32, against float64 over the decoded weights
mkdir -p "$dir/fp8"
python3 - "$dir/fp8" "$dir/hf/x.safetensors" <<'PY'
import json, math, random, struct, sys
d = sys.argv[1]
random.seed(11)
D, H, T = 8, 12, 5
def e4m3(b):
    e, m = (b >> 3) & 15, b & 7
    v = m * 2.0 ** -9 if e == 0 else (8 + m) * 2.0 ** (e - 10)
    return -v if b & 0x80 else v
header, blob, w = {}, b"", {}
for name, (r, c) in (("gate_proj", (H, D)), ("up_proj", (H, D)), ("down_proj", (D, H))):
    codes = [[random.randrange(0x20, 0x60) | random.choice((0, 0x80)) for _ in range(c)] for _ in range(r)]
    scales = [random.choice((1, 2, 3)) / 64 for _ in range(r)]
    w[name] = [[e4m3(codes[i][j]) * scales[i] for j in range(c)] for i in range(r)]
    key = "model.layers.0.mlp.%s.weight" % name
    data = bytes(b for row in codes for b in row)
    header[key] = {"dtype": "F8_E4M3", "shape": [r, c], "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
    data = struct.pack("<%df" % r, *scales)
    header[key + "_scale"] = {"dtype": "F32", "shape": [r, 1], "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(header).encode()
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
json.dump({"hidden_act": "silu"}, open(d + "/config.json", "w"))
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
x = struct.unpack("<40f", raw[8 + n:8 + n + 160])
x = [x[t * D:(t + 1) * D] for t in range(T)]
g, u, dn = w["gate_proj"], w["up_proj"], w["down_proj"]
silu = lambda v: v / (1 + math.exp(-v))
y = [[sum(dn[j][k] * silu(sum(x[t][i] * g[k][i] for i in range(D))) * sum(x[t][i] * u[k][i] for i in range(D))
          for k in range(H)) for j in range(D)] for t in range(T)]
json.dump(y, open(d + "/y_ref.json", "w"))
PY
check "mlp from an FP8 checkpoint" 0 "$bin" mlp --weights "$dir/fp8" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
    --output "$dir/fp8/y.safetensors" --variant gated --device cpu --dtype f32
contains "mlp from an FP8 checkpoint" "(silu, 8 -> 12, f32 from F8_E4M3) on cpu"
y_close "the FP8 mlp's y" "$dir/fp8/y.safetensors" "$dir/fp8/y_ref.json"
check "mlp fp8 on the cpu" 0 "$bin" mlp --weights "$dir/fp8" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
    --output "$dir/fp8/y8.safetensors" --variant fp8 --device cpu --dtype f32
contains "mlp fp8 on the cpu: says what ran (f32)" "--variant fp8: cpu gemm: no FP8 (f8e4m3) GEMM on the CPU; FP8 GEMMs run on Hopper GPUs; the gated f32 forward runs instead"
contains "mlp fp8 on the cpu: the summary says what ran" "on cpu, gated (fp8 asked)"
y_close "mlp fp8 on the cpu: y" "$dir/fp8/y8.safetensors" "$dir/fp8/y_ref.json"
# compiled, the fp8 forward is captured as it runs (here the gated one, with its note)
check "mlp --compile --variant fp8 on the cpu" 0 "$bin" mlp --weights "$dir/fp8" --prefix model.layers.0.mlp \
    --input "$dir/hf/x.safetensors" --output "$dir/fp8/y9.safetensors" --variant fp8 --compile --device cpu --dtype f32
contains "mlp --compile --variant fp8: says what ran" "the gated f32 forward runs instead"
y_close "mlp --compile --variant fp8 on the cpu: y" "$dir/fp8/y9.safetensors" "$dir/fp8/y_ref.json"
check "mlp --compile takes no fused" 2 "$bin" mlp --weights "$dir/fp8" --prefix model.layers.0.mlp --input "$dir/hf/x.safetensors" \
    --output "$dir/fp8/y10.safetensors" --variant fused --compile
[ ! -e "$dir/fp8/y10.safetensors" ] || { fails=$((fails + 1)); echo "FAIL: a refused run wrote its output"; }
checks=$((checks + 1))
# the experiments profile a real layer: its sizes and activation come from the checkpoint
check "simple-mlp --weights" 0 "$bin" simple-mlp --out "$dir" --weights "$dir/hf" --prefix model.layers.0.mlp --batch 1 --seq 4 --device cpu
contains "simple-mlp --weights: the file's sizes" "1x4x8x12"
contains "simple-mlp --weights: silu" "lf::silu"
checks=$((checks + 1)) # the layer's name in its files: two layers, two sets of files
[ -f "$dir/simple-mlp/1x4x8x12_model.layers.0.mlp_bf16_cold_eager.json" ] || { fails=$((fails + 1)); echo "FAIL: simple-mlp --weights: the layer in the file name"; }
check "simple-mlp --weights, --prefix with its dot" 0 "$bin" simple-mlp --out "$dir" --weights "$dir/hf" --prefix model.layers.0.mlp. --batch 1 --seq 4 --device cpu
# RANK left in the environment (a cluster's shell) does not make a one-device run distributed
check "RANK without --tp" 0 env RANK=0 WORLD_SIZE=1 "$bin" simple-mlp --out "$dir" --batch 1 --seq 4 --dim 32 --hidden 48 --device cpu
check "kernels-mlp --weights, FP8" 0 "$bin" kernels-mlp --out "$dir" --weights "$dir/fp8" --prefix model.layers.0.mlp --batch 1 --seq 4 --device cpu --variant gated
contains "kernels-mlp --weights, FP8: the file's sizes" "1x4x8x12"
check "--weights with --dim" 2 "$bin" simple-mlp --out "$dir" --weights "$dir/hf" --prefix model.layers.0.mlp --dim 16
check "--weights without --prefix" 2 "$bin" simple-mlp --out "$dir" --weights "$dir/hf"
check "tour --threads is checked" 2 "$bin" tour --out "$dir" --threads 0
check "tour" 0 "$bin" tour --out "$dir"
contains "tour table" "what changed"
contains "tour mlp note" "batch 64 -> 8"
rm -rf "$dir"
echo "$checks passed, $fails failed" | sed "s/^$checks passed/$((checks - fails)) passed/"
[ "$fails" = 0 ]
