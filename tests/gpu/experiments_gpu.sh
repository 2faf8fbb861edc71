#!/bin/sh
# Every experiment on the GPU, and the invariants its trace must hold: kernels per step and
# their names (linfuse trace expect), then, in the JSON itself, no dropped records, every
# kernel's flow matched at both ends, every kernel's launch call nested inside the op whose
# External id the kernel carries, and kernel args as Kineto writes them.
# Usage: experiments_gpu.sh <linfuse binary> <work dir>   (run on a GPU machine)
set -u
bin="$1" work="$2"
rm -rf "$work"
mkdir -p "$work"
fails=0 checks=0
run() { # run "what" command...
    what="$1"
    shift
    checks=$((checks + 1))
    if ! out=$("$@" 2>&1); then
        fails=$((fails + 1))
        echo "FAIL: $what"
        echo "$out" | tail -8
    fi
}

run "matmul-add on cuda" "$bin" matmul-add --device cuda --out "$work"
run "linear on cuda" "$bin" linear --device cuda --out "$work"
run "simple-mlp on cuda" "$bin" simple-mlp --device cuda --out "$work"
run "kernels-mlp on cuda" "$bin" kernels-mlp --device cuda --out "$work"
run "kernels-mlp gated on cuda" "$bin" kernels-mlp --device cuda --variant gated --out "$work"
run "kernels-mlp gated, f16 (falls back)" "$bin" kernels-mlp --device cuda --variant gated --dtype f16 --out "$work"
run "kernels-mlp fp8 on cuda" "$bin" kernels-mlp --device cuda --variant fp8 --out "$work"
run "tour (auto picks the GPU)" "$bin" tour --out "$work/tour"
run "simple-mlp --compile (one CUDA graph)" "$bin" simple-mlp --device cuda --compile --out "$work/c"
run "simple-mlp --compile --gated" "$bin" simple-mlp --device cuda --compile --gated --out "$work/cg"
run "simple-mlp --compile --no-cuda-graph" "$bin" simple-mlp --device cuda --compile --no-cuda-graph --out "$work/cn"
run "matmul-add --compile" "$bin" matmul-add --device cuda --compile --out "$work/c"
run "linear --compile" "$bin" linear --device cuda --compile --out "$work/c"

ma=$(ls "$work"/matmul-add/*.json) lin=$(ls "$work"/linear/*.json) mlp=$(ls "$work"/simple-mlp/*.json)
kf=$(ls "$work"/kernels-mlp/*bf16*_kernels.json) kg=$(ls "$work"/kernels-mlp/*bf16*_gated.json)
kh=$(ls "$work"/kernels-mlp/*f16*_gated.json | grep -v bf16) k8=$(ls "$work"/kernels-mlp/*bf16*_fp8.json)
# matmul then add: a GEMM and an add kernel; the linear: one GEMM with the bias in its
# epilogue and nothing else; the MLP: three GEMMs, a GELU and a mul
run "matmul-add: 2 kernels" "$bin" trace expect "$ma" --kernels-per-step 2 --kernel 'add'
run "linear: 1 kernel, bias epilogue" "$bin" trace expect "$lin" --kernels-per-step 1 --kernel 'bias' --no-kernel 'add_op'
run "simple-mlp: 5 kernels" "$bin" trace expect "$mlp" --kernels-per-step 5 --kernel 'gelu' --kernel 'mul'
# kernels-mlp: the hand-fused middle (4 kernels, no separate gelu or mul); gated: the Hopper
# kernel and down's GEMM (2); f16 has no gated kernel: one GEMM over [Wg; Wu] + the fused middle
run "kernels-mlp: 4 kernels" "$bin" trace expect "$kf" --kernels-per-step 4 --kernel 'act_mul_kernel' --no-kernel 'flat_kernel'
run "gated: 2 kernels" "$bin" trace expect "$kg" --kernels-per-step 2 --kernel 'gated_gemm_bf16_gelu_tanh' --no-kernel 'act_mul'
run "gated f16 fallback: 3 kernels" "$bin" trace expect "$kh" --kernels-per-step 3 --kernel 'act_mul_kernel'
run "gated f16 fallback: the trace says why" grep -q 'lf::mm_gated fallback (cuda gemm: the gated kernel takes bf16 or scaled f8e4m3 operands' "$kh"
# fp8: x quantized per token, the gated kernel's e4m3 form writing h in e4m3 blocks itself,
# cuBLASLt's block-scaled FP8 down GEMM (3); no separate quantization of h
run "fp8: 3 kernels, the e4m3 gated kernel writing e4m3" "$bin" trace expect "$k8" --kernels-per-step 3 --kernel 'gated_gemm_f8e4m3_gelu_tanh_128x256_to_f8e4m3' --no-kernel 'act_mul'
run "fp8: x's quantization, none of h's" "$bin" trace expect "$k8" --kernels-per-step 3 --kernel 'quantize_fp8_rowwise' --no-kernel 'quantize_fp8_1x128'
run "fp8: no fallback note" sh -c "! grep -q 'fp8 variant runs gated bf16' '$k8'"

# compiled: 3 GEMMs + the generated gelu*mul (4), gated 2, matmul-add one GEMM reading the bias
# as C, linear eager's own kernel; kernels from a graph launch still counted per step
cm=$(ls "$work"/c/simple-mlp/*.json) cg=$(ls "$work"/cg/simple-mlp/*.json) cn=$(ls "$work"/cn/simple-mlp/*.json)
cma=$(ls "$work"/c/matmul-add/*.json) cl=$(ls "$work"/c/linear/*.json)
run "compiled mlp: 4 kernels" "$bin" trace expect "$cm" --kernels-per-step 4 --kernel 'lf_poi_fused_gelu_mul_0' --no-kernel 'flat_kernel'
run "compiled mlp, gated: 2 kernels" "$bin" trace expect "$cg" --kernels-per-step 2 --kernel 'gated_gemm'
run "compiled mlp, no graph: 4 kernels" "$bin" trace expect "$cn" --kernels-per-step 4 --kernel 'lf_poi_fused_gelu_mul_0'
run "compiled matmul-add: 1 kernel" "$bin" trace expect "$cma" --kernels-per-step 1 --no-kernel 'add_op' --no-kernel 'copy'
run "compiled linear: 1 kernel, the bias epilogue" "$bin" trace expect "$cl" --kernels-per-step 1 --kernel 'bias'
run "compiled mlp: one graph launch per step" grep -q 'cudaGraphLaunch' "$cm"
# every kernel a graph replays leads to the lf::cuda_graph_replay op that launched it (by
# correlation), so the table's device time lands on that op and the compiled region above it; and
# each carries the External id of the op call that made it at capture (a gpu_user_annotation span
# over it), so the compiled table has the eager forward's op rows with their kernels' time
for f in "$cm" "$cg" "$cma" "$cl"; do
    checks=$((checks + 1))
    if ! "$bin" trace table "$f" --format json | python3 -c '
import json, sys
t = json.load(sys.stdin)
total = t["self_device_total_us"]
rows = {r["name"]: r for r in t["rows"]}
rep = rows.get("lf::cuda_graph_replay")
assert rep and total > 0, "no lf::cuda_graph_replay row, or no device time"
assert abs(rep["device_total_us"] - total) <= 1e-3 * total, (rep["device_total_us"], total)
reg = [r for n, r in rows.items() if n.startswith("Compiled Region")]
assert reg and abs(reg[0]["device_total_us"] - total) <= 1e-3 * total, "the compiled region holds it too"
ops = [n for n, r in rows.items() if n.startswith("lf::") and n not in ("lf::cuda_graph_replay", "lf::guard_check") and r["device_total_us"] > 0]
assert ops, "no op of the forward carries device time: %s" % sorted(rows)
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = {e["args"]["External id"] for e in ev if e.get("cat") == "gpu_user_annotation"}
ks = [e for e in ev if e.get("cat") == "kernel"]
assert ks and all(e["args"].get("External id") in spans for e in ks), "a graph kernel under no op span"
for n in ops:
    assert rows[n]["device_total_us"] <= total * (1 + 1e-3), (n, rows[n]["device_total_us"], total)
' "$f"; then
        fails=$((fails + 1))
        echo "FAIL: graph kernels not attributed to their ops in $f"
    fi
done
# the graph launch nests in its compiled region: no row of any compiled table has a negative self time
for f in "$cm" "$cg" "$cn" "$cma" "$cl"; do
    checks=$((checks + 1))
    if "$bin" trace table "$f" | grep -qE ' -[0-9]+\.[0-9]+(%|us)'; then
        fails=$((fails + 1))
        echo "FAIL: negative self time in the table of $f"
        "$bin" trace table "$f" | grep -E ' -[0-9]' | head -3
    fi
done

# GEMM plans chosen by measurement: the first run times cuBLASLt's candidates and writes the
# plan file, a second reads it, a corrupt file is ignored with a warning and rewritten, and with
# LINFUSE_GEMM_AUTOTUNE=0 nothing is timed or written
xdg="$work/xdg"
rm -rf "$xdg"
run "autotune: first run" env XDG_CACHE_HOME="$xdg" "$bin" bench cuda --case linear_1024x32x64 --reps 2
plans=$(ls "$xdg"/linfuse/gemm-plans/*.bin 2>/dev/null | head -1)
run "autotune: a plan file written" test -s "$plans"
run "autotune: the file's magic" sh -c "head -c 7 '$plans' | grep -q LFGEMM1"
cp "$plans" "$work/plans.before"
run "autotune: second run" env XDG_CACHE_HOME="$xdg" "$bin" bench cuda --case linear_1024x32x64 --reps 2
run "autotune: the plans read back, not timed again" cmp "$plans" "$work/plans.before"
printf 'LFGEMM1\n\005\000\000\000abc' >"$plans"
checks=$((checks + 1))
out=$(env XDG_CACHE_HOME="$xdg" "$bin" bench cuda --case linear_1024x32x64 --reps 2 2>&1)
case "$out" in
*"ignoring the GEMM plan cache"*"timed again"*) ;;
*) fails=$((fails + 1)); echo "FAIL: a corrupt plan file is not reported"; echo "$out" | tail -3 ;;
esac
# timed again, the winners may differ; the file holds as many plans of the same sizes as before
run "autotune: a corrupt file rewritten whole" sh -c "head -c 7 '$plans' | grep -q LFGEMM1 && [ \$(wc -c <'$plans') = \$(wc -c <'$work/plans.before') ]"
rm -rf "$xdg"
run "autotune off: runs" env XDG_CACHE_HOME="$xdg" LINFUSE_GEMM_AUTOTUNE=0 "$bin" bench cuda --case linear_1024x32x64 --reps 2
run "autotune off: nothing written" sh -c "! ls '$xdg'/linfuse/gemm-plans/*.bin >/dev/null 2>&1"

# tensor parallel over two GPUs (when there are two): one thread per GPU, and one process per
# GPU under torchrun; each rank's trace: its kernels plus one NCCL kernel per all-reduce (per
# chunk with --chunks), distributedInfo, record_param_comms with the collective's arguments
tpfiles=""
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -ge 2 ]; then
    run "simple-mlp --tp 2 --chunks 1" "$bin" simple-mlp --tp 2 --chunks 1 --out "$work/tp"
    run "simple-mlp --tp 2 --chunks 2" "$bin" simple-mlp --tp 2 --chunks 2 --out "$work/tpc"
    run "kernels-mlp gated --tp 2 --chunks 1" "$bin" kernels-mlp --variant gated --tp 2 --chunks 1 --out "$work/tp"
    run "simple-mlp --tp 2 --compile" "$bin" simple-mlp --tp 2 --compile --out "$work/tpg"
    run "simple-mlp under torchrun" env NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc-per-node 2 \
        --no-python "$bin" simple-mlp --tp 2 --chunks 1 --out "$work/tr"
    for r in 0 1; do
        e="$work/tp/simple-mlp/64x128x768x3072_bf16_cold_eager_rank$r.json"
        c="$work/tpc/simple-mlp/64x128x768x3072_bf16_cold_eager_rank$r.json"
        g="$work/tp/kernels-mlp/64x128x768x3072_bf16_cold_gated_rank$r.json"
        k="$work/tpg/simple-mlp/64x128x768x3072_bf16_cold_compile_rank$r.json"
        t="$work/tr/simple-mlp/64x128x768x3072_bf16_cold_eager_rank$r.json"
        run "tp rank $r: 5 kernels + 1 all-reduce" "$bin" trace expect "$e" --kernels-per-step 6 --kernel 'ncclDevKernel_AllReduce'
        run "tp rank $r, 2 chunks: 2 x (5 + 1)" "$bin" trace expect "$c" --kernels-per-step 12 --kernel 'ncclDevKernel_AllReduce'
        run "tp rank $r, gated: 2 + 1" "$bin" trace expect "$g" --kernels-per-step 3 --kernel 'gated_gemm' --kernel 'nccl'
        run "tp rank $r, compiled: 4 + 1 in one graph" "$bin" trace expect "$k" --kernels-per-step 5 --kernel 'lf_poi_fused_gelu_mul_0' --kernel 'nccl'
        run "tp rank $r under torchrun: 5 + 1" "$bin" trace expect "$t" --kernels-per-step 6 --kernel 'ncclDevKernel_AllReduce'
        tpfiles="$tpfiles $e $c $g $t"
        for f in "$e" "$t"; do
            checks=$((checks + 1))
            python3 - "$f" "$r" <<'PY' || { fails=$((fails + 1)); echo "FAIL: rank $r's distributed facts in $f"; }
import json, sys
d = json.load(open(sys.argv[1]))
r = int(sys.argv[2])
di = d["distributedInfo"]
assert di["rank"] == r and di["world_size"] == 2 and di["backend"] == "nccl" and di["nccl_version"].startswith("2."), di
rpc = [e for e in d["traceEvents"] if e.get("name") == "record_param_comms"]
assert rpc and all(e["args"]["Collective name"] == "allreduce" and e["args"]["Group size"] == 2 and e["args"]["Rank"] == r
                   and e["args"]["In msg nelems"] == 8192 * 768 for e in rpc), rpc[:1]
k = [e for e in d["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
assert k and all(e["args"].get("Collective name") == "allreduce" and e["args"]["device"] == r for e in k), k[:1]
print("rank %d: distributedInfo, %d record_param_comms, %d NCCL kernels on cuda:%d" % (r, len(rpc), len(k), r))
PY
        done
    done
    run "merge the torchrun ranks" "$bin" trace merge "$work/tr/simple-mlp/64x128x768x3072_bf16_cold_eager_rank0.json" \
        "$work/tr/simple-mlp/64x128x768x3072_bf16_cold_eager_rank1.json" -o "$work/tr/merged.json"
    run "summary of the merged ranks" sh -c "\"$bin\" trace summary \"$work/tr/merged.json\" | grep -q 'rank=1 kernels/step=6'"
else
    echo "experiments_gpu: $gpus GPU here; the tensor-parallel checks need 2"
fi

for f in "$ma" "$lin" "$mlp" "$kf" "$kg" $tpfiles; do
    checks=$((checks + 1))
    if ! python3 - "$f" <<'EOF'; then
import json, sys
path = sys.argv[1]
d = json.load(open(path))
ev = d["traceEvents"]
bad = []
if d.get("linfuse_dropped_events", 0):
    bad.append("%d dropped records" % d["linfuse_dropped_events"])
if not d.get("deviceProperties"):
    bad.append("no deviceProperties")
kernels = [e for e in ev if e.get("cat") == "kernel"]
starts = {e["id"]: e for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
ends = {e["id"]: e for e in ev if e.get("ph") == "f" and e.get("cat") == "ac2g"}
launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
ops = [e for e in ev if e.get("cat") == "cpu_op"]
if not kernels:
    bad.append("no kernels")
for k in kernels:
    a = k["args"]
    c = a.get("correlation")
    for key in ("grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
                "est. achieved occupancy %", "External id"):
        if key not in a:
            bad.append("%s lacks %r" % (k["name"][:40], key))
    if not 0 <= a.get("est. achieved occupancy %", -1) <= 100:
        bad.append("%s occupancy %r" % (k["name"][:40], a.get("est. achieved occupancy %")))
    if c not in starts or c not in ends:
        bad.append("kernel %s: flow %s not matched" % (k["name"][:40], c))
        continue
    l = launches.get(c)
    if l is None:
        bad.append("kernel %s: no launch call" % k["name"][:40])
        continue
    if not (l["ts"] <= k["ts"]):
        bad.append("kernel %s starts before its launch" % k["name"][:40])
    owner = [o for o in ops if o["args"].get("External id") == a["External id"] and o["tid"] == l["tid"]
             and o["ts"] <= l["ts"] and l["ts"] + l["dur"] <= o["ts"] + o["dur"] + 0.002]
    if not owner:
        bad.append("kernel %s: launch not nested in its op" % k["name"][:40])
if bad:
    print("FAIL: %s:\n  %s" % (path, "\n  ".join(sorted(set(bad))[:12])))
    sys.exit(1)
print("%s: %d kernels, flows matched, launches nested, no drops" % (path.split("/")[-2], len(kernels)))
EOF
        fails=$((fails + 1))
    fi
done

echo "experiments_gpu: $checks checks, $fails failed"
[ "$fails" = 0 ]
