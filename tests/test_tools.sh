#!/bin/sh
# test_tools.sh -- the user-facing programs end to end: flx-example under
# flxrun, flx-info, and flx-train's error for a missing data directory
# (test_train.sh trains).
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }

out=$("$top/flxrun" -n 3 "$top/flx-example" 2>&1) || fail "flx-example: $out"
[ "$(echo "$out" | grep -c 'sum = 6 (expected 6)')" -eq 3 ] || fail "flx-example output: $out"
# the tcp spin: 2 ms, but 50 us when the job's ranks here outnumber the cores
cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
out=$(FLX_LOG_LEVEL=info taskset -c "$cpu" "$top/flxrun" -n 2 "$top/flx-example" 2>&1) ||
    fail "flx-example on one core: $out"
[ "$(echo "$out" | grep -c 'tcp: 2 ranks share 1 cores here: busy-poll 50 us (FLX_SPIN_SHARED), not 2 ms')" -eq 2 ] ||
    fail "2 ranks on 1 core kept the long spin: $out"
# ... FLX_SPIN_SHARED's, never more than FLX_SPIN
out=$(FLX_LOG_LEVEL=info FLX_SPIN_SHARED=300us taskset -c "$cpu" "$top/flxrun" -n 2 "$top/flx-example" 2>&1) ||
    fail "flx-example on one core, FLX_SPIN_SHARED=300us: $out"
[ "$(echo "$out" | grep -c 'tcp: 2 ranks share 1 cores here: busy-poll 300 us (FLX_SPIN_SHARED), not 2 ms')" -eq 2 ] ||
    fail "FLX_SPIN_SHARED=300us: $out"
out=$(FLX_LOG_LEVEL=info FLX_SPIN_SHARED=300us FLX_SPIN=100us taskset -c "$cpu" "$top/flxrun" -n 2 "$top/flx-example" 2>&1) ||
    fail "flx-example on one core, FLX_SPIN=100us: $out"
echo "$out" | grep -q "busy-poll" && fail "FLX_SPIN 100 us below FLX_SPIN_SHARED was changed: $out"
out=$(FLX_SPIN_SHARED=fast "$top/flxrun" -n 1 "$top/flx-example" 2>&1) && fail "FLX_SPIN_SHARED=fast accepted: $out"
echo "$out" | grep -q "FLX_SPIN_SHARED" || fail "FLX_SPIN_SHARED=fast: no line names it: $out"
out=$(FLX_LOG_LEVEL=info "$top/flxrun" -n 1 "$top/flx-example" 2>&1) || fail "flx-example, 1 rank: $out"
echo "$out" | grep -q "busy-poll 50 us" && fail "1 rank took the short spin: $out"
# ... counted over the union of the ranks' CPUs: bound to a core each by flxrun, the long
# spin; unbound and one more than the cores, or twice the CPUs by default (bound to the cores
# in turn where they divide them), the short one
ncpu=$(awk '/^Cpus_allowed_list/ { n = 0; k = split($2, r, ","); for (i = 1; i <= k; i++) {
           m = split(r[i], ab, "-"); n += m == 2 ? ab[2] - ab[1] + 1 : 1 } print n }' /proc/self/status)
if [ "$ncpu" -ge 2 ]; then
    out=$(FLX_LOG_LEVEL=info "$top/flxrun" -n 2 "$top/flx-example" 2>&1) || fail "flx-example, bound: $out"
    echo "$out" | grep -q "busy-poll 50 us" && fail "2 ranks bound to a core each took the short spin: $out"
fi
if [ "$ncpu" -le 15 ]; then
    n=$((ncpu + 1))
    out=$(FLX_LOG_LEVEL=info "$top/flxrun" --bind none -n "$n" "$top/flx-example" 2>&1) ||
        fail "flx-example, $n ranks on $ncpu cores: $out"
    [ "$(echo "$out" | grep -c "tcp: $n ranks share $ncpu cores here: busy-poll 50 us")" -eq "$n" ] ||
        fail "$n ranks on $ncpu cores kept the long spin: $out"
    echo "$out" | grep -q "CPUs apart" && fail "unbound ranks found others on CPUs apart: $out"
    # twice the CPUs, flxrun's default: bound to the cores in turn where they divide the ranks
    n=$((2 * ncpu))
    out=$(FLX_LOG_LEVEL=info "$top/flxrun" -n "$n" "$top/flx-example" 2>&1) ||
        fail "flx-example, $n ranks on $ncpu cores, default binding: $out"
    [ "$(echo "$out" | grep -c "tcp: $n ranks share $ncpu cores here: busy-poll 50 us")" -eq "$n" ] ||
        fail "$n ranks sharing $ncpu cores (default binding) kept the long spin: $out"
    # ... but FLX_SPIN while every rank awaited runs on another core: n / K ranks a core
    ncore=$("$top/flx-info" | sed -n 's/^# cpus: .*: [0-9]* CPUs\{0,1\} in \([0-9]*\) cores\{0,1\} .*/\1/p')
    [ -n "$ncore" ] || fail "flx-info names no core count"
    apart=$((n - n / ncore)) want=0
    [ "$apart" -gt 0 ] && [ $((n % ncore)) -eq 0 ] && want=$n # else flxrun leaves them unbound
    [ "$(echo "$out" | grep -c "tcp: busy-poll 2 ms (FLX_SPIN) while every rank awaited runs on CPUs apart from this rank's: $apart of the $((n - 1)) others")" -eq "$want" ] ||
        fail "$n ranks bound in turn to $ncore cores: not $want lines of $apart ranks on CPUs apart: $out"
fi

"$top/flx-info" | grep -q "build features: tcp" || fail "flx-info has no feature line"
"$top/flx-info" | grep -q "^# controller learning: a rank stopped (Ctrl-Z, SIGSTOP) for over 1 s, .*inside a sync, that sync's times are not learnt; between two syncs (computing), neither" ||
    fail "flx-info does not say that the controller leaves out steps a rank was stopped in"
"$top/flx-info" | grep -q "^# flex defaults: weight 0.6, gain floor 0.45" ||
    fail "flx-info does not show flex's defaults"
"$top/flx-info" | grep -q "^# flx-train --policy flex: local steps" ||
    fail "flx-info does not say that flx-train's flex takes local steps"
"$top/flx-info" | grep -q "^# flx-train model files: --save FILE writes the trained model" ||
    fail "flx-info does not list flx-train's model files"
"$top/flx-info" | grep -q "^# transports: tcp (2 connections per pair of ranks" ||
    fail "flx-info does not show the tcp connections per pair"
"$top/flx-info" | grep -q "1 where a rank's open-file limit holds only 1" ||
    fail "flx-info does not say what FLX_TCP_SOCKETS=auto does"
FLX_TCP_SOCKETS=1 "$top/flx-info" | grep -q "^# transports: tcp (1 connection per pair of ranks" ||
    fail "flx-info does not follow FLX_TCP_SOCKETS=1"
FLX_TCP_SOCKETS=2 "$top/flx-info" | grep -q "^# transports: tcp (2 connections per pair of ranks, FLX" ||
    fail "flx-info does not follow FLX_TCP_SOCKETS=2"
"$top/flx-info" | grep -q "long messages on the faster of the two, measured per pair while running, FLX_TCP_LANE=auto)" ||
    fail "flx-info does not say what FLX_TCP_LANE=auto does"
FLX_SPIN=10us "$top/flx-info" | grep -q "^# tcp waiting: busy-polls 10 us (FLX_SPIN.* awaited from one peer only and nothing to write, it spins on recv() alone$" ||
    fail "flx-info does not say how the tcp backend waits"
"$top/flx-info" | grep -q "^# tcp waiting: .*where the job's ranks outnumber their CPUs, unless every rank awaited runs on CPUs apart" ||
    fail "flx-info does not say when ranks that share cores spin the full time"
FLX_TCP_WRITE_MAX=64k "$top/flx-info" | grep -q "^# tcp writes: a long message in sendmsg() calls of at most 64 KiB (FLX_TCP_WRITE_MAX), rounded down to whole segments" ||
    fail "flx-info does not show how long messages are written"
FLX_TCP_WRITE_MAX=0 "$top/flx-info" | grep -q "^# tcp writes: a long message in sendmsg() calls of as much as the socket takes (FLX_TCP_WRITE_MAX=0)" ||
    fail "flx-info does not show FLX_TCP_WRITE_MAX=0"
"$top/flx-info" | grep -q "^# tcp unsent data: a socket takes more of a message only while under 16 KiB of what it holds is not yet sent (FLX_TCP_NOTSENT_LOWAT)" ||
    fail "flx-info does not show FLX_TCP_NOTSENT_LOWAT's default"
FLX_TCP_NOTSENT_LOWAT=0 "$top/flx-info" | grep -q "^# tcp unsent data: as much as the socket buffer holds (FLX_TCP_NOTSENT_LOWAT=0" ||
    fail "flx-info does not show FLX_TCP_NOTSENT_LOWAT=0"
# the CPUs flxrun places ranks on: this process's list and count, as the kernel has them
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # (nproc obeys OMP_NUM_THREADS)
"$top/flx-info" | grep -q "^# cpus: $cpus: $ncpu CPUs\? in [0-9]* cores\? (at most [0-9]* threads\? a core) in [0-9]* packages\?; flxrun binds" ||
    fail "flx-info does not list this process's CPUs ($cpus, $ncpu) and their cores"
taskset -c "${cpus%%[,-]*}" "$top/flx-info" | grep -q "^# cpus: ${cpus%%[,-]*}: 1 CPU in 1 core (at most 1 thread a core) in 1 package;" ||
    fail "flx-info under taskset does not show the one CPU left"
# the out-of-place allgather streams its own block above this core's L2 (getconf; 1 MiB
# where it does not say), or never without AVX
if [ "$(uname -m)" = x86_64 ] && grep -qw avx /proc/cpuinfo; then
    l2=$(getconf LEVEL2_CACHE_SIZE 2>/dev/null || true)
    case $l2 in '' | *[!0-9]* | 0) l2=1048576 ;; esac
    "$top/flx-info" | grep -q "^# out-of-place allgather: .*streaming stores when the block is over $((l2 / 1024)) KiB (this core's L2 cache)" ||
        fail "flx-info does not give the streaming copy's threshold as this core's L2 ($l2 B)"
else
    "$top/flx-info" | grep -q "^# out-of-place allgather: .*no AVX streaming stores" ||
        fail "flx-info does not say that this CPU copies with memcpy"
fi
"$top/flx-info" | grep -q "reduce_scatter (ring; small on 4+ ranks: an allreduce, rd/tree/hd, where recursive doubling's fitted alpha and beta say so)" ||
    fail "flx-info does not say how the reduce-scatter is chosen"
# flx-reduce-scatter-perf: every dtype and op on 3 ranks, each result checked exactly
# (#wrong 0), and the algorithm of each call in its --csv
rs_csv=$(mktemp)
out=$("$top/flxrun" -n 3 "$top/flx-reduce-scatter-perf" -b 48 -e 196608 -f 16 -n 1 -w 0 -d all \
    -o all --csv "$rs_csv" 2>&1) || fail "flx-reduce-scatter-perf: $out"
echo "$out" | grep -q "Out of bounds values : 0 OK" || fail "flx-reduce-scatter-perf results: $out"
[ "$(grep -c '^flx-reduce-scatter-perf,reduce_scatter,3,tcp,.*,ring,' "$rs_csv")" -eq 240 ] ||
    fail "flx-reduce-scatter-perf --csv: not 4 sizes x 6 types x 5 ops x 2 placements by the ring: $(cat "$rs_csv")"
rm -f "$rs_csv"
# an argument error every rank finds is said once, by rank 0, on 4 ranks too:
# the quiet ranks wait for it (exiting at once, one made flxrun stop rank 0
# before it wrote); a quiet rank alone says it itself, PERF_QUIET_WAIT_S later
for i in 1 2 3; do
    out=$("$top/flxrun" -n 4 "$top/flx-reduce-scatter-perf" -a ring -b 8 -e 8 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [ "$(echo "$out" | grep -c "flx-reduce-scatter-perf: -a does not apply")" -eq 1 ] &&
        echo "$out" | grep -q "^\[0\] flx-reduce-scatter-perf: -a does not apply" ||
        fail "flx-reduce-scatter-perf -a ring on 4 ranks: exit $rc: $out"
    out=$("$top/flxrun" -n 4 "$top/flx-allreduce-perf" -b 1Q 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [ "$(echo "$out" | grep -c "invalid value '1Q' for -b")" -eq 1 ] ||
        fail "flx-allreduce-perf -b 1Q on 4 ranks: exit $rc: $out"
    out=$("$top/flxrun" -n 4 "$top/flx-sparse-perf" -m foo 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [ "$(echo "$out" | grep -c "flx-sparse-perf: -m foo: not a list of methods")" -eq 1 ] ||
        fail "flx-sparse-perf -m foo on 4 ranks: exit $rc: $out"
done
out=$(FLX_RANK=1 FLX_SIZE=2 "$top/flx-allreduce-perf" -zq 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "^flx-allreduce-perf: invalid value 'q' for -z" ||
    fail "flx-allreduce-perf -zq as a lone rank 1: exit $rc: $out"
out=$(FLX_RANK=1 FLX_SIZE=2 "$top/flx-sparse-perf" -b 1Q 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "^flx-sparse-perf: -b 1Q: not a size" ||
    fail "flx-sparse-perf -b 1Q as a lone rank 1: exit $rc: $out"
FLX_TCP_LANE=shared "$top/flx-info" | grep -q "long messages on the first, FLX_TCP_LANE=shared)" ||
    fail "flx-info does not follow FLX_TCP_LANE=shared"
FLX_TCP_SOCKETS=1 FLX_TCP_LANE=shared "$top/flx-info" | grep -q "FLX_TCP_LANE" &&
    fail "flx-info names FLX_TCP_LANE with one connection per pair"
# FLX_TCP_LANE=auto: the higher rank of a pair measures both connections for its long messages
# (each tried within the first periods, then the other now and then), and says so at debug level
out=$(FLX_LOG_LEVEL=debug FLX_LOG_SUBSYS=net "$top/flxrun" -n 2 "$top/flx-allgather-perf" \
    -b 4M -e 4M -n 40 -w 2 2>&1) || fail "flx-allgather-perf for the lanes: $out"
echo "$out" | sed -n 's/.*long messages to rank 0 (FLX_TCP_LANE=auto): \([0-9]*\) periods measured on the second connection, \([0-9]*\) on the first;.*/\1 \2/p' |
    awk '{ found = 1; ok = $1 >= 2 && $2 >= 2 && $1 + $2 >= 40 } END { exit !(found && ok) }' ||
    fail "FLX_TCP_LANE=auto: rank 1 did not measure both connections over 40 periods: $(echo "$out" | grep periods)"
echo "$out" | grep "long messages to rank 0" | grep -q " 512K [0-9.]*/[0-9.]*" ||
    fail "FLX_TCP_LANE=auto: no estimate for the 512 KiB class (the chunks): $(echo "$out" | grep periods)"
# the first connections get 4 MiB buffers only where the kernel grants that much
wmax=$(cat /proc/sys/net/core/wmem_max) rmax=$(cat /proc/sys/net/core/rmem_max)
if [ "$wmax" -ge 4194304 ] && [ "$rmax" -ge 4194304 ]; then want="gets 4 MiB socket buffers"
else want="keeps autotuned socket buffers: net.core.wmem_max/rmem_max allow"; fi
echo "$out" | grep -q "first connection of each pair $want" ||
    fail "wmem_max $wmax, rmem_max $rmax: no line '$want': $(echo "$out" | grep "first connection")"
out=$(FLX_TCP_LANE=split FLX_LOG_LEVEL=debug FLX_LOG_SUBSYS=net "$top/flxrun" -n 2 \
    "$top/flx-allgather-perf" -b 4M -e 4M -n 4 2>&1) || fail "flx-allgather-perf, split: $out"
echo "$out" | grep -q "periods" && fail "FLX_TCP_LANE=split measured lanes: $(echo "$out" | grep periods)"
for knob in FLX_TIMEOUT FLX_ALGO FLX_JOB_SECRET FLX_ROOT FLX_CHUNK_SIZE FLX_LOG_LEVEL FLX_TCP_SOCKETS FLX_TCP_LANE; do
    "$top/flx-info" -c | grep -q "^$knob=" || fail "flx-info -c does not list $knob"
done
FLX_TIMEOUT=never "$top/flx-info" -c >/dev/null 2>&1 && fail "flx-info accepted FLX_TIMEOUT=never"

# every link measured, and the model is the worst of them
out=$("$top/flxrun" -n 3 "$top/flx-info" --calibrate 2>&1) || fail "flx-info --calibrate: $out"
echo "$out" | sed 's/^\[[0-9]*\] //' | awk '
    /# alpha/ { k = "a"; next } /# beta/ { k = "b"; next } /^#/ { k = ""; next }
    k != "" && $1 ~ /^[0-9]+$/ && NF == 4 { for (i = 2; i <= 4; i++) if ($i != "-") { n[k]++
        if (k == "a" && $i + 0 > amax) amax = $i + 0
        if (k == "b" && (bmin == "" || $i + 0 < bmin)) bmin = $i + 0 } }
    /model: alpha/ { ma = $3; mb = $6 }
    END { if (n["a"] != 6 || n["b"] != 6 || ma == "" || ma - amax > 0.001 || amax - ma > 0.001 ||
              mb - bmin > 0.0006 || bmin - mb > 0.0006 || bmin <= 0) exit 1 }' ||
    fail "flx-info --calibrate: matrices and model disagree: $out"
# each allgather algorithm's prediction, growing with size, and the pick: printed to 0.1 us,
# neighbouring sizes may show the same time where the fitted bandwidth is high (ring 441.9 at 12
# and at 4092 bytes in one CI run), so never lower than the size before and the largest above the
# smallest; on 3 ranks Bruck takes as many steps as the ring, so auto is the ring at every size
echo "$out" | sed 's/^\[[0-9]*\] //' | awk '
    /^# allgather, predicted/ { on = 1; next } /^#/ { on = 0 }
    on && $1 ~ /^[0-9]+$/ { rows++; if (rows == 1) { r1 = $2; b1 = $3 }
                            else if (!($2 >= pr && $3 >= pb)) bad = 1
                            if ($4 != "ring") bad = 1
                            pr = $2; pb = $3 }
    END { exit !(rows == 5 && !bad && pr > r1 && pb > b1) }' ||
    fail "flx-info --calibrate: allgather predictions: $out"
"$top/flx-info" --calibrate >/dev/null 2>&1 && fail "flx-info --calibrate ran without a job"

# compare-mpi.sh's report from kept results: median over the runs of the mean (column 6) or
# of the p50 (column 9), the ratio MPI / flexcoll, and the sizes where flexcoll is behind
src=${abs_top_srcdir:-.}
res=$(mktemp)
cat >"$res" <<'EOF_RES'
flexcoll allreduce 2 1 4096 10 0 0 9
mpi allreduce 2 1 4096 20 0 0 8
flexcoll allreduce 2 2 4096 30 0 0 9
mpi allreduce 2 2 4096 20 0 0 8
flexcoll allreduce 2 3 4096 12 0 0 9
mpi allreduce 2 3 4096 24 0 0 8
flexcoll allreduce 2 1 8192 40 0 0 40
mpi allreduce 2 1 8192 50 0 0 30
EOF_RES
# ... and, for each size behind, how often flexcoll was the faster of a pair (the runs paired by
# repetition) and the one-sided sign test's p: 16384 is slower in all 6 pairs (p = 1/64)
for rep in 1 2 3 4 5 6; do
    echo "flexcoll allreduce 2 $rep 16384 10 0 0 7" >>"$res"
    echo "mpi allreduce 2 $rep 16384 9 0 0 $((5 + rep))" >>"$res"
done
out=$(bash "$src/scripts/compare-mpi.sh" -R "$res" 2>&1) || fail "compare-mpi -R: $out"
echo "$out" | grep -q "^ *4096  *12.00  *20.00  *1.67 " || fail "compare-mpi -R medians: $out"
echo "$out" | grep -q "behind at : 1 of 3 sizes 16384 (0.90, faster in 0 of 6, p 0.02)$" ||
    fail "compare-mpi -R behind list: $out"
echo "$out" | grep -q "of them, clearly : 1 16384 (sign test" || fail "compare-mpi -R sign test: $out"
out=$(bash "$src/scripts/compare-mpi.sh" -s p50 -R "$res" 2>&1) || fail "compare-mpi -s p50: $out"
echo "$out" | grep -q "behind at : 2 of 3 sizes 4096 (0.89, faster in 0 of 3, p 0.12) 8192 (0.75, faster in 0 of 1, p 0.50)$" ||
    fail "compare-mpi -s p50 behind list: $out"
echo "$out" | grep -q "of them, clearly : 0 (sign test" || fail "compare-mpi -s p50 sign test: $out"
# a tie is neither side's: left out of the pairs (3 losses and a tie: p = 1/8, not 1/16)
for rep in 1 2 3 4; do
    echo "flexcoll allreduce 2 $rep 32768 10 0 0 10"
    echo "mpi allreduce 2 $rep 32768 $((rep < 4 ? 9 : 10)) 0 0 9"
done >"$res.tie"
out=$(bash "$src/scripts/compare-mpi.sh" -R "$res.tie" 2>&1) || fail "compare-mpi -R ties: $out"
echo "$out" | grep -q "behind at : 1 of 1 sizes 32768 (0.90, faster in 0 of 3, 1 tie, p 0.12)$" ||
    fail "compare-mpi -R: a tie counted as a pair: $out"
rm -f "$res.tie"
bash "$src/scripts/compare-mpi.sh" -s p99 -R "$res" >/dev/null 2>&1 && fail "compare-mpi -s p99 accepted"
# results kept before the p50 column existed: -s p50 is an error, not a table of n/a
cut -d' ' -f1-8 "$res" >"$res.old"
out=$(bash "$src/scripts/compare-mpi.sh" -s p50 -R "$res.old" 2>&1) && fail "compare-mpi -s p50 on 8 columns: $out"
echo "$out" | grep -q "no p50 column" || fail "compare-mpi -s p50 on 8 columns: $out"
bash "$src/scripts/compare-mpi.sh" -R "$res.old" >/dev/null 2>&1 || fail "compare-mpi -R on 8 columns"
rm -f "$res.old"
rm -f "$res"

# bench-select's table on loopback, both collectives: a row per size with a
# choice the collective has, its summary lines; the allgather has no tree or hd
bs=$(mktemp -d)
for c in allreduce allgather; do
    out=$(bash "$src/scripts/bench-select.sh" -c $c -n 2 -b 1k -e 8k -i 3 -w 1 -B "$top" -o "$bs" \
          loopback 2>&1) || fail "bench-select -c $c: $out"
    echo "$out" | awk -v c=$c '
        $1 ~ /^[0-9]+K$/ { rows++; if (!($7 == "ring" || $7 == "rd" ||
                                           (c == "allreduce" && ($7 == "tree" || $7 == "hd"))) ||
                                     (c == "allgather" && ($3 != "-" || $5 != "-")) ||
                                     (c == "allreduce" && !($5 > 0)) || !($9 > 0)) bad = 1 }
        /^# auto\/best: worst/ { s1 = 1 } /^# pick\/best/ { s2 = 1 }
        END { exit !(rows == 4 && !bad && s1 && s2) }' || fail "bench-select -c $c table: $out"
done
bash "$src/scripts/bench-select.sh" -c bcast loopback >/dev/null 2>&1 && fail "bench-select -c bcast accepted"
rm -rf "$bs"

out=$("$top/flx-train" --data /nonexistent/dir --epochs 1 2>&1) && fail "missing data accepted"
echo "$out" | grep -q "/nonexistent/dir/train-images-idx3-ubyte" || fail "error does not name the file: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "missing data: more than the one line naming the file: $out"
out=$("$top/flx-train" --synthetic --policy dense --ctl-log /tmp/never.csv 2>&1) &&
    fail "--ctl-log accepted with a policy that logs no decision"
echo "$out" | grep -q "ctl-log needs a policy the controller runs" || fail "--ctl-log with dense: $out"
# bad arguments: one line saying what is wrong, exit 2; --help shows each tool's own defaults
"$top/flx-info" extra >/dev/null 2>&1; [ $? -eq 2 ] || fail "flx-info accepted an extra argument"
for a in extra --bogus; do # one line, not the usage after it
    out=$("$top/flx-info" $a 2>&1)
    [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "flx-info $a: not one line: $out"
done
# a tool offers in --help only the flags it has a use for, and refuses -a where its call takes
# no algorithm (the broadcast took it and ran its own choice)
"$top/flx-bcast-perf" --help | grep -q -- "^  -a," && fail "flx-bcast-perf --help offers -a"
"$top/flx-reduce-scatter-perf" --help | grep -q -- "^  -[arz]," && fail "flx-reduce-scatter-perf --help offers -a, -r or -z"
"$top/flx-allgather-perf" --help | grep -q -- "^  -o," && fail "flx-allgather-perf --help offers -o"
out=$("$top/flx-bcast-perf" -a tree -e 64 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "^flx-bcast-perf: -a does not apply" || fail "flx-bcast-perf -a tree: exit $rc: $out"
out=$(FLX_SIZE=5000 "$top/flx-info" -c 2>&1) && fail "FLX_SIZE=5000 accepted"
echo "$out" | grep -q "expected an integer from 1 to 2048" || fail "FLX_SIZE=5000: no range: $out"
"$top/flx-reduce-perf" --help | grep -q "smallest size in bytes (8, 4k, 1M...; default 4k)" ||
    fail "flx-reduce-perf --help: wrong -b default"
"$top/flx-reduce-perf" --help | grep -q "largest size in bytes (default 256M)" ||
    fail "flx-reduce-perf --help: wrong -e default"
"$top/flx-allreduce-perf" --help | grep -q "largest size in bytes (default 64M)" ||
    fail "flx-allreduce-perf --help: wrong -e default"
for args in "-c 0|-c 0: not a list of at most" "-b 8M -e 4M|-b 8388608 is larger than -e 4194304" \
            "-m foo|unknown option '-m'" "-e 4G|-e 4294967296: at most 2^31 - 1 elements"; do
    out=$("$top/flx-topk-perf" ${args%%|*} 2>&1); rc=$?
    [ "$rc" -eq 2 ] && echo "$out" | grep -q "^flx-topk-perf: ${args#*|}" ||
        fail "flx-topk-perf ${args%%|*}: exit $rc: $out"
done
out=$("$top/flx-topk-perf" -b 1k -e 1k -n 1 -w 0 --csv /nonexistent-dir/x.csv 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "^flx-topk-perf: cannot write /nonexistent-dir/x.csv" ||
    fail "flx-topk-perf with an unwritable --csv: exit $rc: $out"
out=$("$top/flxrun" -n 1 "$top/flx-sparse-perf" -m foo 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "flx-sparse-perf: -m foo: not a list of methods" ||
    fail "flx-sparse-perf -m foo: exit $rc: $out"
# perf tools: a sweep with no size that holds one element per rank measures
# nothing, which is a usage error, not "OK"; flx-sparse-perf refuses an
# unwritable --csv on every rank and a compute time that is not finite
out=$("$top/flxrun" -n 2 "$top/flx-allgather-perf" -b 4 -e 4 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "flx-allgather-perf -b 4 -e 4 on 2 ranks: exit $rc: $out"
echo "$out" | grep -q "nothing measured" || fail "no reason for an empty sweep: $out"
# a missing FLX_SOCKET_IFNAME fails every rank at once, the root too (alone
# here: it waited for FLX_CONNECT_TIMEOUT before)
t0=$(date +%s)
out=$(FLX_RANK=0 FLX_SIZE=2 FLX_ROOT=127.0.0.1:$((20000 + $$ % 12000)) FLX_JOB_SECRET=s FLX_SOCKET_IFNAME=no-such-if0 \
      FLX_CONNECT_TIMEOUT=30s timeout 60 "$top/flx-example" 2>&1) &&
    fail "FLX_SOCKET_IFNAME=no-such-if0 accepted: $out"
[ $(($(date +%s) - t0)) -lt 10 ] || fail "a missing FLX_SOCKET_IFNAME took $(($(date +%s) - t0)) s"
echo "$out" | grep -q "FLX_SOCKET_IFNAME=no-such-if0: no such interface" ||
    fail "the missing interface is not named: $out"
# a malformed FLX_ROOT is refused at once, naming it
for bad in "127.0.0.1:+80|no valid port" "127.0.0.1: 80|no valid port" "127.0.0.1:0|no valid port" \
           "127.0.0.1|is not host:port" "[::1|is not \\[IPv6 address\\]:port" "::1:29400|an IPv6 address goes in brackets"; do
    root=${bad%%|*} why=${bad#*|}
    out=$(FLX_RANK=1 FLX_SIZE=2 FLX_ROOT=$root FLX_JOB_SECRET=s timeout 60 "$top/flx-example" 2>&1) &&
        fail "FLX_ROOT='$root' accepted: $out"
    echo "$out" | grep -qF "address '$root'" && echo "$out" | grep -q "$why" ||
        fail "FLX_ROOT='$root' is not refused with '$why': $out"
done
# two processes with one rank, and a rank with another FLX_SIZE: the root
# names the claim and where the first came from, the others say the root
# stopped the job; every process fails, none waits for FLX_CONNECT_TIMEOUT
dup=$(mktemp -d)
port=$((20000 + ($$ + 7) % 12000))
for r in 0 1 1; do
    FLX_RANK=$r FLX_SIZE=3 FLX_ROOT=127.0.0.1:$port FLX_JOB_SECRET=s FLX_CONNECT_TIMEOUT=20s \
        timeout 60 "$top/flx-example" >"$dup/$r.$(mktemp -u XXXX)" 2>&1 &
done
t0=$(date +%s)
wait
[ $(($(date +%s) - t0)) -lt 15 ] || fail "a rank claimed twice took $(($(date +%s) - t0)) s"
grep -q "sum =" "$dup"/* && fail "a job with rank 1 twice ran: $(cat "$dup"/*)"
grep -q "claims rank 1, which the process at 127.0.0.1:[0-9]* already holds: two processes claim the rank" "$dup"/0.* ||
    fail "the root does not name the rank claimed twice: $(cat "$dup"/*)"
[ "$(cat "$dup"/1.* | grep -c 'the root closed the connection before sending the address table: it stopped the job')" -eq 2 ] ||
    fail "the ranks 1 do not say the root stopped the job: $(cat "$dup"/*)"
rm -f "$dup"/*
(FLX_RANK=1 FLX_SIZE=3 FLX_ROOT=127.0.0.1:$port FLX_JOB_SECRET=s FLX_CONNECT_TIMEOUT=20s \
    timeout 60 "$top/flx-example" >"$dup/1" 2>&1 &
 FLX_RANK=0 FLX_SIZE=2 FLX_ROOT=127.0.0.1:$port FLX_JOB_SECRET=s FLX_CONNECT_TIMEOUT=20s \
    timeout 60 "$top/flx-example" >"$dup/0" 2>&1; wait)
grep -q "peer 127.0.0.1:[0-9]* claims rank 1 of a job of 3 ranks; this job has 2 (FLX_SIZE differs?)" "$dup/0" ||
    fail "the root does not name a rank of another size: $(cat "$dup"/*)"
grep -q "stopped the job" "$dup/1" || fail "the rank of another size: $(cat "$dup/1")"
rm -rf "$dup"
# a root alone on a loopback address (a host name that resolves to 127.0.1.1)
# says so when its ranks do not come
out=$(FLX_RANK=0 FLX_SIZE=2 FLX_ROOT=127.0.1.1:$((20000 + $$ % 12000)) FLX_JOB_SECRET=s \
      FLX_CONNECT_TIMEOUT=1s timeout 60 "$top/flx-example" 2>&1) && fail "a lone root succeeded: $out"
echo "$out" | grep -q "only 0 of 1 expected ranks connected within 1 s (the root listens on 127.0.1.1:[0-9]*, a loopback address: if the missing ranks run on other hosts, they cannot reach it" ||
    fail "a lone root on 127.0.1.1 does not say it listens on loopback: $out"
# FLX_SOCKET_IFNAME moves every data connection, rank 0's too (they were the
# connections to FLX_ROOT's address before), and FLX_ROOT=0.0.0.0 works with
# two connections per pair (the second went to 0.0.0.0 before).  In a network
# namespace of its own (root only): loopback, and 10.9.0.1 labelled lo:d.
# Prints the established connections in the middle of a 3-rank run.
ns_conns() {
    unshare -n sh -s "$@" <<'EOF_NS'
ip link set lo up && ip addr add 10.9.0.1/32 dev lo label lo:d || exit 3
# v0: an interface with an IPv6 address only (no veth: the case that needs it says so)
ip link add v0 type veth peer name v1 2>/dev/null && ip -6 addr add fd00::1/128 dev v0 nodad &&
    ip link set v0 up && ip link set v1 up
"$@" >"$ns/run.out" 2>&1 &
pid=$! i=0
# 3 ranks, 2 connections a pair: 12 ends
while [ $i -lt 400 ] && [ "$(ss -Htn state established | wc -l)" -lt 12 ]; do
    sleep 0.05; i=$((i + 1))
done
ss -Htn state established
wait $pid || { echo "run failed: $(cat "$ns/run.out")"; exit 1; }
EOF_NS
}
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null && command -v ss >/dev/null; then
    ns=$(mktemp -d); export ns top
    perf="$top/flx-allreduce-perf -b 16M -e 16M -w 2 -n 60"
    out=$(FLX_SOCKET_IFNAME=lo:d FLX_TCP_SOCKETS=2 ns_conns "$top/flxrun" -n 3 $perf 2>&1) ||
        fail "3 ranks with FLX_SOCKET_IFNAME=lo:d: $out"
    [ "$(echo "$out" | grep -c '10\.9\.0\.1:[0-9]* *10\.9\.0\.1:')" -eq 12 ] ||
        fail "FLX_SOCKET_IFNAME=lo:d: not every data connection is on 10.9.0.1: $out"
    port=$((20000 + $$ % 12000))
    out=$(FLX_ROOT=0.0.0.0:$port FLX_TCP_SOCKETS=2 ns_conns "$top/flxrun" -n 3 $perf 2>&1) ||
        fail "3 ranks with FLX_ROOT=0.0.0.0: $out"
    [ "$(echo "$out" | grep -c '127\.0\.0\.1:[0-9]* *127\.0\.0\.1:')" -eq 12 ] &&
        ! echo "$out" | grep -q ":$port " ||
        fail "FLX_ROOT=0.0.0.0:$port: not 12 data connections apart from the rendezvous: $out"
    # two hosts (network namespaces A and B joined by a veth pair): rank 1
    # reaches rank 0 over loopback on A, so its data address is loopback,
    # which rank 2 on B cannot reach.  The root says so at once (the mesh
    # waited for FLX_CONNECT_TIMEOUT before).
    na=flx-a-$$ nb=flx-b-$$
    trap 'ip netns del "$na" 2>/dev/null; ip netns del "$nb" 2>/dev/null' EXIT
    # nsenter, not ip netns exec (it remounts /, which fails where / is not a
    # mount point: a chroot, where ip netns add does not make working
    # namespaces either); skipped unless the set-up is seen to work: B
    # reaches A's address
    if { ip netns add "$na" && ip netns add "$nb" &&
         ip link add va netns "$na" type veth peer name vb netns "$nb" &&
         ip -n "$na" link set lo up && ip -n "$nb" link set lo up &&
         ip -n "$na" addr add 10.11.0.1/24 dev va && ip -n "$nb" addr add 10.11.0.2/24 dev vb &&
         ip -n "$na" link set va up && ip -n "$nb" link set vb up &&
         nsenter --net=/run/netns/"$nb" ip -4 addr show dev vb | grep -q 10.11.0.2 &&
         nsenter --net=/run/netns/"$nb" ip route get 10.11.0.1 | grep -q "dev vb"; } >/dev/null 2>&1
    then
        t0=$(date +%s)
        for r in 0 1 2; do
            case $r in 0) n=$na root=0.0.0.0 ;; 1) n=$na root=127.0.0.1 ;; 2) n=$nb root=10.11.0.1 ;; esac
            FLX_RANK=$r FLX_SIZE=3 FLX_ROOT=$root:$port FLX_JOB_SECRET=s FLX_CONNECT_TIMEOUT=30s \
                timeout 60 nsenter --net=/run/netns/"$n" "$top/flx-example" >"$ns/lo.$r" 2>&1 &
        done
        wait
        ip netns del "$na"; ip netns del "$nb"; trap - EXIT
        [ $(($(date +%s) - t0)) -lt 20 ] || fail "a loopback data address took $(($(date +%s) - t0)) s"
        grep -q "rank 1 takes its data connections on 127.0.0.1:[0-9]*, a loopback address, and rank 2 runs on another host or network namespace (at 10.11.0.2:[0-9]*)" "$ns/lo.0" ||
            fail "the root does not name the loopback data address: $(cat "$ns"/lo.*)"
        grep -q "sum =" "$ns"/lo.* && fail "a job with a loopback data address ran: $(cat "$ns"/lo.*)"
    else
        ip netns del "$na" 2>/dev/null; ip netns del "$nb" 2>/dev/null
        echo "(no named network namespaces or veth: the two-host loopback test skipped)"
    fi
    # a member asks again for a root name its resolver does not know yet
    # (it failed at once before); a name that never comes fails at
    # FLX_CONNECT_TIMEOUT, saying so.  /etc/hosts of a mount namespace, the
    # name added once the member has said it cannot resolve it (not after a
    # fixed 1.5 s, which a slow start could outlast).
    cp /etc/hosts "$ns/hosts"
    if unshare -n -m true 2>/dev/null; then
        out=$(unshare -n -m sh -s <<'EOF_NS' 2>&1
ip link set lo up && mount --bind "$ns/hosts" /etc/hosts || exit 3
(for _ in $(seq 200); do
    grep -q "cannot resolve host 'flx-late-root'" "$ns/late.1" 2>/dev/null && break; sleep 0.05
 done; echo "127.0.0.1 flx-late-root" >>/etc/hosts) &
FLX_RANK=0 FLX_SIZE=2 FLX_ROOT=127.0.0.1:23999 FLX_JOB_SECRET=s timeout 60 "$top/flx-example" &
FLX_RANK=1 FLX_SIZE=2 FLX_ROOT=flx-late-root:23999 FLX_JOB_SECRET=s timeout 60 "$top/flx-example" \
    >"$ns/late.1" 2>&1; r=$?; cat "$ns/late.1"; [ "$r" -eq 0 ] || exit 1
wait $! || exit 1
FLX_RANK=1 FLX_SIZE=2 FLX_ROOT=flx-never-root:23999 FLX_JOB_SECRET=s FLX_CONNECT_TIMEOUT=1s \
    timeout 60 "$top/flx-example" && exit 1
exit 0
EOF_NS
        ) || fail "a root name that comes late: $out"
        [ "$(echo "$out" | grep -c 'sum = 3 (expected 3)')" -eq 2 ] &&
            echo "$out" | grep -q "cannot resolve host 'flx-late-root' of 'flx-late-root:23999' yet" &&
            echo "$out" | grep -q "cannot resolve host 'flx-never-root' of 'flx-never-root:23999': .* (still, at FLX_CONNECT_TIMEOUT)" ||
            fail "a root name that comes late, or never: $out"
    else
        echo "(no unshare -m: the late root name test skipped)"
    fi
    # IPv6: a [::1] root; and data on an interface with an IPv6 address only
    # (fd00::1 on v0) while the rendezvous is IPv4
    if unshare -n sh -c 'ip link set lo up && ip -6 addr show dev lo | grep -q "::1/128"'; then
        out=$(FLX_ROOT="[::1]:$port" FLX_TCP_SOCKETS=2 ns_conns "$top/flxrun" -n 3 $perf 2>&1) ||
            fail "3 ranks with FLX_ROOT=[::1]: $out"
        [ "$(echo "$out" | grep -c '\[::1\]:[0-9]* *\[::1\]:')" -eq 12 ] ||
            fail "FLX_ROOT=[::1]:$port: not 12 data connection ends on [::1]: $out"
        if unshare -n sh -c 'ip link add v0 type veth peer name v1' 2>/dev/null; then
            out=$(FLX_SOCKET_IFNAME=v0 FLX_TCP_SOCKETS=2 ns_conns "$top/flxrun" -n 3 $perf 2>&1) ||
                fail "3 ranks with FLX_SOCKET_IFNAME=v0 (IPv6 only): $out"
            [ "$(echo "$out" | grep -c '\[fd00::1\]:[0-9]* *\[fd00::1\]:')" -eq 12 ] ||
                fail "FLX_SOCKET_IFNAME=v0: not 12 data connection ends on [fd00::1]: $out"
        else
            echo "(no veth here: FLX_SOCKET_IFNAME on an IPv6-only interface not tested)"
        fi
    else
        echo "(no IPv6 loopback here: the IPv6 tests skipped)"
    fi
    rm -rf "$ns"
else
    echo "(not root or no unshare -n: FLX_SOCKET_IFNAME's namespace test skipped)"
fi
# a job secret too long is refused without printing it (the 256-byte limit printed a
# 300-character secret whole on every rank); 300 characters now fit
long=$(head -c 600 /dev/zero | tr '\0' 'k')
FLX_JOB_SECRET=$long "$top/flx-info" -c >/dev/null 2>&1 || fail "a 600-character secret refused"
long=$long$long
out=$(FLX_JOB_SECRET=$long "$top/flx-info" -c 2>&1) && fail "a 1200-character secret accepted"
echo "$out" | grep -q "kkkkkkkk" && fail "the secret was printed: $out"
echo "$out" | grep -q "FLX_JOB_SECRET (1200 characters, not shown) is too long: at most 1023" ||
    fail "no line for the long secret: $out"
# two steps of one Slurm allocation at once, sharing the root address and no FLX_JOB_SECRET:
# each step's ranks must not join the other step's job (the job id alone was the secret, and
# all four ranks formed two mixed jobs and exit 0); step 0 completes, step 1's early rank 1
# is refused by step 0's root. Each start waits for what it needs, not a fixed sleep (a root
# slower than the sleep to bind could lose its port to step 1's root): step 1's rank 1 once step
# 0's root listens (/proc/net/tcp, state 0A), the other two once it has been refused and left;
# step 0 may wait 10 s for its rank 1 (two process starts on a loaded machine), step 1 3 s
slurm_port=$((20001 + $$ % 12000))
slurm_ex() { # STEP RANK
    env -u FLX_RANK -u FLX_SIZE -u FLX_JOB_SECRET -u OMPI_COMM_WORLD_RANK -u PMI_RANK \
        SLURM_JOB_ID=4242 SLURM_STEP_ID=$1 SLURM_PROCID=$2 SLURM_NTASKS=2 \
        FLX_ROOT=127.0.0.1:$slurm_port FLX_CONNECT_TIMEOUT=$(($1 ? 3 : 10))s \
        timeout 30 "$top/flx-example" >"$tmp_slurm/$1.$2" 2>&1
}
tmp_slurm=$(mktemp -d)
slurm_ex 0 0 & p00=$!
listening=0
for _ in $(seq 200); do
    grep -q ":$(printf %04X "$slurm_port") 00000000:0000 0A" /proc/net/tcp && { listening=1; break; }
    sleep 0.05
done
[ "$listening" -eq 1 ] || fail "Slurm step 0's root not listening on $slurm_port after 10 s: $(cat "$tmp_slurm"/0.0)"
slurm_ex 1 1 & p11=$!
wait $p11; r11=$?
slurm_ex 0 1 & p01=$!
slurm_ex 1 0 & p10=$!
wait $p00; r00=$?; wait $p01; r01=$?; wait $p10; r10=$?
out=$(cat "$tmp_slurm"/*); rm -rf "$tmp_slurm"
[ "$r00" -eq 0 ] && [ "$r01" -eq 0 ] || fail "Slurm step 0 failed ($r00 $r01): $out"
[ "$r11" -ne 0 ] && [ "$r10" -ne 0 ] || fail "Slurm step 1 joined step 0's job ($r11 $r10): $out"
[ "$(echo "$out" | grep -c 'sum = 3 (expected 3)')" -eq 2 ] || fail "Slurm steps: $out"
echo "$out" | grep -q "failed authentication" || fail "Slurm step 1's rank 1 not refused: $out"
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)   # buffers twice the host's memory
out=$("$top/flxrun" -n 1 "$top/flx-allreduce-perf" -b 8 -e $((mem_kib * 2048)) 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "flx-allreduce-perf -e beyond memory: exit $rc: $out"
echo "$out" | grep -q "more than this host's" || fail "no reason for -e beyond memory: $out"
out=$("$top/flxrun" -n 2 "$top/flx-sparse-perf" -b 4k -e 4k -n 1 -w 0 \
      --csv /nonexistent-dir/x.csv 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "flx-sparse-perf with an unwritable --csv: exit $rc: $out"
echo "$out" | grep -q "cannot open /nonexistent-dir/x.csv" || fail "--csv not named: $out"
out=$(timeout 20 "$top/flxrun" -n 1 "$top/flx-sparse-perf" -b 4k -e 4k -n 1 -w 0 \
      --compute-us inf 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "flx-sparse-perf --compute-us inf: exit $rc: $out"
# a job that succeeds loses nothing to a slow reader: its rank exits at once (60 kB fit in the
# pipe), and the reader takes 1 KiB each 30 ms of the 180 kB (before, flxrun took the open pipes
# for leftovers and dropped the rest after the SIGKILL grace: 110898 bytes arrived), nor to a
# reader that starts late
slow_count() { total=0; while :; do n=$(head -c 1024 | wc -c); [ "$n" -eq 0 ] && break
    total=$((total + n)); sleep 0.03; done; echo "$total"; }
n=$("$top/flxrun" -n 1 sh -c "yes x | head -n 30000" | slow_count)
[ "$n" -eq 180000 ] || fail "a slow reader got $n of the 180000 bytes of a job that succeeded"
n=$("$top/flxrun" -n 1 sh -c "head -c 100000 /dev/zero | tr '\\0' x | fold -w 1000" | (sleep 5; wc -c))
[ "$n" -eq 100500 ] || fail "a late reader got $n of the 100500 bytes of a job that succeeded"
# output that cannot be written fails a job that succeeded, with one line (it was lost with
# exit 0): a full disk, a closed stdout; a reader that leaves (| head) does not
out=$("$top/flxrun" -n 2 "$top/flx-example" 2>&1 >/dev/full) && fail "flxrun, stdout on a full disk: exit 0"
[ "$(echo "$out" | grep -c "standard output could not be written (No space left on device)")" -eq 1 ] ||
    fail "flxrun, stdout on a full disk: not one line saying so: $out"
out=$("$top/flxrun" -n 2 "$top/flx-example" 2>&1 >&-) && fail "flxrun, stdout closed: exit 0"
echo "$out" | grep -q "standard output could not be written (Bad file descriptor)" ||
    fail "flxrun, stdout closed: $out"
rcf=$(mktemp)
{ "$top/flxrun" -n 1 sh -c "yes x | head -n 30000"; echo $? >"$rcf"; } | head -n 1 >/dev/null
[ "$(cat "$rcf")" = 0 ] || fail "flxrun | head -n 1 (the reader left): exit $(cat "$rcf")"
rm -f "$rcf"
# ... and so do the tools' own: a report or --csv that cannot be written, one line, exit 1
for t in "flx-allreduce-perf -e 64" "flx-sparse-perf -b 4k -e 4k -c 0.1" "flx-topk-perf -b 1k -e 1k -c 0.1"; do
    out=$($top/$t --csv /dev/full 2>&1 >/dev/null); rc=$?
    [ "$rc" -eq 1 ] && [ "$(echo "$out" | grep -c "writing /dev/full failed")" -eq 1 ] ||
        fail "$t --csv /dev/full: exit $rc: $out"
    out=$($top/$t 2>&1 >/dev/full); rc=$?
    [ "$rc" -eq 1 ] && echo "$out" | grep -q "writing to standard output failed" ||
        fail "$t >/dev/full: exit $rc: $out"
done
for a in "" -c; do
    out=$("$top/flx-info" $a 2>&1 >/dev/full) && fail "flx-info $a >/dev/full: exit 0"
    [ "$out" = "flx-info: writing to standard output failed" ] || fail "flx-info $a >/dev/full: $out"
done
# an empty field in a list is an error (it was skipped)
for a in "-c 0.1," "-c ,0.1" "-c 0.1,,0.033" "-m all,"; do
    "$top/flx-sparse-perf" -b 4k -e 4k $a >/dev/null 2>&1; rc=$?
    [ "$rc" -eq 2 ] || fail "flx-sparse-perf $a: exit $rc, not 2"
done
"$top/flx-topk-perf" -b 1k -e 1k -c 0.1, >/dev/null 2>&1; [ $? -eq 2 ] || fail "flx-topk-perf -c 0.1,: not a usage error"
# the README shows the whole of tools/example.c: the same text
src=${abs_top_srcdir:-.}
# the scripts' bad input: one line saying what, a non-zero exit, before anything runs
out=$("$src/scripts/compare-mpi.sh" -R /dev/null 2>&1) && fail "compare-mpi.sh -R on an empty file succeeded"
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "no result rows in /dev/null" ||
    fail "compare-mpi.sh -R /dev/null: not the one line saying why: $out"
out=$("$src/scripts/experiment-fmnist.sh" -n -r 1gbit,bogus "$top" 2>&1) && fail "experiment-fmnist.sh took rate bogus"
echo "$out" | grep -q "bad rate 'bogus'" || fail "experiment-fmnist.sh -r bogus: $out"
out=$("$src/scripts/link-change.sh" -n -p nosuch "$top" 2>&1) && fail "link-change.sh took policy nosuch"
echo "$out" | grep -q "unknown policy 'nosuch'" || fail "link-change.sh -p nosuch: $out"
out=$("$src/scripts/soak.sh" --bogus 2>&1) && fail "soak.sh took --bogus"
echo "$out" | grep -q "unknown option '--bogus'" || fail "soak.sh --bogus: $out"
out=$("$src/scripts/plot-train" -t 2>&1) && fail "plot-train -t without a title ran"
echo "$out" | grep -q -- "-t needs a value" || fail "plot-train -t: $out"
# the experiment's table counts steps, not the epochs' evaluation rows (2 epochs of 5 steps)
exp=$(mktemp -d)
"$top/flx-train" --synthetic --epochs 2 --max-steps 5 --log "$exp/1gbit-flex.csv" >/dev/null 2>&1 ||
    fail "flx-train for the experiment's report"
grep -q ",eval," "$exp/1gbit-flex.csv" || fail "no evaluation rows in the step log"
"$src/scripts/experiment-fmnist.sh" -R -o "$exp" -r 1gbit -p flex 2>/dev/null |
    awk '$1 == "1gbit" && $2 == "flex" { found = 1; exit $3 != 10 } END { exit !found }' ||
    fail "the experiment's report does not count 10 steps: $("$src/scripts/experiment-fmnist.sh" -R -o "$exp" -r 1gbit -p flex 2>&1)"
rm -rf "$exp"
sed -n '/The whole of `tools\/example.c`:/,/^```$/p' "$src/README.md" | sed '1,3d;$d' |
    cmp -s - "$src/tools/example.c" || fail "README's copy of tools/example.c differs from the file"
echo "PASS: flx-example, flx-info (-c, --calibrate), compare-mpi report, bench-select, flx-train, perf tools' bad input"
