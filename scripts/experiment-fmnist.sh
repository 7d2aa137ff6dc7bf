#!/bin/bash
# experiment-fmnist.sh -- every gradient-sync policy on Fashion-MNIST, slow to fast links.
#
#   scripts/experiment-fmnist.sh [options] BUILD_DIR [-- FLX-TRAIN ARGS...]
#
# For each RATE, brings up an emulated cluster of N hosts (scripts/cluster.sh,
# needs root; torn down at the end and on Ctrl-C) and trains the MLP once per
# POLICY with flx-train from BUILD_DIR (flxrun from there too), with the same
# model, seed, epochs and batch per rank every time.  Run RATE-POLICY writes
# OUTDIR/RATE-POLICY.csv (--log) and OUTDIR/RATE-POLICY.out (all output).
# Then prints one row per run: steps, final test accuracy, training time
# (time_s: evaluations left out) to reach the goal accuracy (first
# evaluation at or above it, "-" if none), training time, bytes this rank
# sent (the sum of the bytes column, MB = 1e6 B), mean step time (time_s
# differences, leaving out those holding an evaluation) and mean compute /
# selection / communication time per step (evaluation rows are not steps);
# writes the same
# table as markdown to OUTDIR/table.md and, per rate, OUTDIR/RATE-accuracy.png
# and OUTDIR/RATE-decisions.png (scripts/plot-train).
#
# Options:
#   -r RATES     comma-separated tc rates (default 100mbit,1gbit,10gbit)
#   -p POLICIES  comma-separated (default dense,topk-ag,artopk,powersgd,
#                accordion,gravac,selsync,flex)
#   -e EPOCHS    epochs per run (default 10)
#   -t SECONDS   --time-limit of each run (default none)
#   -o OUTDIR    where everything goes (default ${TMPDIR:-/tmp}/flx-fmnist)
#   -m SPEC      --model (default mlp:1024,1024, i.e. 784-1024-1024-10)
#   -b B         batch per rank (default 64)    -s SEED  (default 1)
#   -E N         --eval-every N steps (default 100; 0: once per epoch only)
#   -g ACC       goal test accuracy in % (default 85)
#   -N N         ranks = hosts (default 4)
#   -d DIR       --data DIR (default: flx-train's, Debian's fashion-mnist)
#   -R           report only: table and charts from the CSVs already in OUTDIR
#   -n, --dry-run  print the commands that would run, run nothing
# Arguments after -- go to every flx-train (e.g. -- --lr 0.1 --synthetic).
# Environment for the ranks (FLX_*) is passed through.
set -u

here=$(cd "$(dirname "$0")" && pwd)
rates=100mbit,1gbit,10gbit
policies=dense,topk-ag,artopk,powersgd,accordion,gravac,selsync,flex
epochs=10 tlimit='' out=${TMPDIR:-/tmp}/flx-fmnist model=mlp:1024,1024 batch=64 seed=1
every=100 goal=85 n=4 data='' report=0 dry=0

die() { echo "experiment-fmnist.sh: $*" >&2; exit 2; }
args=()
for a in "$@"; do [ "$a" = --dry-run ] && a=-n; args+=("$a"); done
set -- "${args[@]}"
while getopts "r:p:e:t:o:m:b:s:E:g:N:d:Rnh" opt; do
    case $opt in
    r) rates=$OPTARG ;;
    p) policies=$OPTARG ;;
    e) epochs=$OPTARG ;;
    t) tlimit=$OPTARG ;;
    o) out=$OPTARG ;;
    m) model=$OPTARG ;;
    b) batch=$OPTARG ;;
    s) seed=$OPTARG ;;
    E) every=$OPTARG ;;
    g) goal=$OPTARG ;;
    N) n=$OPTARG ;;
    d) data=$OPTARG ;;
    R) report=1 ;;
    n) dry=1 ;;
    h) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
bdir=${1:-}
[ -n "$bdir" ] || [ $report = 1 ] || { echo "usage: $0 [options] BUILD_DIR [-- FLX-TRAIN ARGS]   (-h for help)" >&2; exit 2; }
[ $# -gt 0 ] && shift
[ "${1:-}" = -- ] && shift
extra=("$@")
for v in "e:$epochs" "b:$batch" "s:$seed" "E:$every" "N:$n"; do
    [[ ${v#*:} =~ ^[0-9]+$ ]] || die "-${v%%:*}: not a number: '${v#*:}'"
done
[ -z "$tlimit" ] || [[ $tlimit =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "-t: not a number of seconds: '$tlimit'"
[[ $goal =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "-g: not a percentage: '$goal'"
IFS=, read -r -a rate_list <<<"$rates"
IFS=, read -r -a policy_list <<<"$policies"
[ ${#rate_list[@]} -gt 0 ] && [ ${#policy_list[@]} -gt 0 ] || die "no rates or no policies"
# every rate and policy checked before the first run (cluster.sh's rate form)
for r in "${rate_list[@]}"; do
    [[ $r =~ ^[0-9]+(\.[0-9]+)?[kmgt]?(bit|bps)$ ]] || die "-r: bad rate '$r' (e.g. 100mbit, 1gbit)"
done
for p in "${policy_list[@]}"; do
    case " dense topk-ag artopk powersgd accordion gravac selsync flex " in
    *" $p "*) ;;
    *) die "-p: unknown policy '$p' (dense, topk-ag, artopk, powersgd, accordion, gravac, selsync, flex)" ;;
    esac
done

# ---- runs ----------------------------------------------------------------------
q() { printf '%q' "$1"; shift; [ $# -eq 0 ] || printf ' %q' "$@"; }   # a command line, quoted for the shell

if [ $report = 0 ]; then
    [ -d "$bdir" ] || die "no build directory '$bdir'"
    bdir=$(cd "$bdir" && pwd) || exit 2
    train=$bdir/flx-train
    if [ $dry = 0 ]; then
        [ -x "$train" ] && [ -x "$bdir/flxrun" ] || die "no flx-train/flxrun in $bdir"
        "$train" --help 2>&1 | grep -q -- --policy ||
            die "$train has no --policy (not the gradient-sync trainer yet); -n shows the commands"
        [ "$(id -u)" = 0 ] || die "the emulated cluster needs root"
        mkdir -p "$out" || exit 2
    fi
    out=$(cd "$out" 2>/dev/null && pwd || echo "$out")
    common=(--model "$model" --batch "$batch" --epochs "$epochs" --seed "$seed")
    [ "$every" != 0 ] && common+=(--eval-every "$every")
    [ -n "$tlimit" ] && common+=(--time-limit "$tlimit")
    [ -n "$data" ] && common+=(--data "$data")
    # flxrun's limit: the run's own limit plus time to start and evaluate
    timeout=()
    [ -n "$tlimit" ] && timeout=(--timeout "$(awk -v t="$tlimit" 'BEGIN { print int(t + 300) }')")
    if [ $dry = 0 ]; then
        echo "# Fashion-MNIST, $n ranks, $model, batch $batch per rank, $epochs epochs, seed $seed${tlimit:+, time limit $tlimit s}, eval every $every steps" >"$out/params.txt"
        trap '"$here/cluster.sh" down >/dev/null' EXIT
        trap 'echo; echo "experiment-fmnist.sh: interrupted" >&2; exit 130' INT TERM
    fi
    for rate in "${rate_list[@]}"; do
        if [ $dry = 1 ]; then
            q "$here/cluster.sh" up "$n" "$rate"; echo
        else
            "$here/cluster.sh" up "$n" "$rate" >/dev/null || exit 1
        fi
        for pol in "${policy_list[@]}"; do
            base=$out/$rate-$pol
            cmd=("$here/cluster.sh" run "$n" "${timeout[@]}" -- "$train" --policy "$pol"
                 "${common[@]}" --log "$base.csv" "${extra[@]}")
            if [ $dry = 1 ]; then
                echo "FLXRUN=$(q "$bdir/flxrun") $(q "${cmd[@]}") >$(q "$base.out") 2>&1"
                continue
            fi
            printf "%s %-18s " "$(date +%T)" "$rate $pol"
            rm -f "$base.csv"
            t0=$(date +%s)
            FLXRUN=$bdir/flxrun "${cmd[@]}" >"$base.out" 2>&1
            rc=$?
            if [ $rc -eq 0 ]; then
                echo "done in $(($(date +%s) - t0)) s"
            else
                echo "FAILED ($rc) after $(($(date +%s) - t0)) s; last lines of $base.out:"
                tail -3 "$base.out" | sed 's/^/    /'
            fi
        done
    done
    if [ $dry = 1 ]; then
        q "$here/cluster.sh" down; echo
        exit 0
    fi
    "$here/cluster.sh" down >/dev/null
    trap - EXIT
fi

# ---- report --------------------------------------------------------------------
[ -d "$out" ] || die "no output directory $out"
# one tab-separated row per CSV, columns found by header name
summary() {
    awk -F, -v goal="$goal" '
    { sub(/\r$/, "") }
    NR == 1 { for (k = 1; k <= NF; k++) col[$k] = k; next }
    NF == 0 { next }
    function v(name) { return (name in col) ? $col[name] : "" }
    {
        t = v("time_s") + 0
        evalrow = v("test_acc") != ""
        if (evalrow) {
            acc = v("test_acc") + 0; final = acc
            if (reach == "" && acc >= goal) reach = t
        }
        if (v("collective") == "eval") { preveval = 1; next }   # a row of its own, not a step
        steps++
        if (!evalrow && !preveval) { dt += t - prevt; ndt++ }
        prevt = t; preveval = evalrow
        bytes += v("bytes"); comp += v("compute_s"); sel += v("select_s"); comm += v("comm_s")
    }
    END {
        if (steps == 0) { printf "0\t-\t-\t-\t-\t-\t-\t-\t-\n"; exit }
        printf "%d\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\n", steps,
               final == "" ? "-" : sprintf("%.2f", final), reach == "" ? "-" : sprintf("%.1f", reach),
               prevt, bytes / 1e6, ndt ? 1e3 * dt / ndt : 0, 1e3 * comp / steps,
               1e3 * sel / steps, 1e3 * comm / steps
    }' "$1"
}
rows=$out/table.tsv
printf 'rate\tpolicy\tsteps\tfinal acc %%\tt to %s%% (s)\ttime (s)\tMB/rank\tstep ms\tcompute ms\tselect ms\tcomm ms\tnote\n' \
    "$goal" >"$rows"
nrows=0
for rate in "${rate_list[@]}"; do
    csvs=()
    for pol in "${policy_list[@]}"; do
        base=$out/$rate-$pol
        [ -f "$base.csv" ] || [ -f "$base.out" ] || continue
        note=
        if [ -f "$base.out" ] && ! grep -q 'flx-train: done in' "$base.out"; then note="failed, see $(basename "$base.out")"; fi
        if [ -f "$base.csv" ]; then
            printf '%s\t%s\t%s\t%s\n' "$rate" "$pol" "$(summary "$base.csv")" "$note" >>"$rows"
            csvs+=("$base.csv")
        else
            printf '%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n' "$rate" "$pol" "${note:-no CSV}" >>"$rows"
        fi
        nrows=$((nrows + 1))
    done
    [ ${#csvs[@]} -gt 0 ] &&
        "$here/plot-train" -g "$goal" -t "Fashion-MNIST, $n ranks, $rate, $model" "${csvs[@]}" "$out/$rate" >/dev/null
done
[ $nrows -gt 0 ] || die "no RATE-POLICY.csv in $out for rates $rates, policies $policies"
{
    if [ -f "$out/params.txt" ]; then cat "$out/params.txt"; else echo "# Fashion-MNIST runs in $out"; fi
    echo
    awk -F'\t' '{
        line = "|"; for (k = 1; k <= NF; k++) line = line " " $k " |"; print line
        if (NR == 1) { line = "|"; for (k = 1; k <= NF; k++) line = line (k <= 2 || k == NF ? " --- |" : " ---: |"); print line }
    }' "$rows"
} >"$out/table.md"
# aligned text on the terminal (no note column when every run is fine)
awk -F'\t' '
{ for (k = 1; k <= NF; k++) { c[NR, k] = $k; if (length($k) > w[k]) w[k] = length($k) }
  if (NR > 1 && $12 != "") notes = 1; n = NR }
END { for (r = 1; r <= n; r++) { line = ""
        for (k = 1; k <= (notes ? 12 : 11); k++)
            line = line sprintf(k <= 2 || k == 12 ? "%-*s  " : "%*s  ", w[k], c[r, k])
        sub(/ +$/, "", line); print line } }' "$rows"
rm -f "$rows"
echo "# table: $out/table.md   charts: $out/RATE-accuracy.png, $out/RATE-decisions.png"
