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

check "no command" 2 "$bin"
check "unknown command" 2 "$bin" frobnicate
contains "unknown command" "unknown command 'frobnicate'"
check "help" 0 "$bin" help
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
check "demo runs" 0 "$bin" demo --batch 1 --seq 8 --dim 64 --hidden 96 --reps 2
contains "demo chain" "lf::linear([1x8x64], [96x64], None)"
contains "demo kernel" "-> kernel lf_cpu_gemm_bf16_"
contains "demo count" "kernels per forward: 5"
echo "$checks passed, $fails failed" | sed "s/^$checks passed/$((checks - fails)) passed/"
[ "$fails" = 0 ]
