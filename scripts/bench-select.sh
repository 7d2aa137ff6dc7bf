#!/bin/bash
# bench-select.sh -- does the automatic algorithm choice pick the fastest?
#
#   scripts/bench-select.sh [options] RATE
#
# RATE: a tc rate (1gbit, 10gbit, 25gbit, 500mbit...) for an emulated cluster
# of N hosts (scripts/cluster.sh, needs root; brought up here and always torn
# down on exit), or "loopback" for N local ranks under flxrun.
#
# Runs `flx-allreduce-perf -a all --model` (ring, tree, rd, hd, then auto at each
# size, so load changes hit them alike; -c allgather: flx-allgather-perf, ring
# and rd = Bruck, sizes gathered in all) and prints per size: each algorithm's time, auto's time
# and choice, auto / fastest (target <= 1.10), pick / fastest (the chosen
# algorithm's own run against the fastest: the choice without the noise
# between the auto run and the others), and the model's error for each
# algorithm ((measured - predicted) / predicted; target within 25% at >= 64 KiB).
# Times are the p50 of the out-of-place iterations (the slowest rank's), which
# is steadier than the mean on a shared machine.
#
# Options:
#   -c COLL     allreduce (default) or allgather
#   -n N        ranks / hosts (default 4)
#   -b SIZE     smallest size (default 8)
#   -e SIZE     largest size (default 16M)
#   -i ITERS    timed iterations per size (default 15), -w warm-up (default 3)
#   -o DIR      where the CSV and the table go (default ${TMPDIR:-/tmp}/flx-bench)
#   -B DIR      build directory holding flxrun and flx-allreduce-perf (default:
#               the current directory if it has them, else build/)
# Environment for the ranks (FLX_*) is passed through.
set -u

here=$(cd "$(dirname "$0")" && pwd)
n=4 minb=8 maxb=16M iters=15 warm=3 out=${TMPDIR:-/tmp}/flx-bench bdir= coll=allreduce
while getopts "c:n:b:e:i:w:o:B:h" opt; do
    case $opt in
    c) coll=$OPTARG ;;
    n) n=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    i) iters=$OPTARG ;;
    w) warm=$OPTARG ;;
    o) out=$OPTARG ;;
    B) bdir=$OPTARG ;;
    h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
rate=${1:-}
[ -n "$rate" ] || { echo "usage: $0 [options] RATE|loopback   (-h for help)" >&2; exit 2; }
[ $# -le 1 ] || { echo "$0: one RATE, not '$1' and '$2'" >&2; exit 2; }
for v in "n:$n" "i:$iters"; do
    [[ ${v#*:} =~ ^[0-9]+$ ]] && [ "${v#*:}" -ge 1 ] || { echo "$0: -${v%%:*} needs a positive integer, not '${v#*:}'" >&2; exit 2; }
done
[[ $warm =~ ^[0-9]+$ ]] || { echo "$0: -w needs an integer, not '$warm'" >&2; exit 2; }
case $coll in allreduce|allgather) ;; *) echo "$0: -c $coll: allreduce or allgather" >&2; exit 2 ;; esac

if [ -z "$bdir" ]; then
    if [ -x ./flx-allreduce-perf ]; then bdir=.; else bdir=$here/../build; fi
fi
bdir=$(cd "$bdir" && pwd) || exit 2
perf=$bdir/flx-$coll-perf
[ -x "$perf" ] && [ -x "$bdir/flxrun" ] || { echo "$0: no flx-$coll-perf/flxrun in $bdir" >&2; exit 2; }
mkdir -p "$out" || exit 2
tag=select-$rate-n$n
[ "$coll" = allreduce ] || tag=select-$coll-$rate-n$n
csv=$out/$tag.csv
log=$out/$tag.log
table=$out/$tag.txt

args=(-b "$minb" -e "$maxb" -f 2 -n "$iters" -w "$warm" -c 0 -a all --model --csv "$csv")
if [ "$rate" = loopback ]; then
    "$bdir/flxrun" -n "$n" --timeout 900 -- "$perf" "${args[@]}" >"$log" 2>&1
    rc=$?
else
    trap '"$here/cluster.sh" down' EXIT
    trap 'exit 130' INT TERM
    "$here/cluster.sh" up "$n" "$rate" >/dev/null || exit 1
    FLXRUN=$bdir/flxrun "$here/cluster.sh" run "$n" --timeout 900 -- "$perf" "${args[@]}" >"$log" 2>&1
    rc=$?
fi
# TCP ping-pong round trip between two hosts (8 bytes, TCP_NODELAY, median of
# 2000, a Python client and server: no ping(8) here), for the 8 B latency target.
rtt_us=
if [ "$rate" != loopback ] && [ $rc -eq 0 ] && command -v python3 >/dev/null; then
    "$here/cluster.sh" exec 1 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 29399)); s.listen(1); s.settimeout(20); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(64)
    if not d: break
    c.sendall(d)' &
    sleep 0.5
    rtt_us=$("$here/cluster.sh" exec 0 python3 -c '
import socket, time
c = socket.create_connection(("10.77.0.2", 29399), timeout=20)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for i in range(2200):
    t0 = time.perf_counter(); c.sendall(b"12345678"); n = 0
    while n < 8: n += len(c.recv(64))
    t.append(time.perf_counter() - t0)
t = sorted(t[200:]); print("%.1f" % (t[len(t) // 2] * 1e6))')
    wait
fi
if [ $rc -ne 0 ]; then
    echo "$0: flx-$coll-perf failed ($rc); last lines of $log:" >&2
    tail -5 "$log" >&2
    exit 1
fi

model=$(grep -o 'link model: .*' "$log" | head -1)
alpha_us=$(echo "$model" | awk '{ for (i = 1; i < NF; i++) if ($i == "alpha") print $(i + 1) + 0 }')
linkbps=0
if [ "$rate" != loopback ]; then
    # bytes/s of a tc rate: bit is bits, bps bytes, each with k, m, g or t
    linkbps=$(echo "$rate" | awk '{ r = tolower($0); n = r + 0; m = 1
        if (r ~ /k(bit|bps)$/) m = 1e3; if (r ~ /m(bit|bps)$/) m = 1e6
        if (r ~ /g(bit|bps)$/) m = 1e9; if (r ~ /t(bit|bps)$/) m = 1e12
        print (r ~ /bit$/ ? n * m / 8 : n * m) }')
fi
{
    echo "# $coll algorithm selection, $n ranks, $rate ($model)"
    echo "# p50 time of the out-of-place runs in us; err = (measured - predicted) / predicted"
    # CSV columns by name from the header; algo_arg is what -a asked for
    # (1 ring, 2 tree, 3 rd, 4 hd, 5 auto), algo what ran; the allgather has
    # neither tree nor hd.
    awk -F, -v rtt="${rtt_us:-0}" -v linkbps="$linkbps" -v alpha="$alpha_us" -v coll="$coll" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["placement"] != "out-of-place" { next }
    {
        size = $col["size"]
        arg = $col["algo_arg"]
        sweep = arg == "ring" ? 1 : arg == "tree" ? 2 : arg == "rd" ? 3 : arg == "hd" ? 4 : 5
        if (size != prev) sizes[++nsz] = size
        prev = size
        t[sweep, size] = $col["p50_us"]
        if (sweep <= 4) p[sweep, size] = $col["pred_us"]
        if (sweep == 5) choice[size] = $col["algo"]
        busbw[sweep, size] = $col["busbw_gbs"]
        nranks = $col["nranks"]
    }
    function hs(b) {
        if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "M"
        if (b >= 1024 && b % 1024 == 0) return (b / 1024) "K"
        return b
    }
    END {
        printf "%8s %10s %10s %10s %10s %10s %6s %9s %9s %8s %8s %8s %8s\n", "size", "ring", "tree",
               "rd", "hd", "auto", "choice", "auto/best", "pick/best", "err ring", "err tree", "err rd",
               "err hd"
        worst = 0; bad = 0; errbad = 0; pworst = 0; pbad = 0
        for (k = 1; k <= nsz; k++) {
            s = sizes[k]; best = 1e300; bname = ""
            for (a = 1; a <= 4; a++) if ((a, s) in t && t[a, s] < best) { best = t[a, s]; bname = a }
            r = best > 0 ? t[5, s] / best : 0
            if (r > worst) worst = r
            if (r > 1.10) bad++
            # the chosen algorithm, its own run, against the fastest: the choice
            # alone, without the noise between the auto run and the others
            c = choice[s] == "ring" ? 1 : choice[s] == "tree" ? 2 : choice[s] == "rd" ? 3 : choice[s] == "hd" ? 4 : 0
            pr = c && best > 0 ? t[c, s] / best : 0
            if (pr > pworst) pworst = pr
            if (pr > 1.10) pbad++
            line = sprintf("%8s %10.1f %10s %10.1f %10s %10.1f %6s %9.2f %9.2f", hs(s), t[1, s],
                           (2, s) in t ? sprintf("%.1f", t[2, s]) : "-", t[3, s],
                           (4, s) in t ? sprintf("%.1f", t[4, s]) : "-", t[5, s], choice[s], r, pr)
            for (a = 1; a <= 4; a++) {
                if (!((a, s) in t)) { line = line sprintf(" %8s", "-"); continue }
                e = p[a, s] > 0 ? (t[a, s] / p[a, s] - 1) * 100 : 0
                line = line sprintf(" %+7.0f%%", e)
                if (s >= 65536) { n64++; if (e > 25 || e < -25) errbad++ }
            }
            print line
        }
        printf "# auto/best: worst %.2f, %d of %d sizes above 1.10; model error outside 25%% at >= 64K: %d of %d\n",
               worst, bad, nsz, errbad, n64
        printf "# pick/best (the chosen algorithm, its own run): worst %.2f, %d of %d sizes above 1.10\n",
               pworst, pbad, nsz
        # ring bus bandwidth at the largest size; 8 B latency against ping
        big = sizes[nsz]
        printf "# ring busbw at %s: %.3f GB/s", hs(big), busbw[1, big]
        if (linkbps > 0) printf " = %.0f%% of the link (%.3f GB/s)", 100 * busbw[1, big] / (linkbps / 1e9), linkbps / 1e9
        printf "\n"
        lat = t[5, sizes[1]]; lg = 0; for (m = 1; m < nranks; m *= 2) lg++
        if (coll != "allreduce") exit
        if (rtt > 0)
            printf "# %s B auto %.1f us = %.2f x 2 log2(N) round trips of a Python TCP ping-pong (%.1f us)\n",
                   sizes[1], lat, lat / (2 * lg * rtt), rtt
        if (alpha > 0)
            printf "# %s B auto %.1f us = %.2f x 2 log2(N) round trips of flexcoll (2 alpha = %.1f us)\n",
                   sizes[1], lat, lat / (4 * lg * alpha), 2 * alpha
    }
    ' "$csv"
} | tee "$table"
echo "# CSV: $csv   log: $log"
