#!/bin/sh
# test_gloo.sh -- the Gloo side of scripts/compare-mpi.sh -B gloo: builds
# scripts/gloo-coll-bench.cc against Debian's libgloo, runs it under flxrun on
# 2 and 3 ranks (every Gloo algorithm in both pair modes, each checked against
# exact sums), its bad input, and one short comparison end to end.
set -u
top=${abs_top_builddir:-.}
src=${abs_top_srcdir:-.}
fail() { echo "FAIL: $*"; exit 1; }
command -v g++ >/dev/null 2>&1 || { echo "SKIP: g++ not installed"; exit 77; }
[ -r /usr/include/gloo/allreduce.h ] || { echo "SKIP: Gloo not installed (apt-get install libgloo-dev)"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++17 -o "$tmp/gloo-coll-bench" "$src/scripts/gloo-coll-bench.cc" -lgloo -lpthread \
    >"$tmp/build.log" 2>&1 || fail "gloo-coll-bench does not build: $(cat "$tmp/build.log")"

# run N COLL OPTS...: one run with a fresh rendezvous directory; its output in $out
run=0
run() {
    n=$1
    shift
    run=$((run + 1))
    mkdir "$tmp/store$run"
    out=$(GLOO_BENCH_STORE="$tmp/store$run" timeout 300 "$top/flxrun" -n "$n" \
          "$tmp/gloo-coll-bench" "$@" 2>&1)
}

# 4 B .. 256 KiB by 4: 9 sizes for the allreduce; the allgather's 4 B is
# below one float per rank (no row)
for n in 2 3; do
    for coll in allreduce allgather; do
        run "$n" "$coll" -b 4 -e 256k -f 4 -n 3 -w 1 -c 1 || fail "$coll on $n ranks: $out"
        echo "$out" | grep -q "nRanks $n net gloo-tcp" || fail "$coll on $n ranks: header: $out"
        echo "$out" | grep -q "Out of bounds values : 0 OK" || fail "$coll on $n ranks: wrong results: $out"
        # every row: both #wrong columns 0, and the fastest algorithm named
        rows=$(echo "$out" | sed 's/^\[[0-9]*\] //' | awk '
            $1 ~ /^[0-9]+$/ && NF == 17 && $9 == 0 && $13 == 0 &&
            $17 ~ /^(ring|bcube|hd|ring-chunked|ring-legacy)(\+sync)?$/ { k++ } END { print k + 0 }')
        want=9
        [ "$coll" = allgather ] && want=8
        [ "$rows" -eq "$want" ] || fail "$coll on $n ranks: $rows good rows, not $want: $out"
    done
done
echo "PASS: gloo-coll-bench, allreduce and allgather on 2 and 3 ranks, every algorithm checked"

# sync mode stops at 2 x min(net.core.wmem_max, 32 MiB): above it nothing runs
# in sync mode (a blocking send larger than the socket takes can meet its
# partner's); at it, halving-doubling's first message (half) runs, from cold
wmem=$(cat /proc/sys/net/core/wmem_max)
[ "$wmem" -lt 33554432 ] || wmem=33554432
cap=$((2 * wmem))
run 2 allreduce -a hd -m sync -b $cap -e $cap -n 2 -w 1 || fail "hd in sync mode at the cap: $out"
[ "$(echo "$out" | grep -c " hd+sync$")" -eq 1 ] || fail "hd in sync mode at the cap: rows: $out"
run 2 allreduce -a hd -m sync -b $((2 * cap)) -e $((2 * cap)) -n 1 -w 0 || fail "above the sync cap: $out"
echo "$out" | grep -q "# sync mode up to $cap B" || fail "sync cap not in the header: $out"
echo "$out" | grep -q "$((2 * cap)) B: no algorithm to run (sync mode only up to $cap B)" ||
    fail "hd in sync mode ran above the cap: $out"
echo "$out" | sed 's/^\[[0-9]*\] //' | grep -qE '^ +[0-9]+ ' && fail "a row above the sync cap: $out"

# one algorithm, one mode: its name in every row
run 2 allreduce -a hd -m sync -b 4k -e 64k -f 4 -n 3 -w 1 || fail "hd in sync mode: $out"
[ "$(echo "$out" | grep -c ' hd+sync$')" -eq 3 ] || fail "hd in sync mode: rows: $out"
run 2 allgather -a ring -m async -b 4k -e 4k -n 3 -w 1 || fail "ring allgather: $out"
[ "$(echo "$out" | grep -c ' ring$')" -eq 1 ] || fail "ring allgather: rows: $out"

# bad input: an error naming it, exit 2, nothing run
run 2 allgather -a bcube -b 4 -e 4 && fail "bcube allgather accepted: $out"
echo "$out" | grep -q "Gloo has no bcube allgather" || fail "bcube allgather: message: $out"
run 2 allreduce -a ring -m sync -b 4 -e 4 && fail "ring in sync mode accepted: $out"
echo "$out" | grep -q "Gloo has no ring allreduce in sync mode" || fail "ring in sync mode: message: $out"
run 2 allreduce -m never -b 4 -e 4 && fail "-m never accepted: $out"
echo "$out" | grep -q "invalid value 'never' for -m" || fail "-m never: message: $out"
run 2 allreduce -b 4 -e 3g && fail "-e 3g accepted: $out"
echo "$out" | grep -q "maxbytes above 2147483647" || fail "-e 3g: message: $out"
out=$(env -u GLOO_BENCH_STORE "$top/flxrun" -n 1 "$tmp/gloo-coll-bench" allreduce 2>&1) &&
    fail "no rendezvous directory accepted: $out"
echo "$out" | grep -q "no rendezvous directory" || fail "no rendezvous directory: message: $out"
out=$(env -u FLX_RANK -u FLX_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID \
      "$tmp/gloo-coll-bench" allreduce 2>&1) && fail "no rank accepted: $out"
echo "$out" | grep -q "no rank" || fail "no rank: message: $out"
echo "PASS: gloo-coll-bench's bad input"

# the comparison end to end: both sides run, the table names Gloo
out=$(bash "$src/scripts/compare-mpi.sh" -B gloo -r 1 -N 2 -b 1k -e 8k -n 3 -w 1 -k "$tmp/keep" "$top" 2>&1) ||
    fail "compare-mpi.sh -B gloo: $out"
echo "$out" | grep -q "flexcoll (us) *Gloo (us) *Gloo/flx" || fail "compare-mpi.sh -B gloo: table: $out"
[ "$(echo "$out" | grep -c 'flexcoll behind at : [0-9]* of 4 sizes')" -eq 2 ] ||
    fail "compare-mpi.sh -B gloo: 4 sizes in each table: $out"
[ "$(awk '$1 == "gloo" && NF == 10 && $10 ~ /^(ring|bcube|hd|ring-chunked|ring-legacy)(\+sync)?$/' \
       "$tmp/keep/results.txt" | wc -l)" -eq 8 ] ||
    fail "compare-mpi.sh -B gloo: results.txt: $(cat "$tmp/keep/results.txt")"
# the core-to-core round trip beside each pair: one row per collective's sweep,
# a number where two CPUs may be used (n/a otherwise), and its median in the tables
[ "$(echo "$out" | grep -c 'size (B).*c2c ns')" -eq 2 ] || fail "compare-mpi.sh: no c2c column: $out"
if [ "$(nproc)" -ge 2 ]; then
    [ "$(awk 'NF == 5 && $4 == "all" && $5 ~ /^[0-9]+$/ && $5 > 0' "$tmp/keep/c2c.txt" | wc -l)" -eq 2 ] ||
        fail "compare-mpi.sh: c2c.txt: $(cat "$tmp/keep/c2c.txt")"
    [ "$(echo "$out" | grep -c 'core-to-core       : lowest round trip [0-9]* ns; cores far (over [0-9]* ns) in [0-4] of 4 flexcoll results')" -eq 2 ] ||
        fail "compare-mpi.sh: core-to-core line: $out"
fi
echo "PASS: compare-mpi.sh records the core-to-core round trip"
bash "$src/scripts/compare-mpi.sh" -B nccl -R "$tmp/keep/results.txt" >/dev/null 2>&1 &&
    fail "compare-mpi.sh -B nccl accepted"
bash "$src/scripts/compare-mpi.sh" -G "-a hd" -R "$tmp/keep/results.txt" >/dev/null 2>&1 &&
    fail "compare-mpi.sh -G without -B gloo accepted"
# the kept rows report again, labelled by their baseline
out=$(bash "$src/scripts/compare-mpi.sh" -R "$tmp/keep/results.txt" 2>&1) || fail "compare-mpi.sh -R: $out"
echo "$out" | grep -q "Gloo/flexcoll" || fail "compare-mpi.sh -R on Gloo rows: $out"
echo "PASS: compare-mpi.sh -B gloo"

# core-latency itself: a round trip between two CPUs, its bad input refused
cc -O2 -pthread -o "$tmp/core-latency" "$src/scripts/core-latency.c" 2>"$tmp/cl.log" ||
    fail "core-latency does not build: $(cat "$tmp/cl.log")"
if [ "$(nproc)" -ge 2 ]; then
    out=$("$tmp/core-latency" -n 1000 -r 2 2>&1) || fail "core-latency -r 2: $out"
    echo "$out" | grep -Eq '^core-to-core round trip CPU [0-9]+ <-> CPU [0-9]+: [1-9][0-9]* ns \(1000 rounds\)$' ||
        fail "core-latency -r 2: output: $out"
    cpu=$(taskset -pc $$ 2>/dev/null | awk -F': ' '{ split($2, a, "[,-]"); print a[1] }')
    if [ -n "$cpu" ] && command -v taskset >/dev/null 2>&1; then
        out=$(taskset -c "$cpu" "$tmp/core-latency" 2>&1)
        [ $? -eq 77 ] || fail "core-latency on one CPU: not 77: $out"
        echo "$out" | grep -q "may use only CPU $cpu: nothing to measure" || fail "core-latency on one CPU: $out"
    fi
fi
# a CPU this process may not use (the last a cpu_set_t holds): one line, exit 1, for either side
last=$(($(getconf _NPROCESSORS_CONF) < 1024 ? 1023 : 0))
if [ "$last" -gt 0 ]; then
    for pair in "0 $last" "$last 0"; do
        # shellcheck disable=SC2086 # the words are the arguments
        out=$(timeout 20 "$tmp/core-latency" $pair 2>&1)
        [ $? -eq 1 ] || fail "core-latency $pair: not exit 1: $out"
        echo "$out" | grep -q "^core-latency: cannot run on CPU $last: " || fail "core-latency $pair: $out"
    done
fi
for bad in "-n 0" "-n x" "-r 1" "0 0" "1" "0 99999"; do
    # shellcheck disable=SC2086 # the words are the arguments
    out=$("$tmp/core-latency" $bad 2>&1)
    [ $? -eq 2 ] || fail "core-latency $bad: not a usage error: $out"
done
echo "PASS: core-latency"
