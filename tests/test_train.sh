#!/bin/sh
# test_train.sh -- flx-train learns the synthetic task with every policy on
# 1 and 3 ranks: the final test accuracy and the last epoch's training loss
# are asserted, and --check-sync fails the run unless every rank holds
# bit-identical weights after every synchronised step.  Also the CNN, and
# errors for bad options and corrupt data.
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

# train N POLICY ARGS...: runs, checks accuracy >= 85% and loss < 0.6
train() {
    n=$1 pol=$2
    shift 2
    out=$("$top/flxrun" -n "$n" --timeout 300 "$top/flx-train" --synthetic --epochs 3 \
          --model mlp:64 --batch 32 --seed 3 --policy "$pol" --check-sync \
          --log "$tmp/$pol-$n.csv" "$@" 2>&1) || fail "flx-train --policy $pol on $n ranks: $out"
    acc=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p' | tail -1)
    loss=$(echo "$out" | sed -n 's/.*epoch 3\/3  loss \([0-9.]*\) .*/\1/p' | tail -1)
    [ -n "$acc" ] && [ -n "$loss" ] || fail "no accuracy or loss in: $out"
    awk -v a="$acc" -v l="$loss" 'BEGIN { exit !(a >= 85.0 && l < 0.6) }' ||
        fail "--policy $pol on $n ranks: test accuracy $acc%, loss $loss (need >= 85%, < 0.6): $out"
    rows=$(grep -c ",$pol," "$tmp/$pol-$n.csv")
    [ "$rows" -ge 100 ] || fail "--policy $pol on $n ranks: $rows rows in the step log"
    echo "policy $pol, $n rank(s): test accuracy $acc%, loss $loss"
}

for pol in dense topk-ag artopk powersgd accordion gravac selsync flex; do
    for n in 1 3; do
        train "$n" "$pol" --interval 20
    done
done
# flex (local steps, the default) skipped some steps and synced others
grep -q ",flex,skip," "$tmp/flex-3.csv" || fail "flex never took a local step"
grep -q ",flex,dense-ring,\|,flex,dense-tree,\|,flex,artopk,\|,flex,topk-ag," "$tmp/flex-3.csv" ||
    fail "flex never synced"
# flex actually compresses when the weight asks for speed (above its default gain floor)
train 3 flex --weight 1 --interval 20
grep -q ",flex,artopk,\|,flex,topk-ag," "$tmp/flex-3.csv" || fail "flex --weight 1 never compressed"
# ... and without local steps: the controller syncs every step's gradient
train 3 flex --weight 1 --interval 20 --local-steps off
grep -q ",flex,skip," "$tmp/flex-3.csv" && fail "flex --local-steps off skipped a step"
grep -q ",flex,artopk,\|,flex,topk-ag," "$tmp/flex-3.csv" ||
    fail "flex --local-steps off --weight 1 never compressed"
# the drift sync is SelSync's weight average when the controller keeps everything (weight 0:
# dense): x = xref - mean(xref - x_i) = mean(x_i) up to rounding, at the same steps
sel=$(train 3 selsync --delta 0.3) || { echo "$sel"; exit 1; }
fd=$(train 3 flex --delta 0.3 --delta-decay 0 --weight 0) || { echo "$fd"; exit 1; }
ns=$(awk -F, '$5 == "selsync" && $6 == "dense-ring"' "$tmp/selsync-3.csv" | wc -l)
nf=$(awk -F, '$5 == "flex" && ($6 == "dense-ring" || $6 == "dense-tree")' "$tmp/flex-3.csv" | wc -l)
nc=$(awk -F, '$5 == "flex" && ($6 == "artopk" || $6 == "topk-ag")' "$tmp/flex-3.csv" | wc -l)
[ "$nc" -eq 0 ] || fail "flex --weight 0 compressed $nc syncs"
awk -v a="$ns" -v b="$nf" 'BEGIN { d = a - b; exit !(a >= 5 && d <= 2 && d >= -2) }' ||
    fail "selsync synced $ns times, flex --weight 0 $nf (same test, same delta)"
awk -v a="${sel#*accuracy }" -v b="${fd#*accuracy }" 'BEGIN { a += 0; b += 0; d = a - b; exit !(d < 1 && d > -1) }' ||
    fail "selsync and flex --weight 0 differ by a point or more: $sel / $fd"
echo "selsync $ns syncs, flex --weight 0 $nf"
# without flex's default gain floor (--min-gain 0) it still learns and compresses
train 3 flex --weight 1 --interval 20 --min-gain 0
grep -q ",flex,artopk,\|,flex,topk-ag," "$tmp/flex-3.csv" || fail "flex --min-gain 0 never compressed"
# AR-Topk with the index set voted by every rank
train 3 artopk --leader vote
# dense over the halving-doubling allreduce: learns, and the log names it
train 3 dense --algo hd
grep -q ",dense,dense-hd," "$tmp/dense-3.csv" || fail "--algo hd: no dense-hd step in the log"
grep -q ",dense,dense-ring,\|,dense,dense-rd,\|,dense,dense-tree," "$tmp/dense-3.csv" &&
    fail "--algo hd: a step ran another allreduce"
# top-k with momentum correction: each rank's velocity compressed, masked where sent;
# it must change the run (same seed, same data: without it the runs are identical)
mc_on=$(train 3 topk-ag --momentum-correction on) || { echo "$mc_on"; exit 1; }
echo "$mc_on"
mc_off=$(train 3 topk-ag --momentum-correction off) || { echo "$mc_off"; exit 1; }
[ "${mc_on#*accuracy}" != "${mc_off#*accuracy}" ] ||
    fail "--momentum-correction on changed nothing: $mc_on / $mc_off"
train 3 flex --weight 1 --interval 20 --momentum-correction on --local-steps off
out=$("$top/flx-train" --synthetic --policy flex --momentum-correction on 2>&1) &&
    fail "momentum correction with flex's local steps accepted"
echo "$out" | grep -q "add --local-steps off" || fail "no clear error for flex local steps + momentum correction: $out"
out=$("$top/flx-train" --synthetic --policy flex --local-steps maybe 2>&1) && fail "--local-steps maybe accepted"
echo "$out" | grep -q "bad value 'maybe' for --local-steps" || fail "no clear error for --local-steps maybe: $out"
out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 5 --model mlp:16 --policy topk-ag \
      --momentum-correction on 2>&1) || fail "momentum correction, 1 rank: $out"
echo "$out" | grep -q "policy topk-ag with momentum correction" || fail "no momentum correction line: $out"
# selsync skipped some steps and synced others
grep -q ",selsync,skip," "$tmp/selsync-3.csv" || fail "selsync never skipped a step"
# ... and syncs when the smoothed norm has moved by delta since the last sync, not only
# every --interval: while the norm falls early on (before, it tested the change from one
# step to the next of the smoothed norm, a quarter of the raw change, and synced at
# none of steps 1-39 here; now at 4, 6, 8, 10, 14, 16, 19, 23 and 29)
"$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 1 --max-steps 40 \
    --policy selsync --interval 1000 --seed 1 --log "$tmp/selsync-delta.csv" >/dev/null 2>&1 ||
    fail "selsync --interval 1000 failed"
synced=$(awk -F, 'NR > 2 && $6 == "dense-ring"' "$tmp/selsync-delta.csv" | wc -l)
[ "$synced" -ge 3 ] || fail "selsync synced $synced times in steps 1-39 with a falling norm"
# --max-local sets the longest run without a sync apart from --interval (the critical test's):
# with a delta no change reaches, selsync and flex sync every 7th step, not every 3rd
for pol in selsync flex; do
    "$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 1 --max-steps 30 \
        --policy $pol --delta 100 --interval 3 --max-local 7 --log "$tmp/maxlocal.csv" >/dev/null 2>&1 ||
        fail "$pol --max-local 7 failed"
    synced=$(awk -F, 'NR > 1 && $14 == 1 {printf "%s ", $1}' "$tmp/maxlocal.csv")
    [ "$synced" = "0 7 14 21 28 " ] || fail "$pol --max-local 7 --interval 3 synced at steps $synced"
done
# --delta-decay P: a step syncs when the agreed norm change reaches delta x (lr / --lr)^P
# (flex's default P is 0.5, selsync's 0): checked step by step from the log's lr and change
# columns, away from the threshold by 2%; under a cosine rate the decay syncs more often
syncs=""
for run in "selsync --delta-decay 1:1:0.3" "selsync --delta-decay 0:0:0.3" "flex:0.5:0.2"; do
    args=${run%%:*} p=${run#*:} p=${p%%:*} d=${run##*:}
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 2 --model mlp:64 \
        --batch 32 --lr 0.05 --lr-schedule cosine --max-local 1000 --policy $args \
        --log "$tmp/decay.csv" 2>&1) || fail "--policy $args failed: $out"
    # the epoch line names the delta of the epoch's last step where it decays
    n=$(echo "$out" | grep -c "epoch [12]/2 .*; delta now [0-9]")
    [ "$p" = 0 ] && [ "$n" != 0 ] && fail "--policy $args: a decaying delta in the epoch line: $out"
    [ "$p" != 0 ] && [ "$n" != 2 ] && fail "--policy $args: no 'delta now' in the epoch lines: $out"
    bad=$(awk -F, -v p="$p" -v d="$d" 'NR > 2 && $6 != "eval" {
              thr = d * ($18 / 0.05) ^ p; ch = ($20 == "inf") ? 1e300 : $20
              if ((ch > 1.02 * thr && $14 != 1) || (ch < 0.98 * thr && $14 != 0))
                  printf "step %s lr %s change %s synced %s; ", $1, $18, $20, $14 }' "$tmp/decay.csv")
    [ -z "$bad" ] || fail "--policy $args, delta $d x (lr / 0.05)^$p: $bad"
    syncs="$syncs $(awk -F, 'NR > 1 && $6 != "eval" && $14 == 1' "$tmp/decay.csv" | wc -l)"
done
set -- $syncs
[ "$1" -gt "$2" ] || fail "selsync synced $1 times with --delta-decay 1, $2 without (cosine rate)"
out=$("$top/flx-train" --synthetic --policy selsync --max-local 0 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "bad value '0' for --max-local" || fail "--max-local 0 accepted: $out"
out=$("$top/flx-train" --synthetic --policy selsync --delta-decay -1 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "bad value '-1' for --delta-decay" ||
    fail "--delta-decay -1 accepted: $out"
# numbers are read as FLX_* values are: no hexadecimal, no blanks, no sign (strtod took
# them); an unknown option is getopt's line and a pointer to --help, not the whole usage
for v in 0x10 " 0.1" "0.1 " "+0.1" "-0" inf nan; do
    out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 1 --lr "$v" 2>&1)
    [ $? = 2 ] && echo "$out" | grep -q "bad value '$v' for --lr" || fail "--lr '$v' accepted: $out"
done
out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 1 --lr .05 2>&1) ||
    fail "--lr .05 (as FLX_* values take it) refused: $out"
out=$("$top/flx-train" --synthetic --bogus 2>&1)
[ $? = 2 ] && [ "$(echo "$out" | wc -l)" -eq 2 ] && echo "$out" | grep -q "see --help" ||
    fail "--bogus: not two lines pointing at --help: $out"

out=$("$top/flx-train" --synthetic --policy flex --local-steps off --max-local 3 --epochs 1 \
      --delta-decay 1 --max-steps 2 2>&1) || fail "flex --local-steps off --max-local 3: $out"
echo "$out" | grep -q "warning: --policy flex ignores --max-local" ||
    fail "no warning for --max-local without local steps: $out"
echo "$out" | grep -q "ignores.*--delta-decay" ||
    fail "no warning for --delta-decay without local steps: $out"
# selsync evaluates the mean of the ranks' weights apart and puts each rank's own back:
# evaluating every 7 steps leaves every step's loss as it was without
for e in 0 7; do
    every=""
    [ "$e" = 0 ] || every="--eval-every $e"
    "$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 2 --model mlp:64 \
        --batch 32 --seed 3 --policy selsync $every --log "$tmp/eval-$e.csv" >/dev/null 2>&1 ||
        fail "selsync ${every:-without --eval-every}"
done
[ "$(awk -F, 'NR > 1 && $6 != "eval" && $15 != ""' "$tmp/eval-7.csv" | wc -l)" -ge 5 ] ||
    fail "no --eval-every 7 evaluations in the step log"
l0=$(awk -F, '$6 != "eval" && NR > 1 { print $1, $4 }' "$tmp/eval-0.csv")
l7=$(awk -F, '$6 != "eval" && NR > 1 { print $1, $4 }' "$tmp/eval-7.csv")
[ -n "$l0" ] && [ "$l0" = "$l7" ] || fail "evaluating the mean of selsync's ranks changed the training"
# ranks given different --seed or --lr stop at once with one line naming it (they trained to
# the end with different weights, exit 0)
for opt in "--seed \$((FLX_RANK + 1))" "--lr 0.0\$((FLX_RANK + 1))"; do
    out=$("$top/flxrun" -n 2 --timeout 60 sh -c "exec '$top/flx-train' --synthetic --epochs 1 \
          --max-steps 5 --model mlp:16 $opt" 2>&1) && fail "ranks with different ${opt%% *} trained: $out"
    echo "$out" | grep -q "the ranks were given different ${opt%% *} (every rank" ||
        fail "no line for different ${opt%% *}: $out"
done
# the CNN on 4000 Fashion-MNIST images (the synthetic task has no image structure)
out=$("$top/flxrun" -n 2 --timeout 300 "$top/flx-train" --train-limit 4000 --epochs 2 \
      --model cnn:8,16,64 --batch 32 --seed 3 --check-sync 2>&1) || fail "CNN: $out"
acc=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 70.0) }' || fail "CNN test accuracy $acc% < 70%: $out"
echo "CNN on Fashion-MNIST, 2 ranks: test accuracy $acc%"

# --time-limit: the ranks agree when to stop (their clocks differ), evaluate, exit 0
out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 50 --model mlp:64 \
      --batch 32 --time-limit 0.3 --policy flex 2>&1) || fail "--time-limit run: $out"
echo "$out" | grep -q "final test-acc" || fail "--time-limit: no final line: $out"
echo "$out" | grep -q "epoch 50/50" && fail "--time-limit did not stop the run: $out"

# bad input: one clear line, exit status != 0
out=$("$top/flx-train" --synthetic --train-limit 10 --batch 64 2>&1) && fail "10 examples for a 64-example step accepted"
echo "$out" | grep -q "fewer than one step" || fail "no clear error for too little data: $out"
"$top/flx-train" --policy fastest >/dev/null 2>&1 && fail "unknown policy accepted"
out=$("$top/flx-train" --synthetic --policy dense --momentum-correction on 2>&1) &&
    fail "momentum correction without top-k accepted"
echo "$out" | grep -q "needs a top-k policy" || fail "no clear error for dense + momentum correction: $out"
"$top/flx-train" --synthetic --momentum-correction maybe >/dev/null 2>&1 &&
    fail "--momentum-correction maybe accepted"
out=$("$top/flx-train" --synthetic --model cnn:4 2>&1) && fail "bad CNN spec accepted"
out=$("$top/flx-train" --synthetic --policy flex --min-gain 1.5 2>&1) && fail "--min-gain 1.5 accepted"
echo "$out" | grep -q "min-gain" || fail "no clear error for --min-gain 1.5: $out"
out=$("$top/flx-train" --synthetic --model mlp:0 2>&1) && fail "zero-width layer accepted"
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "width 0 is not in" ||
    fail "a bad model spec: not the one line saying why (checked late?): $out"
out=$("$top/flx-train" --synthetic --hidden 16, 2>&1) && fail "--hidden 16, accepted"
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "bad width list" ||
    fail "--hidden 16,: not the one line saying why: $out"
# an option the policy ignores: said once, by rank 0, and the run goes on
out=$("$top/flxrun" -n 2 "$top/flx-train" --synthetic --epochs 1 --max-steps 2 --policy dense --kept 0.5 2>&1) ||
    fail "dense with --kept: $out"
[ "$(echo "$out" | grep -c "warning: --policy dense ignores --kept (topk-ag or artopk)")" -eq 1 ] ||
    fail "no single warning for --kept with dense: $out"
# the step schedule: x0.1 from the first epoch starting at or after 50% and 75% (5 epochs: the
# 4th and the 5th; it decayed in the 3rd before)
"$top/flx-train" --synthetic --epochs 5 --max-steps 2 --lr-schedule step --log "$tmp/lr.csv" >/dev/null 2>&1 ||
    fail "the step schedule run"
lrs=$(awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
    $c["collective"] != "eval" && !($c["epoch"] in seen) { seen[$c["epoch"]] = 1; printf "%s ", $c["lr"] }' "$tmp/lr.csv")
[ "$lrs" = "0.05 0.05 0.05 0.005 0.0005 " ] || fail "step schedule over 5 epochs: $lrs"
# a full disk: the run fails, it does not leave a short log behind an exit 0
"$top/flx-train" --synthetic --epochs 1 --max-steps 2 --log /dev/full >/dev/null 2>&1 &&
    fail "a step log on a full disk passed"
"$top/flx-train" --synthetic --epochs 1 --max-steps 2 --policy flex --ctl-log /dev/full >/dev/null 2>&1 &&
    fail "a decision log on a full disk passed"
"$top/flx-train" --synthetic --epochs 1 --max-steps 2 >/dev/full 2>/dev/null && fail "output to a full disk passed"
mkdir "$tmp/data"
printf 'not gzip and not IDX' > "$tmp/data/train-images-idx3-ubyte"
out=$("$top/flx-train" --data "$tmp/data" 2>&1) && fail "corrupt data accepted"
echo "$out" | grep -q "$tmp/data/train-images-idx3-ubyte" || fail "error does not name the file: $out"

# IDX files by hand: be32 V writes V as 4 big-endian bytes
be32() {
    printf "\\$(printf %o $(( ($1 >> 24) & 255 )))\\$(printf %o $(( ($1 >> 16) & 255 )))"
    printf "\\$(printf %o $(( ($1 >> 8) & 255 )))\\$(printf %o $(( $1 & 255 )))"
}
# mkset DIR PREFIX N H W: N blank H x W images and their labels (all 0)
mkset() {
    mkdir -p "$1"
    { be32 2051; be32 "$3"; be32 "$4"; be32 "$5"; head -c $(($3 * $4 * $5)) /dev/zero; } \
        > "$1/$2-images-idx3-ubyte"
    { be32 2049; be32 "$3"; head -c "$3" /dev/zero; } > "$1/$2-labels-idx1-ubyte"
}
# header dimensions whose product wraps 64 bits: refused before any allocation
mkset "$tmp/wrap" train 4 28 28
mkset "$tmp/wrap" t10k 2 28 28
{ be32 2051; be32 16777216; be32 16777216; be32 16777216; } > "$tmp/wrap/train-images-idx3-ubyte"
out=$("$top/flx-train" --data "$tmp/wrap" --batch 1 2>&1) && fail "wrapping IDX dimensions accepted"
echo "$out" | grep -q "$tmp/wrap/train-images-idx3-ubyte: its dimensions make more than" ||
    fail "no clear error for wrapping IDX dimensions: $out"
# a gzip stream cut short: the error names the file and how far it got
# (random pixels, so that the cut falls inside the data)
mkset "$tmp/cut" train 4 28 28
mkset "$tmp/cut" t10k 2 28 28
{ be32 2051; be32 4; be32 28; be32 28; head -c 3136 /dev/urandom; } |
    gzip -c | head -c 1500 > "$tmp/cut/train-images-idx3-ubyte.gz"
rm "$tmp/cut/train-images-idx3-ubyte"
out=$("$top/flx-train" --data "$tmp/cut" --batch 1 2>&1) && fail "a cut gzip stream accepted"
echo "$out" | grep -q "$tmp/cut/train-images-idx3-ubyte.gz: unexpected end of file after [0-9]* of 3136 data bytes" ||
    fail "no clear error for a cut gzip stream: $out"
# test images of another size than the training images
mkset "$tmp/shape" train 4 28 28
mkset "$tmp/shape" t10k 2 20 20
out=$("$top/flx-train" --data "$tmp/shape" --batch 1 2>&1) && fail "20x20 test images accepted"
echo "$out" | grep -q "test images are 20x20 but the training images 28x28" ||
    fail "no clear error for test images of another size: $out"
# ... also with as many pixels (16x25 against 20x20: the shape, not the count)
mkset "$tmp/shape2" train 4 16 25
mkset "$tmp/shape2" t10k 2 20 20
out=$("$top/flx-train" --data "$tmp/shape2" --batch 1 2>&1) && fail "16x25 against 20x20 accepted"
echo "$out" | grep -q "test images are 20x20 but the training images 16x25" ||
    fail "no clear error for test images of another shape: $out"
# a FIFO or a directory where a data file should be: one clear error at
# once (the open of a FIFO waited for a writer forever before)
mkset "$tmp/fifo" train 4 28 28
mkset "$tmp/fifo" t10k 2 28 28
rm "$tmp/fifo/train-labels-idx1-ubyte"
mkfifo "$tmp/fifo/train-labels-idx1-ubyte"
out=$(timeout 60 "$top/flx-train" --data "$tmp/fifo" --batch 1 2>&1); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a FIFO as the labels: exit $rc: $out"
echo "$out" | grep -q "cannot read $tmp/fifo/train-labels-idx1-ubyte: not a regular file" ||
    fail "no clear error for a FIFO as the labels: $out"
mkset "$tmp/dir" train 4 28 28
mkset "$tmp/dir" t10k 2 28 28
rm "$tmp/dir/t10k-labels-idx1-ubyte"
mkdir "$tmp/dir/t10k-labels-idx1-ubyte.gz"
out=$(timeout 60 "$top/flx-train" --data "$tmp/dir" --batch 1 2>&1) && fail "a directory as the test labels accepted"
echo "$out" | grep -q "cannot read $tmp/dir/t10k-labels-idx1-ubyte.gz: not a regular file" ||
    fail "no clear error for a directory as the test labels: $out"
# a gzip stream whose trailer (CRC, length) is cut by 8, 4 or 1 bytes: its data all there,
# and still an error naming the file (zlib's gzread let it pass)
for cut in 8 4 1; do
    mkset "$tmp/trailer$cut" train 4 28 28
    mkset "$tmp/trailer$cut" t10k 2 28 28
    gzip -c "$tmp/trailer$cut/train-images-idx3-ubyte" > "$tmp/trailer$cut/z"
    head -c $(($(wc -c < "$tmp/trailer$cut/z") - cut)) "$tmp/trailer$cut/z" \
        > "$tmp/trailer$cut/train-images-idx3-ubyte.gz"
    rm "$tmp/trailer$cut/z" "$tmp/trailer$cut/train-images-idx3-ubyte"
    out=$("$top/flx-train" --data "$tmp/trailer$cut" --batch 1 2>&1) && fail "a gzip trailer cut by $cut accepted"
    echo "$out" | grep -q "$tmp/trailer$cut/train-images-idx3-ubyte.gz: unexpected end of file after its 3136 data bytes" ||
        fail "no clear error for a gzip trailer cut by $cut: $out"
done
# ranks that loaded different data, or where one could not load it, stop
# together with one clear error instead of calling different collectives
mkset "$tmp/r0" train 4 28 28
mkset "$tmp/r0" t10k 2 28 28
mkset "$tmp/r1" train 6 28 28
mkset "$tmp/r1" t10k 2 28 28
printf '#!/bin/sh\nexec "%s/flx-train" --data "%s/r$FLX_RANK" --batch 1 --epochs 1\n' \
    "$top" "$tmp" > "$tmp/per-rank.sh"
chmod +x "$tmp/per-rank.sh"
out=$("$top/flxrun" -n 2 --timeout 60 "$tmp/per-rank.sh" 2>&1) && fail "ranks with different data ran"
echo "$out" | grep -q "the ranks loaded different data (training examples: 4 on one rank, 6 on another)" ||
    fail "no clear error for ranks with different data: $out"
rm "$tmp/r1/t10k-labels-idx1-ubyte"
out=$("$top/flxrun" -n 2 --timeout 60 "$tmp/per-rank.sh" 2>&1) && fail "a rank without data ran"
echo "$out" | grep -q "^\[0\] flx-train: rank 0: another rank could not load the data" ||
    fail "rank 0 does not say that another rank has no data: $out"
echo "$out" | grep -q "^\[1\] .*$tmp/r1/t10k-labels-idx1-ubyte" ||
    fail "rank 1 does not name its missing file: $out"
# selsync and flex's local steps: a gradient that overflows stops every rank with one clear
# error (NaN would not compare alike on every rank), at the step after it (the agreement is
# taken one step late)
for pol in selsync flex; do
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --model mlp:64 --batch 32 \
          --policy $pol --lr 100 --epochs 3 2>&1) && fail "$pol went on with NaN: $out"
    echo "$out" | grep -q "$pol: this rank's gradient holds NaN or Inf: every rank stops" ||
        fail "no clear error for a NaN gradient under $pol: $out"
done
# ... and alone (one rank, no agreement to carry it): it stops at once with its line (with
# the norm taken in the update's pass it trained on, bad values zeroed, until this was caught)
for pol in selsync flex; do
    out=$("$top/flx-train" --synthetic --model mlp:64 --batch 32 --policy $pol --lr 100 \
          --epochs 3 2>&1) && fail "$pol on one rank went on with NaN: $out"
    echo "$out" | grep -q "$pol: this rank's gradient holds NaN or Inf: it stops" ||
        fail "no clear error for a NaN gradient under $pol on one rank: $out"
done
# ... and a NaN in the last step's gradient, whose agreement is taken after the loop, before
# the final evaluation: the run finds the first NaN step K - 1 of a longer run (it fails "at
# step K"; selsync's steps do not depend on timing), then runs exactly K steps
out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --model mlp:64 --batch 32 \
      --policy selsync --lr 100 --epochs 1 --max-steps 100 2>&1) && fail "selsync went on with NaN: $out"
k=$(echo "$out" | sed -n 's/.*gradient sync (selsync) failed at step \([0-9]*\):.*/\1/p' | head -1)
[ -n "$k" ] || fail "no step for the NaN under selsync: $out"
out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --model mlp:64 --batch 32 \
      --policy selsync --lr 100 --epochs 1 --max-steps "$k" 2>&1) &&
    fail "a NaN at the last step ($k steps) ended in success: $out"
echo "$out" | grep -q "selsync: this rank's gradient held NaN or Inf at the last step: every rank stops" ||
    fail "no clear error for a NaN at the last step ($k steps): $out"
echo "$out" | grep -q "final test-acc" && fail "a NaN at the last step was evaluated: $out"
echo "a NaN at the last of $k steps stops every rank"
# an unwritable step log: every rank stops at once with a clear error (rank 1
# reported a lost peer in the first sync before)
out=$("$top/flxrun" -n 2 --timeout 60 "$top/flx-train" --synthetic --model mlp:64 \
      --log /nonexistent-dir/run.csv 2>&1) && fail "an unwritable --log was accepted: $out"
echo "$out" | grep -q "^\[0\] flx-train: cannot write /nonexistent-dir/run.csv" ||
    fail "rank 0 does not name the log it cannot write: $out"
echo "$out" | grep -q "^\[1\] flx-train: rank 1: rank 0 cannot write the step log" ||
    fail "rank 1 does not say why it stops: $out"
echo "$out" | grep -q "peer lost" && fail "an unwritable --log looked like a lost peer: $out"
# dense: the same divergence stops every rank too (it trained on NaN and
# exited 0 before)
out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --model mlp:64 --batch 32 \
      --policy dense --lr 100 --epochs 3 2>&1) && fail "dense went on with NaN: $out"
echo "$out" | grep -q "dense: the averaged gradient holds NaN or Inf" ||
    fail "no clear error for a NaN gradient under dense: $out"

# --save and --load.  Ranks that never sync after the first step (selsync, huge --delta and
# --interval) hold different weights at the end: the saved model is their mean, the model
# the last evaluation tested, so loading it and only evaluating (--epochs 0, the same
# 3 ranks) gives the same accuracy to the last example; an evaluation that scored each
# rank's own weights (a mixture) gave 25.90 / 39.35 / 79.85% against the mean's
# 26.80 / 38.60 / 83.35% at 3 / 5 / 10 steps
for ms in 3 10; do
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --policy selsync \
          --delta 100 --interval 1000 --epochs 1 --max-steps $ms --lr 0.01 \
          --save "$tmp/m.bin" 2>&1) || fail "selsync --save: $out"
    echo "$out" | grep -q "saved MLP 64-256-256-10 (85002 parameters) to $tmp/m.bin" ||
        fail "no line for the saved model: $out"
    a=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 0 \
          --load "$tmp/m.bin" 2>&1) || fail "--load --epochs 0: $out"
    echo "$out" | grep -q "loaded the weights of MLP 64-256-256-10 from $tmp/m.bin" ||
        fail "no line for the loaded model: $out"
    b=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
    [ -n "$a" ] && [ "$a" = "$b" ] ||
        fail "the saved mean model scores $b%, the run's last evaluation $a% ($ms steps)"
    echo "$ms steps of selsync apart: evaluated $a%, the saved model $b%"
done
# a loaded model goes on training from where it was: one more epoch of dense from the
# 10-step model beats the 10-step model, and beats one epoch from the seed's weights
out=$("$top/flxrun" -n 2 --timeout 120 "$top/flx-train" --synthetic --epochs 1 --max-steps 10 \
      --lr 0.01 2>&1) || fail "dense 10 steps: $out"
fresh=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
out=$("$top/flxrun" -n 2 --timeout 120 "$top/flx-train" --synthetic --epochs 1 --max-steps 10 \
      --lr 0.01 --load "$tmp/m.bin" --save "$tmp/m2.bin" 2>&1) || fail "--load then train: $out"
more=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
awk -v a="$more" -v b="$b" -v f="$fresh" 'BEGIN { exit !(a > b && a > f) }' ||
    fail "10 more steps from the loaded model: $more% (loaded $b%, 10 steps from scratch $fresh%)"
echo "loaded $b%, 10 more steps $more% (10 from scratch $fresh%)"
# where the ranks' weights may differ, --epochs 0 scores the loaded weights themselves (their
# mean over 3 ranks, a sum divided by 3, would move some by an ulp), and a run from them
# syncs and keeps the ranks identical at each sync (the local-steps reference is the loaded
# weights, taken after the load)
for pol in selsync flex; do
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 0 --policy $pol \
          --load "$tmp/m.bin" 2>&1) || fail "--load --epochs 0 --policy $pol: $out"
    c=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
    [ "$c" = "$b" ] || fail "--epochs 0 --policy $pol scores the loaded model $c%, dense $b%"
    out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 1 --max-steps 20 \
          --lr 0.01 --policy $pol --check-sync --load "$tmp/m.bin" 2>&1) || fail "--load --policy $pol: $out"
done
# bad model files: one line naming the file and what is wrong, every rank stops, and the
# weights are not half-loaded (nothing trains)
printf 'hello' >"$tmp/short.bin"
head -c 1000 "$tmp/m.bin" >"$tmp/cut.bin"
cp "$tmp/m.bin" "$tmp/long.bin" && printf 'x' >>"$tmp/long.bin"
cp "$tmp/m.bin" "$tmp/flip.bin" # one byte of the weights inverted
byte=$(od -An -tu1 -j5000 -N1 "$tmp/m.bin" | tr -d ' ')
printf "\\$(printf '%03o' $((byte ^ 255)))" | dd of="$tmp/flip.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
cmp -s "$tmp/m.bin" "$tmp/flip.bin" && fail "the test could not change a byte of the model file"
mkfifo "$tmp/fifo.bin"
# weight 100 Inf, the CRC-32 right (gzip's trailer holds the data's): flx-train saves no such
# file, but one written otherwise trained into "the gradient holds NaN" and --epochs 0 scored it
dl=$(od -An -tu4 -j12 -N4 "$tmp/m.bin" | tr -d ' ')
hl=$((24 + dl)) wl=$(($(stat -c %s "$tmp/m.bin") - 24 - dl - 4))
{ head -c $((hl + 400)) "$tmp/m.bin" | tail -c 400; printf '\000\000\200\177'
  tail -c +$((hl + 405)) "$tmp/m.bin" | head -c $((wl - 404)); } >"$tmp/w.bin"
{ head -c $hl "$tmp/m.bin"; cat "$tmp/w.bin"; gzip -c <"$tmp/w.bin" | tail -c 8 | head -c 4; } >"$tmp/inf.bin"
for c in "short.bin:not a flx-train model file" \
         "inf.bin:$tmp/inf.bin: weight 100 of 85002 is inf: a model file holds finite weights only" \
         "cut.bin:damaged model file (shorter than its header says)" \
         "long.bin:damaged model file (longer than its header says)" \
         "flip.bin:damaged model file (the weights' CRC-32 does not match)" \
         "none.bin:cannot open $tmp/none.bin: No such file or directory" \
         "fifo.bin:cannot read $tmp/fifo.bin: not a regular file"; do
    f=${c%%:*} msg=${c#*:}
    out=$("$top/flxrun" -n 2 --timeout 60 "$top/flx-train" --synthetic --epochs 1 \
          --load "$tmp/$f" 2>&1) && fail "--load $f accepted: $out"
    echo "$out" | grep -qF "$msg" || fail "--load $f: no line saying '$msg': $out"
    echo "$out" | grep -q "^\[1\] flx-train: rank 1: rank 0 could not load $tmp/$f" ||
        fail "--load $f: rank 1 does not say why it stops: $out"
    echo "$out" | grep -q "epoch 1/1" && fail "--load $f: a rank trained: $out"
    echo "$out" | grep -q "loaded the weights" && fail "--load $f: a line says it was loaded: $out"
done
out=$("$top/flx-train" --synthetic --model mlp:32 --epochs 0 --load "$tmp/m.bin" 2>&1) &&
    fail "a model file of another model accepted: $out"
echo "$out" | grep -q "$tmp/m.bin holds a MLP 64-256-256-10, not this run's MLP 64-32-10" ||
    fail "no clear line for a model file of another model: $out"
# an unwritable --save (no such folder, a directory in its place): every rank stops before
# training, with the file named (it trained, then lost the model, before)
mkdir "$tmp/adir"
for c in "/nonexistent-dir/m.bin:cannot write /nonexistent-dir/m.bin (a file beside it: /nonexistent-dir/m.bin.XXXXXX): No such file or directory" \
         "$tmp/adir:cannot write $tmp/adir: it is not a regular file"; do
    f=${c%%:*} msg=${c#*:}
    out=$("$top/flxrun" -n 2 --timeout 60 "$top/flx-train" --synthetic --epochs 1 --save "$f" 2>&1) &&
        fail "an unwritable --save $f was accepted: $out"
    echo "$out" | grep -qF "$msg" || fail "--save $f: no line saying '$msg': $out"
    echo "$out" | grep -q "^\[1\] flx-train: rank 1: rank 0 cannot write the model file (--save)" ||
        fail "--save $f: rank 1 does not say why it stops: $out"
    echo "$out" | grep -q "epoch 1/1" && fail "--save $f: a rank trained: $out"
done
# a file it replaces keeps its mode, and is replaced whole: in a read-only folder (not for
# root, who writes anyway) the run stops before training and the file is as it was
cp "$tmp/m.bin" "$tmp/keep.bin" && chmod 640 "$tmp/keep.bin"
"$top/flx-train" --synthetic --epochs 1 --max-steps 2 --save "$tmp/keep.bin" >/dev/null 2>&1 ||
    fail "--save over an existing file failed"
[ "$(stat -c %a "$tmp/keep.bin")" = 640 ] || fail "--save changed the mode of the file it replaced"
cmp -s "$tmp/m.bin" "$tmp/keep.bin" && fail "--save did not replace the file"
ls "$tmp" | grep -q "keep.bin\." && fail "--save left its temporary file behind"
# --save through a symbolic link writes the file it leads to, and the link stays (the link was
# replaced by a file, its target left as it was); a link that leads nowhere is refused at once
ln -s keep.bin "$tmp/link.bin"
cp "$tmp/keep.bin" "$tmp/before.bin"
out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 3 --save "$tmp/link.bin" 2>&1) ||
    fail "--save through a link: $out"
[ -L "$tmp/link.bin" ] || fail "--save replaced the link $tmp/link.bin"
cmp -s "$tmp/keep.bin" "$tmp/before.bin" && fail "--save through a link left the file it leads to as it was"
ls "$tmp" | grep -q "keep.bin\.\|link.bin\." && fail "--save through a link left its temporary file behind"
ln -s nowhere.bin "$tmp/dangling.bin"
out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 3 --save "$tmp/dangling.bin" 2>&1) &&
    fail "--save through a link that leads nowhere succeeded: $out"
echo "$out" | grep -q "cannot write $tmp/dangling.bin: a symbolic link that leads to no file" ||
    fail "--save through a link that leads nowhere: $out"
echo "$out" | grep -q "epoch 1/1" && fail "--save through a link that leads nowhere: it trained: $out"
rm -f "$tmp/link.bin" "$tmp/dangling.bin" "$tmp/before.bin"
cp "$tmp/m.bin" "$tmp/keep.bin"
if [ "$(id -u)" != 0 ]; then
    chmod 555 "$tmp"
    "$top/flx-train" --synthetic --epochs 1 --max-steps 2 --save "$tmp/keep.bin" >/dev/null 2>&1 &&
        fail "--save into a read-only folder succeeded"
    chmod 755 "$tmp"
    cmp -s "$tmp/m.bin" "$tmp/keep.bin" || fail "a failed --save changed the file it would replace"
fi
# a save that fails after training (the disk fills: a file-size limit of 64 KiB, SIGXFSZ
# ignored, so the write fails with EFBIG): exit non-zero with one line naming the file, the file
# it would replace as it was, no temporary file left
out=$(trap '' XFSZ; ulimit -f 64; "$top/flxrun" -n 2 --timeout 60 "$top/flx-train" --synthetic \
      --epochs 1 --max-steps 2 --save "$tmp/keep.bin" 2>&1) && fail "a save past the file-size limit succeeded: $out"
[ "$(echo "$out" | grep -c "cannot write $tmp/keep.bin")" = 1 ] ||
    fail "a save that failed after training: not one line naming the file: $out"
echo "$out" | grep -q "final test-acc" || fail "the failed save's run did not train: $out"
cmp -s "$tmp/m.bin" "$tmp/keep.bin" || fail "a save that failed after training changed the file it would replace"
ls "$tmp" | grep -q "keep.bin\." && fail "a failed --save left its temporary file behind"
out=$("$top/flx-train" --synthetic --epochs 1 --save "" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "bad value '' for --save" || fail "--save '' accepted: $out"
# ranks that disagree on --load stop at once with one line
out=$("$top/flxrun" -n 2 --timeout 60 sh -c "if [ \$FLX_RANK = 0 ]; then l='--load $tmp/m.bin'; \
      else l=; fi; exec '$top/flx-train' --synthetic --epochs 1 --max-steps 2 \$l" 2>&1) &&
    fail "ranks that disagree on --load trained: $out"
echo "$out" | grep -q "the ranks were given different --load" || fail "no line for different --load: $out"
echo "PASS: flx-train, every policy on 1 and 3 ranks"
