#!/usr/bin/env bash
# compare-mpi.sh -- flexcoll against Open MPI (or Gloo, -B gloo) on this host,
# over loopback only.
#
#   scripts/compare-mpi.sh [options] [BUILD_DIR]
#
# BUILD_DIR (or $FLX_BUILD, default: the current directory) holds flxrun,
# flx-allreduce-perf and flx-allgather-perf (and flx-reduce-scatter-perf for
# -C reduce_scatter).  The script builds
# scripts/mpi-coll-bench.c with mpicc into a temporary directory, then for
# each rank count N (default 2 and 4) runs R repetitions (default 5) of, in
# alternating order,
#
#   flxrun -n N flx-allreduce-perf ...   vs  mpirun ... mpi-coll-bench allreduce ...
#   flxrun -n N flx-allgather-perf ...   vs  mpirun ... mpi-coll-bench allgather ...
#
# (-C picks the collectives: also reduce_scatter, flx-reduce-scatter-perf
# against MPI_Reduce_scatter_block, float sum, the size each rank's input)
# over the same sizes (default 4 B .. 64 MiB, factor 2), float (sum for
# allreduce), with the same warm-up / iteration scheme, and prints per
# collective and N: size, the median over the repetitions of the out-of-place
# time of flexcoll and of MPI, their ratio (MPI/flexcoll: > 1 means flexcoll
# is faster) and both bus bandwidths (from the median times), then the 4 KiB
# latency and the mean 1-64 MiB bus bandwidth, and the sizes where flexcoll
# is behind, each with how often flexcoll was the faster of a pair (the runs
# paired by repetition; ties left out) and a one-sided sign test's p, those under 0.05
# counted as clearly behind.  The time of one run at one size is the mean over its timed
# iterations (-s mean, nccl-tests' "time", the default) or their median
# (-s p50: one stalled iteration on a busy machine does not move it); both
# tools print both, so -R can report either from the same runs.
#
# Loopback only: mpirun uses ob1 + btl tcp,self restricted to lo (and its
# out-of-band channel to lo); flexcoll ranks rendezvous at 127.0.0.1 (flxrun)
# and listen on lo (FLX_SOCKET_IFNAME=lo).  Both bind alike: each rank to its
# own core when the ranks are no more than the cores this script may use
# (flxrun's default; mpirun --bind-to core), to a hardware thread when they
# are no more than the CPUs (--bind-to hwthread), else, where the K cores
# divide the ranks, rank i to core i mod K, shared (flxrun's default; mpirun
# --map-by core --bind-to core:overload-allowed), else neither (--bind-to none).
#
# -B gloo compares with Gloo (Debian's libgloo-dev) instead: the script builds
# scripts/gloo-coll-bench.cc with g++ and starts its ranks with flxrun (they
# rendezvous through Gloo's FileStore in a fresh directory of each run); Gloo's
# tcp device on lo.  By default that bench runs every Gloo algorithm in both of
# Gloo's pair modes (async, sync with busy polling) at each size and reports
# the fastest; -G passes it other options (-G "-a ring -m async": what
# PyTorch's ProcessGroupGloo calls).
#
# -p pairs the runs by size: every run then measures one size, and at each
# size flexcoll and the baseline run back to back (alternating which goes
# first), so that both see the machine in the same state.  A whole sweep
# takes seconds to minutes, and on a shared machine a run can fall into a
# slow mode (2-4x the time at every size) that lasts about as long: with
# whole sweeps one library's median at a size can come from its slow runs
# and the other's from its fast ones.
#
# Before every pair the script measures the round trip of a cache line
# between the CPUs of ranks 0 and 1 (scripts/core-latency.c, built with cc;
# kept as c2c.txt beside results.txt).  Each table shows its median per size
# ("c2c ns"), and the sizes where flexcoll is behind counted again over the
# pairs whose cores were near (round trip at most 3x the run's lowest) and
# over those whose cores were far.  On a virtual machine the host may move
# the CPUs apart for minutes at a time, and loopback transfers then cost more.
set -euo pipefail

prog=${0##*/}
script_dir=$(cd "$(dirname "$0")" && pwd)

usage() {
    cat <<EOF
usage: $prog [-B mpi|gloo] [-G "GLOO OPTS"] [-C "allreduce allgather"] [-r REPS] [-N "2 4"] [-b MIN] [-e MAX]
             [-n ITERS] [-w WARMUP] [-c 0|1] [-s mean|p50] [-p] [-k LOGDIR] [-t SECONDS] [BUILD_DIR]
       $prog [-s mean|p50] -R RESULTS  (the report again, from a results.txt kept with -k)
  BUILD_DIR  where flxrun and flx-*-perf are (default: \$FLX_BUILD or .)
  -B BASE    what flexcoll is compared with: mpi (Open MPI, default) or gloo
  -G OPTS    more options for gloo-coll-bench (-a ALGO, -m async|sync|both; loopback only;
             the sweep's -b -e -n -w -c are this script's and come after, so they win)
  -C LIST    collectives (default "allreduce allgather"; also reduce_scatter, with -B mpi)
  -r REPS    repetitions of each run, alternating flexcoll and MPI (default 5)
  -N LIST    rank counts (default "2 4")
  -b MIN     smallest size (default 4)         -e MAX  largest size (default 64M)
  -n ITERS   timed iterations (default 20)     -w N    warm-up iterations (default 5)
  -c 0|1     correctness pass in both tools (untimed; default 1)
  -k LOGDIR  keep every run's output in LOGDIR (default: a temporary directory, removed)
  -t SECONDS time limit of one run (default 900)
  -s STAT    a run's time at a size: mean of its iterations (default) or p50
  -p         paired: one size per run, flexcoll and the baseline back to back at each size
  -R FILE    print the tables from FILE (results.txt of an earlier -k run); run nothing
EOF
}

reps=5
nlist="2 4"
minb=4
maxb=64M
iters=20
warmup=5
check=1
keep=""
limit=900
report_only=""
stat=mean
base=mpi
gloo_opts=""
paired=""
colls="allreduce allgather"
while getopts ":B:G:C:r:N:b:e:n:w:c:k:t:R:s:ph" opt; do
    case $opt in
    B) base=$OPTARG ;;
    C) colls=$OPTARG ;;
    G) gloo_opts=$OPTARG ;;
    r) reps=$OPTARG ;;
    N) nlist=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    n) iters=$OPTARG ;;
    w) warmup=$OPTARG ;;
    c) check=$OPTARG ;;
    k) keep=$OPTARG ;;
    t) limit=$OPTARG ;;
    R) report_only=$OPTARG ;;
    s) stat=$OPTARG ;;
    p) paired=1 ;;
    h) usage; exit 0 ;;
    :) echo "$prog: option -$OPTARG needs a value" >&2; usage >&2; exit 2 ;;
    *) echo "$prog: unknown option -$OPTARG" >&2; usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -gt 1 ]; then
    echo "$prog: one BUILD_DIR, not '$1' and '$2'" >&2
    usage >&2
    exit 2
fi
build=${1:-${FLX_BUILD:-.}}

case $reps in '' | *[!0-9]* | 0) echo "$prog: -r needs a positive integer" >&2; exit 2 ;; esac
[ -n "${nlist// /}" ] || { echo "$prog: -N needs rank counts >= 2, not an empty list" >&2; exit 2; }
for n in $nlist; do
    case $n in '' | *[!0-9]* | 0 | 1) echo "$prog: -N needs rank counts >= 2" >&2; exit 2 ;; esac
done
# the sweep's numbers, checked before anything is built or run
case $iters in '' | *[!0-9]* | 0) echo "$prog: -n needs a positive integer, not '$iters'" >&2; exit 2 ;; esac
case $warmup in '' | *[!0-9]*) echo "$prog: -w needs an integer, not '$warmup'" >&2; exit 2 ;; esac
case $check in 0 | 1) ;; *) echo "$prog: -c takes 0 or 1, not '$check'" >&2; exit 2 ;; esac
[[ $limit =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ ! $limit =~ ^0+(\.0*)?$ ]] ||
    { echo "$prog: -t needs a positive number of seconds, not '$limit'" >&2; exit 2; }
for v in "b:$minb" "e:$maxb"; do
    [[ ${v#*:} =~ ^[0-9]+[kKmMgG]?$ ]] || { echo "$prog: -${v%%:*} needs a size such as 4, 64k or 64M, not '${v#*:}'" >&2; exit 2; }
done
# to_bytes SIZE: 4, 64k, 64M or 1G in bytes
to_bytes() {
    local v=${1%[kKmMgG]}
    case ${1#"$v"} in
    k | K) echo $((10#$v << 10)) ;;
    m | M) echo $((10#$v << 20)) ;;
    g | G) echo $((10#$v << 30)) ;;
    *) echo $((10#$v)) ;;
    esac
}
lo=$(to_bytes "$minb") hi=$(to_bytes "$maxb")
if [ "$lo" -gt "$hi" ] || { [ -n "$paired" ] && [ "$lo" -eq 0 ]; }; then
    echo "$prog: -b $minb must be no larger than -e $maxb (and above 0 with -p)" >&2
    exit 2
fi
case $base in
mpi | gloo) ;;
*) echo "$prog: -B takes mpi or gloo, not '$base'" >&2; exit 2 ;;
esac
[ -n "${colls// /}" ] || { echo "$prog: -C needs collectives, not an empty list" >&2; exit 2; }
for coll in $colls; do
    case $coll in
    allreduce | allgather) ;;
    reduce_scatter)
        [ "$base" = mpi ] || { echo "$prog: -C reduce_scatter is for -B mpi (gloo-coll-bench has none)" >&2; exit 2; } ;;
    *) echo "$prog: -C takes allreduce, allgather and reduce_scatter, not '$coll'" >&2; exit 2 ;;
    esac
done
if [ -n "$gloo_opts" ] && [ "$base" != gloo ]; then
    echo "$prog: -G is for -B gloo" >&2
    exit 2
fi
read -r -a gopts <<<"$gloo_opts" # words, never globbed
case $stat in
mean) statcol=6 ;;
p50) statcol=9 ;;
*) echo "$prog: -s takes mean or p50, not '$stat'" >&2; exit 2 ;;
esac

# ---- report -------------------------------------------------------------------
# report RESULTS: one table per collective and N from the rows
#   impl coll n rep size time_us busbw wrong p50_us
# (impl: flexcoll, or the baseline: mpi or gloo)
# has_rows RESULTS: exit 1 with one line unless RESULTS holds result rows
has_rows() {
    awk '($1 == "flexcoll" || $1 == "mpi" || $1 == "gloo") &&
         ($2 == "allreduce" || $2 == "allgather" || $2 == "reduce_scatter") &&
         $3 ~ /^[0-9]+$/ && $5 ~ /^[0-9]+$/ { ok = 1; exit } END { exit !ok }' "$1" && return 0
    echo "$prog: error: no result rows in $1 (impl coll n rep size time_us busbw wrong p50_us)" >&2
    exit 1
}

report() {
    local res=$1 c2c=${2:-/dev/null} coll n label
    has_rows "$res"
    label=$(awk '$1 != "flexcoll" { print ($1 == "gloo" ? "Gloo" : "MPI"); exit }' "$res")
    label=${label:-MPI}
    if [ "$statcol" = 9 ] && awk 'NF < 9 { old = 1; exit } END { exit !old }' "$res"; then
        echo "$prog: error: $res has no p50 column (kept by an older version); use -s mean" >&2
        exit 1
    fi
    for coll in allreduce allgather reduce_scatter; do
        for n in $(awk -v c="$coll" '$2 == c { print $3 }' "$res" | sort -n | uniq); do
            awk -v coll="$coll" -v n="$n" -v col="$statcol" -v L="$label" -v bk="${label,,}" '
            # c2c.txt rows: coll n rep size|all round_trip_ns (n/a: not measured)
            FILENAME == ARGV[1] {
                if (NF == 5 && $5 ~ /^[0-9.]+$/) {
                    lat[$1, $2, $3, $4] = $5 + 0
                    if (lowest == "" || $5 + 0 < lowest) lowest = $5 + 0
                }
                next
            }
            function median(list,    v, k, i, j, t) {
                k = split(list, v, " ")
                for (i = 2; i <= k; i++) {            # insertion sort, k is small
                    t = v[i] + 0
                    for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]
                    v[j + 1] = t
                }
                if (k == 0) return -1
                return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
            }
            # behind_in TF TM: the sizes where the medians of TF (flexcoll) and TM put flexcoll behind
            function behind_in(tf, tm,    i, s, f, m, out, k, tot) {
                out = ""; k = tot = 0
                for (i = 1; i <= ns; i++) {
                    s = sizes[i]
                    f = median(tf[s]); m = median(tm[s])
                    if (f <= 0 || m <= 0) continue
                    tot++
                    if (m < f) { out = out sprintf(" %d (%.2f)", s, m / f); k++ }
                }
                return k " of " tot " sizes" out
            }
            # sign_p K N: the chance of K or fewer wins in N pairs where either side
            # wins as often (one-sided sign test); 1 for N = 0
            function sign_p(k, nn,    i, c, sum) {
                if (nn <= 0) return 1
                c = 1; sum = 0
                for (i = 0; i <= k; i++) {
                    sum += c
                    c = c * (nn - i) / (i + 1)
                }
                return sum / 2 ^ nn
            }
            $2 == coll && $3 == n {
                if (!($5 in seen)) { seen[$5] = 1; sizes[++ns] = $5 }
                t[$1, $5] = t[$1, $5] " " $col
                v[$1, $5, $4] = $col + 0
                if (!(($5, $4) in rs_seen)) { rs_seen[$5, $4] = 1; reps[$5] = reps[$5] " " $4 }
                if ($8 != "N/A" && $8 + 0 > 0) bad[$1]++
                # the core-to-core round trip of this pair: measured for its size, or for its sweep
                c = (($2, $3, $4, $5) in lat) ? lat[$2, $3, $4, $5] : \
                    ((($2, $3, $4, "all") in lat) ? lat[$2, $3, $4, "all"] : -1)
                if (c < 0) next
                if ($1 == "flexcoll") { cl[$5] = cl[$5] " " c; npair++ }
                far = c > 3 * lowest
                if ($1 == "flexcoll") nfar += far
                if (far) { if ($1 == "flexcoll") ff[$5] = ff[$5] " " $col; else fm[$5] = fm[$5] " " $col }
                else { if ($1 == "flexcoll") nf[$5] = nf[$5] " " $col; else nm[$5] = nm[$5] " " $col }
            }
            END {
                factor = coll == "allreduce" ? 2 * (n - 1) / n : (n - 1) / n
                what = coll == "allreduce" ? "allreduce (float, sum)" : \
                       coll == "allgather" ? "allgather (float; size = gathered total)" : \
                       "reduce_scatter (float, sum; size = the input of each rank)"
                printf "\n== %s, N=%d ==\n", what, n
                printf "%12s  %14s  %14s  %8s  %10s  %10s  %7s\n", "size (B)", "flexcoll (us)", L " (us)",
                       L "/flx", "flx busbw", L " busbw", "c2c ns"
                lat_f = lat_m = -1; sf = sm = nb = 0; behind = ""; nbehind = 0; sig = ""; nsig = 0
                for (i = 1; i <= ns; i++) {
                    s = sizes[i]
                    f = median(t["flexcoll", s]); m = median(t[bk, s])
                    bf = f > 0 ? factor * s / f / 1e3 : 0        # bytes/us/1e3 = GB/s
                    bm = m > 0 ? factor * s / m / 1e3 : 0
                    fs = f > 0 ? sprintf("%.2f", f) : "n/a"; fb = f > 0 ? sprintf("%.3f", bf) : "n/a"
                    ms = m > 0 ? sprintf("%.2f", m) : "n/a"; mb = m > 0 ? sprintf("%.3f", bm) : "n/a"
                    rs = (f > 0 && m > 0) ? sprintf("%.2f", m / f) : "n/a"
                    cs = s in cl ? sprintf("%.0f", median(cl[s])) : "n/a"
                    printf "%12d  %14s  %14s  %8s  %10s  %10s  %7s\n", s, fs, ms, rs, fb, mb, cs
                    if (s == 4096) { lat_f = f; lat_m = m }
                    if (f > 0 && m > 0 && m < f) {
                        # the runs paired by repetition: how often flexcoll was faster
                        # (a tie counts for neither: the sign test drops it)
                        kk = split(reps[s], rl, " "); np = nw = nt = 0
                        for (j = 1; j <= kk; j++) {
                            if (!(("flexcoll", s, rl[j]) in v) || !((bk, s, rl[j]) in v)) continue
                            if (v["flexcoll", s, rl[j]] == v[bk, s, rl[j]]) { nt++; continue }
                            np++
                            if (v["flexcoll", s, rl[j]] < v[bk, s, rl[j]]) nw++
                        }
                        pv = sign_p(nw, np)
                        behind = behind sprintf(" %d (%s, faster in %d of %d%s, p %.2f)", s, rs, nw, np,
                                                nt ? sprintf(", %d tie%s", nt, nt > 1 ? "s" : "") : "", pv)
                        nbehind++
                        if (pv < 0.05) { sig = sig " " s; nsig++ }
                    }
                    if (s >= 1048576 && s <= 67108864 && f > 0 && m > 0) { sf += bf; sm += bm; nb++ }
                }
                if (lat_f > 0 && lat_m > 0)
                    printf "4 KiB latency      : flexcoll %.2f us, %s %.2f us, %s/flexcoll %.2f\n",
                           lat_f, L, lat_m, L, lat_m / lat_f
                else
                    printf "4 KiB latency      : no 4096-byte row\n"
                if (nb > 0)
                    printf "1-64 MiB busbw     : flexcoll %.3f GB/s, %s %.3f GB/s (mean over %d sizes), flexcoll/%s %.2f\n",
                           sf / nb, L, sm / nb, nb, L, (sm > 0 ? sf / sm : 0)
                else
                    printf "1-64 MiB busbw     : no rows between 1 and 64 MiB\n"
                printf "flexcoll behind at : %d of %d sizes%s\n", nbehind, ns, behind
                printf "  of them, clearly : %d%s (sign test over the pairs by repetition, one-sided p < 0.05)\n", nsig, sig
                if (npair > 0) {
                    printf "core-to-core       : lowest round trip %.0f ns; cores far (over %.0f ns) in %d of %d flexcoll results (a size of a run)\n",
                           lowest, 3 * lowest, nfar, npair
                    printf "  behind, near     : %s\n", behind_in(nf, nm)
                    printf "  behind, far      : %s\n", behind_in(ff, fm)
                }
                if (bad["flexcoll"] || bad[bk])
                    printf "WARNING: rows with wrong elements: flexcoll %d, %s %d\n", bad["flexcoll"], L, bad[bk]
            }' "$c2c" "$res"
        done
    done
}

if [ -n "$report_only" ]; then
    if [ ! -r "$report_only" ]; then
        echo "$prog: error: cannot read $report_only" >&2
        exit 1
    fi
    has_rows "$report_only"
    echo "# report from $report_only: a run's time = the $stat of its iterations, median over the repetitions per size;"
    echo "# ratio = baseline time / flexcoll time (> 1: flexcoll faster); busbw from the median times (GB/s)"
    c2c_kept=$(dirname "$report_only")/c2c.txt
    [ -r "$c2c_kept" ] || c2c_kept=/dev/null
    report "$report_only" "$c2c_kept"
    exit 0
fi

# ---- prerequisites ------------------------------------------------------------
if [ "$base" = mpi ]; then
    for tool in mpicc mpirun; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "$prog: error: $tool not found in PATH; install Open MPI" \
                 "(Debian: apt-get install openmpi-bin libopenmpi-dev)" >&2
            exit 1
        fi
    done
elif ! command -v g++ >/dev/null 2>&1; then
    echo "$prog: error: -B gloo needs g++ and Gloo (Debian: apt-get install g++ libgloo-dev)" >&2
    exit 1
fi
if [ ! -d "$build" ]; then
    echo "$prog: error: build directory '$build' does not exist" >&2
    exit 1
fi
build=$(cd "$build" && pwd)
tools="flxrun"
for coll in $colls; do tools+=" flx-${coll//_/-}-perf"; done
for f in $tools; do
    if [ ! -x "$build/$f" ]; then
        echo "$prog: error: $build/$f not found or not executable" \
             "(pass the build directory, or set FLX_BUILD; run make there first)" >&2
        exit 1
    fi
done
src=$script_dir/mpi-coll-bench.c
[ "$base" = gloo ] && src=$script_dir/gloo-coll-bench.cc
if [ ! -r "$src" ]; then
    echo "$prog: error: $src not found" >&2
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flx-compare-$base.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
logdir=${keep:-$tmp/logs}
mkdir -p "$logdir"
results=$tmp/results.txt
: >"$results"

if [ "$base" = mpi ]; then
    echo "# building mpi-coll-bench with $(command -v mpicc)" >&2
    bcmd=(mpicc -O2 -o "$tmp/mpi-coll-bench" "$src" -lm)
    base_name=$(mpirun --version 2>&1 | head -n 1)
else
    echo "# building gloo-coll-bench with $(command -v g++)" >&2
    bcmd=(g++ -O3 -std=c++17 -o "$tmp/gloo-coll-bench" "$src" -lgloo -lpthread)
    base_name="Gloo $(dpkg-query -W -f '${Version}' libgloo-dev 2>/dev/null || echo '(version unknown)')"
    base_name+=" (gloo-coll-bench ${gloo_opts:-best of every algorithm and pair mode})"
fi
if ! "${bcmd[@]}" 2>"$tmp/build.log"; then
    hint=""
    [ "$base" = gloo ] && hint=" (is Gloo installed? Debian: apt-get install libgloo-dev)"
    echo "$prog: error: ${bcmd[0]} failed$hint:" >&2
    cat "$tmp/build.log" >&2
    exit 1
fi

# the core-to-core round trip beside every pair (n/a without a C compiler)
c2c=$tmp/c2c.txt
: >"$c2c"
latency=""
if command -v cc >/dev/null 2>&1 &&
    cc -O2 -pthread -o "$tmp/core-latency" "$script_dir/core-latency.c" 2>"$tmp/build-latency.log"; then
    latency=$tmp/core-latency
else
    echo "$prog: warning: could not build core-latency (cc); c2c ns will read n/a" >&2
fi

sweep=(-b "$minb" -e "$maxb" -f 2 -n "$iters" -w "$warmup" -c "$check")
tag="" # the size of a paired run, in its log's name

# the CPUs and cores flxrun may use (nproc obeys OMP_NUM_THREADS; flxrun
# --report-bindings counts both; its CPU count where it says nothing)
host_cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
host_cores=$("$build/flxrun" --report-bindings -n 1 true 2>&1 |
             sed -n 's/^flxrun: [0-9]* CPUs\? in \([0-9]*\) cores\? .*/\1/p') || host_cores=""
host_cores=${host_cores:-$host_cpus}

# mpi_bind N: mpirun's binding options for N ranks, as flxrun binds them: a
# core each while they fit the cores, a hardware thread each while they fit
# the CPUs, else the cores in turn (rank i on core i mod K), shared, where
# the K cores divide the ranks, else none
mpi_bind() {
    if [ "$1" -le "$host_cores" ]; then
        echo --bind-to core
    elif [ "$1" -le "$host_cpus" ]; then
        echo --bind-to hwthread
    elif [ $(($1 % host_cores)) -eq 0 ]; then
        echo --map-by core --bind-to core:overload-allowed
    else
        echo --bind-to none
    fi
}

# run_one IMPL COLL N REP: run one benchmark, append its rows to $results as
#   impl coll n rep size time_us busbw wrong p50_us [gloo's algorithm]
run_one() {
    local impl=$1 coll=$2 n=$3 rep=$4
    local log=$logdir/$impl-$coll-n$n-rep$rep$tag.log
    local -a cmd
    local t0 t1

    if [ "$impl" = flexcoll ]; then
        cmd=(env -u FLX_ROOT FLX_SOCKET_IFNAME=lo
             "$build/flxrun" -n "$n" -t "$limit" "$build/flx-${coll//_/-}-perf" "${sweep[@]}")
    elif [ "$impl" = gloo ]; then
        # a fresh rendezvous directory per run: Gloo's FileStore keys must not exist yet
        mkdir -p "$tmp/store-$coll-n$n-rep$rep$tag"
        cmd=(env -u FLX_ROOT GLOO_BENCH_STORE="$tmp/store-$coll-n$n-rep$rep$tag"
             "$build/flxrun" -n "$n" -t "$limit" "$tmp/gloo-coll-bench" "$coll" -I lo
             ${gopts[@]+"${gopts[@]}"} "${sweep[@]}")
    else
        local -a bind
        read -ra bind <<<"$(mpi_bind "$n")"
        cmd=(timeout "$limit" mpirun --allow-run-as-root --oversubscribe "${bind[@]}" -np "$n"
             --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo
             --mca oob_tcp_if_include lo "$tmp/mpi-coll-bench" "$coll" "${sweep[@]}")
    fi
    printf '# rep %d/%d  N=%d  %-14s %-8s%s ... ' "$rep" "$reps" "$n" "$coll" "$impl" "${tag:+ ${tag#-} B}" >&2
    t0=$(date +%s)
    if ! "${cmd[@]}" >"$log" 2>&1; then
        echo "FAILED" >&2
        echo "$prog: error: this run failed: ${cmd[*]}" >&2
        echo "--- last lines of $log:" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
    t1=$(date +%s)
    echo "$((t1 - t0)) s" >&2
    # flxrun prefixes each rank's lines with "[i] "; rows are the lines whose
    # first field is a number: size count type redop root time algbw busbw #wrong ...
    # (gloo-coll-bench's 17th field names the algorithm that gave the row)
    sed 's/^\[[0-9]*\] //' "$log" |
        awk -v impl="$impl" -v coll="$coll" -v n="$n" -v rep="$rep" \
            '$1 ~ /^[0-9]+$/ && NF >= 16 {
                 print impl, coll, n, rep, $1, $6, $8, $9, $15 (impl == "gloo" ? " " $17 : "") }' \
            >>"$results"
    if ! grep -q '^# Out of bounds values : 0 OK' <(sed 's/^\[[0-9]*\] //' "$log"); then
        echo "$prog: warning: $impl $coll N=$n rep $rep reported wrong results (see $log)" >&2
    fi
}

# run_pair COLL N REP FIRST: flexcoll and the baseline back to back; FIRST odd:
# flexcoll first (alternated, so neither always runs on a warmer machine)
run_pair() {
    local ns="n/a" sz=all
    [ -n "$tag" ] && sz=${tag#-}
    if [ -n "$latency" ]; then
        # the first CPUs of ranks 0 and 1 as flxrun binds N ranks (whole cores, as
        # mpirun's --bind-to core; with more ranks than CPUs that the cores divide,
        # cores 0 and 1); unbound, or one core for both, the tool picks two CPUs
        local pair
        pair=$("$build/flxrun" --report-bindings -n "$2" true 2>&1 |
               sed -n 's/^flxrun: rank [01]: CPUs \([0-9]*\).*/\1/p' | tr '\n' ' ') || pair=""
        # one core holding both (a host of one core): the tool picks two CPUs
        local cpu0="" cpu1=""
        read -r cpu0 cpu1 _ <<<"$pair" || true
        [ "$cpu0" = "$cpu1" ] && pair=""
        # shellcheck disable=SC2086 # two CPU numbers, or none
        ns=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT "$latency" $pair 2>/dev/null |
             awk '{ print $(NF - 3) }') || ns="n/a"
        [[ $ns =~ ^[0-9]+$ ]] || ns="n/a"
    fi
    echo "$1 $2 $3 $sz $ns" >>"$c2c"
    if [ $(($4 % 2)) -eq 1 ]; then
        run_one flexcoll "$1" "$2" "$3"
        run_one "$base" "$1" "$2" "$3"
    else
        run_one "$base" "$1" "$2" "$3"
        run_one flexcoll "$1" "$2" "$3"
    fi
}

for n in $nlist; do
    for rep in $(seq 1 "$reps"); do
        for coll in $colls; do
            if [ -z "$paired" ]; then
                run_pair "$coll" "$n" "$rep" "$rep"
                continue
            fi
            i=0
            for ((size = lo; size <= hi; size *= 2)); do
                # a sweep has no row below one float (per rank, but for the allreduce)
                [ "$size" -lt 4 ] && continue
                [ "$coll" != allreduce ] && [ "$size" -lt $((4 * n)) ] && continue
                sweep=(-b "$size" -e "$size" -n "$iters" -w "$warmup" -c "$check")
                tag=-$size
                run_pair "$coll" "$n" "$rep" $((rep + i))
                i=$((i + 1))
            done
        done
    done
done

echo
echo "# flexcoll ($build) vs $base_name over loopback"
[ -n "$paired" ] && echo "# paired: one size per run, flexcoll and $base back to back at each size"
echo "# float, out-of-place, $iters iterations after $warmup warm-up, a run's time = the $stat of its"
echo "# iterations (slowest rank), median of $reps runs per size;"
echo "# ratio = baseline time / flexcoll time (> 1: flexcoll faster); busbw from the median times (GB/s)"
report "$results" "$c2c"
if [ -n "$keep" ]; then
    cp "$results" "$logdir/results.txt"
    cp "$c2c" "$logdir/c2c.txt"
    echo
    echo "# logs and results.txt kept in $logdir"
fi
