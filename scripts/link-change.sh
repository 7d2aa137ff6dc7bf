#!/bin/bash
# link-change.sh -- does the controller follow the link?  fast, slow, fast again, mid-run.
#
#   scripts/link-change.sh [options] BUILD_DIR [-- FLX-TRAIN ARGS...]
#
# Brings up an emulated cluster of N hosts at FAST (scripts/cluster.sh, needs
# root; torn down at the end and on Ctrl-C), starts flx-train --policy POLICY
# from BUILD_DIR in the background with --log OUTDIR/link-change.csv and
# --time-limit T1+T2+T3, and, counting from the start of training (when the
# CSV appears), after T1 seconds sets every link to SLOW with `cluster.sh
# rate`, T2 seconds later back to FAST, and lets it run T3 more seconds.
# Then prints, per phase (wall_s windows of the CSV, limits as measured
# here): steps, mean step and comm time, MB sent per step, the kept fraction
# (median, min-max), the share of each collective, and how long after the
# change the phase's main collective first appeared (with local steps,
# selsync and flex: kept fraction and shares of the syncs, the share of
# steps that did not sync apart); writes
# OUTDIR/link-change-decisions.png and -accuracy.png (scripts/plot-train,
# whose axis is training time: dotted lines at the first step after each
# change) and OUTDIR/link-change.txt (the table).
#
# Options:
#   -1 T1, -2 T2, -3 T3   seconds per phase (default 30 each)
#   -f FAST, -s SLOW      tc rates (default 10gbit and 100mbit)
#   -p POLICY             --policy (default flex)
#   -m SPEC               --model (default mlp:1024,1024)
#   -b B                  batch per rank (default 64)     -S SEED (default 1)
#   -E N                  --eval-every N steps (default 100; 0: per epoch only)
#   -e EPOCHS             --epochs, enough not to end before the time limit
#                         (default 100)
#   -N N                  ranks = hosts (default 4)
#   -o OUTDIR             (default ${TMPDIR:-/tmp}/flx-link-change)
#   -n, --dry-run         print the commands and when they would run
# Arguments after -- go to flx-train.  FLX_* environment is passed through.
set -u

here=$(cd "$(dirname "$0")" && pwd)
t1=30 t2=30 t3=30 fast=10gbit slow=100mbit policy=flex model=mlp:1024,1024 batch=64 seed=1
every=100 epochs=100 n=4 out=${TMPDIR:-/tmp}/flx-link-change dry=0

die() { echo "link-change.sh: $*" >&2; exit 2; }
args=()
for a in "$@"; do [ "$a" = --dry-run ] && a=-n; args+=("$a"); done
set -- "${args[@]}"
while getopts "1:2:3:f:s:p:m:b:S:E:e:N:o:nh" opt; do
    case $opt in
    1) t1=$OPTARG ;;
    2) t2=$OPTARG ;;
    3) t3=$OPTARG ;;
    f) fast=$OPTARG ;;
    s) slow=$OPTARG ;;
    p) policy=$OPTARG ;;
    m) model=$OPTARG ;;
    b) batch=$OPTARG ;;
    S) seed=$OPTARG ;;
    E) every=$OPTARG ;;
    e) epochs=$OPTARG ;;
    N) n=$OPTARG ;;
    o) out=$OPTARG ;;
    n) dry=1 ;;
    h) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [options] BUILD_DIR [-- FLX-TRAIN ARGS]   (-h for help)" >&2; exit 2; }
bdir=$(cd "$1" 2>/dev/null && pwd) || die "no build directory '$1'"
shift
[ "${1:-}" = -- ] && shift
extra=("$@")
for v in "1:$t1" "2:$t2" "3:$t3"; do
    [[ ${v#*:} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "-${v%%:*}: not a number of seconds: '${v#*:}'"
done
for v in "b:$batch" "S:$seed" "E:$every" "e:$epochs" "N:$n"; do
    [[ ${v#*:} =~ ^[0-9]+$ ]] || die "-${v%%:*}: not a number: '${v#*:}'"
done
for v in "f:$fast" "s:$slow"; do   # cluster.sh's rate form, checked before anything starts
    [[ ${v#*:} =~ ^[0-9]+(\.[0-9]+)?[kmgt]?(bit|bps)$ ]] || die "-${v%%:*}: bad rate '${v#*:}' (e.g. 100mbit, 10gbit)"
done
case " dense topk-ag artopk powersgd accordion gravac selsync flex " in
*" $policy "*) ;;
*) die "-p: unknown policy '$policy' (dense, topk-ag, artopk, powersgd, accordion, gravac, selsync, flex)" ;;
esac
train=$bdir/flx-train
if [ $dry = 0 ]; then mkdir -p "$out" || exit 2; fi
out=$(cd "$out" 2>/dev/null && pwd || echo "$out")
tlimit=$(awk -v a="$t1" -v b="$t2" -v c="$t3" 'BEGIN { print a + b + c }')
csv=$out/link-change.csv
log=$out/link-change.out
cmd=("$here/cluster.sh" run "$n" --timeout "$(awk -v t="$tlimit" 'BEGIN { print int(t + 300) }')" --
     "$train" --policy "$policy" --model "$model" --batch "$batch" --epochs "$epochs"
     --seed "$seed" --time-limit "$tlimit" --log "$csv")
[ "$every" != 0 ] && cmd+=(--eval-every "$every")
cmd+=("${extra[@]}")
q() { printf '%q' "$1"; shift; [ $# -eq 0 ] || printf ' %q' "$@"; }

if [ $dry = 1 ]; then
    q "$here/cluster.sh" up "$n" "$fast"; echo
    echo "FLXRUN=$(q "$bdir/flxrun") $(q "${cmd[@]}") >$(q "$log") 2>&1 &"
    echo "# when $(q "$csv") appears (training started): t = 0"
    echo "# at t = $t1 s: $(q "$here/cluster.sh" rate "$slow")"
    echo "# at t = $(awk -v a="$t1" -v b="$t2" 'BEGIN { print a + b }') s: $(q "$here/cluster.sh" rate "$fast")"
    echo "# training stops itself at t = $tlimit s; then: $(q "$here/cluster.sh" down)"
    exit 0
fi
[ -x "$train" ] && [ -x "$bdir/flxrun" ] || die "no flx-train/flxrun in $bdir"
"$train" --help 2>&1 | grep -q -- --policy ||
    die "$train has no --policy (not the gradient-sync trainer yet); -n shows the commands"
[ "$(id -u)" = 0 ] || die "the emulated cluster needs root"

pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null    # flxrun passes it to every rank
        wait "$pid" 2>/dev/null
    fi
    "$here/cluster.sh" down >/dev/null
}
trap cleanup EXIT
trap 'echo "link-change.sh: interrupted" >&2; exit 130' INT TERM

now() { date +%s.%N; }
# sleep_until T0 S: sleep until S seconds after the time T0 (from now()),
# returning early (1) if the training ends first
sleep_until() {
    local left
    while :; do
        left=$(awk -v t0="$1" -v s="$2" -v now="$(now)" 'BEGIN { l = t0 + s - now; print (l > 0 ? l : 0) }')
        [ "$left" = 0 ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep "$(awk -v l="$left" 'BEGIN { print (l < 0.5 ? l : 0.5) }')"
    done
}

"$here/cluster.sh" up "$n" "$fast" >/dev/null || exit 1
rm -f "$csv"
FLXRUN=$bdir/flxrun "${cmd[@]}" >"$log" 2>&1 &
pid=$!
# training starts right after the log is opened: wait for the file
start=$(now)
while [ ! -e "$csv" ]; do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; die "flx-train stopped before training ($?); see $log"; }
    awk -v s="$start" -v now="$(now)" 'BEGIN { exit !(now - s > 300) }' && die "no $csv after 300 s; see $log"
    sleep 0.1
done
t0=$(now)
echo "link-change: training started; $fast for $t1 s, $slow for $t2 s, $fast for $t3 s"
c1='' c2=''
if sleep_until "$t0" "$t1"; then
    "$here/cluster.sh" rate "$slow" >/dev/null && c1=$(awk -v t0="$t0" -v now="$(now)" 'BEGIN { printf "%.2f", now - t0 }')
    echo "link-change: t = $c1 s: links at $slow"
    if sleep_until "$t0" "$(awk -v a="$t1" -v b="$t2" 'BEGIN { print a + b }')"; then
        "$here/cluster.sh" rate "$fast" >/dev/null && c2=$(awk -v t0="$t0" -v now="$(now)" 'BEGIN { printf "%.2f", now - t0 }')
        echo "link-change: t = $c2 s: links at $fast"
    fi
fi
wait "$pid"
rc=$?
pid=
"$here/cluster.sh" down >/dev/null
[ $rc -eq 0 ] || { echo "link-change.sh: flx-train failed ($rc); last lines of $log:" >&2; tail -5 "$log" >&2; }
[ -n "$c2" ] || echo "link-change.sh: training ended before every change was made" >&2
[ -s "$csv" ] || exit 1

# ---- per phase -----------------------------------------------------------------
{
    echo "# $policy, $n ranks, $model: $fast, $slow from t = ${c1:--} s, $fast from t = ${c2:--} s"
    awk -F, -v c1="${c1:-1e30}" -v c2="${c2:-1e30}" -v r1="$fast" -v r2="$slow" '
    { sub(/\r$/, "") }
    NR == 1 { for (k = 1; k <= NF; k++) col[$k] = k; next }
    NF == 0 { next }
    function v(name) { return (name in col) ? $col[name] : "" }
    {
        # wall_s (evaluations included) runs with the clock the changes were made by
        t = v("wall_s") != "" ? v("wall_s") + 0 : v("time_s") + 0
        p = t < c1 ? 1 : t < c2 ? 2 : 3
        if (v("collective") == "eval") {   # the evaluation closing an epoch: a row, not a step
            acc[p] = v("test_acc"); prevev = 1; next
        }
        n[p]++
        if (!(p in first)) first[p] = t
        last[p] = t
        ev = v("test_acc") != ""
        if (!ev && !prevev && NR > 2 && p == prevp) { dt[p] += t - prevt; ndt[p]++ }
        prevt = t; prevev = ev; prevp = p
        comm[p] += v("comm_s"); bytes[p] += v("bytes")
        c = v("collective"); if (c == "") c = "?"
        if (c == "skip") { skip[p]++ }   # a local step (selsync, flex): no sync, no choice
        else {
            ns[p]++; kept[p, ns[p]] = v("kept_fraction") + 0
            cnt[p, c]++; if (!((p, c) in firstc)) firstc[p, c] = t
            if (!(c in known)) { known[c] = 1; names[++nn] = c }
        }
        if (ev) acc[p] = v("test_acc")
    }
    function median(p,    i, j, m, x, a) {
        m = ns[p]; if (!m) { lo[p] = hi[p] = 0; return 0 }
        for (i = 1; i <= m; i++) a[i] = kept[p, i]
        for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        lo[p] = a[1]; hi[p] = a[m]
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
        rate[1] = r1; rate[2] = r2; rate[3] = r1; from[1] = 0; from[2] = c1; from[3] = c2
        printf "%-5s %-8s %7s %6s %8s %8s %8s %-22s %-8s %s\n", "phase", "link", "from s", "steps",
               "step ms", "comm ms", "MB/step", "kept median (min-max)", "test acc", "collectives"
        for (p = 1; p <= 3; p++) {
            if (!n[p]) continue
            m = median(p)
            share = skip[p] ? sprintf("%d syncs (local steps %.0f%%): ", ns[p], 100 * skip[p] / n[p]) : ""
            sh0 = share; best = ""
            for (i = 1; i <= nn; i++) if (cnt[p, names[i]]) {
                share = share sprintf("%s%s %.0f%%", share == sh0 ? "" : ", ", names[i], 100 * cnt[p, names[i]] / ns[p])
                if (best == "" || cnt[p, names[i]] > cnt[p, best]) best = names[i]
            }
            main[p] = best == "" ? "skip" : best
            printf "%-5d %-8s %7.1f %6d %8.1f %8.1f %8.2f %-22s %-8s %s\n", p, rate[p], (from[p] > 1e29 ? 0 : from[p]), n[p],
                   ndt[p] ? 1e3 * dt[p] / ndt[p] : 0, 1e3 * comm[p] / n[p], bytes[p] / n[p] / 1e6,
                   sprintf("%.3g (%.3g-%.3g)", m, lo[p], hi[p]), (p in acc) ? acc[p] : "-", share
        }
        for (p = 2; p <= 3; p++) {
            if (!n[p] || !n[p - 1]) continue
            if (main[p] == main[p - 1])
                printf "# phase %d (%s): still mostly %s, as in phase %d\n", p, rate[p], main[p], p - 1
            else
                printf "# phase %d (%s): mostly %s instead of %s; first %s step %.1f s after the change\n",
                       p, rate[p], main[p], main[p - 1], main[p], firstc[p, main[p]] - from[p]
        }
    }' "$csv"
} | tee "$out/link-change.txt"
# the changes on plot-train's axis, training time (time_s): at the first row at or after each
marks=$(awk -F, -v c1="${c1:-}" -v c2="${c2:-}" '
    NR == 1 { for (k = 1; k <= NF; k++) col[$k] = k; next }
    ("wall_s" in col) && c1 != "" && m1 == "" && $col["wall_s"] + 0 >= c1 { m1 = $col["time_s"] + 0 }
    ("wall_s" in col) && c2 != "" && m2 == "" && $col["wall_s"] + 0 >= c2 { m2 = $col["time_s"] + 0 }
    END { if (m1 != "") printf "%.2f", m1; if (m2 != "") printf "%s%.2f", (m1 != "" ? "," : ""), m2 }' "$csv")
"$here/plot-train" -t "$policy, $n ranks: $fast, $slow, $fast" ${marks:+-v "$marks"} "$csv" "$out/link-change" >/dev/null
echo "# CSV: $csv   log: $log   charts: $out/link-change-decisions.png, $out/link-change-accuracy.png"
[ $rc -eq 0 ]
